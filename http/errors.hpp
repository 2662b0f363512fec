// API errors: one list gives each kind its HTTP status and code; handlers throw api_error.
#pragma once

#include "domain/order.hpp"

#include <stdexcept>
#include <string>

namespace outboxd::http {

/// Every kind of API error with its HTTP status, listed once: the enum and the status and code
/// lookups are generated from this list, and a kind's `error.code` is its name.
// clang-format off
#define OUTBOXD_API_ERROR_KINDS(X)                                                           \
  X(bad_request, 400)             X(malformed_json, 400)          X(unauthorized, 401)       \
  X(forbidden, 403)               X(not_found, 404)               X(method_not_allowed, 405) \
  X(request_timeout, 408)         X(invalid_transition, 409)                                 \
  X(payload_too_large, 413)       X(uri_too_long, 414)            X(unsupported_media_type, 415) \
  X(validation_failed, 422)       X(idempotency_key_reused, 422)                                 \
  X(request_headers_too_large, 431)                                                              \
  X(internal, 500)                X(unavailable, 503)
// clang-format on

#define OUTBOXD_API_ERROR_ENUMERATOR(name, status) name,
enum class error_kind { OUTBOXD_API_ERROR_KINDS(OUTBOXD_API_ERROR_ENUMERATOR) };
#undef OUTBOXD_API_ERROR_ENUMERATOR

/// The HTTP status of an error kind.
int status_of(error_kind kind);
/// The stable `error.code` string of an error kind, e.g. "validation_failed".
const char* code_of(error_kind kind);

/// Thrown by handlers; rendered as `{"error": {"code", "message", "details"}}`.
class api_error : public std::runtime_error {
public:
  api_error(error_kind kind, std::string message, domain::field_errors details = {})
      : std::runtime_error(message), kind_(kind), message_(std::move(message)),
        details_(std::move(details)) {}

  error_kind kind() const { return kind_; }
  /// The whole message: what() ends at a NUL byte that a client's input put in it.
  const std::string& message() const { return message_; }
  const domain::field_errors& details() const { return details_; }

private:
  error_kind kind_;
  std::string message_;
  domain::field_errors details_;
};

/// A 422 for field errors, with a message that names each field.
api_error validation_error(const domain::field_errors& errors);

/// A new id for a request, unique in this process ("<8 hex digits of the process>-<counter>"):
/// every answer carries it as X-Request-Id, and a 500's details name it.
std::string next_request_id();

/// The JSON body of an error response; `request_id` is added to details when given.
std::string error_body(error_kind kind, const std::string& message,
                       const domain::field_errors& details, const std::string& request_id = {});

} // namespace outboxd::http
