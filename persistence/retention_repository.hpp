// Retention of what only history needs: the audit rows of settled aggregates and the orders
// removed long ago. Each batch is one short transaction; rows that something unfinished may still
// need are never touched. (Processed events and resolved dead letters are deleted by their own
// repositories, next to the statements that finish them.)
#pragma once

#include "persistence/outbox_repository.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <pqxx/pqxx>
#include <string>
#include <vector>

namespace outboxd::persistence {

/// One audit row on its way out: the row as a JSON object (columns as in aggregate_results) and
/// the UTC day it was written ("2026-12-02").
struct expiring_audit_row {
  std::int64_t id = 0;
  std::string day;
  std::string json;
};

/// What one batch of audit retention did.
struct audit_batch {
  int deleted = 0;
  std::int64_t scanned_to = 0; // the next batch starts after this id
  bool caught_up = false;      // no row after scanned_to is old enough yet
};

class retention_repository {
public:
  /// Prepares its statements on `conn`, which it uses exclusively.
  retention_repository(pqxx::connection& conn, hooks_by_type hooks);

  /// Looks at the next `batch` audit rows after id `after` in id order, up to the first one
  /// younger than `age`, and deletes those whose aggregate is settled (its hooks say so) and has
  /// no unfinished event or dead letter. `keep` receives the rows before the delete commits; when
  /// it throws, nothing is deleted and the exception propagates.
  audit_batch
  delete_settled_audit(std::int64_t after, std::chrono::milliseconds age, int batch,
                       const std::function<void(const std::vector<expiring_audit_row>&)>& keep);

  /// Deletes up to `batch` orders removed (soft-deleted) longer than `age` ago that have no
  /// unfinished event and no unresolved dead letter; returns how many.
  int delete_removed_orders(std::chrono::milliseconds age, int batch);

private:
  pqxx::connection& conn_;
  hooks_by_type hooks_;
  bool audit_prepared_ = false;
};

} // namespace outboxd::persistence
