// Conversions from result rows to domain records, shared by every repository.
#pragma once

#include "domain/order.hpp"
#include "domain/outbox.hpp"

#include <optional>
#include <pqxx/pqxx>
#include <string>

namespace outboxd::persistence {

/// Select lists matching the converters below (timestamps as ISO text via outboxd_iso).
inline constexpr const char* order_columns =
    "id, customer_id, total_amount::text, currency, shipping_type, order_status, status_reason, "
    "outboxd_iso(created_at), outboxd_iso(updated_at)";
inline constexpr const char* event_columns =
    "id, aggregate_type, aggregate_id, event_type, payloads::text, status, attempts, "
    "outboxd_iso(next_retry_at), lease_owner, outboxd_iso(lease_expires_at), last_error, "
    "idempotency_key, outboxd_iso(created_at), outboxd_iso(status_changed_at), "
    "outboxd_iso(processed_at)";
inline constexpr const char* attempt_columns =
    "id, event_id, aggregate_id, event_type, destination, fanout_order, attempt, endpoint_url, "
    "http_method, idempotency_key, request_payload::text, response_status, "
    "response_payload::text, response_text, outcome, error_message, duration_ms, "
    "outboxd_iso(published_at), response_body, response_content_type, response_truncated, "
    "aggregate_type";
inline constexpr const char* dead_letter_columns =
    "id, original_event_id, aggregate_id, event_type, payloads::text, reason, last_error, status, "
    "attempts, outboxd_iso(next_retry_at), revert_error, outboxd_iso(failed_at), "
    "outboxd_iso(status_changed_at), outboxd_iso(resolved_at)";

domain::order to_order(const pqxx::row& r);
domain::event_record to_event(const pqxx::row& r);
domain::attempt_record to_attempt(const pqxx::row& r);
domain::dead_letter_record to_dead_letter(const pqxx::row& r);

template <class T> std::optional<T> optional_field(const pqxx::field& f) {
  if (f.is_null())
    return std::nullopt;
  return f.as<T>();
}

} // namespace outboxd::persistence
