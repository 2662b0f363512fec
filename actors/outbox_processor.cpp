// outbox-processor-N: claim a batch, run its events one per message (so the mailbox, and with
// it shutdown, is served between events), then claim again; idle until a wake-up or the next
// due retry.
#include "actors/event_runner.hpp"
#include "actors/workers.hpp"
#include "log/log.hpp"
#include "metrics/metrics.hpp"

#include <caf/all.hpp>
#include <deque>

namespace outboxd::actors {
namespace {

using std::chrono::milliseconds;

struct processor_state {
  context_ptr ctx;
  int index = 0;
  std::string tag;
  caf::actor supervisor;
  std::unique_ptr<event_runner> runner;
  std::deque<persistence::claimed_event> batch;
  int claim_size = 1;
  std::size_t claimed = 0; // events of the last claim, and when it was made
  std::chrono::steady_clock::time_point claimed_at;
  std::uint64_t timer = 0;
  caf::actor dlq;
  domain::restart_history dlq_restarts;
  bool stopping = false;
  static inline const char* name = "outbox_processor";
};

using processor = caf::stateful_actor<processor_state>;

/// The outbox repository on a borrowed connection, for one statement.
auto repo(processor* self) {
  return self->state.ctx->db->outbox(self->state.tag);
}

void schedule(processor* self, milliseconds delay) {
  self->delayed_send(self, delay, tick_atom::value, ++self->state.timer);
}

void handle_connection_loss(processor* self, const std::exception& e) {
  auto& st = self->state;
  st.ctx->db->lost(st.tag, e);
  // The claims die with the connection's usefulness; their leases expire and the reaper
  // hands them to a worker that can reach the database.
  st.batch.clear();
  schedule(self, st.ctx->db->retry_in());
}

domain::claim_sizing sizing(const conf::outbox_settings& s) {
  return {s.batch_size, s.pool_size};
}

void claim(processor* self) {
  auto& st = self->state;
  if (st.stopping || st.ctx->stopping || !st.batch.empty())
    return;
  const auto& s = st.ctx->settings.outbox;
  try {
    auto now = std::chrono::steady_clock::now();
    if (st.claimed > 0)
      st.claim_size = sizing(s).next(st.claim_size, st.claimed, now - st.claimed_at);
    auto claimed = repo(self)->claim(st.tag, st.claim_size, s.lease_timeout);
    st.claimed = claimed.size();
    st.claimed_at = now;
    if (claimed.empty()) {
      st.claim_size = sizing(s).base();
      self->send(st.supervisor, idle_atom::value, st.index);
      auto next = repo(self)->next_due_in();
      schedule(self, next ? std::min(*next + milliseconds(1), s.poll_interval) : s.poll_interval);
      return;
    }
    log::debug(st.tag, "claimed {} event(s), first {}", claimed.size(), claimed.front().id);
    for (const auto& e : claimed)
      metrics::global().events_claimed.inc({{"event_type", e.event_type}});
    st.batch.assign(claimed.begin(), claimed.end());
    self->send(self, process_atom::value);
  } catch (const std::exception& e) {
    if (!is_connection_loss(e))
      throw;
    handle_connection_loss(self, e);
  }
}

void process_next(processor* self) {
  auto& st = self->state;
  if (st.batch.empty()) {
    claim(self);
    return;
  }
  auto e = st.batch.front();
  st.batch.pop_front();
  try {
    if (st.ctx->stopping) {
      repo(self)->release(e);
    } else {
      st.runner->run(e);
    }
  } catch (const std::exception& ex) {
    if (!is_connection_loss(ex))
      throw;
    handle_connection_loss(self, ex);
    return;
  }
  self->send(self, process_atom::value);
}

void release_batch(processor* self) {
  auto& st = self->state;
  if (st.batch.empty())
    return;
  int released = 0;
  try {
    for (const auto& e : st.batch)
      released += repo(self)->release(e) ? 1 : 0;
  } catch (const std::exception& ex) {
    log::warn(st.tag, "could not hand back claims (their leases will expire): {}", ex.what());
  }
  log::info(st.tag, "handed back {} unstarted claim(s)", released);
  st.batch.clear();
}

void start_dlq_child(processor* self) {
  auto& st = self->state;
  st.dlq = spawn_dlq_processor(self, st.ctx, st.index, st.supervisor);
  // Linked, so that the child ends when this processor crashes: its restart brings a new one,
  // and the old must not go on running unsupervised next to it.
  self->link_to(st.dlq);
  st.dlq_restarts.started(std::chrono::steady_clock::now());
}

caf::behavior outbox_processor(processor* self, context_ptr ctx, int index, caf::actor supervisor) {
  auto& st = self->state;
  st.ctx = std::move(ctx);
  st.index = index;
  st.tag = fmt::format("outbox-processor-{}", index + 1);
  st.supervisor = std::move(supervisor);
  st.claim_size = sizing(st.ctx->settings.outbox).base();
  st.runner = std::make_unique<event_runner>(*st.ctx, st.tag);
  self->set_exception_handler([self](std::exception_ptr& ep) -> caf::error {
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      log::error(self->state.tag, "crashed: {}", e.what());
      return caf::make_error(caf::sec::runtime_error, e.what());
    }
  });
  // The link to the dead-letter child is one-way in effect: its end is handled by the down
  // handler below (a restart), never by ending this processor too.
  self->set_exit_handler([self](caf::exit_msg& em) {
    if (em.source != self->state.dlq.address() && em.reason)
      self->quit(em.reason);
  });
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (dm.source != st.dlq.address() || st.stopping)
      return;
    auto delay = st.dlq_restarts.crashed(st.ctx->restart_backoff, std::chrono::steady_clock::now());
    log::error(st.tag, "dlq-processor-{} stopped ({}); restarting in {}ms", st.index + 1,
               self->system().render(dm.reason), delay.count());
    self->delayed_send(self, delay, restart_atom::value);
  });
  start_dlq_child(self);
  log::info(st.tag, "started (batch {}, lease {}ms)", st.ctx->settings.outbox.batch_size,
            st.ctx->settings.outbox.lease_timeout.count());
  self->send(self, wake_atom::value);
  return {
      [self](wake_atom) { claim(self); },
      [self](sweep_atom) { claim(self); },
      [self](tick_atom, std::uint64_t timer) {
        if (timer == self->state.timer)
          claim(self);
      },
      [self](process_atom) { process_next(self); },
      [self](restart_atom) {
        if (!self->state.stopping)
          start_dlq_child(self);
      },
      [self](stop_atom) -> caf::result<bool> {
        auto& st = self->state;
        st.stopping = true;
        release_batch(self);
        auto rp = self->make_response_promise<bool>();
        auto finish = [self, rp]() mutable {
          log::info(self->state.tag, "stopped");
          rp.deliver(true);
          self->quit();
        };
        self->request(st.dlq, st.ctx->settings.outbox.shutdown_timeout, stop_atom::value)
            .then([finish](bool) mutable { finish(); },
                  [finish](caf::error&) mutable { finish(); });
        return rp;
      },
  };
}

} // namespace

caf::actor spawn_outbox_processor(caf::event_based_actor* supervisor, context_ptr ctx, int index) {
  return supervisor->spawn<caf::detached + caf::monitored>(outbox_processor, std::move(ctx), index,
                                                           caf::actor_cast<caf::actor>(supervisor));
}

} // namespace outboxd::actors
