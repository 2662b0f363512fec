// The standalone simulator's server: the shared listener with the simulator routes and /healthz.
#include "simulator/server.hpp"

#include <httplib.h>

namespace outboxd::simulator {

server::server(const conf::server_settings& settings, simulator& sim, http::access_policy policy)
    : sim_(sim), listener_(settings, "simulator", std::move(policy)) {
  // Its own liveness probe, same path and answer as outboxd's.
  listener_.route("GET", "/healthz", http::route_kind::api, http::access::open,
                  [](const httplib::Request&, httplib::Response& res) {
                    res.set_content(R"({"status":"ok"})", "application/json");
                  });
  listener_.run_on_gate("GET", "/healthz");
  sim_.install(listener_);
}

server::~server() {
  stop();
}

int server::bind(int port) {
  return listener_.bind(port);
}

void server::start() {
  listener_.start();
}

void server::stop() {
  sim_.stop();
  listener_.stop();
}

} // namespace outboxd::simulator
