// The database connections of the engine's workers, shared: a worker borrows one for each
// statement and gives it back, so outbox.poolSize processors and their dead-letter children run
// on outbox.connections connections. Opened when needed, dropped when a statement on them fails,
// and, while the database cannot be reached, retried after a capped exponential backoff.
#pragma once

#include "persistence/connection_pool.hpp"
#include "persistence/dlq_repository.hpp"
#include "persistence/outbox_repository.hpp"
#include "persistence/retention_repository.hpp"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <pqxx/pqxx>
#include <string>
#include <thread>
#include <vector>

namespace outboxd::persistence {

class worker_connections {
  /// One connection and the repositories prepared on it.
  struct session {
    session(const std::string& conninfo, const std::string& setup, const hooks_by_type& hooks)
        : conn(conninfo), outbox(conn, hooks), dlq(conn, hooks), retention(conn, hooks) {
      if (!setup.empty())
        pqxx::nontransaction(conn).exec(setup);
    }
    pqxx::connection conn;
    const int pid = conn.backendpid();
    outbox_repository outbox;
    dlq_repository dlq;
    retention_repository retention;
    std::thread::id last_user;
  };

public:
  /// `conninfo(n)` is the connection string of the n-th connection opened (1, 2, ...); `setup`
  /// (SQL, optional) runs on each one when it is opened.
  worker_connections(std::function<std::string(int)> conninfo, int size, hooks_by_type hooks,
                     std::string setup = {});
  ~worker_connections();
  worker_connections(const worker_connections&) = delete;
  worker_connections& operator=(const worker_connections&) = delete;

  /// A borrowed connection's repository, given back when the lease ends: for a temporary, at the
  /// end of the statement that uses it (`db.outbox()->complete(...)`). A lease that ends by an
  /// exception drops its connection, so the next statement runs on a fresh one.
  template <class Repo> class lease {
  public:
    lease(lease&& other) noexcept
        : pool_(other.pool_), session_(std::move(other.session_)), repo_(other.repo_),
          exceptions_(other.exceptions_) {}
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    lease& operator=(lease&&) = delete;
    ~lease() {
      if (session_)
        pool_->give_back(std::move(session_), std::uncaught_exceptions() > exceptions_);
    }
    Repo* operator->() const { return repo_; }

  private:
    friend class worker_connections;
    lease(worker_connections* pool, std::unique_ptr<session> s, Repo* repo)
        : pool_(pool), session_(std::move(s)), repo_(repo),
          exceptions_(std::uncaught_exceptions()) {}
    worker_connections* pool_;
    std::unique_ptr<session> session_;
    Repo* repo_;
    int exceptions_;
  };

  /// Borrows a connection: the one this thread (each worker is detached) had last when it is
  /// free, else a new one while fewer than the maximum are open, else the one used most recently;
  /// waits while all are in use. So a worker keeps its connection while there are enough, and the
  /// backends' caches stay warm. Throws pqxx::broken_connection while the database cannot be
  /// reached (logged once per outage, under `who`).
  lease<outbox_repository> outbox(const std::string& who);
  lease<dlq_repository> dlq(const std::string& who);
  lease<retention_repository> retention(const std::string& who);

  /// A statement of `who` failed because its connection was lost: logged once per outage; the
  /// idle connections are dropped too (they most likely died with it).
  void lost(const std::string& who, const std::exception& why);

  /// A statement of `who` the database refused for now (read-only, out of resources, cut
  /// short): the first refusal of a spell is logged at WARN, the rest at debug, and the wait
  /// before the workers' next try (retry_in) grows as after a failed connection. A spell ends
  /// when no refusal came for a while (the longest wait, twice).
  void refused(const std::string& who, const std::exception& why);

  /// The SQL each connection runs when it is opened.
  const std::string& setup() const { return setup_; }

  /// When a worker that could not reach the database, or was refused, tries again.
  std::chrono::milliseconds retry_in() const;

  /// Asks PostgreSQL to cancel the statements running on the borrowed connections (from a
  /// connection of its own): a stop that timed out must not wait for a statement that waits
  /// for a lock. Returns how many were running.
  int cancel_running();

private:
  std::unique_ptr<session> take(const std::string& who);
  void give_back(std::unique_ptr<session> s, bool drop);

  std::function<std::string(int)> conninfo_;
  hooks_by_type hooks_;
  mutable std::mutex mutex_;
  std::condition_variable available_;
  std::vector<std::unique_ptr<session>> idle_;
  std::vector<int> busy_; // backend pids of the borrowed connections
  std::string setup_;
  int size_;
  int open_ = 0;
  int opened_ = 0; // connections opened so far, for their names
  /// Raises backoff_, once per backoff period however many workers fail at once (under mutex_).
  void raise_backoff();
  /// Whether a spell of refusals is on at `now` (under mutex_).
  bool refusing(std::chrono::steady_clock::time_point now) const;

  bool reported_ = false;
  std::chrono::milliseconds backoff_{250};
  std::chrono::steady_clock::time_point backoff_raised_;
  std::optional<std::chrono::steady_clock::time_point> refused_at_; // the spell's last refusal
};

} // namespace outboxd::persistence
