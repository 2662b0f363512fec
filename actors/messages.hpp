// The actors' internal API: message atoms and the context every engine actor shares.
#pragma once

#include "actors/destination_gates.hpp"
#include "conf/settings.hpp"
#include "domain/restart_backoff.hpp"
#include "persistence/worker_connections.hpp"

#include <atomic>
#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace outboxd::actors {

/// Work may be waiting: claim now (from the listener via the supervisor, or a timer).
using wake_atom = caf::atom_constant<caf::atom("wake")>;
/// Dead-letter work may be waiting.
using dlq_wake_atom = caf::atom_constant<caf::atom("dlqwake")>;
/// Notifications may have been lost (listener reconnected): every worker claims once.
using sweep_atom = caf::atom_constant<caf::atom("sweep")>;
/// A processor found nothing to claim; it waits for a wake-up.
using idle_atom = caf::atom_constant<caf::atom("idle")>;
/// Process the next claimed event (a self-message, so the mailbox is served between events).
using process_atom = caf::atom_constant<caf::atom("process")>;
/// A timer fired; carries the timer generation so stale timers are ignored.
using tick_atom = caf::atom_constant<caf::atom("tick")>;
/// A dead-letter processor announces itself to the supervisor.
using register_atom = caf::atom_constant<caf::atom("register")>;
/// Restart a crashed child after its backoff.
using restart_atom = caf::atom_constant<caf::atom("restart")>;
/// Orderly stop: finish the call in flight, hand unstarted claims back, answer, quit.
using stop_atom = caf::atom_constant<caf::atom("stop")>;
/// The listener polls its connection for notifications.
using poll_atom = caf::atom_constant<caf::atom("poll")>;
/// Periodic jobs of the janitor.
using reap_atom = caf::atom_constant<caf::atom("reap")>;
using retain_atom = caf::atom_constant<caf::atom("retain")>;
/// Ask the supervisor what it supervises; it answers a supervisor_status.
using status_atom = caf::atom_constant<caf::atom("status")>;

/// What the supervisor sees of its children (for tests and diagnostics).
struct supervisor_status {
  /// The outbox processors by index (a null handle while one waits for its restart).
  std::vector<caf::actor> processors;
  /// The registered dead-letter children by processor index: only live ones.
  std::map<int, caf::actor> dlq_children;
  /// Crashes in the current run of each processor, by index (0: none since it was healthy).
  std::vector<int> processor_crashes;
  /// The restart wait after each processor's last crash, in ms (0: never crashed).
  std::vector<std::int64_t> processor_delay_ms;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, supervisor_status& x) {
  return f(caf::meta::type_name("supervisor_status"), x.processors, x.dlq_children,
           x.processor_crashes, x.processor_delay_ms);
}

/// Read-only configuration plus the few shared flags of a running engine.
struct engine_context {
  conf::settings settings;
  /// The connection string of a worker connection; `role` names it in pg_stat_activity
  /// (application_name "outboxd-<role>").
  std::string conninfo(const std::string& role) const;
  /// This process among replicas: its host name (a container's or pod's name) and pid.
  std::string instance;
  /// What a worker's claims record as their lease owner: "<tag>@<instance>", so that an operator
  /// sees which replica holds an event.
  std::string lease_owner(const std::string& tag) const { return tag + "@" + instance; }
  persistence::hooks_by_type hooks;
  /// The connections the workers share: outbox.connections, less the processors' own.
  std::unique_ptr<persistence::worker_connections> db;
  /// Connections each outbox processor holds for its runs' claims, attempt rows and completions,
  /// sent without waiting for them (0: they borrow from `db` and wait; see own_connections()).
  int own_connections = 0;
  /// Each destination's circuit breaker and limits, shared by every worker of the process.
  std::unique_ptr<destination_gates> gates;
  /// Set once shutdown begins: workers stop between calls and hand their claims back.
  std::atomic<bool> stopping{false};
  /// The listener holds a live LISTEN connection (readiness).
  std::atomic<bool> listener_connected{false};
  /// How crashed children are restarted (processors, listener, janitor, dead-letter children).
  /// Not a configuration key: tests shorten it.
  domain::restart_backoff restart_backoff;
};

using context_ptr = std::shared_ptr<engine_context>;

} // namespace outboxd::actors
