// janitor: the lease reaper (expired outbox and dead-letter leases) every reaperInterval, and
// retention of old PROCESSED events in small batches. Detached: both block on the database.
#include "actors/workers.hpp"
#include "log/log.hpp"
#include "metrics/metrics.hpp"
#include "persistence/dlq_repository.hpp"

#include <caf/all.hpp>

namespace outboxd::actors {
namespace {

constexpr int retention_batch = 500;
constexpr int retention_batches_per_run = 20;
constexpr auto retention_every = std::chrono::minutes(1);
constexpr const char* tag = "janitor";

struct janitor_state {
  context_ptr ctx;
  static inline const char* name = "janitor";
};

using janitor = caf::stateful_actor<janitor_state>;

/// Runs `job`, turning a lost connection or a statement cut short by its timeout into a log line
/// and a later retry (the next period).
template <class Job> void guarded(janitor* self, Job&& job) {
  try {
    job(*self->state.ctx->db);
  } catch (const std::exception& e) {
    if (persistence::is_cancelled_statement(e)) {
      log::warn(tag, "statement cut short, trying again next time: {}", e.what());
      return;
    }
    if (!persistence::is_connection_loss(e))
      throw;
    self->state.ctx->db->lost(tag, e);
  }
}

caf::behavior janitor_actor(janitor* self, context_ptr ctx) {
  auto& st = self->state;
  st.ctx = std::move(ctx);
  const auto& s = st.ctx->settings;
  self->delayed_send(self, s.outbox.reaper_interval, reap_atom::value);
  if (s.outbox.retention.count() > 0)
    self->delayed_send(self, std::chrono::seconds(5), retain_atom::value);
  return {
      [self](reap_atom) {
        const auto& s = self->state.ctx->settings;
        guarded(self, [&](persistence::worker_connections& db) {
          auto outbox = db.outbox(tag)->reap_expired(s.outbox.max_retries);
          auto dlq = db.dlq(tag)->reap_expired(s.dlq.max_retries);
          metrics::global().lease_expiries.inc({{"table", "outbox_events"}},
                                               outbox.returned + outbox.dead_lettered);
          metrics::global().lease_expiries.inc({{"table", "dead_letter_events"}}, dlq);
          if (outbox.returned + outbox.dead_lettered + dlq > 0)
            log::warn(tag,
                      "expired leases reclaimed: {} event(s) back to PENDING, {} dead-lettered, "
                      "{} dead letter(s)",
                      outbox.returned, outbox.dead_lettered, dlq);
        });
        self->delayed_send(self, s.outbox.reaper_interval, reap_atom::value);
      },
      [self](retain_atom) {
        const auto& s = self->state.ctx->settings;
        guarded(self, [&](persistence::worker_connections& db) {
          int deleted = 0;
          for (int i = 0; i < retention_batches_per_run; ++i) {
            int n = db.outbox(tag)->delete_processed(s.outbox.retention, retention_batch);
            deleted += n;
            if (n < retention_batch)
              break;
          }
          if (deleted > 0)
            log::info(tag, "retention: deleted {} processed event(s)", deleted);
        });
        self->delayed_send(self, retention_every, retain_atom::value);
      },
      [self](stop_atom) {
        self->quit();
        return true;
      },
  };
}

} // namespace

caf::actor spawn_janitor(caf::event_based_actor* supervisor, context_ptr ctx) {
  return supervisor->spawn<caf::detached + caf::monitored>(janitor_actor, std::move(ctx));
}

} // namespace outboxd::actors
