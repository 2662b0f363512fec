// The throwaway PostgreSQL cluster of a test run (started by scripts/test.sh) and fresh,
// migrated databases on it, one per test executable.
#pragma once

#include <mutex>
#include <string>

namespace outboxd::test {

/// Connection string of the test cluster (TEST_DATABASE_URL). Aborts the run with an
/// explanation when it is not set: these tests need scripts/test.sh or a cluster of your own.
std::string cluster_conninfo();

/// Drops and creates database `name` on `cluster` (by default the test cluster), applies the
/// migrations, and returns its connection string.
std::string fresh_database(const std::string& name,
                           const std::string& cluster = cluster_conninfo());

/// A test file's database, dropped, created and migrated on first use (fresh_database), so that
/// `const lazy_database db("outboxd_pg_x");` at namespace scope costs nothing until `db()`.
class lazy_database {
public:
  explicit lazy_database(std::string name) : name_(std::move(name)) {}
  /// The database's connection string.
  const std::string& operator()() const;

private:
  std::string name_;
  mutable std::once_flag created_;
  mutable std::string conninfo_;
};

/// Empties every outboxd table and restarts the id sequences.
void truncate_all(const std::string& conninfo);

/// Runs one SQL statement and returns the first column of the first row as text ("" if none).
std::string query_value(const std::string& conninfo, const std::string& sql);

/// The number of rows in `table`.
long long count_rows(const std::string& conninfo, const std::string& table);

} // namespace outboxd::test
