// Bearer token check with a constant-time comparison.
#include "http/auth.hpp"

#include "http/errors.hpp"

#include <httplib.h>

namespace outboxd::http {

void require_admin(const httplib::Request& req, const std::string& token) {
  if (token.empty())
    return;
  auto given = req.get_header_value("Authorization");
  auto expected = "Bearer " + token;
  unsigned diff = given.size() != expected.size();
  for (std::size_t i = 0; i < expected.size(); ++i)
    diff |= static_cast<unsigned char>(i < given.size() ? given[i] : 0) ^
            static_cast<unsigned char>(expected[i]);
  if (diff != 0)
    throw api_error(error_kind::unauthorized,
                    "this endpoint needs the header 'Authorization: Bearer <admin.token>'");
}

} // namespace outboxd::http
