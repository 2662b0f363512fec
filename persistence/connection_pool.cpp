// Connection pool: lazily opened connections, prepared statements registered on each, and the
// translation of connection-level failures into store_unavailable.
#include "persistence/connection_pool.hpp"

#include "domain/ports.hpp"

#include <fmt/format.h>

namespace outboxd::persistence {
namespace {

constexpr auto acquire_wait = std::chrono::seconds(10);
constexpr auto client_check_interval = std::chrono::milliseconds(2000);

/// The text of a store_unavailable for a connection loss.
std::string loss_message(const std::exception& e) {
  if (dynamic_cast<const pqxx::broken_connection*>(&e))
    return fmt::format("database connection lost: {}", e.what());
  // The commit may or may not have happened: the caller must re-read, never blindly redo.
  if (dynamic_cast<const pqxx::in_doubt_error*>(&e))
    return fmt::format("database commit outcome unknown: {}", e.what());
  return fmt::format("database unavailable: {}", e.what());
}

} // namespace

bool is_connection_loss(const std::exception& e) {
  if (dynamic_cast<const pqxx::broken_connection*>(&e) ||
      dynamic_cast<const pqxx::in_doubt_error*>(&e))
    return true;
  if (auto* sql = dynamic_cast<const pqxx::sql_error*>(&e)) {
    const auto& state = sql->sqlstate();
    return state.rfind("08", 0) == 0 || state.rfind("57P", 0) == 0;
  }
  return false;
}

std::string session_limits_sql(const statement_limits& limits) {
  // The text outboxd sends and reads is UTF-8, and its statements are written for READ
  // COMMITTED (claims skip locked rows, updates re-check their lease): a role's or database's
  // other client_encoding would re-encode what clients wrote into the business tables, and
  // SERIALIZABLE would fail engine statements with serialization errors.
  return fmt::format("SET statement_timeout = {}; SET lock_timeout = {}; "
                     "SET client_connection_check_interval = {}; SET client_encoding = 'UTF8'; "
                     "SET default_transaction_isolation = 'read committed'",
                     limits.statement_timeout.count(), limits.lock_timeout.count(),
                     client_check_interval.count());
}

bool is_cancelled_statement(const std::exception& e) {
  auto* sql = dynamic_cast<const pqxx::sql_error*>(&e);
  return sql && (sql->sqlstate() == "57014" || sql->sqlstate() == "55P03");
}

bool is_temporary_refusal(const std::exception& e) {
  if (is_cancelled_statement(e))
    return true;
  auto* sql = dynamic_cast<const pqxx::sql_error*>(&e);
  if (!sql)
    return false;
  const auto& state = sql->sqlstate();
  return state == "25006" || state.rfind("53", 0) == 0 || state == "40001" || state == "40P01";
}

std::string make_conninfo(const std::string& url, std::chrono::milliseconds connect_timeout,
                          const std::string& application_name) {
  auto seconds = std::max<long long>(
      1, std::chrono::duration_cast<std::chrono::seconds>(connect_timeout).count());
  bool is_url = url.rfind("postgresql://", 0) == 0 || url.rfind("postgres://", 0) == 0;
  // Over TCP, a database host that vanished (a partition, a hung machine) is noticed within
  // about half a minute instead of the kernel's two hours: keepalives while waiting for an
  // answer, a bound on data left unacknowledged while sending. Given in the URL, the user's own
  // values stand.
  std::string liveness;
  if (url.find("keepalives") == std::string::npos &&
      url.find("tcp_user_timeout") == std::string::npos)
    liveness =
        is_url
            ? "&keepalives_idle=10&keepalives_interval=5&keepalives_count=3&tcp_user_timeout=30000"
            : " keepalives_idle=10 keepalives_interval=5 keepalives_count=3 tcp_user_timeout=30000";
  if (is_url) {
    char sep = url.find('?') == std::string::npos ? '?' : '&';
    return fmt::format("{}{}connect_timeout={}&application_name={}{}", url, sep, seconds,
                       application_name, liveness);
  }
  return fmt::format("{}{}connect_timeout={} application_name={}{}", url, url.empty() ? "" : " ",
                     seconds, application_name, liveness);
}

connection_pool::connection_pool(std::string conninfo, int size, std::vector<statement> statements,
                                 std::string session_setup)
    : conninfo_(std::move(conninfo)), statements_(std::move(statements)),
      session_setup_(std::move(session_setup)), size_(size) {}

connection_pool::~connection_pool() = default;

connection_pool::slot connection_pool::acquire() {
  std::unique_lock lock(mutex_);
  if (!available_.wait_for(lock, acquire_wait, [&] { return !idle_.empty() || open_ < size_; }))
    throw domain::store_unavailable("no database connection became free within 10s");
  if (!idle_.empty()) {
    slot s{std::move(idle_.back())};
    idle_.pop_back();
    return s;
  }
  ++open_;
  lock.unlock();
  try {
    auto conn = std::make_unique<pqxx::connection>(conninfo_);
    if (!session_setup_.empty())
      pqxx::nontransaction(*conn).exec(session_setup_);
    for (const auto& st : statements_)
      conn->prepare(st.name, st.sql);
    return slot{std::move(conn)};
  } catch (const std::exception& e) {
    lock.lock();
    --open_;
    available_.notify_one();
    throw domain::store_unavailable(fmt::format("cannot connect to the database: {}", e.what()));
  }
}

void connection_pool::release(slot s) {
  std::lock_guard lock(mutex_);
  if (s.conn && s.conn->is_open())
    idle_.push_back(std::move(s.conn));
  else
    --open_;
  available_.notify_one();
}

void connection_pool::discard_all(slot s) {
  std::lock_guard lock(mutex_);
  open_ -= static_cast<int>(idle_.size()) + (s.conn ? 1 : 0);
  idle_.clear();
  available_.notify_all();
}

void connection_pool::handle_failure(slot s, std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    const bool lost = is_connection_loss(ex);
    // A session opened while the database was read-only keeps that default after the database
    // takes writes again: a new one is opened instead.
    auto* sql = dynamic_cast<const pqxx::sql_error*>(&ex);
    const bool read_only = sql && sql->sqlstate() == "25006";
    // An empty slot was already counted out by discard_all.
    if (s.conn) {
      if (lost || read_only)
        s.conn.reset(); // never handed out again
      release(std::move(s));
    }
    if (is_cancelled_statement(ex))
      throw domain::store_unavailable(fmt::format(
          "database statement cut short (database.statementTimeout / lockTimeout): {}", ex.what()));
    if (is_temporary_refusal(ex))
      throw domain::store_unavailable(
          fmt::format("the database refused for now (read-only, out of resources, or a "
                      "serialization failure): {}",
                      ex.what()));
    if (!lost)
      throw;
    throw domain::store_unavailable(loss_message(ex));
  } catch (...) {
    if (s.conn)
      release(std::move(s));
    throw;
  }
}

} // namespace outboxd::persistence
