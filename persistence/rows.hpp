// Conversions from result rows to domain records, shared by every repository.
#pragma once

#include "domain/order.hpp"
#include "domain/outbox.hpp"

#include <fmt/format.h>
#include <optional>
#include <pqxx/pqxx>
#include <string>
#include <string_view>

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
/// An attempt row as the API lists it: a body larger than domain::max_listed_body_bytes is left
/// out (JSON) or cut to its start (text, bytes), and the last column says whether one was, so
/// that a timeline of a thousand attempts with megabyte answers stays a few megabytes.
inline const std::string attempt_columns = fmt::format(
    "id, event_id, aggregate_id, event_type, destination, fanout_order, attempt, endpoint_url, "
    "http_method, idempotency_key, "
    "CASE WHEN octet_length(request_payload::text) <= {0} THEN request_payload::text END, "
    "response_status, "
    "CASE WHEN octet_length(response_payload::text) <= {0} THEN response_payload::text END, "
    "left(response_text, {0}), outcome, error_message, duration_ms, "
    "outboxd_iso(published_at), substring(response_body FROM 1 FOR {0}), "
    "response_content_type, response_truncated, aggregate_type, "
    "coalesce(octet_length(request_payload::text) > {0} OR "
    "octet_length(response_payload::text) > {0} OR octet_length(response_text) > {0} OR "
    "octet_length(response_body) > {0}, false)",
    domain::max_listed_body_bytes);
/// SQL for the newest event of `event_type` of an aggregate (outbox_events, or its audit rows once
/// retention removed it): the event a cancellation of that type reverts. The arguments are SQL
/// expressions (parameters, or columns of an outer query).
std::string latest_event_sql(std::string_view aggregate_type, std::string_view aggregate_id,
                             std::string_view event_type);
/// SELECT of the attempt rows (attempt_columns, the newest `limit`, oldest first) that the view
/// of the outbox event or dead letter with id $1 lists: those of its event, or for a
/// cancellation ("!" and the type it cancels) the reverts of the event it cancels, which are
/// recorded under that event's id. `table` is outbox_events or dead_letter_events and
/// `event_column` its column naming the event (id, original_event_id).
std::string listed_attempts_sql(std::string_view table, std::string_view event_column, int limit);
inline constexpr const char* dead_letter_columns =
    "id, original_event_id, aggregate_id, event_type, payloads::text, reason, last_error, status, "
    "attempts, outboxd_iso(next_retry_at), revert_error, outboxd_iso(failed_at), "
    "outboxd_iso(status_changed_at), outboxd_iso(resolved_at), aggregate_type";

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
