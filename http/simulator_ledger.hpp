// The simulator's ledger of side effects: what the simulated outside world did for each aggregate
// (reservations, fraud checks, shipments, charges, high-value processings, notifications), its
// state, and duplicates. It is what GET /api/admin/consistency compares orders with.
//
// GET /api/simulator/ledger[?aggregateId=] answers:
//   {"startedAt": "2026-01-01T12:00:00.000Z", "startedAtMs": 1767268800000,
//    "entries": [{"id": "RES-42-1767268800123-7", "aggregateId": "42",
//                 "operation": "inventory.reserve", "kind": "reservation",
//                 "notificationType": null, "idempotencyKey": "17:inventory",
//                 "revertible": true, "applied": 1, "revertRequests": 0, "state": "active",
//                 "appliedAt": "...", "appliedAtMs": 1767268800123, "appliedSeq": 1,
//                 "revertedAt": null, "revertedAtMs": null, "revertedSeq": null}, ...],
//    "duplicates": [{"aggregateId": "42", "operation": "inventory.reserve",
//                    "notificationType": null, "count": 2, "ids": [...],
//                    "idempotencyKeys": [...]}]}
// Entries are in order of application. `applied` is always 1: every application issues a new id,
// so applying twice shows up as two entries and one duplicates group. `revertRequests` counts
// revert calls for the id that were not idempotent replays; `state` becomes "reverted" on the
// first. `appliedSeq`/`revertedSeq` come from one counter, so they order applies and reverts
// even within one millisecond. The ledger grows for the simulator's lifetime; reset clears it.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace outboxd::http {

/// One side effect.
struct ledger_entry {
  std::string id;
  std::string aggregate_id;
  std::string operation; // the forward knob, e.g. "billing.charge"
  std::string kind;      // reservation, fraudCheck, shipment, charge, highValueProcessing,
                         // notification
  std::optional<std::string> notification_type; // shipping_confirmation, review_request,
                                                // status_update
  std::optional<std::string> idempotency_key;
  int revert_requests = 0;
  bool reverted = false;
  std::int64_t applied_at_ms = 0;
  std::int64_t applied_seq = 0;
  std::optional<std::int64_t> reverted_at_ms;
  std::optional<std::int64_t> reverted_seq;
};

/// What a side effect is, before the ledger gives it an id.
struct side_effect {
  std::string aggregate_id;
  std::string operation;
  std::string kind;
  std::string id_prefix; // "RES", "SHIP-DOM", ...: the id is <prefix>-<aggregate>-<ms>-<serial>
  std::optional<std::string> notification_type;
  std::optional<std::string> idempotency_key;
};

/// The outcome of a revert request.
struct revert_result {
  enum class kind { reverted, already_reverted, not_found };
  kind what = kind::not_found;
  ledger_entry entry; // after the revert (unset when not found)
};

/// Thread-safe.
class side_effect_ledger {
public:
  side_effect_ledger();

  /// Records a side effect applied now and returns it with its id, unique for the process even
  /// for two calls in the same millisecond.
  ledger_entry apply(const side_effect& effect);

  /// Reverts entry `id` of `forward_operation`. An id of another operation is not found. A
  /// second revert of a reverted entry is counted in revert_requests but changes nothing else.
  revert_result revert(std::string_view forward_operation, std::string_view id);

  /// Reverts the newest active entry of `forward_operation` for `aggregate_id` (the /succeed
  /// revert siblings, which carry no id); not_found when there is none.
  revert_result revert_latest(std::string_view forward_operation, std::string_view aggregate_id);

  /// "<prefix>-<middle>-<ms>-<serial>" for ids that are not ledger entries (refund ids).
  std::string make_id(std::string_view prefix, std::string_view middle);

  /// The JSON described above, all aggregates or one.
  std::string json(const std::optional<std::string>& aggregate_id) const;

  /// Forgets every entry and restarts the ledger clock (startedAt = now).
  void reset();

  std::int64_t started_at_ms() const;
  std::size_t size() const;
  /// A copy of the entries, in order of application.
  std::vector<ledger_entry> entries() const;

private:
  revert_result revert_entry(std::size_t index);

  mutable std::mutex mutex_;
  std::int64_t started_at_ms_;
  std::int64_t seq_ = 0;
  std::vector<ledger_entry> entries_;
  std::unordered_map<std::string, std::size_t> by_id_;
};

/// Milliseconds since the Unix epoch, from the system clock.
std::int64_t now_ms();

/// "2026-01-01T12:00:00.123Z".
std::string iso_time(std::int64_t ms);

} // namespace outboxd::http
