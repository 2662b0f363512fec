// Body-less requests as curl sends them (no Content-Length, no Transfer-Encoding) on the shared
// listener, through the standalone simulator server: answered at once, on a connection that stays
// usable. The API server's side is in orders_api_test.cpp.
#include "conf/loader.hpp"
#include "simulator/server.hpp"
#include "simulator/simulator.hpp"
#include "test/support/legacy_auth.hpp"
#include "test/support/raw_http.hpp"

#include <doctest/doctest.h>

using namespace outboxd;
using namespace outboxd::test;
using namespace std::chrono_literals;

namespace {

// Well under the server's read timeout: a server that waited for a body would miss it.
constexpr auto prompt = 3s;

struct simulator_fixture {
  explicit simulator_fixture(std::string admin_token = {}) : sim(simulator_settings()) {
    conf::server_settings s;
    s.port = 0;
    s.threads = 4;
    s.read_timeout = 10s;
    server = std::make_unique<simulator::server>(s, sim, admin_token_only(admin_token));
    port = server->bind(0);
    server->start();
  }
  ~simulator_fixture() { server->stop(); }

  static conf::simulator_settings simulator_settings() {
    auto loaded = conf::load({});
    REQUIRE(loaded.value);
    return loaded.value->simulator;
  }

  simulator::simulator sim;
  std::unique_ptr<simulator::server> server;
  int port = 0;
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE_FIXTURE(simulator_fixture,
                  "a body-less POST to a route without a body is answered at once, keep-alive") {
  raw_connection c(port);
  const std::string json = "Content-Type: application/json\r\n";
  c.send(curl_request("POST", "/api/simulator/reset", port, json));
  auto reset = c.read_response(prompt);
  CHECK_MESSAGE(reset.status == 200, reset.head);
  CHECK(contains(reset.body, R"("status":"reset")"));

  // The same connection serves the next requests: nothing of the first was left unread.
  c.send(curl_request("GET", "/healthz", port));
  auto health = c.read_response(prompt);
  CHECK(health.status == 200);
  c.send(curl_request("POST", "/api/simulator/reset", port, json));
  CHECK(c.read_response(prompt).status == 200);

  // Without a JSON content type (what an HTML form of another site sends) it is refused, at once
  // and on a connection that stays usable.
  c.send(curl_request("POST", "/api/simulator/reset", port));
  auto refused = c.read_response(prompt);
  CHECK(refused.status == 415);
  CHECK(contains(refused.body, "Content-Type: application/json"));
  c.send(curl_request("GET", "/healthz", port));
  CHECK(c.read_response(prompt).status == 200);
}

TEST_CASE_FIXTURE(simulator_fixture,
                  "a body-less PUT to a route that needs a body gets the usual JSON error") {
  raw_connection c(port);
  c.send(curl_request("PUT", "/api/simulator/config", port));
  auto r = c.read_response(prompt);
  CHECK(r.status == 400);
  CHECK(contains(r.body, R"("code":"malformed_json")"));
  CHECK(contains(r.body, "request body is empty; expected a JSON object"));

  // A request with a body still reads it, on the same connection.
  std::string body = R"({"services":{"billing.charge":{"failNext":2}}})";
  c.send("PUT /api/simulator/config HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
         "application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body);
  auto put = c.read_response(prompt);
  CHECK_MESSAGE(put.status == 200, put.body);
  CHECK(contains(put.body, R"("failNext":2)"));
}

TEST_CASE_FIXTURE(simulator_fixture, "Content-Length: 0 and chunked bodies are read as before") {
  raw_connection c(port);
  c.send(curl_request("POST", "/api/simulator/reset", port,
                      "Content-Type: application/json\r\nContent-Length: 0\r\n"));
  CHECK(c.read_response(prompt).status == 200);
  c.send(curl_request("PUT", "/api/simulator/config", port,
                      "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n") +
         "e\r\n{\"services\":{}\r\n1\r\n}\r\n0\r\n\r\n");
  auto r = c.read_response(prompt);
  CHECK_MESSAGE(r.status == 200, r.body);
}

TEST_CASE("the admin check of a body-less POST still applies") {
  simulator_fixture f("s3cret");
  raw_connection c(f.port);
  c.send(curl_request("POST", "/api/simulator/reset", f.port));
  auto refused = c.read_response(prompt);
  CHECK(refused.status == 401);
  CHECK(contains(refused.body, R"("code":"unauthorized")"));
  c.send(curl_request("POST", "/api/simulator/reset", f.port, "Authorization: Bearer s3cret\r\n"));
  CHECK(c.read_response(prompt).status == 200);
}

TEST_CASE_FIXTURE(simulator_fixture, "curl -X POST without data resets the simulator") {
  auto out = run_curl("POST", "/api/simulator/reset", port, "-H 'Content-Type: application/json'");
  REQUIRE_MESSAGE(!out.empty(), "curl did not run");
  CHECK_MESSAGE(out.substr(out.rfind('\n') + 1) == "200", out);
  CHECK(contains(out, R"("status":"reset")"));
  auto put = run_curl("PUT", "/api/simulator/config", port);
  CHECK_MESSAGE(put.substr(put.rfind('\n') + 1) == "400", put);
  CHECK(contains(put, "malformed_json"));
}
