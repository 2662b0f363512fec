// A fixed-size pool of PostgreSQL connections with prepared statements, and the unit-of-work
// runner that turns connection failures into domain::store_unavailable.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <pqxx/pqxx>
#include <string>
#include <utility>
#include <vector>

namespace outboxd::persistence {

/// The one connection-loss rule of every connection outboxd opens: the connection is gone
/// (pqxx::broken_connection), a commit's outcome is unknown (pqxx::in_doubt_error), or the server
/// reports a connection exception (SQLSTATE class 08) or is shutting down or restarting (57P).
bool is_connection_loss(const std::exception& e);

/// What bounds the statements of a session: `statement_timeout` and `lock_timeout` (zero: no
/// bound), and, always, `client_connection_check_interval`, so that PostgreSQL cancels the work
/// of a client that vanished instead of finishing it.
struct statement_limits {
  std::chrono::milliseconds statement_timeout{0};
  std::chrono::milliseconds lock_timeout{0};
};

/// The SET statements of every session of outboxd's pools: `limits`, and the encoding (UTF-8)
/// and isolation (READ COMMITTED) its statements assume, whatever the role or database sets.
std::string session_limits_sql(const statement_limits& limits);

/// A statement cut short by statement_timeout (or a cancel request) or by lock_timeout: the
/// connection is fine, the statement may be tried again later.
bool is_cancelled_statement(const std::exception& e);

/// The database refused for now, whatever the statement: cut short (is_cancelled_statement),
/// read-only (a standby, default_transaction_read_only), out of disk, memory or connections
/// (SQLSTATE class 53), a serialization failure or a deadlock. The same statement may succeed
/// later; a worker backs off instead of crashing, the API answers 503.
bool is_temporary_refusal(const std::exception& e);

/// A named SQL statement, prepared on every connection of the pool that runs it.
struct statement {
  std::string name;
  std::string sql;
};

/// `url` plus `connect_timeout` and `application_name` (what pg_stat_activity shows), in the
/// form the url uses (a `postgresql://` URL, a key=value string, or empty for the PG* variables).
std::string make_conninfo(const std::string& url, std::chrono::milliseconds connect_timeout,
                          const std::string& application_name = "outboxd");

class connection_pool {
public:
  static constexpr int max_attempts = 3;

  /// Connections are opened lazily, at most `size` of them; `session_setup` (SQL, optional)
  /// runs on each one when it is opened.
  connection_pool(std::string conninfo, int size, std::vector<statement> statements,
                  std::string session_setup = {});
  ~connection_pool();
  connection_pool(const connection_pool&) = delete;
  connection_pool& operator=(const connection_pool&) = delete;

  /// Runs `work` with a connection. A lost connection is discarded and `work` re-run once on
  /// a new one, then reported as domain::store_unavailable, as is a statement cut short by its
  /// statement or lock timeout; a serialization failure or deadlock
  /// re-runs `work` (up to 3 times). `work` must therefore be a whole unit: begin, do, commit.
  template <class Work> auto run(Work&& work) {
    for (int attempt = 1;; ++attempt) {
      auto c = acquire();
      try {
        if constexpr (std::is_void_v<decltype(work(*c.conn))>) {
          work(*c.conn);
          release(std::move(c));
          return;
        } else {
          auto result = work(*c.conn);
          release(std::move(c));
          return result;
        }
      } catch (const pqxx::serialization_failure&) {
        release(std::move(c));
        if (attempt >= max_attempts)
          throw;
      } catch (const pqxx::deadlock_detected&) {
        release(std::move(c));
        if (attempt >= max_attempts)
          throw;
      } catch (const pqxx::broken_connection&) {
        // Nothing was committed (a lost commit is in_doubt_error instead), so the unit can run
        // again on a fresh connection; the idle ones probably died with this one.
        discard_all(std::move(c));
        if (attempt >= 2)
          handle_failure({}, std::current_exception());
      } catch (...) {
        handle_failure(std::move(c), std::current_exception());
      }
    }
  }

  const std::string& conninfo() const { return conninfo_; }

private:
  struct slot {
    std::unique_ptr<pqxx::connection> conn;
  };
  slot acquire();
  void release(slot s);
  /// Drops `s` and every idle connection.
  void discard_all(slot s);
  /// Rethrows the exception, as store_unavailable when it means the connection is gone.
  [[noreturn]] void handle_failure(slot s, std::exception_ptr e);

  std::string conninfo_;
  std::vector<statement> statements_;
  std::string session_setup_;
  std::mutex mutex_;
  std::condition_variable available_;
  std::vector<std::unique_ptr<pqxx::connection>> idle_;
  int size_;
  int open_ = 0;
};

} // namespace outboxd::persistence
