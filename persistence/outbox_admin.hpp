// domain::outbox_inspection on PostgreSQL: stats and event listings for the operator API.
#pragma once

#include "domain/ports.hpp"
#include "persistence/connection_pool.hpp"

#include <vector>

namespace outboxd::persistence {

class outbox_admin final : public domain::outbox_inspection {
public:
  explicit outbox_admin(connection_pool& pool) : pool_(pool) {}

  /// The statements this repository runs; give them to the pool it uses.
  static std::vector<statement> statements();

  domain::outbox_stats stats() override;
  domain::outbox_stats gauges() override;
  domain::event_page events(const domain::event_filter& filter) override;
  std::optional<std::pair<domain::event_record, std::vector<domain::attempt_record>>>
  event(std::int64_t id) override;

private:
  connection_pool& pool_;
};

} // namespace outboxd::persistence
