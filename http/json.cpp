// Request parsing and resource codecs. Field names are the camelCase column names.
#include "http/json.hpp"

#include "http/errors.hpp"

#include <algorithm>
#include <cctype>
#include <fmt/format.h>
#include <httplib.h>
#include <rapidjson/error/en.h>

namespace outboxd::http {

void json_writer::raw_field(std::string_view k, const std::optional<std::string>& json) {
  key(k);
  if (json)
    raw(*json, rapidjson::kObjectType);
  else
    null();
}

std::optional<rapidjson::Document> parse_json_body(const httplib::Request& req, bool required) {
  if (req.body.empty()) {
    if (required)
      throw api_error(error_kind::malformed_json, "request body is empty; expected a JSON object");
    return std::nullopt;
  }
  auto type = req.get_header_value("Content-Type");
  std::transform(type.begin(), type.end(), type.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  auto media = type.substr(0, type.find(';'));
  media.erase(media.find_last_not_of(" \t") + 1);
  if (media != "application/json")
    throw api_error(error_kind::unsupported_media_type,
                    fmt::format("Content-Type must be application/json, got '{}'",
                                req.get_header_value("Content-Type")));
  rapidjson::Document doc;
  // Iterative parsing: a deeply nested body cannot exhaust the stack.
  doc.Parse<rapidjson::kParseValidateEncodingFlag | rapidjson::kParseIterativeFlag>(
      req.body.data(), req.body.size());
  if (doc.HasParseError())
    throw api_error(error_kind::malformed_json,
                    fmt::format("request body is not valid JSON: {} at offset {}",
                                rapidjson::GetParseError_En(doc.GetParseError()),
                                doc.GetErrorOffset()));
  return doc;
}

void write_order(json_writer& w, const domain::order& o) {
  w.start_object();
  w.field("id", o.id);
  w.field("customerId", o.customer_id);
  w.key("totalAmount");
  w.raw(domain::to_decimal(o.total_amount), rapidjson::kNumberType);
  w.field("currency", o.currency);
  w.field("shippingType", domain::to_string(o.shipping));
  w.field("status", domain::to_string(o.status));
  w.field("statusReason", o.status_reason);
  w.field("createdAt", o.created_at);
  w.field("updatedAt", o.updated_at);
  w.end_object();
}

void write_event(json_writer& w, const domain::event_record& e) {
  w.start_object();
  w.field("id", e.id);
  w.field("aggregateType", e.aggregate_type);
  w.field("aggregateId", e.aggregate_id);
  w.field("eventType", e.event_type);
  w.raw_field("payloads", e.payloads_json);
  w.field("status", e.status);
  w.field("attempts", e.attempts);
  w.field("nextRetryAt", e.next_retry_at);
  w.field("leaseOwner", e.lease_owner);
  w.field("leaseExpiresAt", e.lease_expires_at);
  w.field("lastError", e.last_error);
  w.field("idempotencyKey", e.idempotency_key);
  w.field("createdAt", e.created_at);
  w.field("statusChangedAt", e.status_changed_at);
  w.field("processedAt", e.processed_at);
  w.end_object();
}

void write_attempt(json_writer& w, const domain::attempt_record& a) {
  w.start_object();
  w.field("id", a.id);
  w.field("eventId", a.event_id);
  w.field("eventType", a.event_type);
  w.field("destination", a.destination);
  w.field("fanoutOrder", a.fanout_order);
  w.field("attempt", a.attempt);
  w.field("outcome", a.outcome);
  w.field("httpMethod", a.http_method);
  w.field("endpointUrl", a.endpoint_url);
  w.field("idempotencyKey", a.idempotency_key);
  w.field("responseStatus", a.response_status);
  w.raw_field("requestPayload", a.request_payload_json);
  w.raw_field("responsePayload", a.response_payload_json);
  w.field("responseText", a.response_text);
  w.field("errorMessage", a.error_message);
  w.field("durationMs", a.duration_ms);
  w.field("publishedAt", a.published_at);
  w.end_object();
}

void write_dead_letter(json_writer& w, const domain::dead_letter_record& d) {
  w.start_object();
  w.field("id", d.id);
  w.field("originalEventId", d.original_event_id);
  w.field("aggregateId", d.aggregate_id);
  w.field("eventType", d.event_type);
  w.raw_field("payloads", d.payloads_json);
  w.field("reason", d.reason);
  w.field("lastError", d.last_error);
  w.field("status", d.status);
  w.field("attempts", d.attempts);
  w.field("nextRetryAt", d.next_retry_at);
  w.field("revertError", d.revert_error);
  w.field("failedAt", d.failed_at);
  w.field("statusChangedAt", d.status_changed_at);
  w.field("resolvedAt", d.resolved_at);
  w.end_object();
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
  w.key("deadLetters");
  w.start_array();
  for (const auto& d : t.dead_letters)
    write_dead_letter(w, d);
  w.end_array();
  w.end_object();
  return w.str();
}

} // namespace outboxd::http
