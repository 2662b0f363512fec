// What `outboxd serve` serves besides the API server's own routes: the in-process simulator (or
// none), the consistency check and the web UI. serve and the route-inventory test share it.
#pragma once

#include "conf/settings.hpp"
#include "domain/ports.hpp"
#include "http/listener.hpp"
#include "simulator/simulator.hpp"

#include <memory>

namespace outboxd::app {

/// Registers on `routes`: the simulator's routes when `settings.simulator.enabled` (a new
/// simulator, returned), `GET /api/admin/consistency` reading that simulator's ledger in process
/// or else the standalone simulator's at `settings.simulator.baseUrl`, and the web UI. Returns
/// null when the simulator is not enabled. The returned simulator and `audit` must outlive the
/// server; stop the simulator before the server at shutdown.
std::unique_ptr<simulator::simulator> install_served_routes(http::listener& routes,
                                                            const conf::settings& settings,
                                                            domain::order_audit_source& audit);

} // namespace outboxd::app
