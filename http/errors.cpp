// The status and code lookups of the error list, and the error body writer.
#include "http/errors.hpp"

#include "domain/response_body.hpp"
#include "http/json.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <fmt/format.h>
#include <random>

namespace outboxd::http {

int status_of(error_kind kind) {
  switch (kind) {
#define OUTBOXD_API_ERROR_STATUS(name, status)                                                     \
  case error_kind::name:                                                                           \
    return status;
    OUTBOXD_API_ERROR_KINDS(OUTBOXD_API_ERROR_STATUS)
#undef OUTBOXD_API_ERROR_STATUS
  }
  return 500; // not reached: the switch covers every kind (-Wswitch says when one is missing)
}

const char* code_of(error_kind kind) {
  switch (kind) {
#define OUTBOXD_API_ERROR_CODE(name, status)                                                       \
  case error_kind::name:                                                                           \
    return #name;
    OUTBOXD_API_ERROR_KINDS(OUTBOXD_API_ERROR_CODE)
#undef OUTBOXD_API_ERROR_CODE
  }
  return "internal";
}

std::string next_request_id() {
  static const std::uint32_t prefix = std::random_device{}();
  static std::atomic<std::uint64_t> counter{0};
  return fmt::format("{:08x}-{:x}", prefix, ++counter);
}

api_error validation_error(const domain::field_errors& errors) {
  // A body of 60 000 unknown keys must not get an answer five times its size: the first ones
  // are enough to fix it.
  constexpr std::size_t listed = 100;
  domain::field_errors shown(errors.begin(), errors.begin() + static_cast<std::ptrdiff_t>(
                                                                  std::min(errors.size(), listed)));
  std::string message;
  for (const auto& e : shown) {
    if (!message.empty())
      message += "; ";
    message += e.field.empty() ? e.message : e.field + " " + e.message;
  }
  if (errors.size() > listed)
    message += fmt::format("; and {} more errors", errors.size() - listed);
  return api_error(error_kind::validation_failed, message, std::move(shown));
}

std::string error_body(error_kind kind, const std::string& message,
                       const domain::field_errors& details, const std::string& request_id) {
  json_writer w;
  w.start_object();
  w.key("error");
  w.start_object();
  w.field("code", code_of(kind));
  // Messages quote what the client sent (a path, a parameter, a value), bytes that need not be
  // UTF-8: the answer is JSON all the same, each ill-formed sequence a U+FFFD.
  w.field("message", domain::readable_text(message));
  if (!details.empty()) {
    w.key("details");
    w.start_array();
    for (const auto& d : details) {
      w.start_object();
      w.field("field", domain::readable_text(d.field));
      w.field("message", domain::readable_text(d.message));
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
