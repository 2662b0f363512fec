// The simulator's "orders vs outside world" check: every settled order's status compared with
// the side effects the simulated services recorded for it. Pure: orders and ledger are inputs.
#pragma once

#include "domain/ports.hpp"
#include "simulator/ledger_entry.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace outboxd::simulator {

struct consistency_violation {
  std::int64_t order_id = 0;
  std::string problem; // one sentence naming the operation and id
};

struct consistency_report {
  int checked = 0;
  int unchecked = 0;
  std::vector<consistency_violation> violations; // by order id, then rule
};

/// Unchecked: orders created before the ledger started, and orders PENDING, CANCELLING or
/// ATTENTION (still moving, or waiting for an operator).
/// CONFIRMED/SHIPPED/DELIVERED: exactly one active reservation, fraud check and shipment, exactly
/// one charge or high-value processing (not both), nothing reverted, no duplicates.
/// FAILED/CANCELLED: every revertible entry reverted by exactly one revert request, reverts in
/// the reverse order of application, no duplicates. A duplicate is the same operation (and
/// notification type) applied more than once for one order. Ledger entries of other aggregates
/// are ignored.
consistency_report check_consistency(const std::vector<domain::audited_order>& orders,
                                     const ledger_snapshot& ledger);

} // namespace outboxd::simulator
