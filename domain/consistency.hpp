// The consistency check of SPEC invariant 3: every order's status compared with the side effects
// the (simulated) outside world recorded for it. Pure: the orders and the ledger are inputs.
#pragma once

#include "domain/order.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace outboxd::domain {

/// What the check needs to know about an order.
struct audited_order {
  std::int64_t id = 0;
  order_status status = order_status::pending;
  std::int64_t created_at_ms = 0; // milliseconds since the Unix epoch
};

/// Where the orders come from (persistence/audit_repository on PostgreSQL).
class order_audit_source {
public:
  virtual ~order_audit_source() = default;
  /// Every non-deleted order. Throws store_unavailable when the store cannot be reached.
  virtual std::vector<audited_order> audited_orders() = 0;
};

/// One side effect of the ledger (GET /api/simulator/ledger, "entries").
struct ledger_record {
  std::string aggregate_id;
  std::string operation; // the forward knob, e.g. "inventory.reserve"
  std::string kind;      // reservation, fraudCheck, shipment, charge, highValueProcessing,
                         // notification
  std::string id;        // RES-..., TXN-..., ...
  std::optional<std::string> notification_type;
  int revert_requests = 0; // revert calls that were not replays of an earlier one
  bool reverted = false;
  std::int64_t applied_seq = 0;             // order of application in the ledger
  std::optional<std::int64_t> reverted_seq; // order of the first revert, same clock
};

/// The ledger: its entries, and when it started (process start or reset).
struct ledger_snapshot {
  std::int64_t started_at_ms = 0;
  std::vector<ledger_record> entries;
};

/// True for the kinds a compensation must revert: reservation, shipment, charge,
/// highValueProcessing (a fraud check and a notification have nothing to undo).
bool is_revertible_kind(const std::string& kind);

struct consistency_violation {
  std::int64_t order_id = 0;
  std::string problem; // one sentence naming the operation and id
};

struct consistency_report {
  int checked = 0;
  int unchecked = 0;
  std::vector<consistency_violation> violations; // by order id, then rule
};

/// Applies invariant 3. Unchecked: orders created before the ledger started, and orders
/// PENDING, CANCELLING or ATTENTION (still moving, or waiting for an operator).
/// CONFIRMED/SHIPPED/DELIVERED: exactly one active reservation, fraud check and shipment, exactly
/// one charge or high-value processing (not both), nothing reverted, no duplicates.
/// FAILED/CANCELLED: every revertible entry reverted by exactly one revert request, reverts in
/// the reverse order of application, no duplicates. A duplicate is the same operation (and
/// notification type) applied more than once for one order. Ledger entries of other aggregates
/// are ignored.
consistency_report check_consistency(const std::vector<audited_order>& orders,
                                     const ledger_snapshot& ledger);

} // namespace outboxd::domain
