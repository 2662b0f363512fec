// The orders side of the consistency check: what the check needs to know about an order, and
// the port the store implements to list them. The rules themselves are the simulator's.
#pragma once

#include "domain/order.hpp"

#include <cstdint>
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

} // namespace outboxd::domain
