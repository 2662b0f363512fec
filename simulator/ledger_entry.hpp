// One side effect of the simulated outside world, the ledger's JSON form (GET
// /api/simulator/ledger) and its parser. One type serves the ledger, its rendering, a
// standalone simulator's ledger read over HTTP and the consistency check. Pure.
//
// The JSON:
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
// even within one millisecond.
#pragma once

#include "domain/expected.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace outboxd::simulator {

/// One side effect.
struct ledger_entry {
  std::string id;           // RES-..., TXN-..., ...
  std::string aggregate_id; // the X-Aggregate-Id of the call
  std::string operation;    // the forward knob, e.g. "billing.charge"
  std::string kind;         // reservation, fraudCheck, shipment, charge, highValueProcessing,
                            // notification
  std::optional<std::string> notification_type; // shipping_confirmation, review_request,
                                                // status_update
  std::optional<std::string> idempotency_key;
  int revert_requests = 0; // revert calls that were not replays of an earlier one
  bool reverted = false;
  std::int64_t applied_at_ms = 0;
  std::int64_t applied_seq = 0;               // order of application in the ledger
  std::optional<std::int64_t> reverted_at_ms; // the first revert
  std::optional<std::int64_t> reverted_seq;   // order of the first revert, same counter
};

/// The ledger at one moment: its entries, and when it started (process start or reset).
struct ledger_snapshot {
  std::int64_t started_at_ms = 0;
  std::vector<ledger_entry> entries;
};

/// True for the kinds a compensation must revert: reservation, shipment, charge,
/// highValueProcessing (a fraud check and a notification have nothing to undo).
bool is_revertible_kind(std::string_view kind);

/// "2026-01-01T12:00:00.123Z" for milliseconds since the Unix epoch.
std::string iso_time(std::int64_t ms);

/// The JSON above, for every aggregate or only `aggregate_id`.
std::string ledger_json(const ledger_snapshot& ledger,
                        const std::optional<std::string>& aggregate_id = std::nullopt);

/// Parses the JSON above (what the consistency check needs must be there: startedAtMs and each
/// entry's aggregateId, operation, kind, id, state, appliedSeq and revertRequests); the error
/// names what is wrong.
domain::expected<ledger_snapshot> parse_ledger_json(std::string_view json);

} // namespace outboxd::simulator
