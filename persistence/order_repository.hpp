// domain::order_store on PostgreSQL: each state change writes the order row and its outbox event
// in one transaction.
#pragma once

#include "domain/ports.hpp"
#include "persistence/connection_pool.hpp"
#include "persistence/intake_notifier.hpp"

#include <vector>

namespace outboxd::persistence {

class order_repository final : public domain::order_store {
public:
  /// With a `notifier`, the pool's sessions must run intake_notifier::session_setup: the
  /// repository then announces its events through the notifier instead of the insert trigger.
  explicit order_repository(connection_pool& pool, intake_notifier* notifier = nullptr)
      : pool_(pool), notifier_(notifier) {}

  /// The statements this repository runs; give them to the pool it uses.
  static std::vector<statement> statements();

  domain::create_outcome create(const domain::new_order& request,
                                const std::optional<std::string>& request_key) override;
  domain::command_outcome execute(std::int64_t order_id, domain::order_command command,
                                  const std::string& reason) override;
  std::vector<domain::order> list(std::optional<domain::order_status> status,
                                  std::optional<std::int64_t> before_id, int limit) override;
  std::optional<domain::order_timeline> timeline(std::int64_t order_id) override;

private:
  void announce(std::int64_t event_id) const {
    if (notifier_)
      notifier_->committed(event_id);
  }

  connection_pool& pool_;
  intake_notifier* notifier_;
};

} // namespace outboxd::persistence
