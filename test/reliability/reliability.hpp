// Shared pieces of the reliability suite: run parameters from the environment, a private
// PostgreSQL cluster the suite may stop and start, an order workload that keeps going while
// things break, the end-of-run invariants, and the run summary.
#pragma once

#include "test/support/http_client.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace outboxd::test {

class outboxd_process;

/// Size of a run. The defaults are the short version scripts/test.sh runs; the long version
/// (scripts/reliability.sh) sets RELIABILITY_ORDERS, RELIABILITY_KILLS, RELIABILITY_DURATION
/// (seconds) and RELIABILITY_SEED.
struct run_parameters {
  int orders = 0;
  int kills = 0;
  std::chrono::seconds duration{0};
  std::uint64_t seed = 0;

  static run_parameters from_env(int orders, int kills, int duration_seconds);
};

/// A PostgreSQL cluster of this test alone (scripts/pg-cluster.sh in a temporary folder), so
/// that it can be stopped and started without disturbing the other tests.
class private_cluster {
public:
  private_cluster();
  ~private_cluster();
  private_cluster(const private_cluster&) = delete;
  private_cluster& operator=(const private_cluster&) = delete;

  const std::string& conninfo() const { return conninfo_; }
  void stop(const std::string& mode); // fast | immediate
  void start();

private:
  std::string dir_;
  std::string conninfo_;
};

/// Creates `orders` orders over `duration` through POST /api/orders (each with its own
/// Idempotency-Key, so a retry after a lost answer never makes a second order) and mixes in
/// cancellations and SHIPPED/DELIVERED updates of earlier orders. Answers while outboxd or the
/// database is down (no answer, 503) are retried; any other unexpected answer is recorded.
class order_workload {
public:
  order_workload(int port, const run_parameters& p);
  ~order_workload();
  /// Waits until every order has been created (or given up on after a minute of refusals).
  void join();

  int created() const { return created_; }
  int cancels() const { return cancels_; }
  int updates() const { return updates_; }
  int refused() const { return refused_; } // no answer or 503, retried
  /// Answers that are wrong whatever happened (e.g. 500, or 422 for a valid request).
  std::vector<std::string> unexpected() const;

private:
  void run(int port, run_parameters p);
  void unexpected_answer(const std::string& what, const http_response& r);

  std::atomic<int> created_{0}, cancels_{0}, updates_{0}, refused_{0};
  mutable std::mutex mutex_;
  std::vector<std::string> unexpected_;
  std::thread thread_;
};

/// Waits until nothing is left to do: no order PENDING, CANCELLING or ATTENTION, no event or
/// dead letter PENDING or PROCESSING. FAILED dead letters (compensations that gave up while the
/// world was failing) are redriven through the API once the world is quiet. False on timeout.
bool settle(const std::string& db, outboxd_process& p, std::chrono::seconds timeout);

/// The end-of-run invariants (the guarantees in docs/guarantees.md), checked with doctest CHECKs:
/// every order terminal, nothing PROCESSING, one successful attempt per (event, destination) in the
/// audit, no duplicate side effect in the simulator's ledger, zero consistency violations. Adds
/// what it found to `report`.
void check_invariants(const std::string& db, outboxd_process& p, int simulator_port,
                      std::map<std::string, std::string>& report);

/// Prints the summary of a scenario and, when RELIABILITY_RESULTS names a folder, writes it
/// there as <scenario>-<UTC time>.md.
void publish_report(const std::string& scenario, const run_parameters& p,
                    const std::map<std::string, std::string>& report);

} // namespace outboxd::test
