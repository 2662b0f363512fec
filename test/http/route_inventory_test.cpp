// The routes `outboxd serve` serves, wired by the same function serve calls, against
// docs/openapi.json: the API routes are exactly the documented operations, the simulated partner
// services stay out of the document, and every listed route is really routed.
#include "conf/loader.hpp"
#include "simulator/server.hpp"
#include "test/http/served_server.hpp"
#include "test/support/openapi.hpp"
#include "test/support/raw_http.hpp"

#include <algorithm>
#include <doctest/doctest.h>
#include <set>
#include <string_view>

using namespace outboxd;
using namespace outboxd::test;

namespace {

/// The simulated services' paths, as the OpenAPI description lists what it leaves out.
constexpr std::string_view simulated_prefixes[] = {
    "/api/inventory/",        "/api/fraud/check",
    "/api/domestic-shipping", "/api/international-shipping",
    "/api/billing",           "/api/high-value-processing",
    "/api/notifications/",
};

bool under_simulated_prefix(const std::string& path) {
  return std::any_of(std::begin(simulated_prefixes), std::end(simulated_prefixes),
                     [&](std::string_view prefix) { return path.rfind(prefix, 0) == 0; });
}

std::string show(const openapi_operation& op) {
  return op.method + " " + op.path;
}

std::set<openapi_operation> documented() {
  auto ops = openapi_operations();
  return {ops.begin(), ops.end()};
}

} // namespace

TEST_CASE("with the in-process simulator, the API routes are exactly the documented operations") {
  served_server s(true);
  auto served = s.of_kind(http::route_kind::api);
  auto doc = documented();
  for (const auto& op : doc)
    CHECK_MESSAGE(served.count(op) == 1, "documented but not served: ", show(op));
  for (const auto& op : served)
    CHECK_MESSAGE(doc.count(op) == 1, "served but not documented: ", show(op));
  CHECK(served.size() == s.server->served_routes().size() -
                             s.of_kind(http::route_kind::simulated_service).size() -
                             s.of_kind(http::route_kind::static_file).size());
}

TEST_CASE("the simulated services are under their prefixes and not in the document") {
  served_server s(true);
  auto simulated = s.of_kind(http::route_kind::simulated_service);
  CHECK(simulated.size() > 20);
  auto doc = documented();
  for (const auto& op : simulated) {
    CHECK_MESSAGE(under_simulated_prefix(op.path), "not under a simulated service: ", show(op));
    CHECK_MESSAGE(doc.count(op) == 0, "simulated service in the document: ", show(op));
    // Not under a documented path with another method either.
    bool documented_path = std::any_of(
        doc.begin(), doc.end(), [&](const openapi_operation& d) { return d.path == op.path; });
    CHECK_MESSAGE(!documented_path, "simulated service path is documented: ", show(op));
  }
  auto files = s.of_kind(http::route_kind::static_file);
  CHECK(files == std::set<openapi_operation>{{"GET", "/"},
                                             {"GET", "/ui/app.js"},
                                             {"GET", "/ui/style.css"},
                                             {"GET", "/ui/favicon.svg"}});
}

TEST_CASE("without the in-process simulator, the API routes are documented ones") {
  served_server s(false);
  CHECK(s.sim == nullptr);
  auto served = s.of_kind(http::route_kind::api);
  auto doc = documented();
  for (const auto& op : served)
    CHECK_MESSAGE(doc.count(op) == 1, "served but not documented: ", show(op));
  CHECK(s.of_kind(http::route_kind::simulated_service).empty());
  CHECK(served.count({"GET", "/api/admin/consistency"}) == 1);
  CHECK(served.count({"GET", "/api/simulator/config"}) == 0);
  // The API server's own table is part of what is served.
  for (const auto& r : http::api_server::routes())
    CHECK_MESSAGE(served.count({r.method, r.path}) == 1, "not served: ", r.method, " ", r.path);
}

TEST_CASE("every listed route is routed: a request finds a handler, not the 404 of no route") {
  served_server s(true);
  int port = s.server->bind();
  s.server->start();
  for (const auto& r : s.server->served_routes()) {
    auto path = r.path;
    for (auto at = path.find('{'); at != std::string::npos; at = path.find('{'))
      path.replace(at, path.find('}', at) - at + 1, "1");
    CAPTURE(r.method);
    CAPTURE(path);
    raw_connection c(port);
    c.send(curl_request(r.method, path, port));
    auto answer = c.read_response(std::chrono::seconds(5));
    CHECK(answer.status != 0);
    CHECK(answer.body.find("no route for") == std::string::npos);
  }
}

TEST_CASE("the standalone simulator serves /healthz and the same simulator routes as serve") {
  served_server s(true);
  std::vector<http::route_info> in_process;
  for (const auto& r : s.server->served_routes())
    if (r.kind == http::route_kind::simulated_service || r.path.rfind("/api/simulator/", 0) == 0)
      in_process.push_back(r);

  auto loaded = conf::load({});
  REQUIRE(loaded.value);
  simulator::simulator sim(loaded.value->simulator);
  simulator::server standalone(loaded.value->server, sim, {});
  auto routes = standalone.routes();
  REQUIRE(!routes.empty());
  CHECK(routes.front() ==
        http::route_info{"GET", "/healthz", http::access::open, http::route_kind::api});
  routes.erase(routes.begin());
  CHECK(routes == in_process);
}
