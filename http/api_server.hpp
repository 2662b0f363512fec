// The API edge: the order, outbox and dead-letter routes, health probes and metrics on the shared
// listener, declared as one route table that can also be listed (e.g. against the OpenAPI file).
#pragma once

#include "conf/settings.hpp"
#include "domain/ports.hpp"
#include "domain/routing.hpp"
#include "http/listener.hpp"

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace httplib {
class Server;
}

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
};

/// One route of the API server: the method and the path as the API documents it, with
/// `{name}` for a path segment (e.g. `GET /api/orders/{id}`).
struct route_info {
  std::string method;
  std::string path;
  bool admin = false; // needs `Authorization: Bearer <admin.token>` when a token is configured
  bool operator==(const route_info&) const = default;
};

class api_server {
public:
  /// `admin_token` guards the mutating admin endpoints when non-empty. `routing` is what
  /// `GET /api/outbox/fanout` describes (the configured `http` section).
  api_server(const conf::server_settings& settings, std::string admin_token, api_dependencies deps,
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

  /// The routes this class serves, in registration order. Routes others add through native()
  /// (simulator, consistency check, web UI) are not listed.
  static std::vector<route_info> routes();

  /// The underlying server, for other route sets (the simulator) to register on.
  httplib::Server& native() { return listener_.native(); }

private:
  void install_routes();

  conf::server_settings settings_;
  std::string admin_token_;
  api_dependencies deps_;
  domain::routing_table routing_;
  listener listener_;
};

} // namespace outboxd::http
