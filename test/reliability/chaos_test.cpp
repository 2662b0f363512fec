// Chaos: orders keep coming while the outside world fails 20 % of the time and answers late now
// and then, and something breaks at random moments: outboxd killed with SIGKILL, its database
// connections terminated, PostgreSQL itself restarted. Afterwards every invariant holds.
#include "test/reliability/reliability.hpp"
#include "test/support/outboxd_process.hpp"
#include "test/support/test_db.hpp"

#include <algorithm>
#include <csignal>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <iterator>
#include <sstream>

using namespace outboxd::test;
using namespace std::chrono;
using namespace std::chrono_literals;

namespace {

/// Test defaults plus: short leases (a killed worker's events come back quickly), call timeouts
/// shorter than the simulator's late answers (so a late answer is an ambiguous timeout).
std::vector<std::string> chaos_args(const simulator_process& sim) {
  auto args = sim.outboxd_args();
  for (const char* setting :
       {"outbox.leaseTimeout=3s", "outbox.reaperInterval=500ms",
        "http.routes.inventory.timeout=500ms", "http.routes.fraudCheck.timeout=500ms",
        "http.routes.shipping.timeout=500ms", "http.routes.billing.timeout=500ms",
        "http.routes.notifications.timeout=500ms"}) {
    args.emplace_back("--set");
    args.emplace_back(setting);
  }
  return args;
}

/// 20 % failures on every operation (503, except high-value processing refusing with 400, which
/// fails the order and starts a compensation), 5 % applied-but-late answers.
void break_the_world(outboxd_process& p, const simulator_process& sim, std::uint64_t seed) {
  p.knobs(every_knob(
      R"({"failureRate":0.2,"failureStatus":503,"retryAfter":null,"lateRate":0.05,"lateMs":800})"));
  p.knobs(R"({"highValue.process":{"failureStatus":400}})");
  auto r = http_client(sim.port).put("/api/simulator/config",
                                     fmt::format(R"({{"seed":{},"services":{{}}}})", seed));
  REQUIRE_MESSAGE(r.status == 200, r.body);
}

/// `count` moments spread at random over the middle of `duration`, in order.
std::vector<milliseconds> random_moments(int count, seconds duration, std::uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  auto span = duration_cast<milliseconds>(duration).count();
  std::uniform_int_distribution<long long> at(span / 20, span - span / 20);
  std::vector<milliseconds> out;
  for (int i = 0; i < count; ++i)
    out.emplace_back(at(rng));
  std::sort(out.begin(), out.end());
  return out;
}

/// A standalone simulator (the outside world, which outlives outboxd) and an outboxd with the
/// chaos settings on database `db`, ready.
struct chaos_world {
  chaos_world(const std::string& name, std::string database)
      : db(std::move(database)), p(name, db, chaos_args(sim)) {
    p.use_simulator(sim.port);
    p.wait_ready();
  }
  simulator_process sim;
  std::string db;
  outboxd_process p;
};

/// Runs the workload against the world's outboxd, calls `disrupt(i)` at each random moment, then
/// lets the world heal, waits until everything settled and checks the invariants.
template <class Disrupt>
void chaos_run(const std::string& scenario, const run_parameters& prm, chaos_world& w,
               Disrupt&& disrupt) {
  auto& [sim, db, p] = w;
  std::map<std::string, std::string> report;
  auto started = steady_clock::now();
  break_the_world(p, sim, prm.seed);
  order_workload workload(p.port(), prm);
  int disruptions = 0;
  for (auto at : random_moments(prm.kills, prm.duration, prm.seed)) {
    std::this_thread::sleep_until(started + at);
    disrupt(disruptions++);
  }
  workload.join();
  p.quiet_world();
  bool settled = settle(db, p, 180s);
  CHECK_MESSAGE(settled, "work left after 3 minutes: "
                             << query_value(db, "SELECT string_agg(order_status || ' ' || n, ', ') "
                                                "FROM (SELECT order_status, count(*) n FROM orders "
                                                "GROUP BY 1) s"));
  CHECK(workload.created() == prm.orders);
  auto unexpected = workload.unexpected();
  CHECK_MESSAGE(unexpected.empty(), (unexpected.empty() ? "" : unexpected.front()));
  report["disruptions"] = std::to_string(disruptions);
  report["orders created (201)"] = std::to_string(workload.created());
  report["cancellations accepted"] = std::to_string(workload.cancels());
  report["status updates accepted"] = std::to_string(workload.updates());
  report["requests refused while down (retried)"] = std::to_string(workload.refused());
  report["unexpected answers"] = std::to_string(unexpected.size());
  check_invariants(db, p, sim.port, report);
  report["time"] = fmt::format(
      "{:.1f} s", duration_cast<milliseconds>(steady_clock::now() - started).count() / 1000.0);
  publish_report(scenario, prm, report);
}

} // namespace

TEST_CASE("kill -9 chaos: outboxd killed at random moments loses nothing and does nothing twice") {
  auto prm = run_parameters::from_env(300, 10, 40);
  chaos_world w("chaos-kill", fresh_database("outboxd_reliability_kill"));
  auto& p = w.p;
  chaos_run("chaos-kill", prm, w, [&](int) {
    p.process().signal(SIGKILL);
    REQUIRE(p.process().wait_exit(10s) == 128 + SIGKILL);
    p.restart();
    p.wait_up(60s);
  });
}

TEST_CASE("backend kills: outboxd's database connections terminated at random moments") {
  auto prm = run_parameters::from_env(150, 25, 20);
  chaos_world w("chaos-backends", fresh_database("outboxd_reliability_backends"));
  const auto& db = w.db;
  std::mt19937_64 rng(prm.seed);
  int terminated = 0;
  chaos_run("chaos-backends", prm, w, [&](int) {
    auto pids = query_value(db, "SELECT string_agg(pid::text, ' ' ORDER BY pid) FROM "
                                "pg_stat_activity WHERE datname = current_database() AND "
                                "application_name LIKE 'outboxd%'");
    std::istringstream in(pids);
    std::vector<std::string> list{std::istream_iterator<std::string>(in), {}};
    if (list.empty())
      return;
    auto pid = list[rng() % list.size()];
    terminated += query_value(db, "SELECT pg_terminate_backend(" + pid + ")") == "t" ? 1 : 0;
  });
  CHECK(terminated >= prm.kills / 2);
  MESSAGE("backends terminated: " << terminated);
  CHECK(w.p.process().running());
}

TEST_CASE("database restart: fast and immediate shutdowns mid-run; intake answers 503, then "
          "everything recovers") {
  auto prm = run_parameters::from_env(150, 2, 30);
  private_cluster cluster;
  chaos_world w("chaos-restart", fresh_database("outboxd_reliability_restart", cluster.conninfo()));
  auto& p = w.p;
  std::vector<std::string> observed;
  chaos_run("chaos-db-restart", prm, w, [&](int i) {
    std::string mode = i % 2 ? "immediate" : "fast";
    cluster.stop(mode);
    // While the database is down: intake refuses quickly and clearly, readiness says why.
    http_client probe(p.port());
    auto asked = steady_clock::now();
    auto r = probe.post("/api/orders",
                        R"({"customerId":"probe","totalAmount":1.00,"shippingType":"domestic"})");
    auto took = duration_cast<milliseconds>(steady_clock::now() - asked);
    CHECK_MESSAGE(r.status == 503, r.body);
    CHECK(r.str("/error/code") != "");
    CHECK(took < 15s);
    auto ready = probe.get("/readyz");
    CHECK(ready.status == 503);
    CHECK(ready.str("/checks/database") == "unreachable"); // not libpq's text: socket, user
    CHECK(ready.body.find("PGSQL") == std::string::npos);
    observed.push_back(
        fmt::format("{} shutdown: intake answered {} in {} ms", mode, r.status, took.count()));
    std::this_thread::sleep_for(2s);
    cluster.start();
    p.wait_up(60s);
  });
  for (const auto& line : observed)
    MESSAGE(line);
  CHECK(p.process().running());
  // The listener noticed and came back.
  auto metrics = p.client().get("/metrics").body;
  CHECK(metrics.find("outboxd_listener_reconnects_total") != std::string::npos);
  CHECK(metrics.find("outboxd_listener_reconnects_total 0\n") == std::string::npos);
}
