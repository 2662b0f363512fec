// The order aggregate: its states and transitions, request validation, and the outbox events it
// emits (one payload per destination of their fan-out).
#pragma once

#include <cstdint>
#include <optional>
#include <rapidjson/document.h>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace outboxd::domain {

enum class order_status {
  pending,
  confirmed,
  shipped,
  delivered,
  failed,
  cancelling,
  cancelled,
  attention
};

inline constexpr order_status all_order_statuses[] = {
    order_status::pending,   order_status::confirmed, order_status::shipped,
    order_status::delivered, order_status::failed,    order_status::cancelling,
    order_status::cancelled, order_status::attention};

/// "PENDING", "CONFIRMED", ... as stored and as shown in the API.
std::string_view to_string(order_status s);
/// Parses an upper-case status name.
std::optional<order_status> parse_order_status(std::string_view name);

enum class shipping_type { domestic, international };
std::string_view to_string(shipping_type t);
std::optional<shipping_type> parse_shipping_type(std::string_view name);

/// An amount of money in cents (NUMERIC(12,2) in the database).
struct money {
  std::int64_t cents = 0;
  friend bool operator==(money, money) = default;
};
/// "99.99", "100.00".
std::string to_decimal(money m);
/// Parses the database's NUMERIC text ("99.99", "100", "0.5"); nullopt when not a decimal with
/// at most two fraction digits.
std::optional<money> parse_decimal(std::string_view text);

/// The largest amount NUMERIC(12,2) holds: 9 999 999 999.99.
inline constexpr std::int64_t max_amount_cents = 999'999'999'999;

struct order_item {
  std::string sku;
  int quantity = 1;
};

/// A validated `POST /api/orders` request.
struct new_order {
  std::string customer_id;
  money total_amount;
  std::string currency = "USD";
  shipping_type shipping = shipping_type::domestic;
  std::vector<order_item> items;
};

/// A stored order as the API shows it. Timestamps are ISO-8601 UTC strings from the database.
struct order {
  std::int64_t id = 0;
  std::string customer_id;
  money total_amount;
  std::string currency;
  shipping_type shipping = shipping_type::domestic;
  order_status status = order_status::pending;
  std::optional<std::string> status_reason;
  std::string created_at;
  std::string updated_at;
};

/// One problem with a request, naming the field (`items[2].quantity`; empty for the whole body).
struct field_error {
  std::string field;
  std::string message;
};
using field_errors = std::vector<field_error>;

/// Validates the parsed body of `POST /api/orders`: customerId, totalAmount, shippingType are
/// required; currency (default USD) and items are optional; unknown fields are refused.
std::variant<new_order, field_errors> validate_new_order(const rapidjson::Value& body);

/// A stable fingerprint of a create request, to tell a replay (same Idempotency-Key, same body)
/// from a reuse of the key for a different order.
std::int64_t fingerprint(const new_order& o);

/// What a user asks of an existing order.
enum class order_command { ship, deliver, cancel, remove };

/// Validates the body of `PUT /api/orders/{id}/status`: `{"status": "SHIPPED" | "DELIVERED"}`.
std::variant<order_command, field_errors> validate_status_update(const rapidjson::Value& body);

/// Validates the optional body of `POST /api/orders/{id}/cancel`: `{"reason": "..."}`.
std::variant<std::string, field_errors> validate_cancel(const rapidjson::Value* body);

/// The body of an operator's resolution of a failed dead letter: `{"reason": "..."}`, the reason
/// required (what was done by hand), at most as long as a cancellation's. Answers the status
/// reason the order is given: "resolved by an operator: <reason>".
std::variant<std::string, field_errors> validate_resolution(const rapidjson::Value* body);

/// The optional body of an operator's redrive of a failed dead letter: nothing, or `{}` (it
/// takes no fields; one sent is refused rather than ignored).
field_errors validate_redrive(const rapidjson::Value* body);

/// The state machine's answer to a command: change state, nothing to do (the request was already
/// carried out: answer from the current state), or refuse (409) with a reason.
struct decision {
  enum class kind { apply, already_done, conflict };
  kind what = kind::conflict;
  order_status next = order_status::pending;
  std::string reason;
};

/// Decides `command` for an order in state `current`. Removal (soft delete) keeps the state.
decision decide(order_status current, order_command command);

/// What the engine reports about an order's events.
enum class engine_outcome {
  fanout_succeeded,         // OrderCreated reached every destination
  fanout_compensated,       // OrderCreated failed and everything it applied was reverted
  cancellation_compensated, // a cancellation reverted everything OrderCreated applied
  compensation_failed       // a compensation of either kind failed after its retries
};

/// The order state after `outcome`, through the same state machine: a CANCELLING order stays
/// CANCELLING whatever happens to its OrderCreated (the queued cancellation decides).
order_status apply_outcome(order_status current, engine_outcome outcome);

/// True when nothing can change an order in state `s` any more but its removal: no command
/// applies and no outcome of its events moves it. Such an order never needs its audit again
/// (there is nothing left to compensate), so retention may delete that audit.
bool is_settled(order_status s);

/// An outbox row to insert in the same transaction as the aggregate change.
struct event_draft {
  std::string aggregate_type;
  std::string aggregate_id;
  std::string event_type;
  std::string payloads_json; // destination -> {"payload": {...}, "pathParams": {...}}
  std::string idempotency_key;
};

inline constexpr std::string_view order_aggregate = "order";
inline constexpr std::string_view order_created = "OrderCreated";
inline constexpr std::string_view order_status_updated = "OrderStatusUpdated";
inline constexpr std::string_view order_cancellation = "!OrderCreated";

/// `OrderCreated` with one payload each for the inventory, fraudCheck, shipping and billing
/// destinations, and the whole order (id, customer, amount, currency, shipping type, items) for
/// any other (`any_destination`); every one with the path parameters orderId and customerId.
event_draft order_created_event(const order& o, const std::vector<order_item>& items);
/// `OrderStatusUpdated` with the notifications payload (order id, old and new status), which any
/// other destination gets too.
event_draft order_status_updated_event(std::int64_t order_id, order_status from, order_status to);
/// `!OrderCreated`: reverts what the order's OrderCreated applied. It calls nobody with payloads;
/// it carries the cancellation's reason (`{"reason": ...}`), the order's reason again once a
/// cancellation that needed an operator is done.
event_draft order_cancellation_event(std::int64_t order_id, const std::string& reason);

} // namespace outboxd::domain
