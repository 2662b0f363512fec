// A test CA and certificates signed by it, made with the openssl command (client and server TLS
// tests).
#pragma once

#include <string>

namespace outboxd::test {

/// A CA and certificates signed by it, made in a temporary directory once per test run.
struct test_pki {
  std::string dir;
  std::string ca;          // the test CA's certificate
  std::string server_cert; // for IP 127.0.0.1 and DNS localhost
  std::string server_key;
  std::string named_cert; // for DNS outboxd.test only
  std::string named_key;
  std::string expired_cert; // for 127.0.0.1, valid in 2020 only (server_key)
  std::string client_cert;  // a client certificate, CN outboxd
  std::string client_key;
};

/// The shared PKI (made at first use; REQUIREs that openssl works).
const test_pki& pki();

} // namespace outboxd::test
