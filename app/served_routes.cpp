// The route sets serve adds to the API server, in the order they have always been registered.
#include "app/served_routes.hpp"

#include "http/ui_routes.hpp"
#include "simulator/consistency_route.hpp"

namespace outboxd::app {

std::unique_ptr<simulator::simulator> install_served_routes(http::listener& routes,
                                                            const conf::settings& settings,
                                                            domain::order_audit_source& audit) {
  // The outside world: in this process by default, else the standalone simulator at baseUrl.
  std::unique_ptr<simulator::simulator> sim;
  simulator::ledger_source ledger = simulator::remote_ledger(settings.simulator.base_url);
  if (settings.simulator.enabled) {
    sim = std::make_unique<simulator::simulator>(settings.simulator);
    sim->install(routes, simulator::partner_callers::this_machine);
    // The simulator object itself, not the unique_ptr: the caller may move the pointer.
    ledger = [in_process = sim.get()] { return in_process->ledger(); };
  }
  simulator::install_consistency_route(routes, audit, std::move(ledger));
  http::install_ui_routes(routes);
  return sim;
}

} // namespace outboxd::app
