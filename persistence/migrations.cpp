// Migration runner: schema_migrations bookkeeping, advisory lock, checksum of applied files.
#include "persistence/migrations.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <stdexcept>
#include <string_view>

namespace outboxd::persistence {
namespace embedded {
std::vector<std::pair<std::string_view, std::string_view>> files();
}

namespace {

// Any constant works as long as every outboxd uses the same one: "outboxd" in ASCII.
constexpr long long migration_lock_key = 0x6f7574626f7864;

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

} // namespace

const std::vector<migration>& migrations() {
  static const std::vector<migration> all = load_embedded();
  return all;
}

int latest_migration_version() {
  return migrations().empty() ? 0 : migrations().back().version;
}

std::vector<std::string> migrate(pqxx::connection& conn) {
  std::vector<std::string> applied_now;
  pqxx::nontransaction session(conn);
  session.exec_params("SELECT pg_advisory_lock($1)", migration_lock_key);
  try {
    session.exec(create_bookkeeping);
    for (const auto& m : migrations()) {
      auto existing = session.exec_params(
          "SELECT checksum FROM schema_migrations WHERE version = $1", m.version);
      if (!existing.empty()) {
        if (existing[0][0].as<std::string>() != checksum(m.sql))
          throw std::runtime_error(fmt::format(
              "migration {} was changed after it was applied; add a new migration instead",
              m.name));
        continue;
      }
      session.exec("BEGIN");
      try {
        session.exec(m.sql);
        session.exec_params(
            "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
            m.version, m.name, checksum(m.sql));
        session.exec("COMMIT");
      } catch (...) {
        session.exec("ROLLBACK");
        throw;
      }
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
