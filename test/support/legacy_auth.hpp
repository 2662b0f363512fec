// The access policy of a configuration that sets only the old plain-text `admin.token` and lets
// requests without a token read and write: what tests of admin-only guards run under.
#pragma once

#include "http/auth.hpp"

#include <string>

namespace outboxd::test {

inline http::access_policy admin_token_only(const std::string& admin_token) {
  conf::auth_settings auth;
  auth.allow_anonymous = true;
  auth.anonymous_role = conf::role::write;
  return http::access_policy(auth, admin_token, {});
}

} // namespace outboxd::test
