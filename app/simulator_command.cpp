// `outboxd simulator --port N`: the simulated external services in their own process, without a
// database, so tests can kill outboxd while the outside world keeps its memory.
#include "app/commands.hpp"
#include "http/auth.hpp"
#include "log/log.hpp"
#include "simulator/server.hpp"
#include "simulator/simulator.hpp"

#include <csignal>

namespace outboxd::app {

int simulator(const conf::settings& settings, int port) {
  // Block the shutdown signals before any thread starts, so that they all inherit the mask and
  // only the main thread receives them, through sigwait.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  simulator::simulator sim(settings.simulator);
  simulator::server server(settings.server, sim, http::policy_of(settings));
  int bound = 0;
  try {
    bound = server.bind(port);
  } catch (const std::exception& e) {
    log::error("simulator", "{}", e.what());
    return exit_failure;
  }
  server.start();
  log::info("simulator",
            "simulator listening on http://{}:{} (seed {}, ledger: GET "
            "/api/simulator/ledger, knobs: GET/PUT /api/simulator/config)",
            settings.server.host, bound, settings.simulator.seed);

  int sig = 0;
  sigwait(&signals, &sig);
  log::info("simulator", "received {}, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  server.stop();
  log::info("simulator", "simulator stopped; bye");
  return exit_ok;
}

} // namespace outboxd::app
