// domain::order_audit_source on PostgreSQL: the orders the consistency check compares with the
// simulator's ledger.
#pragma once

#include "domain/ports.hpp"
#include "persistence/connection_pool.hpp"

#include <vector>

namespace outboxd::persistence {

class audit_repository final : public domain::order_audit_source {
public:
  explicit audit_repository(connection_pool& pool) : pool_(pool) {}

  /// The statements this repository runs; give them to the pool it uses.
  static std::vector<statement> statements();

  /// The window's non-deleted orders, by id, with created_at in milliseconds since the epoch.
  domain::audited_orders_page audited_orders(const domain::audit_window& window) override;

private:
  connection_pool& pool_;
};

} // namespace outboxd::persistence
