// domain::dead_letter_store on PostgreSQL: dead-letter inspection and redrive for the API.
#pragma once

#include "domain/ports.hpp"
#include "persistence/connection_pool.hpp"

#include <vector>

namespace outboxd::persistence {

class dead_letter_admin final : public domain::dead_letter_store {
public:
  explicit dead_letter_admin(connection_pool& pool) : pool_(pool) {}

  /// The statements this repository runs; give them to the pool it uses.
  static std::vector<statement> statements();

  std::vector<domain::dead_letter_record> list(std::optional<std::string> status,
                                               std::optional<std::int64_t> before_id,
                                               int limit) override;
  std::optional<std::pair<domain::dead_letter_record, std::vector<domain::attempt_record>>>
  find(std::int64_t id) override;
  domain::redrive_outcome redrive(std::int64_t id) override;

private:
  connection_pool& pool_;
};

} // namespace outboxd::persistence
