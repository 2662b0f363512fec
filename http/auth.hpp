// Who may call a route: bearer tokens known by their SHA-256, roles that include the ones below
// them, and the rules that keep other web sites' pages from changing anything (content type,
// Origin, CORS).
#pragma once

#include "conf/settings.hpp"

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace httplib {
struct Request;
}

namespace outboxd::http {

/// What a route needs from its caller.
enum class access {
  open,    ///< anyone (health probes, the web UI's files, the simulated partners)
  read,    ///< a read token (or better)
  write,   ///< a write token (or admin)
  admin,   ///< an admin token
  metrics, ///< what auth.metricsRole says (read by default; "none" makes it open)
};

/// The SHA-256 digest of `text`.
std::array<unsigned char, 32> sha256(std::string_view text);

/// The access rules of one server. The default policy checks no token and trusts no other origin.
class access_policy {
public:
  access_policy() = default;
  /// `admin_token` (plain text, may be empty) is accepted as one more admin token;
  /// `server_names` are the host names this server answers to (server.host and
  /// server.allowedHosts), besides its addresses, localhost and the allowed origins' hosts.
  access_policy(const conf::auth_settings& auth, const std::string& admin_token,
                std::vector<std::string> allowed_origins,
                std::vector<std::string> server_names = {});

  /// Whether requests must present a token (some token is configured).
  bool enforcing() const { return !tokens_.empty(); }

  /// Throws api_error: unauthorized (401) without a valid token where one is needed, forbidden
  /// (403) when the token's role is below `needed`, when a request without a token names this
  /// server by a name that is not its own (check_host), or when a page of another site makes a
  /// browser send it without a token. Open routes are not checked at all. Every wrong token,
  /// whatever its length, costs one SHA-256 and one constant-time comparison with each
  /// configured digest.
  void authorize(const httplib::Request& req, access needed) const;

  /// For a route open to other servers by any name (the simulated partners): throws forbidden
  /// (403) when a browser sends the request (it carries Origin or Sec-Fetch-*) and check_host
  /// refuses its Host. Server-to-server calls carry neither and pass.
  void check_browser_host(const httplib::Request& req) const;

  /// For a state-changing request: throws forbidden (403) when it comes from a web page of a
  /// foreign origin, and, for a POST when `needs_json` (outboxd's own API),
  /// unsupported_media_type (415) unless it is `application/json` or carries an Authorization
  /// header: both are what a page of another site cannot send without a CORS preflight, which
  /// only allowed origins pass.
  void check_forgery(const httplib::Request& req, bool needs_json) const;

  /// Whether a browser page of `origin` may call (same origin as `req`, or configured).
  bool origin_allowed(const httplib::Request& req, std::string_view origin) const;

private:
  std::optional<conf::role> role_needed(access needed) const;
  /// check_host, after refusing what a page of another site makes a browser send.
  void check_anonymous(const httplib::Request& req) const;
  /// For a request served without a token (`refused_what` says which, in the refusal): throws
  /// forbidden (403) unless its Host names this server by an IP address, localhost (or
  /// *.localhost), a server name or the host of an allowed origin; a request without a Host
  /// (HTTP/1.0) passes. A page of another site whose name was pointed at this machine (DNS
  /// rebinding) is same-origin in the browser's eyes and, over plain HTTP, sends neither Origin
  /// nor Sec-Fetch-* for a read; only its Host gives it away, so every request is judged by it,
  /// browser or not.
  void check_host(const httplib::Request& req, std::string_view refused_what) const;

  conf::auth_settings auth_;
  std::vector<conf::token_settings> tokens_; // auth.tokens and admin.token
  std::vector<std::string> allowed_origins_;
  std::vector<std::string> server_names_; // lower case
};

/// The access policy `settings` configure (auth.*, admin.token, server.allowedOrigins,
/// server.host, server.allowedHosts).
access_policy policy_of(const conf::settings& settings);

} // namespace outboxd::http
