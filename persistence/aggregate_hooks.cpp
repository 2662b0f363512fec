// The order hooks: lock the order row, ask the state machine, write the new state.
#include "persistence/aggregate_hooks.hpp"

namespace outboxd::persistence {

void order_hooks::apply(pqxx::work& tx, const std::string& aggregate_id,
                        domain::engine_outcome outcome, const std::string& reason) {
  auto row = tx.exec_params("SELECT order_status FROM orders WHERE id = $1::bigint FOR UPDATE",
                            aggregate_id);
  if (row.empty())
    return; // the event outlived its order (e.g. a test removed it): nothing to move
  auto current = domain::parse_order_status(row[0][0].c_str());
  if (!current)
    return;
  auto next = domain::apply_outcome(*current, outcome);
  if (next == *current)
    return;
  tx.exec_params("UPDATE orders SET order_status = $2, status_reason = coalesce(nullif($3, ''), "
                 "status_reason), updated_at = now() WHERE id = $1::bigint",
                 aggregate_id, std::string(domain::to_string(next)), reason);
}

} // namespace outboxd::persistence
