// An HTTP server with only the simulator routes and /healthz: what `outboxd simulator` runs, so
// the simulated outside world can outlive outboxd (no database involved).
#pragma once

#include "conf/settings.hpp"
#include "http/listener.hpp"
#include "simulator/simulator.hpp"

#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace outboxd::simulator {

class server {
public:
  /// `sim` must outlive the server. Threads, timeouts, body limit and TLS come from `settings`;
  /// the port given to bind() wins over settings.port. `policy` guards the control routes.
  server(const conf::server_settings& settings, simulator& sim, http::access_policy policy = {});
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// Binds settings.host:port (0 picks a free port) and returns the port; throws
  /// std::runtime_error naming the address when it cannot be bound (in use, not available).
  int bind(int port);
  /// Serves on a background thread until stop().
  void start();
  /// Wakes the simulator's sleeping handlers, stops accepting, waits for requests in flight and
  /// joins the thread. Idempotent.
  void stop();

  /// Every route this server serves, in registration order.
  std::vector<http::route_info> routes() const { return listener_.routes(); }

private:
  simulator& sim_;
  http::listener listener_;
};

} // namespace outboxd::simulator
