// The simulator's ledger of side effects: what the simulated outside world did for each aggregate
// (reservations, fraud checks, shipments, charges, high-value processings, notifications), its
// state, and duplicates. It is what GET /api/admin/consistency compares orders with. The entry
// type and the JSON of GET /api/simulator/ledger are in simulator/ledger_entry.hpp. The ledger
// grows for the simulator's lifetime; reset clears it.
#pragma once

#include "simulator/ledger_entry.hpp"

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace outboxd::simulator {

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

  /// The ledger JSON (simulator/ledger_entry.hpp), all aggregates or one.
  std::string json(const std::optional<std::string>& aggregate_id) const;

  /// The entries and the start time, taken together.
  ledger_snapshot snapshot() const;

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

} // namespace outboxd::simulator
