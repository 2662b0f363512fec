// The reliability suite's shared pieces.
#include "test/reliability/reliability.hpp"

#include "test/support/outboxd_process.hpp"
#include "test/support/process.hpp"
#include "test/support/test_db.hpp"

#include <cstdlib>
#include <ctime>
#include <doctest/doctest.h>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace outboxd::test {
namespace {

long long env_number(const char* name, long long fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::stoll(v) : fallback;
}

/// The last non-empty line of a command's output.
std::string last_line(const std::string& out) {
  std::istringstream in(out);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty())
      last = line;
  return last;
}

std::string pg_cluster_script() {
  return std::string(OUTBOXD_SOURCE_DIR) + "/scripts/pg-cluster.sh";
}

bool answered(int status) {
  return status != 0 && status != 503;
}

} // namespace

run_parameters run_parameters::from_env(int orders, int kills, int duration_seconds) {
  run_parameters p;
  p.orders = static_cast<int>(env_number("RELIABILITY_ORDERS", orders));
  p.kills = static_cast<int>(env_number("RELIABILITY_KILLS", kills));
  p.duration = std::chrono::seconds(env_number("RELIABILITY_DURATION", duration_seconds));
  p.seed = static_cast<std::uint64_t>(env_number("RELIABILITY_SEED", std::time(nullptr)));
  return p;
}

private_cluster::private_cluster() {
  char dir[] = "/tmp/outboxd-reliability.XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  dir_ = dir;
  ::chmod(dir, 0755); // the server runs as the postgres user when we are root
  start();
}

private_cluster::~private_cluster() {
  run_command({"/bin/bash", pg_cluster_script(), "stop", dir_});
  std::ifstream socket_dir(dir_ + "/socket_dir");
  std::string sock;
  std::getline(socket_dir, sock);
  std::error_code ignored;
  if (!sock.empty())
    std::filesystem::remove_all(sock, ignored);
  std::filesystem::remove_all(dir_, ignored);
}

void private_cluster::start() {
  // An immediate shutdown is a crash of the server, not of the machine: the operating system
  // keeps what was written, so fsync may stay off; but a commit must reach the WAL before it is
  // answered (synchronous_commit on), or a crash loses orders whose 201 the client already has.
  auto [code, out] = run_command({"/bin/bash", pg_cluster_script(), "start", dir_},
                                 {{"PG_EXTRA_OPTS", "-c fsync=off -c full_page_writes=off"}});
  REQUIRE_MESSAGE(code == 0, out);
  conninfo_ = last_line(out);
}

void private_cluster::stop(const std::string& mode) {
  auto [code, out] = run_command({"/bin/bash", pg_cluster_script(), "stop", dir_, mode});
  REQUIRE_MESSAGE(code == 0, out);
}

order_workload::order_workload(int port, const run_parameters& p)
    : thread_([this, port, p] { run(port, p); }) {}

order_workload::~order_workload() {
  join();
}

void order_workload::join() {
  if (thread_.joinable())
    thread_.join();
}

std::vector<std::string> order_workload::unexpected() const {
  std::lock_guard lock(mutex_);
  return unexpected_;
}

void order_workload::unexpected_answer(const std::string& what, const http_response& r) {
  std::lock_guard lock(mutex_);
  unexpected_.push_back(fmt::format("{}: HTTP {} {}", what, r.status, r.body.substr(0, 300)));
}

void order_workload::run(int port, run_parameters p) {
  using namespace std::chrono;
  http_client c(port);
  std::mt19937_64 rng(p.seed);
  std::vector<long long> ids;
  auto start = steady_clock::now();
  for (int i = 0; i < p.orders; ++i) {
    std::this_thread::sleep_until(start + duration_cast<milliseconds>(p.duration) * i / p.orders);
    auto body =
        fmt::format(R"({{"customerId":"C-{}","totalAmount":{}.{:02},"shippingType":"{}"}})", i,
                    10 + rng() % 990, rng() % 100, rng() % 3 ? "domestic" : "international");
    auto key = fmt::format("reliability-{}-{}", p.seed, i);
    auto give_up = steady_clock::now() + minutes(1);
    for (;;) {
      auto r = c.post("/api/orders", body, {{"Idempotency-Key", key}});
      if (r.status == 201 || r.status == 200) {
        ids.push_back(r.num("/id"));
        ++created_;
        break;
      }
      if (answered(r.status)) {
        unexpected_answer("create " + key, r);
        break;
      }
      ++refused_;
      if (steady_clock::now() > give_up) {
        unexpected_answer("create " + key + " refused for a minute", r);
        break;
      }
      std::this_thread::sleep_for(milliseconds(100));
    }
    if (ids.empty())
      continue;
    // Now and then an action on an earlier order; 409 is a right answer for the wrong state.
    auto roll = rng() % 100;
    auto path = "/api/orders/" + std::to_string(ids[rng() % ids.size()]);
    http_response r;
    if (roll < 8) {
      r = c.post(path + "/cancel", R"({"reason":"changed my mind"})");
      cancels_ += r.status == 202 ? 1 : 0;
    } else if (roll < 20) {
      r = c.put(path + "/status",
                roll < 16 ? R"({"status":"SHIPPED"})" : R"({"status":"DELIVERED"})");
      updates_ += r.status == 200 ? 1 : 0;
    } else {
      continue;
    }
    if (answered(r.status) && r.status != 200 && r.status != 202 && r.status != 409)
      unexpected_answer(path, r);
  }
}

bool settle(const std::string& db, outboxd_process& p, std::chrono::seconds timeout) {
  const char* active = "SELECT (SELECT count(*) FROM outbox_events WHERE status IN ('PENDING', "
                       "'PROCESSING')) + (SELECT count(*) FROM dead_letter_events WHERE status IN "
                       "('PENDING', 'PROCESSING'))";
  const char* open_orders = "SELECT count(*) FROM orders WHERE order_status IN ('PENDING', "
                            "'CANCELLING', 'ATTENTION')";
  return wait_until(
      [&] {
        if (query_value(db, active) != "0")
          return false;
        if (query_value(db, open_orders) == "0")
          return true;
        // Only compensations that gave up are left: an operator's redrive, now that the world
        // is quiet.
        auto failed = query_value(
            db, "SELECT coalesce(string_agg(id::text, ' '), '') FROM dead_letter_events "
                "WHERE status = 'FAILED'");
        std::istringstream ids(failed);
        for (std::string id; ids >> id;)
          p.client().post("/api/dlq/" + id + "/retry", "");
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        return false;
      },
      timeout);
}

void check_invariants(const std::string& db, outboxd_process& p, int simulator_port,
                      std::map<std::string, std::string>& report) {
  auto orders = query_value(db, "SELECT count(*) FROM orders");
  report["orders in the database"] = orders;
  report["orders by status"] = query_value(
      db, "SELECT string_agg(order_status || ' ' || n, ', ' ORDER BY order_status) FROM "
          "(SELECT order_status, count(*) n FROM orders GROUP BY 1) s");
  report["HTTP attempts recorded"] = query_value(db, "SELECT count(*) FROM aggregate_results");
  report["dead letters"] = query_value(db, "SELECT count(*) FROM dead_letter_events");

  auto not_terminal =
      query_value(db, "SELECT count(*) FROM orders WHERE order_status NOT IN "
                      "('CONFIRMED', 'SHIPPED', 'DELIVERED', 'FAILED', 'CANCELLED')");
  CHECK_MESSAGE(not_terminal == "0", "orders not terminal: " << not_terminal);
  CHECK(query_value(db, "SELECT count(*) FROM outbox_events WHERE status = 'PROCESSING'") == "0");
  CHECK(query_value(db, "SELECT count(*) FROM dead_letter_events WHERE status = 'PROCESSING'") ==
        "0");
  auto twice = query_value(db, "SELECT count(*) FROM (SELECT event_id, destination FROM "
                               "aggregate_results WHERE outcome = 'success' GROUP BY 1, 2 "
                               "HAVING count(*) > 1) d");
  report["(event, destination) with two successes"] = twice;
  CHECK_MESSAGE(twice == "0",
                "their rows: " << query_value(
                    db, "SELECT string_agg(format('event %s %s attempt %s %s %s key %s "
                        "at %s (%s ms)', event_id, destination, attempt, outcome, "
                        "response_status, idempotency_key, published_at, duration_ms), "
                        "E'\\n' ORDER BY id) FROM aggregate_results r WHERE (event_id, "
                        "destination) IN (SELECT event_id, destination FROM "
                        "aggregate_results WHERE outcome = 'success' GROUP BY 1, 2 "
                        "HAVING count(*) > 1)"));

  auto ledger = http_client(simulator_port).get("/api/simulator/ledger");
  REQUIRE(ledger.json.IsObject());
  report["side effects in the ledger"] = std::to_string(ledger.json["entries"].Size());
  report["duplicate side effects"] = std::to_string(ledger.json["duplicates"].Size());
  CHECK_MESSAGE(ledger.json["duplicates"].Size() == 0, ledger.body.substr(0, 2000));

  auto consistency = p.client().get("/api/admin/consistency");
  REQUIRE(consistency.status == 200);
  report["consistency violations"] = std::to_string(consistency.json["violations"].Size());
  CHECK(std::to_string(consistency.num("/checked")) == orders);
  CHECK_MESSAGE(consistency.json["violations"].Size() == 0, consistency.body.substr(0, 4000));
}

void publish_report(const std::string& scenario, const run_parameters& p,
                    const std::map<std::string, std::string>& report) {
  auto now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H%M%SZ", std::gmtime(&now));
  std::string text = fmt::format("## {} ({})\n\n| | |\n|---|---|\n", scenario, stamp);
  text += fmt::format("| seed | {} |\n| planned orders | {} |\n| planned disruptions | {} |\n"
                      "| planned duration | {} s |\n",
                      p.seed, p.orders, p.kills, p.duration.count());
  for (const auto& [k, v] : report)
    text += fmt::format("| {} | {} |\n", k, v);
  std::cout << "\n" << text << std::flush;
  if (const char* dir = std::getenv("RELIABILITY_RESULTS"); dir != nullptr && *dir != '\0') {
    std::filesystem::create_directories(dir);
    std::ofstream(std::string(dir) + "/" + scenario + "-" + stamp + ".md") << text;
  }
}

} // namespace outboxd::test
