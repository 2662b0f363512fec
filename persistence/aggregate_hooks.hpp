// How an aggregate (the order, or any other domain) learns what happened to its events: the
// engine calls its hooks inside the transaction that completes the event.
#pragma once

#include "domain/order.hpp"

#include <pqxx/pqxx>
#include <string>

namespace outboxd::persistence {

class aggregate_hooks {
public:
  virtual ~aggregate_hooks() = default;
  /// Applies `outcome` of one of the aggregate's events in `tx`; `reason` says why (e.g. the
  /// destination and error that failed the fan-out), empty when there is nothing to say.
  virtual void apply(pqxx::work& tx, const std::string& aggregate_id,
                     domain::engine_outcome outcome, const std::string& reason) = 0;
};

/// The order domain's hooks: moves the order through domain::apply_outcome.
class order_hooks final : public aggregate_hooks {
public:
  void apply(pqxx::work& tx, const std::string& aggregate_id, domain::engine_outcome outcome,
             const std::string& reason) override;
};

} // namespace outboxd::persistence
