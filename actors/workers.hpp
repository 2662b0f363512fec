// Spawn functions of the engine's actors. Workers are detached (own thread each): they block on
// the database and on HTTP, which must never happen on CAF's shared scheduler threads.
#pragma once

#include "actors/messages.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

namespace outboxd::actors {

/// Outbox processor `index`: claims due events, runs them, spawns and watches its own
/// dead-letter processor. Reports idleness to `supervisor`.
caf::actor spawn_outbox_processor(caf::event_based_actor* supervisor, context_ptr ctx, int index);

/// Dead-letter processor `index`, child of outbox processor `index`: claims dead letters and
/// compensates them. Registers itself with `supervisor` for wake-ups.
caf::actor spawn_dlq_processor(caf::event_based_actor* parent, context_ptr ctx, int index,
                               caf::actor supervisor);

/// The LISTEN connection: turns notifications into wake-ups for `supervisor`, reconnects with
/// backoff and asks for a sweep after every (re)connect.
caf::actor spawn_pg_listener(caf::event_based_actor* supervisor, context_ptr ctx);

/// Periodic database jobs: the lease reaper (outbox and dead letters) and retention.
caf::actor spawn_janitor(caf::event_based_actor* supervisor, context_ptr ctx);

} // namespace outboxd::actors
