// Bearer tokens compared by digest in constant time, roles, and the forgery rules.
#include "http/auth.hpp"

#include "http/errors.hpp"
#include "http/json.hpp"

#include <algorithm>
#include <cctype>
#include <fmt/format.h>
#include <httplib.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdexcept>

namespace outboxd::http {
namespace {

const char* name_of(conf::role r) {
  switch (r) {
  case conf::role::read:
    return "read";
  case conf::role::write:
    return "write";
  case conf::role::admin:
    return "admin";
  }
  return "?";
}

std::string lowercase(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

/// The token of an `Authorization: Bearer <token>` header (scheme in any case), or nullopt.
std::optional<std::string_view> bearer_token(std::string_view header) {
  constexpr std::string_view scheme = "bearer ";
  if (header.size() <= scheme.size() || lowercase(header.substr(0, scheme.size())) != scheme)
    return std::nullopt;
  auto token = header.substr(scheme.size());
  auto first = token.find_first_not_of(' ');
  if (first == std::string_view::npos)
    return std::nullopt;
  token = token.substr(first);
  return token.substr(0, token.find_last_not_of(' ') + 1);
}

/// The host of a Host header or an origin's authority, without its port ("[::1]:80" -> "[::1]").
std::string host_name(std::string_view authority) {
  if (!authority.empty() && authority.front() == '[')
    return std::string(authority.substr(0, authority.find(']') + 1));
  return std::string(authority.substr(0, authority.rfind(':')));
}

/// An IPv4 address in dotted decimal, or a bracketed IPv6 address.
bool is_address(std::string_view host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    return true;
  int dots = 0;
  for (char c : host) {
    if (c == '.')
      ++dots;
    else if (c < '0' || c > '9')
      return false;
  }
  return dots == 3 && !host.empty();
}

} // namespace

std::array<unsigned char, 32> sha256(std::string_view text) {
  std::array<unsigned char, 32> out{};
  unsigned int size = 0;
  if (EVP_Digest(text.data(), text.size(), out.data(), &size, EVP_sha256(), nullptr) != 1 ||
      size != out.size())
    throw std::runtime_error("SHA-256 failed");
  return out;
}

access_policy::access_policy(const conf::auth_settings& auth, const std::string& admin_token,
                             std::vector<std::string> allowed_origins,
                             std::vector<std::string> server_names)
    : auth_(auth), tokens_(auth.tokens), allowed_origins_(std::move(allowed_origins)) {
  if (!admin_token.empty())
    tokens_.push_back({"admin.token", conf::role::admin, sha256(admin_token)});
  for (const auto& name : server_names)
    server_names_.push_back(lowercase(name));
}

access_policy policy_of(const conf::settings& settings) {
  std::vector<std::string> names{settings.server.host};
  names.insert(names.end(), settings.server.allowed_hosts.begin(),
               settings.server.allowed_hosts.end());
  return {settings.auth, settings.admin.token, settings.server.allowed_origins, std::move(names)};
}

std::optional<conf::role> access_policy::role_needed(access needed) const {
  switch (needed) {
  case access::open:
    return std::nullopt;
  case access::read:
    return conf::role::read;
  case access::write:
    return conf::role::write;
  case access::admin:
    return conf::role::admin;
  case access::metrics:
    return auth_.metrics_role;
  }
  return conf::role::admin;
}

void access_policy::authorize(const httplib::Request& req, access needed) const {
  auto role = role_needed(needed);
  if (!role)
    return;
  if (!enforcing())
    return check_anonymous(req);
  auto header = req.get_header_value("Authorization");
  if (header.empty()) {
    if (!auth_.allow_anonymous)
      throw api_error(error_kind::unauthorized,
                      fmt::format("this route needs a token of role {} or above: send "
                                  "'Authorization: Bearer <token>'",
                                  name_of(*role)));
    if (auth_.anonymous_role < *role)
      throw api_error(error_kind::unauthorized,
                      fmt::format("requests without a token have role {}; this route needs a "
                                  "token of role {} or above: send 'Authorization: Bearer <token>'",
                                  name_of(auth_.anonymous_role), name_of(*role)));
    return check_anonymous(req);
  }
  auto token = bearer_token(header);
  if (!token)
    throw api_error(error_kind::unauthorized, "the Authorization header must be 'Bearer <token>'");
  // Digests have one length, so a wrong token of any length takes the same comparisons; every
  // configured digest is compared, matched or not.
  auto digest = sha256(*token);
  const conf::token_settings* match = nullptr;
  for (const auto& t : tokens_) {
    bool equal = CRYPTO_memcmp(digest.data(), t.sha256.data(), digest.size()) == 0;
    if (equal && !match)
      match = &t;
  }
  if (!match)
    throw api_error(error_kind::unauthorized, "the bearer token is not valid");
  if (match->granted < *role)
    throw api_error(error_kind::forbidden,
                    fmt::format("the token '{}' has role {}; this route needs {}", match->name,
                                name_of(match->granted), name_of(*role)));
}

void access_policy::check_anonymous(const httplib::Request& req) const {
  // A page of another site cannot read the answer, but its <img> or <script> still makes the
  // request, and an expensive one (a consistency check over a million orders) costs all the
  // same. Without tokens, only this server's own pages and the allowed origins call the API.
  const auto site = req.get_header_value("Sec-Fetch-Site");
  const auto origin = req.get_header_value("Origin");
  if ((site == "cross-site" || site == "same-site") &&
      (origin.empty() || !origin_allowed(req, origin)))
    throw api_error(error_kind::forbidden,
                    "a web page of another site may not call here without a token; list its "
                    "origin in server.allowedOrigins to let it");
  check_host(req, "a request without a token");
}

void access_policy::check_browser_host(const httplib::Request& req) const {
  bool browser = req.has_header("Origin");
  for (const auto& [name, value] : req.headers)
    browser = browser || lowercase(name).starts_with("sec-fetch-");
  if (browser)
    check_host(req, "a web page calling the simulated services");
}

void access_policy::check_host(const httplib::Request& req, std::string_view refused_what) const {
  // Browsers always send Host; a request without one (HTTP/1.0) cannot come from a rebound page.
  const auto name = lowercase(host_name(req.get_header_value("Host")));
  if (name.empty() || is_address(name) || name == "localhost" ||
      (name.size() > 10 && name.compare(name.size() - 10, 10, ".localhost") == 0) ||
      std::find(server_names_.begin(), server_names_.end(), name) != server_names_.end())
    return;
  for (const auto& origin : allowed_origins_) {
    auto authority = origin.find("://");
    if (authority != std::string::npos && host_name(origin.substr(authority + 3)) == name)
      return;
  }
  throw api_error(error_kind::forbidden,
                  fmt::format("{} must name this server by an IP address, localhost, server.host "
                              "or a name in server.allowedHosts, not '{}' (a web page of another "
                              "site can point any other name at this machine: DNS rebinding); "
                              "list the name in server.allowedHosts to allow it",
                              refused_what, name.substr(0, 200)));
}

bool access_policy::origin_allowed(const httplib::Request& req, std::string_view origin) const {
  auto given = lowercase(origin);
  if (std::find(allowed_origins_.begin(), allowed_origins_.end(), given) != allowed_origins_.end())
    return true;
  // The page's own server: its authority is the Host the request was sent to. The scheme is not
  // compared, so a proxy that terminates TLS in front keeps working; one port serves one scheme.
  auto host = lowercase(req.get_header_value("Host"));
  auto authority = given.find("://");
  return !host.empty() && authority != std::string::npos && given.substr(authority + 3) == host;
}

void access_policy::check_forgery(const httplib::Request& req, bool needs_json) const {
  auto origin = req.get_header_value("Origin");
  if (!origin.empty()) {
    if (!origin_allowed(req, origin))
      throw api_error(error_kind::forbidden,
                      fmt::format("a web page of origin '{}' may not change anything here; list "
                                  "the origin in server.allowedOrigins to let it",
                                  origin.substr(0, 200)));
  } else {
    // Browsers that leave Origin out still say where a request comes from.
    auto site = req.get_header_value("Sec-Fetch-Site");
    if (site == "cross-site" || site == "same-site")
      throw api_error(error_kind::forbidden,
                      "a web page of another site may not change anything here");
  }
  // Of the methods that change state, only POST can come from a form or a fetch without a
  // preflight (PUT, PATCH and DELETE never do), and only with a form's or plain text's type.
  if (needs_json && req.method == "POST" && !req.has_header("Authorization") &&
      !is_json_request(req))
    throw api_error(error_kind::unsupported_media_type,
                    "a request that changes state needs 'Content-Type: application/json' (also "
                    "with an empty body) or an Authorization header, which a web page of another "
                    "site cannot send");
}

} // namespace outboxd::http
