// HTTPS through the outgoing client against a loopback TLS server and a CA made at run time:
// verification by default, tls.caFile, tls.serverName, an expired certificate, a client
// certificate the server requires, and insecureSkipVerify as the explicit way out, which the next
// call of a multi driver does not inherit.
#include "client/caller.hpp"
#include "client/multi_caller.hpp"
#include "test/client/loopback.hpp"

#include <doctest/doctest.h>
#include <httplib.h>
#include <memory>
#include <thread>

using namespace outboxd::client;
using namespace outboxd::test;
using namespace std::chrono_literals;

namespace {

/// An HTTPS server on 127.0.0.1 answering every GET with {"ok":true} and the Host it was sent.
class tls_server {
public:
  tls_server(const std::string& cert, const std::string& key,
             const std::string& client_ca = std::string())
      : server_(cert.c_str(), key.c_str(), client_ca.empty() ? nullptr : client_ca.c_str()) {
    REQUIRE(server_.is_valid());
    server_.Get(".*", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(R"({"ok":true,"host":")" + req.get_header_value("Host") + "\"}",
                      "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    REQUIRE(port_ > 0);
    // Bound and listening already: connections wait in the backlog until the thread accepts.
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~tls_server() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_) + "/check"; }
  int port() const { return port_; }

private:
  httplib::SSLServer server_;
  int port_ = 0;
  std::thread thread_;
};

/// A GET with deadlines long enough for a TLS handshake on a loaded machine (sanitizer builds
/// beside other work took over 2 s): these tests are about verification, not speed.
call_request get(const std::string& url) {
  call_request r;
  r.method = "GET";
  r.url = url;
  r.connect_timeout = 15s;
  r.timeout = 20s;
  return r;
}

void check_ok(const call_result& r) {
  REQUIRE_MESSAGE(r.status, r.error);
  CHECK(*r.status == 200);
  CHECK(r.body.find(R"("ok":true)") != std::string::npos);
}

void check_refused(const call_result& r) {
  CHECK_FALSE(r.status);
  CHECK_MESSAGE(r.error.rfind("TLS: certificate verify failed: ", 0) == 0, r.error);
}

} // namespace

TEST_CASE("a server whose certificate chains to tls.caFile is accepted") {
  tls_server server(pki().server_cert, pki().server_key);
  caller c;
  auto request = get(server.url());
  request.tls.ca_file = pki().ca;
  check_ok(c.call(request));
  // Twice over one connection: TLS set-up is not paid per call.
  check_ok(c.call(request));
}

TEST_CASE("by default the system CA store decides: an unknown CA is refused") {
  tls_server server(pki().server_cert, pki().server_key);
  caller c;
  check_refused(c.call(get(server.url())));
}

TEST_CASE("a certificate for another name is refused; tls.serverName names the expected one") {
  tls_server server(pki().named_cert, pki().named_key);
  caller c;
  auto request = get(server.url());
  request.tls.ca_file = pki().ca;
  auto refused = c.call(request);
  check_refused(refused);
  CHECK(refused.error.find("127.0.0.1") != std::string::npos);

  request.tls.server_name = "outboxd.test";
  auto r = c.call(request);
  check_ok(r);
  // Still connected to the URL's host, which the request keeps naming.
  CHECK(r.body.find("\"host\":\"127.0.0.1:" + std::to_string(server.port()) + "\"") !=
        std::string::npos);
}

TEST_CASE("an expired certificate is refused") {
  tls_server server(pki().expired_cert, pki().server_key);
  caller c;
  auto request = get(server.url());
  request.tls.ca_file = pki().ca;
  auto r = c.call(request);
  check_refused(r);
  CHECK(r.error.find("expired") != std::string::npos);
}

TEST_CASE("a server that requires a client certificate gets it from certFile and keyFile") {
  tls_server server(pki().server_cert, pki().server_key, pki().ca);
  caller c;
  auto request = get(server.url());
  request.tls.ca_file = pki().ca;
  auto without = c.call(request);
  CHECK_FALSE(without.status);
  CHECK_FALSE(without.error.empty());

  request.tls.cert_file = pki().client_cert;
  request.tls.key_file = pki().client_key;
  check_ok(c.call(request));
}

TEST_CASE("insecureSkipVerify accepts a certificate of an unknown CA") {
  tls_server server(pki().named_cert, pki().named_key);
  caller c;
  auto request = get(server.url());
  request.tls.insecure_skip_verify = true;
  check_ok(c.call(request));
}

TEST_CASE("a multi driver's call after one with insecureSkipVerify verifies again") {
  // The driver reuses finished calls' curl handles: the way out must not stay open.
  tls_server server(pki().named_cert, pki().named_key);
  multi_caller m;
  std::vector<call_result> results;
  auto insecure = get(server.url());
  insecure.tls.insecure_skip_verify = true;
  for (const auto& request : {insecure, get(server.url()), insecure}) {
    const auto expected = results.size() + 1;
    m.start(request, [&](call_result r) { results.push_back(std::move(r)); });
    for (auto until = std::chrono::steady_clock::now() + 30s;
         results.size() < expected && std::chrono::steady_clock::now() < until;)
      m.run(50ms);
  }
  REQUIRE(results.size() == 3);
  check_ok(results[0]);
  check_refused(results[1]);
  check_ok(results[2]);
}
