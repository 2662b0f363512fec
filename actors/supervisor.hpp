// The root of the engine's actor tree.
#pragma once

#include "actors/messages.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

namespace outboxd::actors {

/// Spawns the supervisor, which spawns the whole engine. Ask it `stop_atom` (it answers true
/// once every worker stopped) before destroying the actor system. Ask it `status_atom` for a
/// supervisor_status.
caf::actor spawn_supervisor(caf::actor_system& system, context_ptr ctx);

} // namespace outboxd::actors
