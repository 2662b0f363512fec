// The API edge: the order, outbox and dead-letter routes, health probes and metrics on the shared
// listener, declared as one route table. Other route sets (simulator, consistency check, web UI)
// register on the same listener, whose registry lists everything served.
#pragma once

#include "conf/settings.hpp"
#include "domain/breaker.hpp"
#include "domain/ports.hpp"
#include "domain/routing.hpp"
#include "http/listener.hpp"

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace outboxd::http {

/// Readiness of the service: each named check is "ok" or says what is wrong.
struct readiness_report {
  std::vector<std::pair<std::string, std::string>> checks;
  bool ready() const;
};

/// What the API serves from; everything must outlive the server.
struct api_dependencies {
  domain::order_store& orders;
  domain::dead_letter_store& dead_letters;
  domain::outbox_inspection& outbox;
  std::function<readiness_report()> readiness;
  /// Each destination's circuit breaker and limits in this process (empty: it runs no engine).
  std::function<std::vector<domain::destination_health>()> destinations = [] {
    return std::vector<domain::destination_health>{};
  };
};

class api_server {
public:
  /// `policy` says who may call each route. `routing` is what `GET /api/outbox/fanout`
  /// describes (the configured `http` section).
  api_server(const conf::server_settings& settings, access_policy policy, api_dependencies deps,
             domain::routing_table routing = {});
  ~api_server();
  api_server(const api_server&) = delete;
  api_server& operator=(const api_server&) = delete;

  /// Binds host:port (port 0 picks a free one) and returns the port; throws std::runtime_error
  /// when the address cannot be bound.
  int bind();
  /// Serves on a background thread until stop().
  void start();
  /// Stops accepting, waits for requests in flight, joins the thread. Idempotent.
  void stop();

  /// The API server's own routes (its route table, all `route_kind::api`), in registration
  /// order; what other route sets add is in served_routes().
  static std::vector<route_info> routes();

  /// Every route this server serves: its own and those other route sets registered through
  /// registry(), in registration order.
  std::vector<route_info> served_routes() const { return listener_.routes(); }

  /// The registry other route sets (simulator, consistency check, web UI) register on.
  listener& registry() { return listener_; }

private:
  void install_routes();

  conf::server_settings settings_;
  api_dependencies deps_;
  domain::routing_table routing_;
  listener listener_;
};

} // namespace outboxd::http
