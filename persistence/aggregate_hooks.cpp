// The order hooks as SQL: domain::apply_outcome, tabulated over every order status, becomes a
// CASE that moves the order row in the same statement that completes its event.
#include "persistence/aggregate_hooks.hpp"

#include <fmt/format.h>

namespace outboxd::persistence {
namespace {

/// The order id in the text expression `aggregate_id`: order ids are numbers, and anything else
/// (an event another writer queued for an "order" with another kind of id) names no order
/// instead of failing the statement that completes the event.
std::string order_id(const std::string& aggregate_id) {
  return fmt::format("CASE WHEN {0} ~ '^[0-9]{{1,18}}$' THEN {0}::bigint END", aggregate_id);
}

} // namespace

std::string order_hooks::transition_sql(domain::engine_outcome outcome) const {
  std::string cases;
  std::string moving;
  for (auto from : domain::all_order_statuses) {
    auto to = domain::apply_outcome(from, outcome);
    if (to == from)
      continue;
    cases += fmt::format(" WHEN '{}' THEN '{}'", domain::to_string(from), domain::to_string(to));
    moving += fmt::format("{}'{}'", moving.empty() ? "" : ", ", domain::to_string(from));
  }
  if (moving.empty())
    return {};
  // The status condition is checked again on the newest row version if a concurrent change
  // (an API cancellation, say) got there first, so a transition never applies to a stale state.
  return fmt::format("UPDATE orders o SET order_status = CASE o.order_status{} END, "
                     "status_reason = coalesce(nullif(target.reason, ''), o.status_reason), "
                     "updated_at = now() "
                     "FROM target WHERE o.id = {} AND o.order_status IN ({})",
                     cases, order_id("target.aggregate_id"), moving);
}

std::string order_hooks::settled_sql(const std::string& aggregate_id) const {
  std::string unsettled;
  for (auto s : domain::all_order_statuses)
    if (!domain::is_settled(s))
      unsettled += fmt::format("{}'{}'", unsettled.empty() ? "" : ", ", domain::to_string(s));
  // One primary-key lookup: no row, or a settled status. A scalar subquery, so that it is never
  // hashed over the whole table.
  return fmt::format("(SELECT o.order_status IN ({}) FROM orders o WHERE o.id = {}) IS NOT TRUE",
                     unsettled, order_id(aggregate_id));
}

std::string transition_ctes(const aggregate_hooks* hooks,
                            std::optional<domain::engine_outcome> outcome,
                            const std::string& source, int reason_param) {
  auto out = fmt::format(", target AS (SELECT aggregate_id, ${}::text AS reason FROM {})",
                         reason_param, source);
  if (hooks && outcome)
    if (auto sql = hooks->transition_sql(*outcome); !sql.empty())
      out += fmt::format(", transition AS ({})", sql);
  return out;
}

void apply_transition(pqxx::transaction_base& tx, const aggregate_hooks* hooks,
                      const std::string& aggregate_id, domain::engine_outcome outcome,
                      const std::string& reason) {
  if (!hooks || hooks->transition_sql(outcome).empty())
    return;
  tx.exec_params("WITH source AS (SELECT $1::text AS aggregate_id)" +
                     transition_ctes(hooks, outcome, "source", 2) + " SELECT 1",
                 aggregate_id, reason);
}

} // namespace outboxd::persistence
