// The outbox engine as main sees it: start, stop within the shutdown timeout, readiness.
#pragma once

#include "actors/messages.hpp"

#include <chrono>
#include <memory>

namespace caf {
class actor_system;
class actor_system_config;
} // namespace caf

namespace outboxd::actors {

/// The longest a worker's statement waits for a row or table lock: a worker waiting on a lock
/// (a user's transaction holding an order, say) holds up every call it has in flight, and their
/// deadlines and leases keep running meanwhile. A run cut short by it is held back and due
/// again later, spending no retry.
inline constexpr std::chrono::milliseconds max_worker_lock_wait{1000};

/// How many connections of its own each outbox processor holds, out of outbox.connections: 3
/// when there are that many per processor and, to share, one more per processor and one for the
/// janitor, and it runs from 2 to 16 calls at a time; otherwise 0 (its statements borrow a shared
/// connection and its thread waits).
int own_connections(const conf::outbox_settings& o);

/// database.lockTimeout for the workers' sessions, at most max_worker_lock_wait.
std::chrono::milliseconds worker_lock_timeout(const conf::database_settings& d);

class engine {
public:
  /// `hooks` must outlive the engine.
  engine(const conf::settings& settings, persistence::hooks_by_type hooks);
  ~engine();
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  void start();
  /// Workers finish the call in flight, hand unstarted claims back and stop; returns when all
  /// stopped or outbox.shutdownTimeout passed. Idempotent.
  void stop();

  /// The listener holds its LISTEN connection (always true when notifications are off).
  bool listening() const;

  /// Every destination's circuit breaker and limits as this process sees them now.
  std::vector<domain::destination_health> destinations() const;

  /// For tests: the context the actors share; its internal knobs (restart_backoff) may be
  /// changed before start().
  engine_context& context() { return *ctx_; }
  /// For tests: the actor system of a started engine. The supervisor is registered in it under
  /// the name "supervisor" until stop().
  caf::actor_system& system() { return *system_; }

private:
  context_ptr ctx_;
  std::unique_ptr<caf::actor_system_config> config_;
  std::unique_ptr<caf::actor_system> system_;
  bool running_ = false;
};

} // namespace outboxd::actors
