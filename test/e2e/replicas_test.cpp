// Several outboxd processes, crashes and restarts against one database and one standalone
// simulator (the outside world keeps its memory when outboxd dies).
#include "test/support/outboxd_process.hpp"
#include "test/support/test_db.hpp"

#include <csignal>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <thread>

using namespace outboxd::test;
using namespace std::chrono_literals;

namespace {

/// `args` with every route's call timeout set to `timeout`: a call must be shorter than the
/// short leases these tests use.
std::vector<std::string> with_call_timeout(std::vector<std::string> args,
                                           const std::string& timeout) {
  for (const char* route : {"inventory", "fraudCheck", "shipping", "billing", "notifications"}) {
    args.emplace_back("--set");
    args.push_back(fmt::format("http.routes.{}.timeout={}", route, timeout));
  }
  return args;
}

} // namespace

TEST_CASE("two outboxd processes drain one backlog and process each event once") {
  simulator_process sim;
  auto db = fresh_database("outboxd_e2e_replicas");
  outboxd_process a("replica-a", db, sim.outboxd_args());
  outboxd_process b("replica-b", db, sim.outboxd_args());
  a.use_simulator(sim.port);
  b.use_simulator(sim.port);
  a.wait_ready();
  b.wait_ready();
  constexpr int orders = 80;
  for (int i = 0; i < orders; ++i)
    (i % 2 ? a : b).create_order(i % 3 ? "domestic" : "international");
  REQUIRE(wait_until(
      [&] {
        return query_value(db, "SELECT count(*) FROM orders WHERE order_status = 'CONFIRMED'") ==
               std::to_string(orders);
      },
      60s));
  // Exactly one successful attempt per (event, destination), and nothing else.
  CHECK(query_value(db, "SELECT count(*) FROM (SELECT event_id, destination FROM aggregate_results "
                        "WHERE outcome = 'success' GROUP BY 1, 2 HAVING count(*) > 1) d") == "0");
  CHECK(query_value(db, "SELECT count(*) FROM aggregate_results") == std::to_string(orders * 4));
  // Both processes did some of the work.
  CHECK(a.output().find("processed after") != std::string::npos);
  CHECK(b.output().find("processed after") != std::string::npos);
  auto ledger = http_client(sim.port).get("/api/simulator/ledger");
  CHECK(ledger.json["duplicates"].Size() == 0);
  auto consistency = a.client().get("/api/admin/consistency");
  CHECK(consistency.num("/checked") == orders);
  CHECK_MESSAGE(consistency.json["violations"].Size() == 0, consistency.body);
}

TEST_CASE(
    "a process killed during a compensation is finished by a restart without a double revert") {
  simulator_process sim;
  auto db = fresh_database("outboxd_e2e_kill_compensation");
  auto args = with_call_timeout(sim.outboxd_args({"outbox.leaseTimeout=2s"}), "1800ms");
  outboxd_process p("kill-compensation", db, args);
  p.use_simulator(sim.port);
  p.wait_ready();
  p.knobs(R"({"billing.charge":{"failNext":1,"failureStatus":400},
              "shipping.domestic.cancel":{"latencyMs":1500}})");
  p.create_order();
  auto id = p.create_order();
  // The dead-letter processor is inside the shipping revert call: kill the process there.
  REQUIRE(wait_until(
      [&] {
        return query_value(db, "SELECT count(*) FROM dead_letter_events WHERE status = "
                               "'PROCESSING'") == "1";
      },
      20s));
  std::this_thread::sleep_for(300ms);
  p.process().signal(SIGKILL);
  CHECK(p.process().wait_exit(5s) == 128 + SIGKILL);
  p.restart();
  CHECK(p.wait_status(id, "FAILED", 40s) == "FAILED");
  auto ledger = p.ledger(id);
  auto shipment = ledger_entries(ledger, "shipping.domestic.create");
  auto reservation = ledger_entries(ledger, "inventory.reserve");
  REQUIRE(shipment.size() == 1);
  REQUIRE(reservation.size() == 1);
  CHECK(std::string((*shipment[0])["state"].GetString()) == "reverted");
  CHECK((*shipment[0])["revertRequests"].GetInt() == 1);
  CHECK(std::string((*reservation[0])["state"].GetString()) == "reverted");
  CHECK((*reservation[0])["revertRequests"].GetInt() == 1);
  auto consistency = p.client().get("/api/admin/consistency");
  CHECK_MESSAGE(consistency.json["violations"].Size() == 0, consistency.body);
}

TEST_CASE("an event that waited in its processor's batch renews its lease before calling") {
  simulator_process sim;
  auto db = fresh_database("outboxd_e2e_batch_lease");
  // The backlog is written with processing off, so that one claim takes all of it.
  auto intake_args = sim.outboxd_args({"outbox.enabled=false"});
  outboxd_process intake("intake", db, intake_args);
  intake.use_simulator(sim.port);
  intake.wait_ready();
  constexpr int orders = 4;
  for (int i = 0; i < orders; ++i)
    intake.create_order();
  intake.knobs(R"({"inventory.reserve":{"latencyMs":1000}})");
  // One processor, a 3 s lease, a reaper every 200 ms: the fourth event starts after ~3 s in the
  // batch, with its lease expired and reclaimed; the third is past half of its lease.
  auto args = with_call_timeout(
      sim.outboxd_args({"outbox.poolSize=1", "outbox.batchSize=10", "outbox.leaseTimeout=3s",
                        "outbox.reaperInterval=200ms", "log.level=debug"}),
      "2s");
  outboxd_process worker("worker", db, args);
  worker.use_simulator(sim.port);
  worker.wait_up();
  REQUIRE(wait_until(
      [&] {
        return query_value(db, "SELECT count(*) FROM orders WHERE order_status = 'CONFIRMED'") ==
               std::to_string(orders);
      },
      60s));
  CHECK(worker.output().find("claimed 4 event(s)") != std::string::npos);
  // No call was made under a lease that was already lost: one run's rows per event.
  CHECK(query_value(db, "SELECT count(*) FROM aggregate_results") == std::to_string(orders * 4));
  CHECK(query_value(db, "SELECT count(*) FROM (SELECT event_id FROM aggregate_results GROUP BY 1 "
                        "HAVING count(DISTINCT attempt) > 1) e") == "0");
  CHECK(worker.output().find("dropped (another worker owns it now)") == std::string::npos);
  auto ledger = http_client(sim.port).get("/api/simulator/ledger");
  CHECK(ledger.json["duplicates"].Size() == 0);
}

TEST_CASE("a status update sends its notification by the configured route") {
  auto db = fresh_database("outboxd_e2e_notify");
  outboxd_process p("notify", db);
  p.wait_ready();
  auto id = p.create_order();
  REQUIRE(p.wait_status(id, "CONFIRMED") == "CONFIRMED");
  auto path = "/api/orders/" + std::to_string(id) + "/status";
  CHECK(p.client().put(path, R"({"status":"SHIPPED"})").status == 200);
  REQUIRE(wait_until(
      [&] {
        auto ledger = p.ledger(id);
        return ledger_entries(ledger, "notifications.send").size() == 1;
      },
      10s));
  CHECK(p.client().put(path, R"({"status":"DELIVERED"})").status == 200);
  REQUIRE(wait_until(
      [&] {
        auto ledger = p.ledger(id);
        return ledger_entries(ledger, "notifications.send").size() == 2;
      },
      10s));
  auto ledger = p.ledger(id);
  auto notes = ledger_entries(ledger, "notifications.send");
  CHECK(std::string((*notes[0])["notificationType"].GetString()) == "shipping_confirmation");
  CHECK(std::string((*notes[1])["notificationType"].GetString()) == "review_request");
  CHECK(p.wait_status(id, "DELIVERED") == "DELIVERED");
}

TEST_CASE("four processors and their dead-letter children share one database connection") {
  simulator_process sim;
  auto db = fresh_database("outboxd_e2e_one_connection");
  auto args = sim.outboxd_args({"outbox.poolSize=4", "outbox.connections=1"});
  outboxd_process p("one-connection", db, args);
  p.use_simulator(sim.port);
  p.wait_ready();
  // Three charges are refused: their events are dead-lettered and compensated by the dead-letter
  // processors while the outbox processors run the rest, all through the one connection.
  p.knobs(R"({"billing.charge":{"failNext":3,"failureStatus":400}})");
  constexpr int orders = 24;
  for (int i = 0; i < orders; ++i)
    p.create_order();
  REQUIRE(wait_until(
      [&] {
        return query_value(db, "SELECT count(*) FROM orders WHERE order_status IN "
                               "('CONFIRMED', 'FAILED')") == std::to_string(orders);
      },
      60s));
  CHECK(query_value(db, "SELECT count(*) FROM orders WHERE order_status = 'FAILED'") == "3");
  CHECK(query_value(db, "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() "
                        "AND application_name LIKE 'outboxd-worker-%'") == "1");
  CHECK(p.output().find("dlq-processor-") != std::string::npos);
  auto consistency = p.client().get("/api/admin/consistency");
  CHECK(consistency.num("/checked") == orders);
  CHECK_MESSAGE(consistency.json["violations"].Size() == 0, consistency.body);
}

TEST_CASE("a charge applied by a run that was killed is refunded even when its first re-send is "
          "answered 503") {
  simulator_process sim;
  auto db = fresh_database("outboxd_e2e_killed_charge");
  auto args = with_call_timeout(sim.outboxd_args({"outbox.maxRetries=0", "outbox.leaseTimeout=2s"}),
                                "1800ms");
  outboxd_process p("killed-charge", db, args);
  p.use_simulator(sim.port);
  p.wait_ready();
  // The charge is applied at once and answered after 5 s: the process is killed in between, so
  // the run leaves no row for it.
  p.knobs(R"({"billing.charge":{"lateRate":1.0,"lateMs":5000}})");
  p.create_order();
  auto id = p.create_order(); // fraud-checked low risk: billed by billing.charge
  REQUIRE(wait_until(
      [&] {
        auto ledger = p.ledger(id);
        return !ledger_entries(ledger, "billing.charge").empty();
      },
      20s));
  p.process().signal(SIGKILL);
  CHECK(p.process().wait_exit(5s) == 128 + SIGKILL);
  // The event is dead-lettered (no retries left). Its compensation re-sends the charge to learn
  // whether it was applied, and that first re-send is answered 503: the charge is still unknown,
  // so the next compensation attempt must re-send it again rather than take the 503 for the
  // killed run's answer.
  p.knobs(R"({"billing.charge":{"lateRate":0,"failNext":1,"failureStatus":503}})");
  p.restart();
  CHECK(p.wait_status(id, "FAILED", 40s) == "FAILED");
  auto ledger = p.ledger(id);
  auto charges = ledger_entries(ledger, "billing.charge");
  REQUIRE(charges.size() == 1);
  CHECK(std::string((*charges[0])["state"].GetString()) == "reverted");
  CHECK((*charges[0])["revertRequests"].GetInt() == 1);
  auto consistency = p.client().get("/api/admin/consistency");
  CHECK_MESSAGE(consistency.json["violations"].Size() == 0, consistency.body);
}
