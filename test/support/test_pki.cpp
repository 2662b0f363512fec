// The openssl-made test PKI.
#include "test/support/test_pki.hpp"

#include "test/support/process.hpp"

#include <cstdlib>
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <vector>

namespace outboxd::test {

namespace {

// run_command takes a path, not a name to look up.
std::string openssl_path() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (std::size_t start = 0; start <= dirs.size();) {
    auto end = std::min(dirs.find(':', start), dirs.size());
    auto candidate = dirs.substr(start, end - start) + "/openssl";
    if (::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    start = end + 1;
  }
  FAIL("the openssl command is not installed (scripts/install-deps.sh installs it)");
  return {};
}

void openssl(std::vector<std::string> args) {
  args.insert(args.begin(), openssl_path());
  auto [code, out] = run_command(args);
  INFO(out);
  REQUIRE_MESSAGE(code == 0, "openssl " << args[1] << " failed");
}

test_pki make_pki() {
  test_pki p;
  std::string pattern = "/tmp/outboxd_client_pki.XXXXXX";
  REQUIRE(::mkdtemp(pattern.data()) != nullptr);
  p.dir = pattern;
  auto at = [&](const std::string& name) { return p.dir + "/" + name; };
  p.ca = at("ca.pem");
  p.server_cert = at("server.pem");
  p.server_key = at("server.key");
  p.named_cert = at("named.pem");
  p.named_key = at("named.key");
  p.expired_cert = at("expired.pem");
  p.client_cert = at("client.pem");
  p.client_key = at("client.key");
  const std::vector<std::string> ec = {"-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                                       "-nodes"};
  auto req = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "req");
    args.insert(args.end(), ec.begin(), ec.end());
    openssl(args);
  };
  req({"-x509", "-keyout", at("ca.key"), "-out", p.ca, "-subj", "/CN=outboxd test CA", "-days", "2",
       "-addext", "basicConstraints=critical,CA:TRUE", "-addext",
       "keyUsage=critical,keyCertSign,cRLSign"});
  req({"-keyout", p.server_key, "-out", at("server.csr"), "-subj", "/CN=127.0.0.1"});
  req({"-keyout", at("named.key"), "-out", at("named.csr"), "-subj", "/CN=outboxd.test"});
  req({"-keyout", p.client_key, "-out", at("client.csr"), "-subj", "/CN=outboxd"});
  std::ofstream(at("server.ext")) << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
  std::ofstream(at("named.ext")) << "subjectAltName=DNS:outboxd.test\n";
  std::ofstream(at("client.ext")) << "extendedKeyUsage=clientAuth\n";
  auto sign = [&](const std::string& csr, const std::string& ext, const std::string& out) {
    openssl({"x509", "-req", "-in", at(csr), "-CA", p.ca, "-CAkey", at("ca.key"), "-CAcreateserial",
             "-days", "2", "-extfile", at(ext), "-out", out});
  };
  sign("server.csr", "server.ext", p.server_cert);
  sign("named.csr", "named.ext", at("named.pem"));
  sign("client.csr", "client.ext", p.client_cert);
  // `openssl x509` cannot back-date; `openssl ca` takes explicit validity dates.
  std::ofstream(at("index.txt")).flush();
  std::ofstream(at("ca.cnf")) << "[ca]\ndefault_ca = test\n[test]\ndatabase = " << at("index.txt")
                              << "\nnew_certs_dir = " << p.dir << "\nserial = " << at("ca.srl")
                              << "\ndefault_md = sha256\npolicy = any\n[any]\ncommonName = "
                                 "supplied\n[server]\nsubjectAltName=IP:127.0.0.1\n";
  openssl({"ca", "-batch", "-config", at("ca.cnf"), "-cert", p.ca, "-keyfile", at("ca.key"), "-in",
           at("server.csr"), "-out", p.expired_cert, "-startdate", "20200101000000Z", "-enddate",
           "20200102000000Z", "-extensions", "server", "-notext"});
  return p;
}

} // namespace

const test_pki& pki() {
  static const struct owner {
    test_pki made = make_pki();
    ~owner() {
      std::error_code ignored;
      std::filesystem::remove_all(made.dir, ignored);
    }
  } shared;
  return shared.made;
}

} // namespace outboxd::test
