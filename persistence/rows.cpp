// Row converters. Column order is fixed by the select lists in rows.hpp.
#include "persistence/rows.hpp"

#include <stdexcept>

namespace outboxd::persistence {

domain::order to_order(const pqxx::row& r) {
  domain::order o;
  o.id = r[0].as<std::int64_t>();
  o.customer_id = r[1].as<std::string>();
  auto amount = domain::parse_decimal(r[2].c_str());
  if (!amount)
    throw std::logic_error("orders.total_amount is not a decimal: " + r[2].as<std::string>());
  o.total_amount = *amount;
  o.currency = r[3].as<std::string>();
  o.shipping = domain::parse_shipping_type(r[4].c_str()).value_or(domain::shipping_type::domestic);
  auto status = domain::parse_order_status(r[5].c_str());
  if (!status)
    throw std::logic_error("orders.order_status is unknown: " + r[5].as<std::string>());
  o.status = *status;
  o.status_reason = optional_field<std::string>(r[6]);
  o.created_at = r[7].as<std::string>();
  o.updated_at = r[8].as<std::string>();
  return o;
}

domain::event_record to_event(const pqxx::row& r) {
  domain::event_record e;
  e.id = r[0].as<std::int64_t>();
  e.aggregate_type = r[1].as<std::string>();
  e.aggregate_id = r[2].as<std::string>();
  e.event_type = r[3].as<std::string>();
  e.payloads_json = r[4].as<std::string>();
  e.status = r[5].as<std::string>();
  e.attempts = r[6].as<int>();
  e.next_retry_at = optional_field<std::string>(r[7]);
  e.lease_owner = optional_field<std::string>(r[8]);
  e.lease_expires_at = optional_field<std::string>(r[9]);
  e.last_error = optional_field<std::string>(r[10]);
  e.idempotency_key = r[11].as<std::string>();
  e.created_at = r[12].as<std::string>();
  e.status_changed_at = r[13].as<std::string>();
  e.processed_at = optional_field<std::string>(r[14]);
  return e;
}

domain::attempt_record to_attempt(const pqxx::row& r) {
  domain::attempt_record a;
  a.id = r[0].as<std::int64_t>();
  a.event_id = r[1].as<std::int64_t>();
  a.aggregate_id = r[2].as<std::string>();
  a.event_type = r[3].as<std::string>();
  a.destination = r[4].as<std::string>();
  a.fanout_order = r[5].as<int>();
  a.attempt = r[6].as<int>();
  a.endpoint_url = r[7].as<std::string>();
  a.http_method = r[8].as<std::string>();
  a.idempotency_key = optional_field<std::string>(r[9]);
  a.request_payload_json = optional_field<std::string>(r[10]);
  a.response_status = optional_field<int>(r[11]);
  a.response_payload_json = optional_field<std::string>(r[12]);
  a.response_text = optional_field<std::string>(r[13]);
  auto outcome = r[14].as<std::string>();
  auto parsed = domain::parse_attempt_outcome(outcome);
  if (!parsed) // the table's CHECK constraint allows no other value
    throw std::runtime_error("aggregate_results row has an unknown outcome '" + outcome + "'");
  a.outcome = *parsed;
  a.error_message = optional_field<std::string>(r[15]);
  a.duration_ms = optional_field<int>(r[16]);
  a.published_at = r[17].as<std::string>();
  if (!r[18].is_null())
    a.response_body = pqxx::binarystring(r[18]).str();
  a.response_content_type = optional_field<std::string>(r[19]);
  a.response_truncated = r[20].as<bool>();
  a.aggregate_type = r[21].as<std::string>();
  a.bodies_shortened = r[22].as<bool>();
  return a;
}

domain::dead_letter_record to_dead_letter(const pqxx::row& r) {
  domain::dead_letter_record d;
  d.id = r[0].as<std::int64_t>();
  d.original_event_id = r[1].as<std::int64_t>();
  d.aggregate_id = r[2].as<std::string>();
  d.event_type = r[3].as<std::string>();
  d.payloads_json = r[4].as<std::string>();
  d.reason = r[5].as<std::string>();
  d.last_error = optional_field<std::string>(r[6]);
  d.status = r[7].as<std::string>();
  d.attempts = r[8].as<int>();
  d.next_retry_at = optional_field<std::string>(r[9]);
  d.revert_error = optional_field<std::string>(r[10]);
  d.failed_at = r[11].as<std::string>();
  d.status_changed_at = r[12].as<std::string>();
  d.resolved_at = optional_field<std::string>(r[13]);
  d.aggregate_type = r[14].as<std::string>();
  return d;
}

std::string latest_event_sql(std::string_view aggregate_type, std::string_view aggregate_id,
                             std::string_view event_type) {
  return fmt::format("coalesce((SELECT max(id) FROM outbox_events WHERE aggregate_type = {0} AND "
                     "aggregate_id = {1} AND event_type = {2}), (SELECT max(event_id) FROM "
                     "aggregate_results WHERE aggregate_id = {1} AND aggregate_type = {0} AND "
                     "event_type = {2} AND destination NOT LIKE '%.revert'))",
                     aggregate_type, aggregate_id, event_type);
}

std::string listed_attempts_sql(std::string_view table, std::string_view event_column, int limit) {
  // Scalar subqueries, run once, so that the rows are found by the index on event_id.
  auto cancelled =
      latest_event_sql("o.aggregate_type", "o.aggregate_id", "substr(o.event_type, 2)");
  return fmt::format(
      "SELECT * FROM (SELECT {0} FROM aggregate_results WHERE event_id = (SELECT CASE WHEN "
      "left(o.event_type, 1) = '!' THEN {1} ELSE o.{2} END FROM {3} o WHERE o.id = $1) AND "
      "(destination LIKE '%.revert' OR (SELECT left(event_type, 1) <> '!' FROM {3} WHERE id = "
      "$1)) ORDER BY id DESC LIMIT {4}) newest ORDER BY id",
      attempt_columns, cancelled, event_column, table, limit);
}

} // namespace outboxd::persistence
