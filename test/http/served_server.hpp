// The server `outboxd serve` builds (the API server and the route sets serve adds, wired by the
// same function), for tests of what it serves and to whom.
#pragma once

#include "app/served_routes.hpp"
#include "conf/loader.hpp"
#include "http/api_server.hpp"
#include "persistence/audit_repository.hpp"
#include "persistence/connection_pool.hpp"
#include "persistence/dead_letter_admin.hpp"
#include "persistence/order_repository.hpp"
#include "persistence/outbox_admin.hpp"
#include "persistence/statements.hpp"
#include "test/support/openapi.hpp"

#include <doctest/doctest.h>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace outboxd::test {

/// The server as serve builds it, by default over a database that is never reached: the routes
/// are listed and called without one (API handlers then answer 503, which is still "routed").
struct served_server {
  /// `sets` are --set overrides of the shipped configuration (auth.tokens, ...); `database`, when
  /// given, is the connection string of a migrated database the API handlers use.
  explicit served_server(bool simulator_enabled, std::vector<std::string> sets = {},
                         const std::string& database = {})
      : pool{database.empty() ? persistence::make_conninfo("host=127.0.0.1 port=1 user=postgres",
                                                           std::chrono::seconds(1))
                              : database,
             2, persistence::pooled_statements()} {
    conf::load_options options;
    options.set_overrides = std::move(sets);
    auto loaded = conf::load(options);
    std::string errors;
    for (const auto& e : loaded.errors)
      errors += e + "\n";
    REQUIRE_MESSAGE(loaded.value, errors);
    settings = *loaded.value;
    settings.server.port = 0;
    settings.server.threads = 4;
    settings.simulator.enabled = simulator_enabled;
    server = std::make_unique<http::api_server>(
        settings.server, http::policy_of(settings),
        http::api_dependencies{orders, dead_letters, outbox,
                               [] { return http::readiness_report{}; }},
        settings.http);
    sim = app::install_served_routes(server->registry(), settings, audit);
  }
  ~served_server() {
    if (sim)
      sim->stop();
    server->stop();
  }

  /// The served routes of `kind` as (method, path) pairs.
  std::set<openapi_operation> of_kind(http::route_kind kind) const {
    std::set<openapi_operation> out;
    for (const auto& r : server->served_routes())
      if (r.kind == kind)
        out.insert({r.method, r.path});
    return out;
  }

  /// Binds a free port, starts serving and returns the port.
  int start() {
    int port = server->bind();
    server->start();
    return port;
  }

  conf::settings settings;
  persistence::connection_pool pool;
  persistence::order_repository orders{pool};
  persistence::dead_letter_admin dead_letters{pool};
  persistence::outbox_admin outbox{pool};
  persistence::audit_repository audit{pool};
  std::unique_ptr<http::api_server> server;
  std::unique_ptr<simulator::simulator> sim;
};

} // namespace outboxd::test
