// The admin token guard of the mutating admin and simulator endpoints.
#pragma once

#include <string>

namespace httplib {
struct Request;
}

namespace outboxd::http {

/// Throws api_error(unauthorized) unless `token` is empty or the request carries
/// `Authorization: Bearer <token>`. The comparison takes the same time however much matches.
void require_admin(const httplib::Request& req, const std::string& token);

} // namespace outboxd::http
