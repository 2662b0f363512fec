// Any answer body is stored as received: each class of hostile body (JSON jsonb refuses, invalid
// UTF-8, NUL bytes, binary, deep nesting, extreme numbers) goes through record_attempt and
// complete on a real PostgreSQL and reads back unchanged from its column.
#include "domain/response_body.hpp"
#include "persistence/outbox_repository.hpp"
#include "persistence/rows.hpp"
#include "test/support/test_db.hpp"

#include <doctest/doctest.h>
#include <pqxx/pqxx>

using namespace outboxd;
using namespace outboxd::test;
using namespace std::chrono_literals;
using namespace std::string_literals;

namespace {

const lazy_database db("outboxd_pg_response_bytes");

long long add_event(const std::string& aggregate) {
  static int n = 0;
  return std::stoll(query_value(
      db(), "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads, "
            "idempotency_key) VALUES ('order', '" +
                aggregate + "', 'OrderCreated', '{}', 'k" + std::to_string(++n) +
                "') RETURNING id"));
}

persistence::attempt_row answer_row(long long event, const std::string& body,
                                    const std::string& content_type) {
  persistence::attempt_row row;
  row.event_id = event;
  row.aggregate_id = "1";
  row.event_type = "OrderCreated";
  row.destination = "inventory";
  row.attempt = 1;
  row.endpoint_url = "http://127.0.0.1:1/inventory";
  row.http_method = "POST";
  row.response_status = 200;
  row.response_content_type = content_type;
  row.response_truncated = body.size() > 10;
  domain::store_body(row, body);
  return row;
}

/// The attempt rows of `event`, read back the way the API reads them.
std::vector<domain::attempt_record> attempts_of(long long event) {
  pqxx::connection c(db());
  pqxx::read_transaction tx(c);
  std::vector<domain::attempt_record> out;
  for (const auto& r : tx.exec("SELECT "s + persistence::attempt_columns +
                               " FROM aggregate_results WHERE event_id = " + std::to_string(event) +
                               " ORDER BY id"))
    out.push_back(persistence::to_attempt(r));
  return out;
}

struct hostile_body {
  const char* name;
  std::string body;
  domain::body_kind kind;
};

const std::vector<hostile_body>& hostile_bodies() {
  static const std::vector<hostile_body> all = {
      {"JSON with a \\u0000 escape", R"({"note":"a\u0000b"})", domain::body_kind::text},
      {"JSON with a lone surrogate escape", R"(["\udc00"])", domain::body_kind::text},
      {"JSON with a number beyond numeric", "[1e-1001]", domain::body_kind::text},
      {"JSON at the edge of numeric", "[1e-1000, 1e308]", domain::body_kind::json},
      {"JSON after a UTF-8 byte-order mark", "\xEF\xBB\xBF{\"reservationId\":\"R-1\"}",
       domain::body_kind::text},
      {"JSON beyond a double's range", R"({"limit":1e309})", domain::body_kind::text},
      {"JSON nested to the depth limit",
       std::string(domain::max_json_depth, '[') + std::string(domain::max_json_depth, ']'),
       domain::body_kind::json},
      {"JSON nested beyond the depth limit",
       std::string(domain::max_json_depth + 1, '[') + std::string(domain::max_json_depth + 1, ']'),
       domain::body_kind::text},
      {"Latin-1 text", "r\xE9serv\xE9 \xE0 Z\xFCrich", domain::body_kind::bytes},
      {"a NUL byte in text", "ok\0then more"s, domain::body_kind::bytes},
      {"JSON then a NUL byte", "{}\0{\"x\":1}"s, domain::body_kind::bytes},
      {"PNG bytes", "\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\xFF\xFE\xFD"s,
       domain::body_kind::bytes},
      {"every byte value",
       [] {
         std::string s;
         for (int i = 0; i < 256; ++i)
           s += static_cast<char>(i);
         return s;
       }(),
       domain::body_kind::bytes},
      {"HTML", "<html><body>caf\xC3\xA9</body></html>", domain::body_kind::text},
      {"JSON with escapes jsonb takes", R"({"e":"\u00e9\ud83d\ude00","a":"\\u0000"})",
       domain::body_kind::json},
  };
  return all;
}

void check_stored(const domain::attempt_record& a, const hostile_body& h) {
  CAPTURE(h.name);
  CHECK(domain::classify_body(h.body) == h.kind);
  CHECK(a.response_content_type == "application/x-test");
  CHECK(a.response_truncated == (h.body.size() > 10));
  switch (h.kind) {
  case domain::body_kind::json: {
    REQUIRE(a.response_payload_json);
    CHECK_FALSE(a.response_text);
    CHECK_FALSE(a.response_body);
    break;
  }
  case domain::body_kind::text:
    CHECK(a.response_text == h.body);
    CHECK_FALSE(a.response_payload_json);
    CHECK_FALSE(a.response_body);
    break;
  case domain::body_kind::bytes:
    CHECK(a.response_body == h.body);
    CHECK_FALSE(a.response_payload_json);
    CHECK_FALSE(a.response_text);
    break;
  case domain::body_kind::empty:
    break;
  }
}

} // namespace

TEST_CASE("record_attempt stores every class of body and it reads back unchanged") {
  truncate_all(db());
  pqxx::connection c(db());
  persistence::outbox_repository repo(c, {});
  auto event = add_event("1");
  for (const auto& h : hostile_bodies()) {
    CAPTURE(h.name);
    repo.record_attempt(answer_row(event, h.body, "application/x-test"));
  }
  auto rows = attempts_of(event);
  REQUIRE(rows.size() == hostile_bodies().size());
  for (std::size_t i = 0; i < rows.size(); ++i)
    check_stored(rows[i], hostile_bodies()[i]);
  // jsonb keeps the value, not the spelling: numeric writes out every digit.
  REQUIRE(rows[3].response_payload_json);
  CHECK(rows[3].response_payload_json->rfind("[0.000", 0) == 0);
  CHECK(rows[3].response_payload_json->size() > 1300);
}

TEST_CASE("the last attempt that commits with the completion may hold any body too") {
  truncate_all(db());
  pqxx::connection c(db());
  persistence::outbox_repository repo(c, {});
  for (const auto& h : hostile_bodies()) {
    CAPTURE(h.name);
    auto event = add_event("2");
    auto claimed = repo.claim("w", 1, 60s);
    REQUIRE(claimed.size() == 1);
    auto row = answer_row(event, h.body, "application/x-test");
    REQUIRE(repo.complete(claimed[0], std::nullopt, {}, &row));
    auto rows = attempts_of(event);
    REQUIRE(rows.size() == 1);
    check_stored(rows[0], h);
  }
}

TEST_CASE("an answer without a body or content type stores nulls and not truncated") {
  truncate_all(db());
  pqxx::connection c(db());
  persistence::outbox_repository repo(c, {});
  auto event = add_event("3");
  auto row = answer_row(event, "", "");
  row.response_content_type.reset();
  repo.record_attempt(row);
  auto rows = attempts_of(event);
  REQUIRE(rows.size() == 1);
  CHECK_FALSE(rows[0].response_payload_json);
  CHECK_FALSE(rows[0].response_text);
  CHECK_FALSE(rows[0].response_body);
  CHECK_FALSE(rows[0].response_content_type);
  CHECK_FALSE(rows[0].response_truncated);
}
