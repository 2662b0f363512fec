// The simulator's ledger of side effects: what the simulated outside world did for each aggregate
// (reservations, fraud checks, shipments, charges, high-value processings, notifications), its
// state, and duplicates. It is what GET /api/admin/consistency compares orders with. The entry
// type and the JSON of GET /api/simulator/ledger are in simulator/ledger_entry.hpp. Bounded: at
// most 200 000 entries and 64 MiB (by default), the oldest forgotten first; forgetting one moves
// the ledger's start past it, so that the consistency check counts the orders it may have
// concerned as unchecked instead of inconsistent. Reset clears it.
#pragma once

#include "simulator/ledger_entry.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
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
  static constexpr std::size_t default_max_entries = 200000;
  static constexpr std::size_t default_max_bytes = std::size_t{64} << 20;

  explicit side_effect_ledger(std::size_t max_entries = default_max_entries,
                              std::size_t max_bytes = default_max_bytes);

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

  /// Forgets every entry and restarts the ledger clock (startedAt = now); the memory goes back to
  /// the system.
  void reset();

  std::int64_t started_at_ms() const;
  std::size_t size() const;
  /// A copy of the entries, in order of application.
  std::vector<ledger_entry> entries() const;

private:
  revert_result revert_entry(ledger_entry& e);
  /// Forgets the oldest entries while the bounds are exceeded.
  void forget_oldest();

  const std::size_t max_entries_;
  const std::size_t max_bytes_;
  mutable std::mutex mutex_;
  std::int64_t started_at_ms_;
  std::int64_t seq_ = 0;
  std::deque<ledger_entry> entries_;
  std::size_t forgotten_ = 0; // entries forgotten since the start: entries_[0]'s position
  std::size_t bytes_ = 0;
  std::unordered_map<std::string, std::size_t> by_id_; // id -> position since the start
};

/// Milliseconds since the Unix epoch, from the system clock.
std::int64_t now_ms();

} // namespace outboxd::simulator
