// The error table and the error body writer.
#include "http/errors.hpp"

#include "http/json.hpp"

namespace outboxd::http {
namespace {

struct error_row {
  error_kind kind;
  int status;
  const char* code;
};

constexpr error_row error_table[] = {
    {error_kind::bad_request, 400, "bad_request"},
    {error_kind::malformed_json, 400, "malformed_json"},
    {error_kind::unauthorized, 401, "unauthorized"},
    {error_kind::not_found, 404, "not_found"},
    {error_kind::method_not_allowed, 405, "method_not_allowed"},
    {error_kind::invalid_transition, 409, "invalid_transition"},
    {error_kind::payload_too_large, 413, "payload_too_large"},
    {error_kind::unsupported_media_type, 415, "unsupported_media_type"},
    {error_kind::validation_failed, 422, "validation_failed"},
    {error_kind::idempotency_key_reused, 422, "idempotency_key_reused"},
    {error_kind::internal, 500, "internal"},
    {error_kind::unavailable, 503, "unavailable"},
};

const error_row& row_of(error_kind kind) {
  for (const auto& r : error_table)
    if (r.kind == kind)
      return r;
  return error_table[10];
}

} // namespace

int status_of(error_kind kind) {
  return row_of(kind).status;
}
const char* code_of(error_kind kind) {
  return row_of(kind).code;
}

api_error validation_error(const domain::field_errors& errors) {
  std::string message;
  for (const auto& e : errors) {
    if (!message.empty())
      message += "; ";
    message += e.field.empty() ? e.message : e.field + " " + e.message;
  }
  return api_error(error_kind::validation_failed, message, errors);
}

std::string error_body(error_kind kind, const std::string& message,
                       const domain::field_errors& details, const std::string& request_id) {
  json_writer w;
  w.start_object();
  w.key("error");
  w.start_object();
  w.field("code", code_of(kind));
  w.field("message", message);
  if (!details.empty()) {
    w.key("details");
    w.start_array();
    for (const auto& d : details) {
      w.start_object();
      w.field("field", d.field);
      w.field("message", d.message);
      w.end_object();
    }
    w.end_array();
  } else if (!request_id.empty()) {
    w.key("details");
    w.start_object();
    w.field("requestId", request_id);
    w.end_object();
  }
  w.end_object();
  w.end_object();
  return w.str();
}

} // namespace outboxd::http
