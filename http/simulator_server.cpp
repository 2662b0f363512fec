// The standalone simulator's server: the shared listener with the simulator routes and /healthz.
#include "http/simulator_server.hpp"

#include <httplib.h>

namespace outboxd::http {

simulator_server::simulator_server(const conf::server_settings& settings, simulator& sim,
                                   const std::string& admin_token)
    : sim_(sim), listener_(settings, "simulator") {
  listener_.native().Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  sim_.install(listener_.native(), admin_token);
}

simulator_server::~simulator_server() {
  stop();
}

int simulator_server::bind(int port) {
  return listener_.bind(port);
}

void simulator_server::start() {
  listener_.start();
}

void simulator_server::stop() {
  sim_.stop();
  listener_.stop();
}

} // namespace outboxd::http
