// `outboxd simulator --port N`: the outside world as its own process, without a database.
#include "test/support/http_client.hpp"
#include "test/support/outboxd_process.hpp"
#include "test/support/process.hpp"

#include <csignal>
#include <doctest/doctest.h>
#include <httplib.h>
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

TEST_CASE("a late answer in progress does not hold up SIGTERM") {
  simulator_process sim;
  // The clients close before SIGTERM: an idle keep-alive connection alone holds httplib's stop()
  // for up to server.keepAliveTimeout, which is not what this test is about.
  {
    http_client c(sim.port);
    REQUIRE(c.put("/api/simulator/config",
                  R"({"services":{"billing.charge":{"lateRate":1.0,"lateMs":60000}}})")
                .status == 200);
    // The caller gives up at once; the handler stays asleep for the rest of the minute.
    httplib::Client impatient("127.0.0.1", sim.port);
    impatient.set_read_timeout(std::chrono::milliseconds(200));
    CHECK_FALSE(impatient.Post("/api/billing", R"({"amount":1})", "application/json"));
    CHECK(c.get("/api/simulator/ledger").json["entries"].Size() == 1); // applied all the same
  }
  auto start = std::chrono::steady_clock::now();
  sim.process.signal(SIGTERM);
  CHECK(sim.process.wait_exit(10s) == 0);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
}

TEST_CASE("the simulator command is listed and its --port is checked") {
  auto [help_code, help] = run_command({OUTBOXD_BINARY, "--help"});
  CHECK(help_code == 0);
  CHECK(help.find("simulator") != std::string::npos);
  CHECK(help.find("--port N") != std::string::npos);
  for (const char* bad : {"abc", "70000", "-1", ""}) {
    auto [code, out] = run_command({OUTBOXD_BINARY, "simulator", "--port", bad});
    CHECK(code == 2);
    CHECK(out.find("--port must be a port number 0..65535") != std::string::npos);
  }
  auto [serve_code, serve_out] = run_command({OUTBOXD_BINARY, "serve", "--port", "9100"});
  CHECK(serve_code == 2);
  CHECK(serve_out.find("--port is only for the simulator command") != std::string::npos);
}
