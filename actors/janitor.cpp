// janitor: the lease reaper (expired outbox and dead-letter leases) every reaperInterval, and
// retention: old PROCESSED events, resolved dead letters, the audit of settled aggregates
// (exported first when a folder is set) and removed orders, deleted in batches, each its own
// short transaction, until none is left. Detached: both block on the database. The reaper holds
// back after a step of the database's clock (domain/lease_clock.hpp).
#include "actors/audit_export.hpp"
#include "actors/workers.hpp"
#include "domain/lease_clock.hpp"
#include "log/log.hpp"
#include "metrics/metrics.hpp"
#include "persistence/dlq_repository.hpp"

#include <caf/all.hpp>
#include <fmt/ranges.h>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace outboxd::actors {
namespace {

constexpr int retention_batch = 1000;
/// A run stops after this long, so that the reaper and a stop are served in between ...
constexpr auto retention_slice = std::chrono::seconds(1);
/// ... and the next one follows at once while rows are left, else after a pause.
constexpr auto retention_again = std::chrono::milliseconds(10);
constexpr auto retention_every = std::chrono::minutes(1);
/// Audit rows that must stay (their aggregate is not settled yet) are passed by a cursor, and
/// looked at again from the start this often.
constexpr auto audit_rewind_every = std::chrono::hours(1);
constexpr const char* tag = "janitor";

struct janitor_state {
  context_ptr ctx;
  /// The database's clock against ours: no reaping for a lease after it stepped forward.
  std::optional<domain::lease_clock> lease_clock;
  std::optional<audit_export> exporter;
  /// Rows deleted by the retention runs since the last one that caught up, by what they are.
  std::map<std::string, long long> retained;
  std::chrono::steady_clock::time_point retaining_since;
  /// Audit retention resumes after this id.
  std::int64_t audit_cursor = 0;
  std::chrono::steady_clock::time_point audit_rewound = std::chrono::steady_clock::now();
  static inline const char* name = "janitor";
};

using janitor = caf::stateful_actor<janitor_state>;

/// Runs `job`, turning a lost connection or a statement cut short by its timeout into a log line
/// and a later retry (the next period).
template <class Job> void guarded(janitor* self, Job&& job) {
  try {
    job(*self->state.ctx->db);
  } catch (const std::exception& e) {
    if (persistence::is_temporary_refusal(e)) {
      self->state.ctx->db->refused(tag, e);
      return;
    }
    if (!persistence::is_connection_loss(e))
      throw;
    self->state.ctx->db->lost(tag, e);
  }
}

/// What one retention batch did.
struct batch_done {
  int deleted = 0;
  bool caught_up = false;
};

/// A batch of a table whose deletes are taken oldest first: caught up when it deleted less
/// than a batch.
batch_done oldest_first(int deleted) {
  return {deleted, deleted < retention_batch};
}

/// Deletes `table`'s rows older than `window` (never, when it is zero) in batches for at most one
/// slice, counting them in `retained[what]`; true when none is left.
template <class Delete>
bool retain(std::map<std::string, long long>& retained, const char* table, const char* what,
            std::chrono::milliseconds window, Delete del) {
  if (window.count() <= 0)
    return true;
  const auto started = std::chrono::steady_clock::now();
  bool caught_up = false;
  while (!caught_up && std::chrono::steady_clock::now() - started < retention_slice) {
    const batch_done b = del(window, retention_batch);
    if (b.deleted > 0) {
      metrics::global().retention_deleted.inc({{"table", table}}, b.deleted);
      retained[what] += b.deleted;
    }
    caught_up = b.caught_up;
  }
  return caught_up;
}

/// One batch of audit retention from the cursor, exporting first when a folder is set. An export
/// that fails deletes nothing: it is logged, counted, and tried again at the next run.
batch_done retain_audit(janitor_state& st, persistence::worker_connections& db,
                        std::chrono::milliseconds window, int batch) {
  std::function<void(const std::vector<persistence::expiring_audit_row>&)> keep;
  if (st.exporter)
    keep = [&](const std::vector<persistence::expiring_audit_row>& rows) {
      st.exporter->write(rows);
      metrics::global().audit_exported.inc({}, static_cast<double>(rows.size()));
    };
  try {
    auto b = db.retention(tag)->delete_settled_audit(st.audit_cursor, window, batch, keep);
    st.audit_cursor = b.scanned_to;
    return {b.deleted, b.caught_up};
  } catch (const export_failed& e) {
    metrics::global().retention_failures.inc({{"table", "aggregate_results"}});
    log::error(tag, "audit retention stopped, nothing deleted, trying again in a minute: {}",
               e.what());
    return {0, true};
  }
}

/// One line for a whole catch-up: what was deleted, and how long it took.
void report_retention(janitor* self) {
  auto& st = self->state;
  std::string parts;
  for (const auto& [what, n] : st.retained)
    if (n > 0)
      parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", n, what);
  if (!parts.empty())
    log::info(tag, "retention: deleted {} in {}ms", parts,
              std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - st.retaining_since)
                  .count());
  st.retained.clear();
}

caf::behavior janitor_actor(janitor* self, context_ptr ctx) {
  auto& st = self->state;
  st.ctx = std::move(ctx);
  const auto& s = st.ctx->settings;
  st.lease_clock.emplace(s.outbox.lease_timeout);
  if (!s.audit.export_dir.empty())
    st.exporter.emplace(s.audit.export_dir);
  self->delayed_send(self, s.outbox.reaper_interval, reap_atom::value);
  if (s.outbox.retention.count() > 0 || s.dlq.retention.count() > 0 ||
      s.audit.retention.count() > 0 || s.orders.retention.count() > 0)
    self->delayed_send(self, std::chrono::seconds(5), retain_atom::value);
  return {
      [self](reap_atom) {
        const auto& s = self->state.ctx->settings;
        auto may_reap = [self, lease = s.outbox.lease_timeout](auto database_now) {
          auto seen = self->state.lease_clock->read(database_now, std::chrono::steady_clock::now());
          if (seen.step)
            log::warn(tag,
                      "the database's clock stepped {}ms ahead of ours: expired leases are left "
                      "alone for {}ms, so that live runs renew theirs under the new time first",
                      seen.step->count(), lease.count());
          return seen.may_reap;
        };
        guarded(self, [&](persistence::worker_connections& db) {
          auto outbox = db.outbox(tag)->reap_expired(s.outbox.max_retries, may_reap);
          auto dlq = db.dlq(tag)->reap_expired(s.dlq.max_retries, may_reap);
          const auto events = outbox.returned.size() + outbox.dead_lettered.size();
          const auto letters = dlq.returned.size() + dlq.dead_lettered.size();
          metrics::global().lease_expiries.inc({{"table", "outbox_events"}}, events);
          metrics::global().lease_expiries.inc({{"table", "dead_letter_events"}}, letters);
          if (events + letters > 0)
            log::warn(tag,
                      "expired leases reclaimed: events back to PENDING [{}], dead-lettered "
                      "[{}]; dead letters back to PENDING [{}], FAILED [{}]",
                      fmt::join(outbox.returned, ", "), fmt::join(outbox.dead_lettered, ", "),
                      fmt::join(dlq.returned, ", "), fmt::join(dlq.dead_lettered, ", "));
          for (const auto* r : {&outbox, &dlq}) {
            for (const auto& what : r->attention)
              log::error(tag,
                         "order needs attention: {} ran out of retries when its lease "
                         "expired",
                         what);
            for (const auto& what : r->refused)
              log::error(tag, "an expired lease could not be reclaimed, the database refused: {}",
                         what);
          }
        });
        self->delayed_send(self, s.outbox.reaper_interval, reap_atom::value);
      },
      [self](retain_atom) {
        auto& st = self->state;
        const auto& s = st.ctx->settings;
        if (st.retained.empty())
          st.retaining_since = std::chrono::steady_clock::now();
        bool caught_up = true;
        guarded(self, [&](persistence::worker_connections& db) {
          caught_up = retain(st.retained, "outbox_events", "processed event(s)", s.outbox.retention,
                             [&](auto age, int batch) {
                               return oldest_first(db.outbox(tag)->delete_processed(age, batch));
                             });
          caught_up &= retain(st.retained, "dead_letter_events", "resolved dead letter(s)",
                              s.dlq.retention, [&](auto age, int batch) {
                                return oldest_first(db.dlq(tag)->delete_resolved(age, batch));
                              });
          if (std::chrono::steady_clock::now() - st.audit_rewound > audit_rewind_every) {
            st.audit_cursor = 0;
            st.audit_rewound = std::chrono::steady_clock::now();
          }
          caught_up &=
              retain(st.retained, "aggregate_results", "audit row(s)", s.audit.retention,
                     [&](auto age, int batch) { return retain_audit(st, db, age, batch); });
          caught_up &=
              retain(st.retained, "orders", "removed order(s)", s.orders.retention,
                     [&](auto age, int batch) {
                       return oldest_first(db.retention(tag)->delete_removed_orders(age, batch));
                     });
        });
        if (caught_up)
          report_retention(self);
        self->delayed_send(self, caught_up ? retention_every : retention_again, retain_atom::value);
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
