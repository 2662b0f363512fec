// Bad input: every request of the corpus (test/reliability/bad_input.json) gets its expected 4xx
// with a JSON error naming the problem, changes nothing in any table, and leaves the service
// healthy; stalled partial requests are cut off without starving other clients.
#include "test/support/outboxd_process.hpp"
#include "test/support/test_db.hpp"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fstream>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <rapidjson/document.h>
#include <sstream>
#include <sys/socket.h>
#include <unistd.h>

using namespace outboxd::test;
using namespace std::chrono_literals;

namespace {

/// A TCP connection to 127.0.0.1:port for requests written byte by byte.
class raw_connection {
public:
  explicit raw_connection(int port, std::chrono::seconds timeout = std::chrono::seconds(15)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    timeval tv{static_cast<time_t>(timeout.count()), 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  }
  ~raw_connection() { ::close(fd_); }
  raw_connection(const raw_connection&) = delete;
  raw_connection& operator=(const raw_connection&) = delete;

  /// Writes everything it can; a server that stops reading (413) may close early.
  void send(const std::string& bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      auto n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0)
        return;
      done += static_cast<std::size_t>(n);
    }
  }
  /// Reads until the server closes the connection or the timeout passes.
  std::string receive_all() {
    std::string out;
    char buf[65536];
    for (;;) {
      auto n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0)
        return out;
      out.append(buf, static_cast<std::size_t>(n));
    }
  }

private:
  int fd_ = -1;
};

struct raw_answer {
  int status = 0; // 0: closed without an answer
  std::string body;
};

raw_answer parse_answer(const std::string& text) {
  raw_answer a;
  if (text.rfind("HTTP/1.1 ", 0) == 0)
    a.status = std::atoi(text.c_str() + 9);
  auto split = text.find("\r\n\r\n");
  if (split != std::string::npos)
    a.body = text.substr(split + 4);
  return a;
}

/// Expands @REPEAT:<count>:<char>@ and @BYTE:<hex>@.
std::string expand(const std::string& text) {
  std::string out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto at = text.find('@', pos);
    auto end = at == std::string::npos ? std::string::npos : text.find('@', at + 1);
    if (end == std::string::npos) {
      out += text.substr(pos);
      break;
    }
    auto marker = text.substr(at + 1, end - at - 1);
    out += text.substr(pos, at - pos);
    if (marker.rfind("REPEAT:", 0) == 0) {
      auto colon = marker.find(':', 7);
      out.append(std::stoul(marker.substr(7, colon - 7)), marker[colon + 1]);
    } else if (marker.rfind("BYTE:", 0) == 0) {
      out += static_cast<char>(std::stoi(marker.substr(5), nullptr, 16));
    } else {
      out += "@" + marker;
      end = at + marker.size();
    }
    pos = end + 1;
  }
  return out;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (auto p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
  return s;
}

/// A fingerprint of every row of every outboxd table.
std::string tables_fingerprint(const std::string& db) {
  std::string out;
  for (const char* table : {"orders", "outbox_events", "aggregate_results", "dead_letter_events"})
    out += query_value(db, fmt::format("SELECT count(*) || ':' || md5(coalesce(string_agg(t::text, "
                                       "'|' ORDER BY id), '')) FROM {} t",
                                       table)) +
           " ";
  return out;
}

/// Orders in every state, made by the real engine (in-process simulator), then an intake-only
/// outboxd (outbox.enabled=false) holding one PENDING order, which the corpus is sent to.
struct corpus_fixture {
  corpus_fixture() : db(fresh_database("outboxd_reliability_bad_input")) {
    {
      outboxd_process engine("bad-input-seed", db);
      engine.wait_ready();
      auto put_status = [&](long long id, const char* status) {
        auto r = engine.client().put("/api/orders/" + std::to_string(id) + "/status",
                                     fmt::format(R"({{"status":"{}"}})", status));
        REQUIRE_MESSAGE(r.status == 200, r.body);
      };
      auto confirmed_order = [&] {
        auto id = engine.create_order();
        REQUIRE(engine.wait_status(id, "CONFIRMED") == "CONFIRMED");
        return id;
      };
      ids["confirmed"] = confirmed_order();
      ids["shipped"] = confirmed_order();
      put_status(ids["shipped"], "SHIPPED");
      ids["delivered"] = confirmed_order();
      put_status(ids["delivered"], "SHIPPED");
      put_status(ids["delivered"], "DELIVERED");
      ids["cancelled"] = confirmed_order();
      REQUIRE(engine.client()
                  .post("/api/orders/" + std::to_string(ids["cancelled"]) + "/cancel", "")
                  .status == 202);
      REQUIRE(engine.wait_status(ids["cancelled"], "CANCELLED") == "CANCELLED");
      // The next order's last step is refused (the fraud score sends even ids to billing, odd
      // ones to high-value processing).
      auto refuse_next_charge = [&] {
        auto next = std::stoll(query_value(db, "SELECT last_value + 1 FROM orders_id_seq"));
        engine.knobs(fmt::format(R"({{"{}":{{"failNext":1,"failureStatus":400}}}})",
                                 next % 2 == 0 ? "billing.charge" : "highValue.process"));
      };
      refuse_next_charge();
      ids["failed"] = engine.create_order();
      REQUIRE(engine.wait_status(ids["failed"], "FAILED") == "FAILED");
      refuse_next_charge();
      engine.knobs(R"({"inventory.release":{"failNext":100,"failureStatus":400}})");
      ids["attention"] = engine.create_order();
      REQUIRE(engine.wait_status(ids["attention"], "ATTENTION") == "ATTENTION");
      engine.knobs(R"({"inventory.release":{"failNext":0}})");
      REQUIRE(engine.stop() == 0);
    }
    intake = std::make_unique<outboxd_process>(
        "bad-input", db,
        std::vector<std::string>{"--set", "outbox.enabled=false", "--set",
                                 "server.readTimeout=1s"});
    intake->wait_up();
    ids["pending"] = intake->create_order();
    ids["unknown"] = 987654321;
  }

  std::string db;
  std::map<std::string, long long> ids;
  std::unique_ptr<outboxd_process> intake;
};

/// Sends every request of the corpus to `target`, each with `extra_headers`, and checks its answer,
/// that no table changed and that the service stays healthy.
void replay_corpus(corpus_fixture& f, outboxd_process& target, const std::string& extra_headers) {
  const auto& db = f.db;
  const auto& ids = f.ids;
  std::ifstream in(std::string(OUTBOXD_SOURCE_DIR) + "/test/reliability/bad_input.json");
  std::stringstream text;
  text << in.rdbuf();
  rapidjson::Document corpus;
  corpus.Parse(text.str().c_str());
  REQUIRE(!corpus.HasParseError());
  const auto& cases = corpus["cases"];
  REQUIRE(cases.Size() >= 80);
  auto before = tables_fingerprint(db);
  for (const auto& c : cases.GetArray()) {
    std::string name = c["name"].GetString();
    CAPTURE(name);
    auto path = std::string(c["path"].GetString());
    auto mentions = std::string(c["mentions"].GetString());
    for (const auto& [state, id] : ids) {
      path = replace_all(path, "{" + state + "}", std::to_string(id));
      mentions = replace_all(mentions, "{" + state + "}", std::to_string(id));
    }
    auto body = c.HasMember("body") ? expand(c["body"].GetString()) : "";
    std::string request = fmt::format("{} {} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n",
                                      c["method"].GetString(), path);
    if (!c.HasMember("contentType"))
      request += "Content-Type: application/json\r\n";
    else if (c["contentType"].IsString())
      request += fmt::format("Content-Type: {}\r\n", c["contentType"].GetString());
    if (c.HasMember("headers"))
      for (const auto& h : c["headers"].GetObject())
        request += fmt::format("{}: {}\r\n", h.name.GetString(), expand(h.value.GetString()));
    if (c.HasMember("body"))
      request += fmt::format("Content-Length: {}\r\n", body.size());
    request += extra_headers + "\r\n" + body;

    raw_connection conn(target.port());
    conn.send(request);
    auto answer = parse_answer(conn.receive_all());
    CHECK(answer.status == c["status"].GetInt());
    rapidjson::Document error;
    error.Parse(answer.body.c_str());
    CHECK_MESSAGE((!error.HasParseError() && error.IsObject() && error.HasMember("error")),
                  "not a JSON error: " << answer.body.substr(0, 300));
    CHECK_MESSAGE(answer.body.find(mentions) != std::string::npos,
                  "\"" << mentions << "\" not in " << answer.body.substr(0, 500));
    CHECK(tables_fingerprint(db) == before);
    CHECK(target.client().get("/healthz").status == 200);
  }
  CHECK(target.process().running());
}

} // namespace

TEST_CASE_FIXTURE(corpus_fixture, "every request of the bad-input corpus gets its 4xx, names the "
                                  "problem and writes nothing") {
  replay_corpus(*this, *intake, "");
}

TEST_CASE_FIXTURE(corpus_fixture, "with tokens required, the corpus sent with an admin token gets "
                                  "the same answers") {
  // printf %s corpus-admin-token | sha256sum
  outboxd_process guarded("bad-input-tokens", db,
                          {"--set", "outbox.enabled=false", "--set", "server.readTimeout=1s",
                           "--set",
                           R"(auth.tokens=[{"name":"ops","role":"admin","sha256":")"
                           "e128c9f699f7001271dd416294593f0d4216983db396a11a56007f658696fe8a"
                           R"("}])"});
  guarded.wait_up();
  replay_corpus(*this, guarded, "Authorization: Bearer corpus-admin-token\r\n");
}

TEST_CASE_FIXTURE(corpus_fixture,
                  "stalled partial requests are cut off and do not starve other clients") {
  auto before = tables_fingerprint(db);
  const std::vector<std::string> partials = {
      "POST /api/orders HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl",
      "POST /api/orders HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: 200\r\n\r\n{\"customerId\": \"C-1\", ",
      "GET /api/ord"};
  // More stalled connections than the test server has threads (16).
  std::vector<std::unique_ptr<raw_connection>> stalled;
  for (int i = 0; i < 24; ++i) {
    stalled.push_back(std::make_unique<raw_connection>(intake->port()));
    stalled.back()->send(partials[i % partials.size()]);
  }
  auto asked = std::chrono::steady_clock::now();
  CHECK(intake->client().get("/healthz").status == 200);
  CHECK(std::chrono::steady_clock::now() - asked < 10s);
  // Each stalled request is closed after server.readTimeout (1s here), with at most a 4xx.
  for (auto& s : stalled) {
    auto answer = parse_answer(s->receive_all());
    CHECK((answer.status == 0 || (answer.status >= 400 && answer.status < 500)));
  }
  CHECK(std::chrono::steady_clock::now() - asked < 15s);
  CHECK(tables_fingerprint(db) == before);
  CHECK(intake->process().running());
}
