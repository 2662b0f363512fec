// How an aggregate (the order, or any other domain) learns what happened to its events: the
// engine runs the aggregate's transition in the statement (or transaction) that completes the
// event, so the two commit together.
#pragma once

#include "domain/order.hpp"

#include <optional>
#include <pqxx/pqxx>
#include <string>

namespace outboxd::persistence {

class aggregate_hooks {
public:
  virtual ~aggregate_hooks() = default;
  /// An UPDATE that applies `outcome` to one aggregate, or empty when `outcome` changes nothing.
  /// It reads the aggregate's id and the reason (e.g. the destination and error that failed the
  /// fan-out; may be empty) from the relation `target(aggregate_id text, reason text)`, which
  /// the engine supplies as a common table expression of at most one row. Being SQL, it runs in
  /// the same statement as the event's own update: one round trip per completed event.
  virtual std::string transition_sql(domain::engine_outcome outcome) const = 0;
  /// A condition on the text expression `aggregate_id` that holds when the aggregate will never
  /// need its audit again: nothing can change it any more, or it is gone. Audit retention
  /// deletes old rows of such aggregates only (and only when none of their events or dead
  /// letters is unfinished, which the engine checks itself).
  virtual std::string settled_sql(const std::string& aggregate_id) const = 0;
};

/// The order domain's hooks: moves the order through domain::apply_outcome.
class order_hooks final : public aggregate_hooks {
public:
  std::string transition_sql(domain::engine_outcome outcome) const override;
  /// The order is gone (removed for good) or in a state domain::is_settled.
  std::string settled_sql(const std::string& aggregate_id) const override;
};

/// The common table expressions that apply `outcome` in a statement whose earlier common table
/// expression `source` yields the aggregate id (column `aggregate_id`, at most one row), with
/// $`reason_param` as the reason: `, target AS (...)[, transition AS (...)]`, to follow the
/// statement's own `WITH` list. `target` is always there (it types the reason parameter); the
/// transition only when there is an outcome and `hooks` has a transition for it.
std::string transition_ctes(const aggregate_hooks* hooks,
                            std::optional<domain::engine_outcome> outcome,
                            const std::string& source, int reason_param);

/// Applies `outcome` to one aggregate inside `tx` (paths that complete several rows in one
/// transaction: the lease reaper, the dead-letter processor).
void apply_transition(pqxx::transaction_base& tx, const aggregate_hooks* hooks,
                      const std::string& aggregate_id, domain::engine_outcome outcome,
                      const std::string& reason);

} // namespace outboxd::persistence
