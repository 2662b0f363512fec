// The HTTPS listener (server.tls.*) with a real TLS client and certificates the test makes: the
// API over HTTPS, plain HTTP refused on that port, mutual TLS with a client CA, and a certificate
// and key that do not belong together refused at start naming the keys.
#include "test/http/served_server.hpp"
#include "test/support/test_pki.hpp"

#include <doctest/doctest.h>
#include <httplib.h>

using namespace outboxd;
using namespace outboxd::test;

namespace {

std::vector<std::string> tls_settings(bool mutual) {
  const auto& p = pki();
  std::vector<std::string> sets = {"server.tls.certFile=" + p.server_cert,
                                   "server.tls.keyFile=" + p.server_key};
  if (mutual)
    sets.push_back("server.tls.clientCaFile=" + p.ca);
  return sets;
}

std::unique_ptr<httplib::SSLClient> tls_client(int port) {
  auto c = std::make_unique<httplib::SSLClient>("127.0.0.1", port);
  c->set_ca_cert_path(pki().ca.c_str());
  c->enable_server_certificate_verification(true);
  c->set_connection_timeout(5, 0);
  c->set_read_timeout(5, 0);
  return c;
}

} // namespace

TEST_CASE("with server.tls set the API speaks HTTPS, verified against the CA, and only HTTPS") {
  served_server s(true, tls_settings(false));
  CHECK(s.settings.simulator.base_url.rfind("https://127.0.0.1:", 0) == 0);
  int port = s.start();
  auto c = tls_client(port);
  auto health = c->Get("/healthz");
  REQUIRE(health);
  CHECK(health->status == 200);
  // The forgery rules hold over TLS too: a form's POST is refused before any handler runs.
  auto form = c->Post("/api/orders/1/cancel", "reason=x", "application/x-www-form-urlencoded");
  REQUIRE(form);
  CHECK(form->status == 415);

  httplib::Client plain("127.0.0.1", port);
  plain.set_connection_timeout(2, 0);
  plain.set_read_timeout(2, 0);
  auto refused = plain.Get("/healthz");
  CHECK((!refused || refused->status != 200));

  // A client that trusts another CA does not get through.
  httplib::SSLClient stranger("127.0.0.1", port);
  stranger.set_ca_cert_path("/nonexistent-ca.pem");
  stranger.enable_server_certificate_verification(true);
  CHECK_FALSE(stranger.Get("/healthz"));
}

TEST_CASE("with server.tls.clientCaFile only clients with a certificate of that CA get in") {
  served_server s(false, tls_settings(true));
  int port = s.start();
  auto anonymous = tls_client(port);
  auto refused = anonymous->Get("/healthz");
  CHECK((!refused || refused->status != 200));

  const auto& p = pki();
  httplib::SSLClient with_cert("127.0.0.1", port, p.client_cert, p.client_key);
  with_cert.set_ca_cert_path(p.ca.c_str());
  with_cert.enable_server_certificate_verification(true);
  auto ok = with_cert.Get("/healthz");
  REQUIRE(ok);
  CHECK(ok->status == 200);
}

TEST_CASE("a certificate and a key that do not belong together are refused at start") {
  const auto& p = pki();
  conf::load_options options;
  options.set_overrides = {"server.tls.certFile=" + p.server_cert,
                           "server.tls.keyFile=" + p.client_key};
  auto loaded = conf::load(options);
  CHECK_FALSE(loaded.value);
  REQUIRE(loaded.errors.size() == 1);
  CHECK(loaded.errors[0] ==
        "server.tls.certFile and server.tls.keyFile cannot serve TLS: the private key does not "
        "load or does not belong to the certificate");
}
