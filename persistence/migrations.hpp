// Forward-only schema migrations (sql/NNN_name.sql, compiled into the binary).
#pragma once

#include <pqxx/pqxx>
#include <string>
#include <vector>

namespace outboxd::persistence {

struct migration {
  int version = 0;
  std::string name; // file name, e.g. "001_schema.sql"
  std::string sql;
};

/// The compiled-in migrations, ordered by version.
const std::vector<migration>& migrations();

/// The highest version among the compiled-in migrations.
int latest_migration_version();

/// Applies every migration not yet applied, each in its own transaction, under an advisory lock
/// so several replicas may start at once. Refuses (throws) when an applied migration's text has
/// changed. Returns the names of the migrations applied now.
std::vector<std::string> migrate(pqxx::connection& conn);

/// The highest applied version, 0 when none (or the bookkeeping table does not exist yet).
int applied_migration_version(pqxx::connection& conn);

} // namespace outboxd::persistence
