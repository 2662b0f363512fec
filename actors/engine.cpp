// The actor system of the engine: two scheduler threads for the event-based supervisor; every
// worker is detached and has a thread of its own.
#include "actors/engine.hpp"

#include "actors/supervisor.hpp"
#include "log/log.hpp"
#include "persistence/connection_pool.hpp"

#include <caf/all.hpp>
#include <unistd.h>

namespace outboxd::actors {

std::string engine_context::conninfo(const std::string& role) const {
  return persistence::make_conninfo(settings.database.url, settings.database.connect_timeout,
                                    "outboxd-" + role);
}

int own_connections(const conf::outbox_settings& o) {
  // Three: a claim never waits behind the rows or the completions, nor they behind each other.
  // One or two measured slower than borrowing (a statement's result waited behind another's).
  // With one call in flight a processor's runs follow one another and nothing would overlap;
  // with many, a blocking statement groups more rows and completions per transaction, and that
  // saved more CPU than the overlap gained once the cores were the limit (32 calls a processor at
  // latency 0: 0.4 against 0.6-0.7 transactions an event, 10-15 % fewer events a second).
  // Shared, at least one per processor and one more: the dead-letter children, the janitor and
  // the processors' rarer statements, which still wait for a connection.
  constexpr int own = 3;
  constexpr int most_calls = 16;
  return o.calls_in_flight > 1 && o.calls_in_flight <= most_calls &&
                 o.connections >= (own + 1) * o.pool_size + 1
             ? own
             : 0;
}

std::chrono::milliseconds worker_lock_timeout(const conf::database_settings& d) {
  // 0 is "no bound"; the workers are bounded anyway.
  return d.lock_timeout.count() == 0 ? max_worker_lock_wait
                                     : std::min(d.lock_timeout, max_worker_lock_wait);
}

engine::engine(const conf::settings& settings, persistence::hooks_by_type hooks)
    : ctx_(std::make_shared<engine_context>()) {
  ctx_->settings = settings;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  ctx_->instance = fmt::format("{}:{}", host, ::getpid());
  ctx_->hooks = std::move(hooks);
  // Borrowed by the processors, their dead-letter children and the janitor.
  const auto& o = settings.outbox;
  ctx_->own_connections = own_connections(o);
  ctx_->db = std::make_unique<persistence::worker_connections>(
      [ctx = ctx_.get()](int n) { return ctx->conninfo(fmt::format("worker-{}", n)); },
      std::min(o.connections - ctx_->own_connections * o.pool_size, 2 * o.pool_size + 1),
      ctx_->hooks,
      persistence::session_limits_sql(
          {settings.database.statement_timeout, worker_lock_timeout(settings.database)}));
  ctx_->gates = std::make_unique<destination_gates>(settings.http);
}

engine::~engine() {
  stop();
}

void engine::start() {
  config_ = std::make_unique<caf::actor_system_config>();
  config_->set("scheduler.max-threads", 2);
  // Idle scheduler threads wait on a condition variable. CAF's default (work stealing) has them
  // poll in 50 µs sleeps for a while after each message; the supervisor gets a message for every
  // notification, so during a burst of orders those two threads kept a fifth of a core busy.
  config_->set("scheduler.policy", caf::atom("sharing"));
  system_ = std::make_unique<caf::actor_system>(*config_);
  auto supervisor = spawn_supervisor(*system_, ctx_);
  system_->registry().put(caf::atom("supervisor"),
                          caf::actor_cast<caf::strong_actor_ptr>(supervisor));
  running_ = true;
}

void engine::stop() {
  if (!running_)
    return;
  running_ = false;
  ctx_->stopping = true;
  auto supervisor = caf::actor_cast<caf::actor>(system_->registry().get(caf::atom("supervisor")));
  system_->registry().erase(caf::atom("supervisor"));
  const auto timeout = ctx_->settings.outbox.shutdown_timeout;
  bool ended = false;
  {
    caf::scoped_actor self{*system_};
    self->monitor(supervisor);
    self->send(supervisor, stop_atom::value);
    // The supervisor ends once every worker has (workers answer between calls).
    auto wait = [&](std::chrono::milliseconds how_long) {
      if (!ended)
        self->receive([&](caf::down_msg&) { ended = true; }, caf::after(how_long) >> [] {});
    };
    wait(timeout + std::chrono::seconds(2));
    // A worker still inside a statement (one waiting for a lock, say) would not end, nor would
    // the actor system: cancel what runs, the worker then sees its stop.
    if (int n = ctx_->db->cancel_running())
      log::warn("supervisor", "cancelled {} database statement(s) still running at the stop", n);
    wait(timeout + std::chrono::seconds(5));
  }
  if (!ended) {
    // Waiting longer would hang the process: leave the actors where they are.
    log::error("supervisor", "workers still running after the shutdown timeout and the "
                             "cancellation of their statements; leaving them");
    (void)system_.release();
    (void)config_.release();
    return;
  }
  system_.reset(); // waits for every actor: all of them have quit by now
  config_.reset();
}

std::vector<domain::destination_health> engine::destinations() const {
  return ctx_->gates->health();
}

bool engine::listening() const {
  const auto& s = ctx_->settings.outbox;
  return !s.enabled || !s.use_listen_notify || ctx_->listener_connected;
}

} // namespace outboxd::actors
