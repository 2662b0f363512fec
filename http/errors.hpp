// API errors: one table maps each kind to its HTTP status and code; handlers throw api_error.
#pragma once

#include "domain/order.hpp"

#include <stdexcept>
#include <string>

namespace outboxd::http {

enum class error_kind {
  bad_request,            // 400
  malformed_json,         // 400
  unauthorized,           // 401
  not_found,              // 404
  method_not_allowed,     // 405
  invalid_transition,     // 409
  payload_too_large,      // 413
  unsupported_media_type, // 415
  validation_failed,      // 422
  idempotency_key_reused, // 422
  internal,               // 500
  unavailable             // 503
};

/// The HTTP status of an error kind.
int status_of(error_kind kind);
/// The stable `error.code` string of an error kind, e.g. "validation_failed".
const char* code_of(error_kind kind);

/// Thrown by handlers; rendered as `{"error": {"code", "message", "details"}}`.
class api_error : public std::runtime_error {
public:
  api_error(error_kind kind, std::string message, domain::field_errors details = {})
      : std::runtime_error(std::move(message)), kind_(kind), details_(std::move(details)) {}

  error_kind kind() const { return kind_; }
  const domain::field_errors& details() const { return details_; }

private:
  error_kind kind_;
  domain::field_errors details_;
};

/// A 422 for field errors, with a message that names each field.
api_error validation_error(const domain::field_errors& errors);

/// The JSON body of an error response; `request_id` is added to details when given.
std::string error_body(error_kind kind, const std::string& message,
                       const domain::field_errors& details, const std::string& request_id = {});

} // namespace outboxd::http
