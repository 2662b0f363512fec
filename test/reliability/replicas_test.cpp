// Replicas: a backlog taken by an intake-only outboxd (outbox.enabled=false), then drained by
// three outboxd processes on the same database and the same standalone simulator.
#include "test/reliability/reliability.hpp"
#include "test/support/outboxd_process.hpp"
#include "test/support/test_db.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace outboxd::test;
using namespace std::chrono;
using namespace std::chrono_literals;

TEST_CASE("three replicas drain a backlog: each event once, per-order sequence kept") {
  auto prm = run_parameters::from_env(5000, 0, 0);
  const int orders = prm.orders;
  simulator_process sim;
  auto db = fresh_database("outboxd_reliability_replicas");
  std::map<std::string, std::string> report;

  // The backlog: every tenth order is cancelled right away, so its cancellation waits behind
  // its own fan-out.
  {
    auto args = sim.outboxd_args();
    args.insert(args.end(), {"--set", "outbox.enabled=false"});
    outboxd_process intake("intake", db, args);
    intake.use_simulator(sim.port);
    intake.wait_ready();
    auto loaded = steady_clock::now();
    std::vector<std::thread> clients;
    std::atomic<int> refused{0};
    for (int c = 0; c < 4; ++c)
      clients.emplace_back([&, c] {
        http_client client(intake.port());
        for (int i = c; i < orders; i += 4) {
          auto r = client.post(
              "/api/orders",
              fmt::format(R"({{"customerId":"R-{}","totalAmount":{}.50,"shippingType":"{}"}})", i,
                          20 + i % 500, i % 3 ? "domestic" : "international"));
          if (r.status != 201) {
            ++refused;
            continue;
          }
          if (i % 10 == 0 &&
              client.post("/api/orders/" + std::to_string(r.num("/id")) + "/cancel", "").status !=
                  202)
            ++refused;
        }
      });
    for (auto& t : clients)
      t.join();
    REQUIRE(refused == 0);
    report["backlog intake"] =
        fmt::format("{} orders in {:.1f} s", orders,
                    duration_cast<milliseconds>(steady_clock::now() - loaded).count() / 1000.0);
    // Nothing was processed by the intake-only process.
    CHECK(query_value(db, "SELECT count(*) FROM outbox_events WHERE status <> 'PENDING'") == "0");
    CHECK(intake.stop() == 0);
  }

  auto started = steady_clock::now();
  std::vector<std::unique_ptr<outboxd_process>> replicas;
  for (const char* name : {"replica-1", "replica-2", "replica-3"}) {
    replicas.push_back(std::make_unique<outboxd_process>(name, db, sim.outboxd_args()));
    replicas.back()->use_simulator(sim.port);
  }
  for (auto& r : replicas)
    r->wait_up();
  bool drained = wait_until(
      [&] {
        return query_value(db, "SELECT count(*) FROM outbox_events WHERE status <> 'PROCESSED'") ==
               "0";
      },
      600s);
  auto took = duration_cast<milliseconds>(steady_clock::now() - started);
  REQUIRE_MESSAGE(drained,
                  query_value(db, "SELECT string_agg(status || ' ' || n, ', ') FROM "
                                  "(SELECT status, count(*) n FROM outbox_events GROUP BY 1) s"));
  auto events = std::stoll(query_value(db, "SELECT count(*) FROM outbox_events"));
  report["events"] = std::to_string(events);
  report["drain time"] = fmt::format("{:.1f} s", took.count() / 1000.0);
  report["throughput"] =
      fmt::format("{:.0f} events/s ({:.0f} orders/s)", events * 1000.0 / took.count(),
                  orders * 1000.0 / took.count());
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    auto out = replicas[i]->output();
    std::size_t n = 0;
    for (auto pos = out.find("processed after"); pos != std::string::npos;
         pos = out.find("processed after", pos + 1))
      ++n;
    report[fmt::format("events completed by replica-{}", i + 1)] = std::to_string(n);
    CHECK(n > 0); // every replica took part
  }
  CHECK(query_value(db, "SELECT count(*) FROM orders WHERE order_status = 'CANCELLED'") ==
        std::to_string((orders + 9) / 10));
  // Per-order sequence: every revert of a cancelled order comes after the last forward call.
  CHECK(query_value(db,
                    "SELECT count(*) FROM (SELECT aggregate_id FROM aggregate_results GROUP BY 1 "
                    "HAVING max(id) FILTER (WHERE destination NOT LIKE '%.revert') > "
                    "min(id) FILTER (WHERE destination LIKE '%.revert')) v") == "0");
  settle(db, *replicas[0], 60s);
  check_invariants(db, *replicas[0], sim.port, report);
  publish_report("replicas", prm, report);
}
