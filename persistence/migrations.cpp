// Migration runner: schema_migrations bookkeeping, advisory lock, checksum of applied files.
#include "persistence/migrations.hpp"

#include "log/log.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>

namespace outboxd::persistence {
namespace embedded {
std::vector<std::pair<std::string_view, std::string_view>> files();
}

namespace {

// Any constant works as long as every outboxd uses the same one: "outboxd" in ASCII.
constexpr long long migration_lock_key = 0x6f7574626f7864;
constexpr std::string_view no_transaction_marker = "-- outboxd:no-transaction";
constexpr auto max_retry_delay = std::chrono::milliseconds(10000);

constexpr const char* create_bookkeeping = R"sql(
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INT PRIMARY KEY,
    name       TEXT NOT NULL,
    checksum   TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
))sql";

std::string checksum(std::string_view text) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return fmt::format("{:016x}", h);
}

std::vector<migration> load_embedded() {
  std::vector<migration> out;
  for (const auto& [name, sql] : embedded::files()) {
    auto digits = name.substr(0, name.find('_'));
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos)
      throw std::logic_error(fmt::format("migration file {} must start with NNN_", name));
    out.push_back({std::stoi(std::string(digits)), std::string(name), std::string(sql)});
  }
  std::sort(out.begin(), out.end(),
            [](const migration& a, const migration& b) { return a.version < b.version; });
  return out;
}

/// Whether `text` holds anything but blanks and `--` comment lines.
bool has_sql(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto first = line.find_first_not_of(" \t\r");
    if (first != std::string::npos && line.compare(first, 2, "--") != 0)
      return true;
  }
  return false;
}

/// The statements of a no-transaction file: each ends with `;` at the end of a line.
std::vector<std::string> statements_of(const std::string& sql) {
  std::vector<std::string> out;
  std::string current, line;
  std::istringstream in(sql);
  while (std::getline(in, line)) {
    current += line + '\n';
    auto last = line.find_last_not_of(" \t\r");
    if (last != std::string::npos && line[last] == ';') {
      if (has_sql(current))
        out.push_back(std::move(current));
      current.clear();
    }
  }
  if (has_sql(current))
    out.push_back(std::move(current));
  return out;
}

/// A concurrent index build that failed leaves its index INVALID, and `IF NOT EXISTS` would then
/// skip it: drop it so that the statement builds it again.
void drop_invalid_index(pqxx::nontransaction& session, const std::string& statement) {
  static const std::regex concurrent_index(
      R"(CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(?:IF\s+NOT\s+EXISTS\s+)?("?[A-Za-z_][A-Za-z0-9_]*"?))",
      std::regex::icase);
  std::smatch m;
  if (!std::regex_search(statement, m, concurrent_index))
    return;
  auto name = m[1].str();
  name.erase(std::remove(name.begin(), name.end(), '"'), name.end());
  auto invalid = session.exec_params(
      "SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
      "WHERE c.relname = $1 AND NOT i.indisvalid AND pg_table_is_visible(c.oid)",
      name);
  if (!invalid.empty()) {
    log::warn("migrate", "dropping the invalid index {} a failed build left behind", name);
    session.exec("DROP INDEX CONCURRENTLY IF EXISTS " + session.quote_name(name));
  }
}

void record(pqxx::nontransaction& session, const migration& m) {
  session.exec_params("INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                      m.version, m.name, checksum(m.sql));
}

void apply(pqxx::nontransaction& session, const migration& m) {
  if (m.sql.rfind(no_transaction_marker, 0) == 0) {
    for (const auto& statement : statements_of(m.sql)) {
      drop_invalid_index(session, statement);
      session.exec(statement);
    }
    record(session, m);
    return;
  }
  session.exec("BEGIN");
  try {
    session.exec(m.sql);
    record(session, m);
    session.exec("COMMIT");
  } catch (...) {
    session.exec("ROLLBACK");
    throw;
  }
}

} // namespace

std::string oldest_transactions(pqxx::nontransaction& session) {
  // Who holds the lock is known only while waiting for it; a lock held (or a snapshot an index
  // build waits out) belongs to an open transaction, and the oldest are the likely ones. No
  // query text: it may carry customers' data, and the pid finds it.
  auto rows = session.exec(
      "SELECT pid, coalesce(nullif(application_name, ''), '-'), coalesce(usename, '-'), "
      "coalesce(host(client_addr), 'local'), coalesce(state, '-'), "
      "floor(extract(epoch FROM clock_timestamp() - xact_start))::bigint FROM pg_stat_activity "
      "WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid() "
      "AND datname = current_database() ORDER BY xact_start LIMIT 3");
  if (rows.empty())
    return "no other session of this database has a transaction open";
  std::string out = "the oldest open transactions: ";
  for (pqxx::result::size_type i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if (i > 0)
      out += "; ";
    out += fmt::format("pid {} ({}, user {}, from {}, {} for {}s)", r[0].c_str(), r[1].c_str(),
                       r[2].c_str(), r[3].c_str(), r[4].c_str(), r[5].c_str());
  }
  return out;
}

namespace {

/// Applies `m`, trying again (after a growing delay) when it gave up waiting for a lock.
void apply_with_retries(pqxx::nontransaction& session, const migration& m,
                        const migrate_options& options) {
  auto delay = options.first_retry_delay;
  for (int attempt = 1;; ++attempt) {
    try {
      apply(session, m);
      return;
    } catch (const pqxx::sql_error& e) {
      if (e.sqlstate() != "55P03")
        throw;
      if (attempt >= options.attempts)
        throw std::runtime_error(fmt::format(
            "{}: a lock was not free within {}ms in {} attempts; {} (pg_terminate_backend(pid) "
            "ends one)",
            m.name, options.lock_timeout.count(), attempt, oldest_transactions(session)));
      log::warn("migrate",
                "{}: a lock was not free within {}ms (the database is busy; {}); rolled back, "
                "trying again in {}ms (attempt {} of {})",
                m.name, options.lock_timeout.count(), oldest_transactions(session), delay.count(),
                attempt + 1, options.attempts);
      std::this_thread::sleep_for(delay);
      delay = std::min(delay * 2, max_retry_delay);
    }
  }
}

/// The checksum recorded for each applied version (none when the bookkeeping table is missing).
std::map<int, std::string> applied_checksums(pqxx::nontransaction& session) {
  std::map<int, std::string> out;
  if (!session.exec1("SELECT to_regclass('schema_migrations') IS NOT NULL")[0].as<bool>())
    return out;
  for (const auto& r : session.exec("SELECT version, checksum FROM schema_migrations"))
    out.emplace(r[0].as<int>(), r[1].as<std::string>());
  return out;
}

void refuse_changed(const migration& m, const std::string& recorded) {
  if (recorded != checksum(m.sql))
    throw std::runtime_error(fmt::format(
        "migration {} was changed after it was applied; add a new migration instead", m.name));
}

/// Whether every migration of `list` is applied (each checked against its recorded checksum).
bool all_applied(pqxx::nontransaction& session, const std::vector<migration>& list) {
  const auto applied = applied_checksums(session);
  for (const auto& m : list) {
    auto it = applied.find(m.version);
    if (it == applied.end())
      return false;
    refuse_changed(m, it->second);
  }
  return true;
}

} // namespace

const std::vector<migration>& migrations() {
  static const std::vector<migration> all = load_embedded();
  return all;
}

int latest_migration_version() {
  return migrations().empty() ? 0 : migrations().back().version;
}

std::vector<std::string> migrate(pqxx::connection& conn, const migrate_options& options) {
  return migrate(conn, migrations(), options);
}

std::vector<std::string> migrate(pqxx::connection& conn, const std::vector<migration>& list,
                                 const migrate_options& options) {
  std::vector<std::string> applied_now;
  pqxx::nontransaction session(conn);
  // Nothing to apply: done by reading alone, so that a role that may only read and write the
  // tables (migrations left to another role), or a read-only database, starts all the same.
  if (all_applied(session, list))
    return applied_now;
  // Polled rather than waited for: a session waiting for the lock would sit in an open
  // transaction, which a concurrent index build of the migrating process waits for in turn.
  for (bool told = false;
       !session.exec_params1("SELECT pg_try_advisory_lock($1)", migration_lock_key)[0].as<bool>();
       told = true) {
    if (!told)
      log::info("migrate", "another process is migrating the database; waiting for it");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  try {
    // Index builds may take long; waits for locks may not, since every write queues behind them.
    session.exec(fmt::format("SET statement_timeout = 0; SET lock_timeout = {}",
                             options.lock_timeout.count()));
    session.exec(create_bookkeeping);
    for (const auto& m : list) {
      auto existing = session.exec_params(
          "SELECT checksum FROM schema_migrations WHERE version = $1", m.version);
      if (!existing.empty()) {
        refuse_changed(m, existing[0][0].as<std::string>());
        continue;
      }
      apply_with_retries(session, m, options);
      applied_now.push_back(m.name);
    }
  } catch (...) {
    if (conn.is_open())
      session.exec_params("SELECT pg_advisory_unlock($1)", migration_lock_key);
    throw;
  }
  session.exec_params("SELECT pg_advisory_unlock($1)", migration_lock_key);
  return applied_now;
}

int applied_migration_version(pqxx::connection& conn) {
  pqxx::nontransaction tx(conn);
  auto exists = tx.exec("SELECT to_regclass('schema_migrations') IS NOT NULL");
  if (!exists[0][0].as<bool>())
    return 0;
  return tx.exec("SELECT coalesce(max(version), 0) FROM schema_migrations")[0][0].as<int>();
}

} // namespace outboxd::persistence
