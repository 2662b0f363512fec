// `outboxd simulator --port N`: the outside world as its own process, without a database.
#include "test/support/http_client.hpp"
#include "test/support/outboxd_process.hpp"
#include "test/support/process.hpp"

#include <csignal>
#include <doctest/doctest.h>
#include <unistd.h>

using namespace outboxd::test;
using namespace std::chrono_literals;

TEST_CASE("the standalone simulator serves, keeps its ledger, and stops cleanly on SIGTERM") {
  simulator_process sim;
  http_client c(sim.port);
  auto reserve = [&] {
    return c.post("/api/inventory/reserve", R"({"orderId":8})",
                  {{"X-Aggregate-Id", "8"}, {"Idempotency-Key", "8:inventory"}});
  };
  auto first = reserve();
  auto replay = reserve();
  CHECK(first.status == 200);
  CHECK(replay.status == 200);
  CHECK(replay.header("Idempotent-Replayed") == "true");
  CHECK(replay.str("/reservationId") == first.str("/reservationId"));
  auto ledger = c.get("/api/simulator/ledger?aggregateId=8");
  CHECK(ledger.json["entries"].Size() == 1);
  CHECK(c.put("/api/simulator/config", R"({"services":{"billing.charge":{"failureRate":1.0}}})")
            .status == 200);
  auto charge = c.post("/api/billing", R"({"amount":1})", {{"X-Aggregate-Id", "8"}});
  CHECK(charge.status == 503);
  sim.process.signal(SIGTERM);
  CHECK(sim.process.wait_exit(10s) == 0);
}

TEST_CASE("the standalone simulator exits 1 when its port is taken") {
  simulator_process first;
  auto [code, out] =
      run_command({OUTBOXD_BINARY, "simulator", "--port", std::to_string(first.port)});
  CHECK(code == 1);
  CHECK(out.find(std::to_string(first.port)) != std::string::npos);
}
