// Request parsing and resource codecs. Field names are the camelCase column names.
#include "http/json.hpp"

#include "domain/json_parse.hpp"
#include "domain/response_body.hpp"
#include "http/errors.hpp"

#include <algorithm>
#include <cctype>
#include <fmt/format.h>
#include <httplib.h>

namespace outboxd::http {

std::optional<std::string> idempotency_key(const httplib::Request& req) {
  constexpr std::size_t max_length = 255;
  if (!req.has_header("Idempotency-Key"))
    return std::nullopt;
  auto key = req.get_header_value("Idempotency-Key");
  bool printable = !key.empty() && key.size() <= max_length;
  for (unsigned char c : key)
    printable = printable && c >= 0x21 && c <= 0x7E;
  if (!printable)
    throw api_error(
        error_kind::validation_failed,
        fmt::format("Idempotency-Key must be 1 to {} printable ASCII characters without spaces",
                    max_length),
        {{"Idempotency-Key", "must be 1 to 255 printable ASCII characters"}});
  return key;
}

bool is_json_request(const httplib::Request& req) {
  auto type = req.get_header_value("Content-Type");
  std::transform(type.begin(), type.end(), type.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  auto media = type.substr(0, type.find(';'));
  media.erase(media.find_last_not_of(" \t") + 1);
  return media == "application/json";
}

std::optional<rapidjson::Document> parse_json_body(const httplib::Request& req, bool required) {
  if (req.body.empty()) {
    if (required)
      throw api_error(error_kind::malformed_json, "request body is empty; expected a JSON object");
    return std::nullopt;
  }
  if (!is_json_request(req))
    throw api_error(error_kind::unsupported_media_type,
                    fmt::format("Content-Type must be application/json, got '{}'",
                                req.get_header_value("Content-Type")));
  rapidjson::Document doc;
  // Bounded depth: neither the parse nor any later walk of the body can exhaust a stack.
  if (auto error = domain::parse_json_bounded<rapidjson::kParseValidateEncodingFlag>(doc, req.body))
    throw api_error(error_kind::malformed_json,
                    fmt::format("request body is not valid JSON: {} at offset {}", error->message,
                                error->offset));
  return doc;
}

void write_order(json_writer& w, const domain::order& o) {
  w.object("id", o.id, "customerId", o.customer_id, "totalAmount",
           raw_json(domain::to_decimal(o.total_amount), rapidjson::kNumberType), "currency",
           o.currency, "shippingType", domain::to_string(o.shipping), "status",
           domain::to_string(o.status), "statusReason", o.status_reason, "createdAt", o.created_at,
           "updatedAt", o.updated_at);
}

void write_event(json_writer& w, const domain::event_record& e) {
  w.object("id", e.id, "aggregateType", e.aggregate_type, "aggregateId", e.aggregate_id,
           "eventType", e.event_type, "payloads", raw_json(e.payloads_json), "status", e.status,
           "attempts", e.attempts, "nextRetryAt", e.next_retry_at, "leaseOwner", e.lease_owner,
           "leaseExpiresAt", e.lease_expires_at, "lastError", e.last_error, "idempotencyKey",
           e.idempotency_key, "createdAt", e.created_at, "statusChangedAt", e.status_changed_at,
           "processedAt", e.processed_at);
}

void write_attempt(json_writer& w, const domain::attempt_record& a) {
  w.start_object();
  w.fields("id", a.id, "eventId", a.event_id, "eventType", a.event_type, "destination",
           a.destination, "fanoutOrder", a.fanout_order, "attempt", a.attempt, "outcome",
           domain::to_string(a.outcome), "httpMethod", a.http_method, "endpointUrl", a.endpoint_url,
           "idempotencyKey", a.idempotency_key, "responseStatus", a.response_status,
           "requestPayload", raw_json(a.request_payload_json), "responsePayload",
           raw_json(a.response_payload_json), "responseText", a.response_text, "errorMessage",
           a.error_message, "durationMs", a.duration_ms, "publishedAt", a.published_at,
           "responseContentType", a.response_content_type, "responseTruncated",
           a.response_truncated);
  if (a.bodies_shortened)
    w.field("bodiesShortened", true);
  // Bytes that are neither JSON nor text travel as base64; JSON strings cannot carry them.
  w.key("responseBody");
  if (a.response_body)
    w.object("encoding", "base64", "data", domain::base64(*a.response_body), "bytes",
             static_cast<std::int64_t>(a.response_body->size()));
  else
    w.null();
  w.end_object();
}

void write_dead_letter(json_writer& w, const domain::dead_letter_record& d) {
  w.object("id", d.id, "originalEventId", d.original_event_id, "aggregateId", d.aggregate_id,
           "eventType", d.event_type, "payloads", raw_json(d.payloads_json), "reason", d.reason,
           "lastError", d.last_error, "status", d.status, "attempts", d.attempts, "nextRetryAt",
           d.next_retry_at, "revertError", d.revert_error, "failedAt", d.failed_at,
           "statusChangedAt", d.status_changed_at, "resolvedAt", d.resolved_at);
}

std::string order_json(const domain::order& o) {
  json_writer w;
  write_order(w, o);
  return w.str();
}

std::string timeline_json(const domain::order_timeline& t) {
  json_writer w;
  w.start_object();
  w.key("order");
  write_order(w, t.value);
  w.key("events");
  w.start_array();
  for (const auto& e : t.events)
    write_event(w, e);
  w.end_array();
  w.key("attempts");
  w.start_array();
  for (const auto& a : t.attempts)
    write_attempt(w, a);
  w.end_array();
  if (t.attempts_truncated) {
    w.key("attemptsTruncated");
    w.value(true);
  }
  w.key("deadLetters");
  w.start_array();
  for (const auto& d : t.dead_letters)
    write_dead_letter(w, d);
  w.end_array();
  w.end_object();
  return w.str();
}

} // namespace outboxd::http

namespace outboxd::http {
namespace {

template <class Record, class Write>
std::string with_attempts(std::string_view key, const Record& record, Write write,
                          const std::vector<domain::attempt_record>& attempts) {
  json_writer w;
  w.start_object();
  w.key(key);
  write(w, record);
  // Read one past the cap: the oldest is left out, and the answer says so.
  const bool truncated = attempts.size() > static_cast<std::size_t>(domain::max_timeline_attempts);
  w.key("attempts");
  w.start_array();
  for (auto a = attempts.begin() + (truncated ? 1 : 0); a != attempts.end(); ++a)
    write_attempt(w, *a);
  w.end_array();
  if (truncated)
    w.field("attemptsTruncated", true);
  w.end_object();
  return w.str();
}

bool revertible(const domain::destination& d) {
  for (const auto& r : d.routes)
    if (r.revert)
      return true;
  return false;
}

} // namespace

std::string event_detail_json(const domain::event_record& e,
                              const std::vector<domain::attempt_record>& attempts) {
  return with_attempts("event", e, write_event, attempts);
}

std::string dead_letter_detail_json(const domain::dead_letter_record& d,
                                    const std::vector<domain::attempt_record>& attempts) {
  return with_attempts("deadLetter", d, write_dead_letter, attempts);
}

std::string fanout_json(const domain::routing_table& routing) {
  json_writer w;
  w.start_object();
  w.key("eventTypes");
  w.start_object();
  for (const auto& [event_type, destinations] : routing.fanout) {
    w.key(event_type);
    w.start_array();
    for (const auto& name : destinations) {
      // The loader refuses a fan-out naming an unknown destination; an absent one (a test's
      // hand-made table) is simply not revertible.
      auto found = routing.destinations.find(name);
      w.object("destination", name, "revertible",
               found != routing.destinations.end() && revertible(found->second));
    }
    w.end_array();
  }
  w.end_object();
  w.end_object();
  return w.str();
}

} // namespace outboxd::http
