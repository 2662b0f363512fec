// Interfaces the domain needs from the outside world; persistence/ implements them, http/ and
// actors/ use them, so neither depends on the other's libraries.
#pragma once

#include "domain/order.hpp"
#include "domain/outbox.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace outboxd::domain {

/// The store cannot be reached right now (database down, connection lost): retry later (503).
class store_unavailable : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The result of creating an order with an optional client Idempotency-Key.
struct create_outcome {
  enum class kind {
    created,    // a new order and its OrderCreated event were committed together
    replayed,   // the key was used before with the same request: the existing order
    key_reused, // the key was used before for a different request: nothing written
    key_removed // the key's order has been removed since (DELETE): nothing written
  };
  kind what = kind::created;
  order value;
};

/// The result of a user command on an existing order.
struct command_outcome {
  enum class kind { applied, already_done, conflict, not_found };
  kind what = kind::not_found;
  std::optional<order> value; // the order after the command (also for already_done/conflict)
  std::string reason;         // why a conflict was refused
};

/// An order with everything that happened to it.
struct order_timeline {
  order value;
  std::vector<event_record> events;
  std::vector<attempt_record> attempts; // the newest max_timeline_attempts, oldest first
  bool attempts_truncated = false;      // the order has more (above the asked id)
  std::vector<dead_letter_record> dead_letters;
};

/// The most attempt rows an order's timeline lists (a client with the read role must not make
/// the server build an answer of every row of an order retried for months).
inline constexpr int max_timeline_attempts = 1000;

/// Order intake and inspection. Every state change writes the order and its outbox event in
/// one transaction. Throws store_unavailable when the database cannot be reached.
class order_store {
public:
  virtual ~order_store() = default;

  virtual create_outcome create(const new_order& request,
                                const std::optional<std::string>& request_key) = 0;

  /// Applies a user command through the state machine; `reason` is used by cancel.
  virtual command_outcome execute(std::int64_t order_id, order_command command,
                                  const std::string& reason) = 0;

  /// Non-deleted orders, newest first, with ids below `before_id` when given.
  virtual std::vector<order> list(std::optional<order_status> status,
                                  std::optional<std::int64_t> before_id, int limit) = 0;

  /// The order (unless deleted) with its events, attempts and dead letters, oldest first. Only
  /// the attempt rows with ids above `after_attempt` are listed (audit rows are never changed, so
  /// a poller that has the older ones asks for the new ones only; 0 lists them all).
  virtual std::optional<order_timeline> timeline(std::int64_t order_id,
                                                 std::int64_t after_attempt) = 0;
};

/// The result of an operator's redrive of a dead letter.
struct redrive_outcome {
  enum class kind { redriven, not_failed, not_found };
  kind what = kind::not_found;
  std::optional<dead_letter_record> value;
};

/// Dead letters as operators see them: inspection and redrive. Throws store_unavailable when
/// the database cannot be reached.
class dead_letter_store {
public:
  virtual ~dead_letter_store() = default;

  /// Newest first, with ids below `before_id` when given.
  virtual std::vector<dead_letter_record>
  list(std::optional<std::string> status, std::optional<std::int64_t> before_id, int limit) = 0;
  /// One dead letter with the attempts of its original event (forward and revert).
  virtual std::optional<std::pair<dead_letter_record, std::vector<attempt_record>>>
  find(std::int64_t id) = 0;
  /// FAILED → PENDING with fresh attempts; the compensation resumes where it stopped.
  virtual redrive_outcome redrive(std::int64_t id) = 0;
  /// FAILED → PROCESSED by an operator who undid what was left by hand (or found nothing left):
  /// the order leaves ATTENTION as a finished compensation would leave it (FAILED, or CANCELLED
  /// for a cancellation), with `reason` as its status reason and the dead letter's revert error,
  /// in one transaction. `redriven` in the outcome means resolved.
  virtual redrive_outcome resolve(std::int64_t id, const std::string& reason) = 0;
};

/// Counts for the operator: events by status, dead letters by status and reason, orders by
/// status, the age of the oldest due event (the lag) and of the oldest undelivered one.
struct outbox_stats {
  std::map<std::string, long long> events;
  std::map<std::string, long long> dead_letters_by_status;
  std::map<std::string, long long> dead_letters_by_reason;
  std::map<std::string, long long> orders;
  std::optional<double> oldest_due_age_seconds;
  std::optional<double> oldest_pending_age_seconds; // since written: due, retrying or held back
  /// The counts that are PostgreSQL's estimates (history above 10 000 rows), named by where they
  /// appear: "outbox.PROCESSED", "orders.DELIVERED", ...
  std::vector<std::string> estimated;
};

/// Filters of the event listing.
struct event_filter {
  std::optional<std::string> status;
  std::string aggregate_type = "order"; // with aggregate_id
  std::optional<std::string> aggregate_id;
  std::optional<std::string> event_type;
  std::optional<std::int64_t> before_id;
  int limit = 50;
};

/// A page of the event listing; `next_cursor` continues it (none when nothing older is left).
struct event_page {
  std::vector<event_record> rows;
  std::optional<std::int64_t> next_cursor;
};

/// Outbox inspection for operators. Throws store_unavailable when the database cannot be
/// reached.
class outbox_inspection {
public:
  virtual ~outbox_inspection() = default;
  virtual outbox_stats stats() = 0;
  /// The live part only (no PROCESSED events, only ATTENTION orders): what every /metrics scrape
  /// reads. Neither costs more as history grows.
  virtual outbox_stats gauges() = 0;
  /// Newest first. A filter by event type alone looks at a window of the newest events before
  /// the cursor only (a short page then still has a next cursor), so that a type that is rare
  /// costs no walk through the whole history.
  virtual event_page events(const event_filter& filter) = 0;
  /// One event with its attempts (forward and revert), oldest first.
  virtual std::optional<std::pair<event_record, std::vector<attempt_record>>>
  event(std::int64_t id) = 0;
};

/// What the consistency check (the simulator's "orders against the outside world") needs to know
/// about an order.
struct audited_order {
  std::int64_t id = 0;
  order_status status = order_status::pending;
  std::int64_t created_at_ms = 0; // milliseconds since the Unix epoch
};

/// Which orders one consistency check reads: the newest `limit`, or the first `limit` after an
/// id, so that its cost is bounded however many orders the table holds.
struct audit_window {
  std::optional<std::int64_t> after_id;
  int limit = 100000;
};

/// The orders of a window, by id, and whether orders lie beyond either end of it.
struct audited_orders_page {
  std::vector<audited_order> orders;
  bool older = false; // non-deleted orders before the first one exist
  bool newer = false; // ... after the last one
};

/// Where the consistency check reads the orders from (persistence/audit_repository).
class order_audit_source {
public:
  virtual ~order_audit_source() = default;
  /// The non-deleted orders of `window`. Throws store_unavailable when the store cannot be
  /// reached.
  virtual audited_orders_page audited_orders(const audit_window& window) = 0;
};

} // namespace outboxd::domain
