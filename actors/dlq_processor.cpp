// dlq-processor-N: claims dead letters and compensates them (LIFO reverts of the original
// event's successful calls). All reverted → PROCESSED and the order FAILED (or CANCELLED);
// retryable trouble → backoff up to dlq.maxRetries; otherwise FAILED and the order ATTENTION.
#include "actors/event_runner.hpp"
#include "actors/workers.hpp"
#include "log/log.hpp"
#include "metrics/metrics.hpp"
#include "persistence/dlq_repository.hpp"

#include <caf/all.hpp>
#include <deque>

namespace outboxd::actors {
namespace {

using std::chrono::milliseconds;

struct dlq_state {
  context_ptr ctx;
  int index = 0;
  std::string tag;
  std::unique_ptr<event_runner> runner;
  std::deque<persistence::claimed_dead_letter> batch;
  std::uint64_t timer = 0;
  bool stopping = false;
  static inline const char* name = "dlq_processor";
};

using dlq_actor = caf::stateful_actor<dlq_state>;

/// The dead-letter repository on a borrowed connection, for one statement.
auto repo(dlq_actor* self) {
  return self->state.ctx->db->dlq(self->state.tag);
}

void schedule(dlq_actor* self, milliseconds delay) {
  self->delayed_send(self, delay, tick_atom::value, ++self->state.timer);
}

void connection_lost(dlq_actor* self, const std::exception& e) {
  auto& st = self->state;
  st.ctx->db->lost(st.tag, e);
  st.batch.clear();
  schedule(self, st.ctx->db->retry_in());
}

void compensate(dlq_actor* self, const persistence::claimed_dead_letter& d) {
  auto& st = self->state;
  const auto& s = st.ctx->settings;
  const int attempt = d.attempts + 1;
  // A redriven failed cancellation compensates the event it cancels; any other dead letter
  // compensates its own event.
  bool cancellation = d.event_type.rfind('!', 0) == 0;
  std::optional<std::int64_t> original = d.original_event_id;
  if (cancellation)
    original = st.ctx->db->outbox(st.tag)->latest_event_id(d.aggregate_type, d.aggregate_id,
                                                           d.event_type.substr(1));
  auto outcome = cancellation ? domain::engine_outcome::cancellation_compensated
                              : domain::engine_outcome::fanout_compensated;
  log::info(st.tag, "dead letter {} (event {} {} {} {}, {}): compensating, attempt {}", d.id,
            d.original_event_id, d.event_type, d.aggregate_type, d.aggregate_id, d.reason, attempt);
  compensation_result r;
  if (original)
    r = st.runner->compensate(*original, d.aggregate_id, d.event_type, attempt);
  switch (r.what) {
  case compensation_result::kind::interrupted:
    repo(self)->release(d);
    return;
  case compensation_result::kind::done:
    if (repo(self)->resolve(d, outcome, d.last_error)) {
      metrics::global().compensations.inc({{"kind", "dead_letter"}, {"outcome", "reverted"}});
      log::info(st.tag, "dead letter {} compensated ({} revert(s)); {} {} {}", d.id, r.reverted,
                d.aggregate_type, d.aggregate_id,
                cancellation ? "cancelled" : "failed: " + d.last_error);
    }
    return;
  case compensation_result::kind::retryable:
    if (attempt <= s.dlq.max_retries) {
      auto delay = st.runner->retry_delay(attempt, r.retry_after, s.dlq.backoff);
      if (repo(self)->retry(d, delay, r.error))
        log::warn(st.tag, "dead letter {} compensation retry {} of {} in {}ms: {}", d.id, attempt,
                  s.dlq.max_retries, delay.count(), r.error);
      return;
    }
    break;
  case compensation_result::kind::non_retryable:
    break;
  }
  if (repo(self)->fail(d, r.error)) {
    metrics::global().compensations.inc({{"kind", "dead_letter"}, {"outcome", "failed"}});
    log::error(st.tag,
               "order needs attention: compensation of dead letter {} ({} {} {}) failed "
               "after {} attempt(s): {}",
               d.id, d.event_type, d.aggregate_type, d.aggregate_id, attempt, r.error);
  }
}

void claim(dlq_actor* self) {
  auto& st = self->state;
  if (st.stopping || st.ctx->stopping || !st.batch.empty())
    return;
  const auto& s = st.ctx->settings;
  try {
    auto claimed = repo(self)->claim(st.tag, s.outbox.batch_size, s.outbox.lease_timeout);
    if (claimed.empty()) {
      auto next = repo(self)->next_due_in();
      schedule(self, next ? std::min(*next + milliseconds(1), s.outbox.poll_interval)
                          : s.outbox.poll_interval);
      return;
    }
    st.batch.assign(claimed.begin(), claimed.end());
    self->send(self, process_atom::value);
  } catch (const std::exception& e) {
    if (!is_connection_loss(e))
      throw;
    connection_lost(self, e);
  }
}

void process_next(dlq_actor* self) {
  auto& st = self->state;
  if (st.batch.empty()) {
    claim(self);
    return;
  }
  auto d = st.batch.front();
  st.batch.pop_front();
  try {
    if (st.ctx->stopping)
      repo(self)->release(d);
    else
      compensate(self, d);
  } catch (const std::exception& e) {
    if (!is_connection_loss(e))
      throw;
    connection_lost(self, e);
    return;
  }
  self->send(self, process_atom::value);
}

caf::behavior dlq_processor(dlq_actor* self, context_ptr ctx, int index, caf::actor supervisor) {
  auto& st = self->state;
  st.ctx = std::move(ctx);
  st.index = index;
  st.tag = fmt::format("dlq-processor-{}", index + 1);
  st.runner = std::make_unique<event_runner>(*st.ctx, st.tag);
  self->set_exception_handler([self](std::exception_ptr& ep) -> caf::error {
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      log::error(self->state.tag, "crashed: {}", e.what());
      return caf::make_error(caf::sec::runtime_error, e.what());
    }
  });
  self->send(supervisor, register_atom::value, index, caf::actor_cast<caf::actor>(self));
  self->send(self, wake_atom::value);
  return {
      [self](wake_atom) { claim(self); },
      [self](dlq_wake_atom) { claim(self); },
      [self](sweep_atom) { claim(self); },
      [self](tick_atom, std::uint64_t timer) {
        if (timer == self->state.timer)
          claim(self);
      },
      [self](process_atom) { process_next(self); },
      [self](stop_atom) {
        auto& st = self->state;
        st.stopping = true;
        try {
          for (const auto& d : st.batch)
            repo(self)->release(d);
        } catch (const std::exception& e) {
          log::warn(st.tag, "could not hand back claims (their leases will expire): {}", e.what());
        }
        st.batch.clear();
        self->quit();
        return true;
      },
  };
}

} // namespace

caf::actor spawn_dlq_processor(caf::event_based_actor* parent, context_ptr ctx, int index,
                               caf::actor supervisor) {
  return parent->spawn<caf::detached + caf::monitored>(dlq_processor, std::move(ctx), index,
                                                       std::move(supervisor));
}

} // namespace outboxd::actors
