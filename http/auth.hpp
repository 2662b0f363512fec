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
  /// `admin_token` (plain text, may be empty) is accepted as one more admin token.
  access_policy(const conf::auth_settings& auth, const std::string& admin_token,
                std::vector<std::string> allowed_origins);

  /// Whether requests must present a token (some token is configured).
  bool enforcing() const { return !tokens_.empty(); }

  /// Throws api_error: unauthorized (401) without a valid token where one is needed, forbidden
  /// (403) when the token's role is below `needed`. Every wrong token, whatever its length, costs
  /// one SHA-256 and one constant-time comparison with each configured digest.
  void authorize(const httplib::Request& req, access needed) const;

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

  conf::auth_settings auth_;
  std::vector<conf::token_settings> tokens_; // auth.tokens and admin.token
  std::vector<std::string> allowed_origins_;
};

/// The access policy `settings` configure (auth.*, admin.token, server.allowedOrigins).
access_policy policy_of(const conf::settings& settings);

} // namespace outboxd::http
