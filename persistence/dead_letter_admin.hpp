// domain::dead_letter_store on PostgreSQL: dead-letter inspection and redrive for the API.
#pragma once

#include "domain/ports.hpp"
#include "persistence/connection_pool.hpp"
#include "persistence/outbox_repository.hpp"

#include <functional>
#include <pqxx/pqxx>
#include <string>
#include <vector>

namespace outboxd::persistence {

class dead_letter_admin final : public domain::dead_letter_store {
public:
  /// `hooks` move the aggregates of resolved dead letters (resolve()); none: they stay as they
  /// are.
  explicit dead_letter_admin(connection_pool& pool, hooks_by_type hooks = {})
      : pool_(pool), hooks_(std::move(hooks)) {}

  /// The statements this repository runs; give them to the pool it uses.
  static std::vector<statement> statements();

  std::vector<domain::dead_letter_record> list(std::optional<std::string> status,
                                               std::optional<std::int64_t> before_id,
                                               int limit) override;
  std::optional<std::pair<domain::dead_letter_record, std::vector<domain::attempt_record>>>
  find(std::int64_t id) override;
  domain::redrive_outcome redrive(std::int64_t id) override;
  domain::redrive_outcome resolve(std::int64_t id, const std::string& reason) override;

private:
  /// Runs `change` (an update of FAILED dead letter `id` returning it) and then `then`, in one
  /// transaction: not_found or not_failed when the update changed nothing.
  domain::redrive_outcome
  change_failed(std::int64_t id, const std::function<pqxx::result(pqxx::work&)>& change,
                const std::function<void(pqxx::work&, const domain::dead_letter_record&)>& then);

  connection_pool& pool_;
  hooks_by_type hooks_;
};

} // namespace outboxd::persistence
