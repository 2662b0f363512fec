// Runs on one call driver that record attempt rows one after the other, for the tests of the
// statement writers: each notes, when it goes on, how many rows another connection sees (what
// "its next step" would find committed).
#pragma once

#include "actors/attempt_writer.hpp"
#include "actors/call_driver.hpp"
#include "actors/database_lane.hpp"
#include "persistence/worker_connections.hpp"
#include "test/support/test_db.hpp"

#include <chrono>
#include <doctest/doctest.h>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace outboxd::test {

/// A successful call's attempt row of event `event_id` to `destination`.
inline persistence::attempt_row row_of(std::int64_t event_id, const std::string& destination) {
  persistence::attempt_row row;
  row.event_id = event_id;
  row.aggregate_id = std::to_string(event_id);
  row.event_type = "OrderCreated";
  row.destination = destination;
  row.attempt = 1;
  row.endpoint_url = "http://127.0.0.1:1/" + destination;
  row.http_method = "POST";
  row.request_payload_json = R"({"sku":"A-1"})";
  row.response_status = 200;
  row.outcome = domain::attempt_outcome::success;
  return row;
}

/// Calls `f` with the exception `error` holds.
template <class F> void inspect(const std::exception_ptr& error, F f) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    f(e);
  }
}

struct recording_runs {
  /// On database `conninfo`, with `connections` shared connections; with `own_connections`, the
  /// rows go out on three connections of their own (application_name "lane-test").
  explicit recording_runs(std::string conninfo_, int connections = 1,
                          std::chrono::microseconds linger_below = actors::call_driver::fast_call,
                          bool own_connections = false)
      : conninfo(std::move(conninfo_)), pool([c = conninfo](int) { return c; }, connections, {}),
        driver(linger_below),
        lane(own_connections ? std::make_unique<actors::database_lane>(
                                   driver, conninfo + " application_name=lane-test",
                                   persistence::outbox_statements::lane_setup, 3)
                             : nullptr),
        writer(pool, "test-processor", driver, lane.get()) {}

  void spawn(std::vector<persistence::attempt_row> rows) {
    const auto i = went_on.size();
    went_on.push_back(-1);
    errors.emplace_back();
    auto run = [](recording_runs& r, std::size_t i,
                  std::vector<persistence::attempt_row> rows) -> actors::task<void> {
      for (const auto& row : rows)
        co_await r.writer.record(row);
      r.went_on[i] = count_rows(r.conninfo, "aggregate_results");
    };
    driver.spawn(run(*this, i, std::move(rows)),
                 [this, i](std::exception_ptr error) { errors[i] = error; });
  }

  /// Drives until every run ended (at most 10 s).
  void finish() {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (driver.running() > 0 && std::chrono::steady_clock::now() < give_up)
      driver.drive(std::chrono::milliseconds(10));
    REQUIRE(driver.running() == 0);
  }

  std::string conninfo;
  persistence::worker_connections pool;
  actors::call_driver driver;
  std::unique_ptr<actors::database_lane> lane; // with own_connections
  actors::attempt_writer writer;
  std::vector<long long> went_on; // rows committed when run i went on; -1: it did not
  std::vector<std::exception_ptr> errors;
};

} // namespace outboxd::test
