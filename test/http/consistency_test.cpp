// GET /api/admin/consistency over real HTTP: orders in a real PostgreSQL (inserted with SQL)
// against the ledger of an in-process simulator on the API server, of a standalone simulator
// reached over HTTP, and of one that cannot be reached (503). Also the ledger parser.
#include "http/api_server.hpp"
#include "persistence/audit_repository.hpp"
#include "persistence/connection_pool.hpp"
#include "persistence/dead_letter_admin.hpp"
#include "persistence/order_repository.hpp"
#include "persistence/outbox_admin.hpp"
#include "persistence/statements.hpp"
#include "simulator/consistency_route.hpp"
#include "simulator/server.hpp"
#include "simulator/simulator.hpp"
#include "test/support/http_client.hpp"
#include "test/support/test_db.hpp"

#include <doctest/doctest.h>
#include <pqxx/pqxx>
#include <rapidjson/pointer.h>
#include <thread>

using namespace outboxd;
using namespace outboxd::test;
using namespace std::chrono_literals;

namespace {

const lazy_database db("outboxd_http_consistency");

conf::simulator_settings quiet() {
  conf::simulator_settings s; // every knob at its zero default: nothing fails
  return s;
}

using headers = std::map<std::string, std::string>;

/// The API server with the in-process simulator and the consistency route, as serve wires them.
struct consistency_fixture {
  consistency_fixture() {
    truncate_all(db());
    conf::server_settings s;
    s.port = 0;
    s.threads = 8;
    server = std::make_unique<http::api_server>(
        s, http::access_policy(), http::api_dependencies{orders, dead_letters, outbox, [] {
                                                           return http::readiness_report{};
                                                         }});
    sim.install(server->registry());
    simulator::install_consistency_route(server->registry(), audit,
                                         [this] { return sim.ledger(); });
    port = server->bind();
    server->start();
    client = std::make_unique<http_client>(port);
  }
  ~consistency_fixture() {
    client.reset();
    sim.stop();
    server->stop();
  }

  /// Inserts an order with `status`; its id is what the simulator calls use as aggregate.
  std::int64_t insert(const char* status, const char* created_offset = "0 seconds") {
    pqxx::connection c(db());
    pqxx::work tx(c);
    auto row = tx.exec_params1("INSERT INTO orders (customer_id, total_amount, shipping_type, "
                               "order_status, created_at) VALUES ('C-1', 10, 'domestic', $1, "
                               "now() - $2::interval) RETURNING id",
                               status, created_offset);
    tx.commit();
    return row[0].as<std::int64_t>();
  }

  http_response call(const std::string& path, std::int64_t order, const std::string& key,
                     const std::string& body = "{}") {
    auto r = client->post(path, body,
                          {{"X-Aggregate-Id", std::to_string(order)}, {"Idempotency-Key", key}});
    REQUIRE_MESSAGE(r.status == 200, r.body);
    return r;
  }

  /// The forward calls of a successful OrderCreated, as the engine makes them.
  std::map<std::string, std::string> fan_out(std::int64_t order) {
    auto k = std::to_string(order) + ":";
    std::map<std::string, std::string> ids;
    ids["inventory"] = call("/api/inventory/reserve", order, k + "inventory").str("/reservationId");
    call("/api/fraud/check", order, k + "fraudCheck");
    ids["shipping"] = call("/api/domestic-shipping", order, k + "shipping").str("/shipmentId");
    if (order % 2 == 0)
      ids["billing"] = call("/api/billing", order, k + "billing").str("/transaction/id");
    else
      ids["billing"] =
          call("/api/high-value-processing", order, k + "billing").str("/processingId");
    return ids;
  }

  void revert(const std::string& path, std::int64_t order, const std::string& key) {
    auto h = headers{{"X-Revert-Aggregate-Id", std::to_string(order)}, {"Idempotency-Key", key}};
    auto r = path.find("/release") != std::string::npos ? client->del(path, h)
                                                        : client->post(path, "{}", h);
    REQUIRE_MESSAGE(r.status == 200, r.body);
  }

  /// The compensation of a fan-out, newest first.
  void compensate(std::int64_t order, std::map<std::string, std::string>& ids) {
    auto k = std::to_string(order) + ":";
    if (order % 2 == 0)
      revert("/api/billing/" + ids["billing"] + "/refund", order, k + "billing:revert");
    else
      revert("/api/high-value-processing/" + ids["billing"] + "/cancel", order,
             k + "billing:revert");
    revert("/api/domestic-shipping/" + ids["shipping"] + "/cancel", order, k + "shipping:revert");
    revert("/api/inventory/" + ids["inventory"] + "/release", order, k + "inventory:revert");
  }

  http_response check() {
    auto r = client->get("/api/admin/consistency");
    REQUIRE_MESSAGE(r.status == 200, r.body);
    return r;
  }

  persistence::connection_pool pool{persistence::make_conninfo(db(), std::chrono::seconds(5)), 4,
                                    persistence::pooled_statements()};
  persistence::order_repository orders{pool};
  persistence::dead_letter_admin dead_letters{pool};
  persistence::outbox_admin outbox{pool};
  persistence::audit_repository audit{pool};
  simulator::simulator sim{quiet()};
  std::unique_ptr<http::api_server> server;
  int port = 0;
  std::unique_ptr<http_client> client;
};

std::size_t violation_count(const http_response& r) {
  const auto* v = rapidjson::Pointer("/violations").Get(r.json);
  return v && v->IsArray() ? v->Size() : 0;
}

} // namespace

TEST_CASE_FIXTURE(consistency_fixture, "orders whose effects match their status pass the check") {
  auto confirmed = insert("CONFIRMED"); // id 1: odd, high-value processing
  auto delivered = insert("DELIVERED"); // id 2: even, billing
  auto failed = insert("FAILED");
  auto cancelled = insert("CANCELLED");
  insert("PENDING");
  insert("ATTENTION");
  insert("CONFIRMED", "1 hour"); // before the ledger started: nothing to compare with
  fan_out(confirmed);
  fan_out(delivered);
  call("/api/notifications/shipping-confirmation", delivered, "n1",
       R"({"orderId":)" + std::to_string(delivered) + R"(,"newStatus":"SHIPPED"})");
  auto f = fan_out(failed);
  compensate(failed, f);
  auto c = fan_out(cancelled);
  compensate(cancelled, c);

  auto r = check();
  CHECK(r.num("/checked") == 4);
  CHECK(r.num("/unchecked") == 3);
  CHECK(violation_count(r) == 0);
}

TEST_CASE_FIXTURE(consistency_fixture, "half-done orders are listed with a sentence each") {
  auto failed = insert("FAILED");
  auto confirmed = insert("CONFIRMED");
  auto ids = fan_out(failed);
  revert("/api/domestic-shipping/" + ids["shipping"] + "/cancel", failed, "only-shipping");
  call("/api/inventory/reserve", confirmed, "2:inventory");
  call("/api/fraud/check", confirmed, "2:fraudCheck");
  call("/api/domestic-shipping", confirmed, "2:shipping");
  call("/api/billing", confirmed, "2:billing");
  call("/api/billing", confirmed, "2:billing-again"); // charged twice

  auto r = check();
  CHECK(r.num("/checked") == 2);
  REQUIRE(violation_count(r) == 3);
  CHECK(r.num("/violations/0/orderId") == failed);
  CHECK(r.str("/violations/0/problem") ==
        "inventory.reserve " + ids["inventory"] + " is still active but the order is FAILED");
  CHECK(r.str("/violations/1/problem") ==
        "highValue.process " + ids["billing"] + " is still active but the order is FAILED");
  CHECK(r.num("/violations/2/orderId") == confirmed);
  CHECK(r.str("/violations/2/problem").find("2 payments were applied (billing.charge TXN-2-") == 0);
}

TEST_CASE_FIXTURE(consistency_fixture, "an answer lists the first 1 000 violations and counts them "
                                       "all") {
  query_value(db(), "INSERT INTO orders (customer_id, total_amount, shipping_type, order_status) "
                    "SELECT 'C-1', 10, 'domestic', 'CONFIRMED' FROM generate_series(1, 400) "
                    "RETURNING 1");
  auto r = check();
  CHECK(r.num("/checked") == 400);
  CHECK(violation_count(r) == 1000);
  CHECK(r.num("/violationCount") > 1000); // each order misses every effect
  CHECK(r.boolean("/violationsTruncated"));
  insert("CANCELLED"); // nothing applied, nothing to undo: no violation
  auto clean = client->get("/api/admin/consistency?cursor=400");
  CHECK(clean.num("/violationCount") == 0);
  CHECK_FALSE(clean.boolean("/violationsTruncated"));
}

TEST_CASE_FIXTURE(consistency_fixture, "orders created before a reset are unchecked, deleted ones "
                                       "are ignored") {
  auto before = insert("CONFIRMED");
  auto removed = insert("FAILED");
  {
    pqxx::connection c(db());
    pqxx::work tx(c);
    tx.exec_params("UPDATE orders SET deleted = true WHERE id = $1", removed);
    tx.commit();
  }
  auto now = check();
  CHECK(now.num("/checked") == 1);
  CHECK(violation_count(now) == 4); // CONFIRMED with none of its four steps applied
  // The ledger clock has millisecond resolution: make sure the reset comes strictly later.
  std::this_thread::sleep_for(5ms);
  REQUIRE(client->post("/api/simulator/reset", "").status == 200);
  auto r = check();
  CHECK(r.num("/checked") == 0);
  CHECK(r.num("/unchecked") == 1);
  CHECK(violation_count(r) == 0);
  (void)before;
}

TEST_CASE_FIXTURE(consistency_fixture, "a check reads a bounded window of orders: the newest, or "
                                       "those after a cursor, walking the table to its end") {
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 5; ++i)
    ids.push_back(insert("CONFIRMED")); // none of their steps applied: 4 violations each
  auto newest = client->get("/api/admin/consistency?limit=2");
  REQUIRE(newest.status == 200);
  CHECK(newest.num("/checked") == 2);
  CHECK(newest.num("/firstOrderId") == ids[3]);
  CHECK(newest.num("/lastOrderId") == ids[4]);
  CHECK(newest.boolean("/earlierOrders"));
  CHECK(newest.is_null("/nextCursor"));
  CHECK(newest.num("/violations/0/orderId") == ids[3]);
  // From the start, window after window, every order once.
  std::string cursor = "0";
  std::vector<std::int64_t> seen;
  for (int i = 0; i < 5 && !cursor.empty(); ++i) {
    auto r = client->get("/api/admin/consistency?limit=2&cursor=" + cursor);
    REQUIRE(r.status == 200);
    CHECK(r.boolean("/earlierOrders") == (cursor != "0"));
    for (auto id = r.num("/firstOrderId"); id <= r.num("/lastOrderId"); ++id)
      seen.push_back(id);
    CHECK(static_cast<std::size_t>(r.num("/checked")) * 4 == violation_count(r));
    cursor = r.is_null("/nextCursor") ? "" : r.str("/nextCursor");
  }
  CHECK(seen == ids);
  // Past the end: an empty window.
  auto after = client->get("/api/admin/consistency?cursor=" + std::to_string(ids.back()));
  CHECK(after.num("/checked") == 0);
  CHECK(after.is_null("/firstOrderId"));
  CHECK(after.is_null("/nextCursor"));
  // Bad parameters name themselves.
  for (const char* bad : {"limit=0", "limit=1000001", "limit=x", "cursor=-1", "cursor=1a"}) {
    auto r = client->get(std::string("/api/admin/consistency?") + bad);
    CAPTURE(bad);
    CHECK(r.status == 422);
    CHECK(r.str("/error/details/0/field") ==
          std::string(bad).substr(0, std::string(bad).find('=')));
  }
}

TEST_CASE_FIXTURE(consistency_fixture, "the check reads the ledger of a standalone simulator") {
  simulator::simulator remote_sim(quiet());
  conf::server_settings s;
  s.threads = 4;
  simulator::server remote(s, remote_sim, {});
  int remote_port = remote.bind(0);
  remote.start();

  // A second API server whose route reads the remote ledger, as with simulator.baseUrl set.
  conf::server_settings api;
  api.port = 0;
  api.threads = 4;
  http::api_server other(api, {},
                         {orders, dead_letters, outbox, [] { return http::readiness_report{}; }});
  simulator::install_consistency_route(
      other.registry(), audit,
      simulator::remote_ledger("http://127.0.0.1:" + std::to_string(remote_port) + "/"));
  int other_port = other.bind();
  other.start();

  auto order = insert("FAILED");
  http_client sim_client(remote_port);
  auto res =
      sim_client.post("/api/inventory/reserve", "{}", {{"X-Aggregate-Id", std::to_string(order)}});
  REQUIRE(res.status == 200);
  http_client api_client(other_port);
  auto r = api_client.get("/api/admin/consistency");
  CHECK(r.status == 200);
  CHECK(r.num("/checked") == 1);
  CHECK(r.str("/violations/0/problem") == "inventory.reserve " + res.str("/reservationId") +
                                              " is still active but the order is "
                                              "FAILED");
  other.stop();
  remote.stop();
}

TEST_CASE_FIXTURE(consistency_fixture, "an unreachable simulator makes the check answer 503") {
  conf::server_settings api;
  api.port = 0;
  api.threads = 4;
  http::api_server other(api, {},
                         {orders, dead_letters, outbox, [] { return http::readiness_report{}; }});
  auto url = "http://127.0.0.1:" + std::to_string(free_port());
  simulator::install_consistency_route(other.registry(), audit, simulator::remote_ledger(url));
  int other_port = other.bind();
  other.start();
  http_client api_client(other_port);
  auto r = api_client.get("/api/admin/consistency");
  CHECK(r.status == 503);
  CHECK(r.str("/error/code") == "unavailable");
  CHECK(r.str("/error/message").find(url + "/api/simulator/ledger") != std::string::npos);
  other.stop();

  // Something that answers, but not with a ledger, is as good as unreachable.
  http::api_server garbled(api, {},
                           {orders, dead_letters, outbox, [] { return http::readiness_report{}; }});
  simulator::install_consistency_route(
      garbled.registry(), audit, simulator::ledger_from_json([] { return std::string("[]"); }));
  int garbled_port = garbled.bind();
  garbled.start();
  auto bad = http_client(garbled_port).get("/api/admin/consistency");
  CHECK(bad.status == 503);
  CHECK(bad.str("/error/message") ==
        "the simulator ledger cannot be read: the ledger is not a JSON object");
  garbled.stop();
}

TEST_CASE("the ledger parser reads entries and refuses what is not a ledger") {
  auto parsed = simulator::parse_ledger_json(
      R"({"startedAt": "x", "startedAtMs": 1000, "duplicates": [],
          "entries": [{"id": "RES-1", "aggregateId": "1", "operation": "inventory.reserve",
                       "kind": "reservation", "notificationType": null, "state": "reverted",
                       "revertRequests": 1, "appliedSeq": 1, "revertedSeq": 3},
                      {"id": "NOTIF-1", "aggregateId": "1", "operation": "notifications.send",
                       "kind": "notification", "notificationType": "review_request",
                       "state": "active", "revertRequests": 0, "appliedSeq": 2,
                       "revertedSeq": null}]})");
  REQUIRE(parsed);
  const auto& l = parsed.value();
  CHECK(l.started_at_ms == 1000);
  REQUIRE(l.entries.size() == 2);
  CHECK(l.entries[0].id == "RES-1");
  CHECK(l.entries[0].reverted);
  CHECK(l.entries[0].revert_requests == 1);
  CHECK(l.entries[0].reverted_seq == 3);
  CHECK_FALSE(l.entries[0].notification_type);
  CHECK(l.entries[1].notification_type == "review_request");
  CHECK_FALSE(l.entries[1].reverted);
  CHECK_FALSE(l.entries[1].reverted_seq);

  CHECK(simulator::parse_ledger_json("not json").err().message ==
        "the ledger is not a JSON object");
  CHECK(simulator::parse_ledger_json(R"({"entries": []})").err().message ==
        "the ledger has no startedAtMs");
  CHECK(simulator::parse_ledger_json(R"({"startedAtMs": 1})").err().message ==
        "the ledger has no entries array");
  CHECK(simulator::parse_ledger_json(R"({"startedAtMs": 1, "entries": [{"id": "x"}]})")
            .err()
            .message.find("ledger entry 0 lacks") == 0);
}

TEST_CASE("the simulator's own ledger JSON round-trips through the parser") {
  simulator::simulator sim(conf::simulator_settings{});
  conf::server_settings s;
  s.threads = 2;
  simulator::server server(s, sim, {});
  int port = server.bind(0);
  server.start();
  http_client client(port);
  auto res = client.post("/api/inventory/reserve", "{}", {{"X-Aggregate-Id", "9"}});
  client.del("/api/inventory/" + res.str("/reservationId") + "/release",
             {{"X-Revert-Aggregate-Id", "9"}});
  auto parsed = simulator::parse_ledger_json(sim.ledger_json(std::nullopt));
  REQUIRE(parsed);
  REQUIRE(parsed.value().entries.size() == 1);
  CHECK(parsed.value().entries[0].aggregate_id == "9");
  CHECK(parsed.value().entries[0].reverted);
  CHECK(parsed.value().entries[0].reverted_seq == 2);
  server.stop();
}
