// Hostile answers end to end: a real outboxd on a real PostgreSQL calls an inventory and a fraud
// check served by this test, which answer with bodies the result table cannot hold as JSON or
// text (JSON with \u0000, Latin-1, PNG bytes, no body, lying or missing content types). Every
// attempt is recorded as received and shown marked by the API; no worker crashes. And an event
// whose rows the database refuses for a reason of its own fails alone, without a crash loop.
#include "test/support/outboxd_process.hpp"
#include "test/support/partner.hpp"
#include "test/support/test_db.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fstream>
#include <functional>
#include <unistd.h>

using namespace outboxd::test;
using namespace std::chrono_literals;
using namespace std::string_literals;

namespace {

/// How the remote answers a call: status, body, and Content-Type (none when empty).
using answer = partner::answer;

/// Inventory (reserve, and a revert that releases) and fraud check on one port, answering
/// whatever the test set last, with exactly the headers given.
struct remote : partner {
  void answer_with(answer a) {
    handle([a](const request& r) {
      return r.method == "DELETE" ? answer{200, R"({"released":true})"} : a;
    });
  }
};

struct hostile_fixture {
  explicit hostile_fixture(const char* database = "outboxd_e2e_hostile_answers")
      : config(write_config()), conninfo(fresh_database(database)),
        p("hostile-answers", conninfo,
          {"--config", config, "--set", "outbox.maxRetries=2", "--set", "dlq.maxRetries=1"}) {
    p.wait_up();
  }
  ~hostile_fixture() { ::unlink(config.c_str()); }

  std::string write_config() {
    auto path = fmt::format("/tmp/outboxd-hostile-answers-{}-{}.json", ::getpid(), server.port);
    std::ofstream(path) << fmt::format(R"({{"http": {{
      "routes": {{
        "inventory": {{"url": "http://127.0.0.1:{0}/inventory", "timeout": "2s",
                      "revert": {{"url": "http://127.0.0.1:{0}/inventory/RES-1/release",
                                 "method": "DELETE"}}}},
        "fraudCheck": {{"url": "http://127.0.0.1:{0}/fraud", "timeout": "2s",
                       "headers": {{"X-Api-Key": "{1}"}}}}
      }},
      "fanout": {{"OrderCreated": ["inventory", "fraudCheck"]}}
    }}}})",
                                       server.port, api_key);
    return path;
  }

  /// Creates an order for `customer` and waits until it is CONFIRMED, FAILED or ATTENTION.
  std::pair<long long, std::string> run_order(const std::string& customer = "C-1") {
    auto r = p.client().post("/api/orders", R"({"customerId":")" + customer +
                                                R"(","totalAmount":10,"shippingType":"domestic"})");
    REQUIRE_MESSAGE(r.status == 201, r.body);
    auto id = r.num("/id");
    std::string status;
    wait_until(
        [&] {
          status = p.client().get("/api/orders/" + std::to_string(id)).str("/order/status");
          return status == "CONFIRMED" || status == "FAILED" || status == "ATTENTION";
        },
        30s);
    return {id, status};
  }

  void check_no_crash() {
    CHECK(p.process().running());
    CHECK_MESSAGE(p.output().find("crashed") == std::string::npos, p.output());
  }

  static constexpr const char* api_key = "pk_live_hostile_secret_42";
  remote server;
  std::string config;
  std::string conninfo;
  outboxd_process p;
};

std::string base64(const std::string& bytes) {
  static constexpr char alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16 |
                 static_cast<unsigned char>(bytes[i + 1]) << 8 |
                 static_cast<unsigned char>(bytes[i + 2]);
    for (int s : {18, 12, 6, 0})
      out += alphabet[v >> s & 63];
  }
  if (i < bytes.size()) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size())
      v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += alphabet[v >> 18 & 63];
    out += alphabet[v >> 12 & 63];
    out += i + 1 < bytes.size() ? alphabet[v >> 6 & 63] : '=';
    out += '=';
  }
  return out;
}

enum class stored { json, text, bytes, none };

/// Checks how the API shows one attempt's answer: in exactly the field `where`, unchanged.
void check_shown(const rapidjson::Value& a, const answer& sent, stored where) {
  CAPTURE(sent.body);
  REQUIRE(a["responseStatus"].IsInt());
  CHECK(a["responseStatus"].GetInt() == sent.status);
  if (sent.content_type.empty())
    CHECK(a["responseContentType"].IsNull());
  else
    CHECK(std::string(a["responseContentType"].GetString()) == sent.content_type);
  CHECK(a["responseTruncated"].IsFalse());
  CHECK(a["responsePayload"].IsNull() == (where != stored::json));
  CHECK(a["responseText"].IsNull() == (where != stored::text));
  CHECK(a["responseBody"].IsNull() == (where != stored::bytes));
  if (where == stored::text)
    CHECK(std::string(a["responseText"].GetString(), a["responseText"].GetStringLength()) ==
          sent.body);
  if (where == stored::bytes) {
    CHECK(std::string(a["responseBody"]["encoding"].GetString()) == "base64");
    CHECK(std::string(a["responseBody"]["data"].GetString()) == base64(sent.body));
    CHECK(a["responseBody"]["bytes"].GetInt64() == static_cast<std::int64_t>(sent.body.size()));
  }
}

/// Runs one order against `sent` from both destinations (the first row is recorded on its own,
/// the last one with the completion) and checks both rows.
void check_class(hostile_fixture& f, const answer& sent, stored where,
                 const std::string& expected_status = "CONFIRMED") {
  f.server.answer_with(sent);
  auto [id, status] = f.run_order();
  CHECK(status == expected_status);
  auto t = f.p.timeline(id);
  REQUIRE(t.json["attempts"].Size() >= 2);
  check_shown(t.json["attempts"][0], sent, where);
  check_shown(t.json["attempts"][1], sent, where);
  f.check_no_crash();
}

} // namespace

TEST_CASE_FIXTURE(hostile_fixture, "JSON with a \\u0000 escape is kept as text") {
  check_class(*this, {200, R"({"reservationId":"RES-1","note":"a\u0000b"})", "application/json"},
              stored::text);
}

TEST_CASE_FIXTURE(hostile_fixture, "Latin-1 text is kept as bytes") {
  check_class(*this, {200, "r\xE9serv\xE9 \xE0 Z\xFCrich", "text/plain; charset=iso-8859-1"},
              stored::bytes);
}

TEST_CASE_FIXTURE(hostile_fixture, "PNG bytes are kept as bytes") {
  check_class(*this,
              {200,
               "\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89"s,
               "image/png"},
              stored::bytes);
}

TEST_CASE_FIXTURE(hostile_fixture, "an empty body stores no body, and the content type") {
  check_class(*this, {200, "", "text/plain"}, stored::none);
}

TEST_CASE_FIXTURE(hostile_fixture, "JSON labelled text/html is stored as JSON") {
  check_class(*this, {200, R"({"reservationId":"RES-1"})", "text/html"}, stored::json);
}

TEST_CASE_FIXTURE(hostile_fixture, "HTML labelled application/json is stored as text") {
  check_class(*this, {200, "<html><body>caf\xC3\xA9</body></html>", "application/json"},
              stored::text);
}

TEST_CASE_FIXTURE(hostile_fixture, "a body without a content type is stored, type null") {
  check_class(*this, {200, "plain words", ""}, stored::text);
  check_class(*this, {200, "\xFF\xFE\0binary"s, ""}, stored::bytes);
}

TEST_CASE_FIXTURE(hostile_fixture,
                  "a refusal with a binary body is recorded; its error message is readable") {
  answer sent{400, "\xFF\xFE\0no\xE9"s, "application/octet-stream"};
  server.answer_with(sent);
  auto [id, status] = run_order();
  CHECK(status == "FAILED"); // dead-lettered, and nothing to revert: inventory refused too
  auto t = p.timeline(id);
  REQUIRE(t.json["attempts"].Size() >= 1);
  const auto& a = t.json["attempts"][0];
  check_shown(a, sent, stored::bytes);
  CHECK(std::string(a["errorMessage"].GetString()) ==
        "HTTP 400: \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDno\xEF\xBF\xBD");
  REQUIRE(t.json["deadLetters"].Size() == 1);
  CHECK(std::string(t.json["deadLetters"][0]["lastError"].GetString())
            .rfind("inventory: HTTP 400", 0) == 0);
  check_no_crash();
}

namespace {

/// How many times `text` stands in `haystack`.
int occurrences(const std::string& haystack, const std::string& text) {
  int n = 0;
  for (auto at = haystack.find(text); at != std::string::npos; at = haystack.find(text, at + 1))
    ++n;
  return n;
}

/// The database refuses every result row of orders of customer POISON, as a broken trigger,
/// a full disk on one partition or a constraint would: nothing a body can cause.
struct poison_fixture : hostile_fixture {
  poison_fixture() : hostile_fixture("outboxd_e2e_hostile_poison") {
    query_value(conninfo, R"sql(
CREATE FUNCTION test_refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM orders WHERE id::text = NEW.aggregate_id AND customer_id = 'POISON') THEN
    RAISE EXCEPTION 'test refuses results of order %', NEW.aggregate_id;
  END IF;
  RETURN NEW;
END $$)sql");
    query_value(conninfo, "CREATE TRIGGER test_refuse_poison BEFORE INSERT ON aggregate_results "
                          "FOR EACH ROW EXECUTE FUNCTION test_refuse_poison()");
  }
};

} // namespace

TEST_CASE_FIXTURE(hostile_fixture,
                  "an API key the partner echoes back is stored and logged as ***") {
  server.handle([](const partner::request& r) {
    auto at = r.head.find("X-Api-Key: ");
    auto value = at == std::string::npos
                     ? std::string()
                     : r.head.substr(at + 11, r.head.find("\r\n", at) - at - 11);
    return answer{200, R"({"riskScore":10,"youSent":")" + value + R"("})"};
  });
  auto [id, status] = run_order();
  CHECK(status == "CONFIRMED");
  bool sent = false;
  for (const auto& r : server.requests())
    sent = sent || r.head.find(std::string("X-Api-Key: ") + api_key) != std::string::npos;
  CHECK(sent); // the partner got the real key
  auto t = p.timeline(id);
  REQUIRE(t.json["attempts"].Size() >= 2);
  const auto& fraud = t.json["attempts"][1];
  CHECK(std::string(fraud["destination"].GetString()) == "fraudCheck");
  CHECK(std::string(fraud["responsePayload"]["youSent"].GetString()) == "***");
  CHECK(t.body.find(api_key) == std::string::npos);
  CHECK(p.output().find(api_key) == std::string::npos);
}

TEST_CASE_FIXTURE(poison_fixture,
                  "an event whose rows the database refuses is held back without spending a "
                  "retry, and completes once the database takes them; the workers carry on") {
  auto [before, before_status] = run_order();
  CHECK(before_status == "CONFIRMED");
  auto r = p.client().post("/api/orders",
                           R"({"customerId":"POISON","totalAmount":10,"shippingType":"domestic"})");
  REQUIRE(r.status == 201);
  auto poison = r.num("/id");
  const auto cause = fmt::format("recording failed: test refuses results of order {}", poison);
  // Its calls succeed, their rows are refused: held back again and again, never dead-lettered
  // (which would revert calls that succeeded) while outbox.maxRetries=2 would have run out.
  REQUIRE(wait_until([&] { return occurrences(p.output(), cause + "; held back") >= 4; }, 30s));
  auto t = p.timeline(poison);
  CHECK(t.str("/order/status") == "PENDING");
  CHECK(t.json["deadLetters"].Size() == 0);
  CHECK(t.json["attempts"].Size() == 0);
  REQUIRE(t.json["events"].Size() == 1);
  CHECK(t.str("/events/0/status") != "DEAD");
  CHECK(t.num("/events/0/attempts") == 0);
  CHECK(t.str("/events/0/lastError") == "held back: " + cause);
  auto [after, after_status] = run_order();
  CHECK(after_status == "CONFIRMED");
  // The database takes its rows again: the order completes (its calls made again under their
  // keys, which a partner replays).
  query_value(conninfo, "DROP TRIGGER test_refuse_poison ON aggregate_results");
  CHECK(p.wait_status(poison, "CONFIRMED") == "CONFIRMED");
  CHECK(p.timeline(poison).json["deadLetters"].Size() == 0);
  check_no_crash();
  CHECK(p.client().get("/healthz").status == 200);
}

TEST_CASE_FIXTURE(hostile_fixture,
                  "a compensation whose rows the database refuses is held back, not failed, and "
                  "finishes once the database takes them") {
  query_value(conninfo, R"sql(
CREATE FUNCTION test_refuse_reverts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.destination LIKE '%.revert' THEN
    RAISE EXCEPTION 'test refuses revert rows of order %', NEW.aggregate_id;
  END IF;
  RETURN NEW;
END $$)sql");
  query_value(conninfo, "CREATE TRIGGER test_refuse_reverts BEFORE INSERT ON aggregate_results "
                        "FOR EACH ROW EXECUTE FUNCTION test_refuse_reverts()");
  // Inventory reserves, the fraud check refuses for good: the reservation must be released.
  server.handle([](const partner::request& r) {
    return r.path == "/fraud" ? answer{400, R"({"error":"no"})"} : answer{200, R"({"ok":true})"};
  });
  auto r = p.client().post("/api/orders",
                           R"({"customerId":"C-2","totalAmount":10,"shippingType":"domestic"})");
  REQUIRE(r.status == 201);
  auto id = r.num("/id");
  const auto cause = fmt::format("recording failed: test refuses revert rows of order {}", id);
  // dlq.maxRetries=1: spent after two failures, yet the dead letter stays PENDING.
  REQUIRE(wait_until([&] { return occurrences(p.output(), cause + "; held back") >= 3; }, 30s));
  auto t = p.timeline(id);
  CHECK(t.str("/order/status") == "PENDING");
  REQUIRE(t.json["deadLetters"].Size() == 1);
  CHECK(t.str("/deadLetters/0/status") != "FAILED");
  CHECK(t.num("/deadLetters/0/attempts") == 0);
  CHECK(t.str("/deadLetters/0/revertError") == "held back: " + cause);
  query_value(conninfo, "DROP TRIGGER test_refuse_reverts ON aggregate_results");
  CHECK(p.wait_status(id, "FAILED") == "FAILED");
  check_no_crash();
}
