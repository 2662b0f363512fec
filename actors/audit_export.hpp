// The audit export: rows that retention is about to delete, appended as JSON lines to one file
// per UTC day in a folder, and synced to disk before the delete commits. A failure leaves the
// rows in the database; a crash between the sync and the commit exports them again, so a reader
// of the files keeps the last line of each id.
#pragma once

#include "persistence/retention_repository.hpp"

#include <stdexcept>
#include <string>
#include <vector>

namespace outboxd::actors {

/// An export that could not be written; the rows stay in the database.
struct export_failed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class audit_export {
public:
  explicit audit_export(std::string dir) : dir_(std::move(dir)) {}

  /// Appends `rows` to `<dir>/aggregate_results-<day>.jsonl` and syncs each file written to;
  /// throws export_failed naming the file when it cannot.
  void write(const std::vector<persistence::expiring_audit_row>& rows) const;

private:
  std::string dir_;
};

} // namespace outboxd::actors
