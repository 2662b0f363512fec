// A processor's statements on connections of its own, on a real PostgreSQL: the thread sends the
// runs' rows and completions and goes on; a run goes on only once its own statement committed;
// what runs hand over meanwhile goes in the next statement; a lost connection fails the runs of
// the statement it cut, a refused statement is written again on a shared connection so that only
// the bad run fails, and runs cancelled meanwhile are dropped. Also when a processor gets such
// connections at all.
#include "actors/attempt_writer.hpp"
#include "actors/call_driver.hpp"
#include "actors/completion_writer.hpp"
#include "actors/database_lane.hpp"
#include "actors/engine.hpp"
#include "persistence/connection_pool.hpp"
#include "persistence/worker_connections.hpp"
#include "test/actors/recording_runs.hpp"
#include "test/support/test_db.hpp"

#include <doctest/doctest.h>
#include <exception>
#include <memory>
#include <optional>
#include <pqxx/pqxx>
#include <vector>

using namespace outboxd;
using namespace outboxd::test;
using namespace std::chrono_literals;

namespace {

const lazy_database db("outboxd_actor_database_lane");

/// Recording runs on this file's database, their rows on three connections of their own.
struct runs : recording_runs {
  runs() : recording_runs(db(), 1, actors::call_driver::fast_call, true) {}

  /// Writes (and so prepares) a statement of `n` rows on the lane's first connection, then
  /// empties the result table: a statement is prepared before it runs, and the preparation would
  /// wait for a table lock too.
  void prepare_rows(std::size_t n) {
    std::vector<persistence::attempt_row> rows(n, row_of(0, "warm-up"));
    std::vector<const persistence::attempt_row*> pointers;
    for (const auto& row : rows)
      pointers.push_back(&row);
    bool done = false;
    lane->send(persistence::outbox_statements::attempts(pointers),
               [&done](persistence::text_rows, std::exception_ptr error) {
                 CHECK_FALSE(error);
                 done = true;
                 return std::size_t{0};
               });
    const auto give_up = std::chrono::steady_clock::now() + 10s;
    while (!done && std::chrono::steady_clock::now() < give_up)
      driver.drive(10ms);
    REQUIRE(done);
    truncate_all(db());
  }
};

/// Holds a lock that makes every insert into the result table wait, until released.
struct table_lock {
  table_lock() : conn(db()), tx(std::make_unique<pqxx::work>(conn)) {
    tx->exec("LOCK TABLE aggregate_results IN SHARE MODE");
  }
  void release() { tx->commit(); }
  pqxx::connection conn;
  std::unique_ptr<pqxx::work> tx;
};

long long waiting_inserts() {
  return std::stoll(query_value(db(), "SELECT count(*) FROM pg_stat_activity WHERE "
                                      "application_name = 'lane-test' AND wait_event_type = "
                                      "'Lock'"));
}

/// Waits (at most 10 s) until `n` of the lane's statements wait for the table lock.
void wait_for_blocked(long long n) {
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (waiting_inserts() < n && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(10ms);
  REQUIRE(waiting_inserts() == n);
}

} // namespace

TEST_CASE("rows go out without the thread waiting; a run goes on once its row committed, and rows "
          "handed over meanwhile go in the next statement") {
  truncate_all(db());
  runs r;
  r.prepare_rows(3);
  table_lock lock;
  for (int i = 1; i <= 3; ++i)
    r.spawn({row_of(i, "inventory"), row_of(i, "fraud")});
  r.driver.drive(0ms); // sends the three first rows, which wait for the lock
  wait_for_blocked(1);
  CHECK(r.writer.pending() == 0);
  CHECK(r.driver.running() == 3);
  r.spawn({row_of(4, "inventory")}); // handed over while the statement is in flight
  r.driver.drive(0ms);
  CHECK(r.writer.pending() == 1); // waits for the statement in flight: one at a time
  CHECK(r.went_on == std::vector<long long>{-1, -1, -1, -1});
  lock.release();
  r.finish();
  for (std::size_t i = 0; i < r.went_on.size(); ++i) {
    CAPTURE(i);
    CHECK_FALSE(r.errors[i]);
    CHECK(r.went_on[i] >= 3);
  }
  CHECK(count_rows(db(), "aggregate_results") == 7);
  // The first rows of runs 1-3 together, run 4's with the next, the second rows after them.
  CHECK(query_value(db(), "SELECT count(DISTINCT xmin::text) FROM aggregate_results WHERE "
                          "destination = 'inventory' AND event_id <= 3") == "1");
  CHECK(query_value(db(), "SELECT count(DISTINCT xmin::text) FROM aggregate_results") != "1");
}

TEST_CASE("a connection lost under a statement fails its runs, none goes on; the next statement "
          "opens a new connection") {
  truncate_all(db());
  runs r;
  r.prepare_rows(3);
  table_lock lock;
  for (int i = 1; i <= 3; ++i)
    r.spawn({row_of(i, "inventory")});
  r.driver.drive(0ms);
  wait_for_blocked(1);
  CHECK(query_value(db(), "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                          "application_name = 'lane-test' AND wait_event_type = 'Lock'") == "1");
  r.finish();
  lock.release();
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(r.went_on[i] == -1);
    REQUIRE(r.errors[i]);
    inspect(r.errors[i], [](const std::exception& e) {
      INFO(e.what());
      CHECK(persistence::is_connection_loss(e));
    });
  }
  CHECK(count_rows(db(), "aggregate_results") == 0);

  r.spawn({row_of(5, "inventory")});
  r.finish();
  CHECK_FALSE(r.errors[3]);
  CHECK(r.went_on[3] == 1);
}

TEST_CASE("a row the database refuses on the lane fails only its own run; the others' commit") {
  truncate_all(db());
  runs r;
  auto bad = row_of(2, "inventory");
  bad.request_payload_json = "{not json";
  r.spawn({row_of(1, "inventory")});
  r.spawn({bad});
  r.spawn({row_of(3, "inventory")});
  r.finish();
  CHECK_FALSE(r.errors[0]);
  CHECK_FALSE(r.errors[2]);
  CHECK(r.went_on[0] == 2);
  CHECK(r.went_on[2] == 2);
  CHECK(r.went_on[1] == -1);
  REQUIRE(r.errors[1]);
  inspect(r.errors[1], [](const std::exception& e) {
    CHECK(dynamic_cast<const pqxx::sql_error*>(&e));
    CHECK_FALSE(persistence::is_connection_loss(e));
  });
  CHECK(query_value(db(), "SELECT string_agg(event_id::text, ',' ORDER BY event_id) FROM "
                          "aggregate_results") == "1,3");
}

TEST_CASE("runs cancelled while their statement is in flight are dropped; the lane goes on") {
  truncate_all(db());
  runs r;
  r.prepare_rows(1);
  {
    table_lock lock;
    r.spawn({row_of(1, "inventory"), row_of(1, "fraud")});
    r.driver.drive(0ms);
    wait_for_blocked(1);
    r.driver.cancel_all(); // the statement's connection is closed under it
    CHECK(r.driver.running() == 0);
    CHECK(r.lane->idle());
    lock.release();
  }
  r.driver.drive(0ms);
  CHECK(r.went_on[0] == -1);
  CHECK(query_value(db(), "SELECT count(*) FROM aggregate_results WHERE destination = 'fraud'") ==
        "0");
  r.spawn({row_of(2, "inventory")});
  r.finish();
  CHECK_FALSE(r.errors[1]);
  CHECK(query_value(db(), "SELECT count(*) FROM aggregate_results WHERE event_id = 2") == "1");
}

TEST_CASE("completions on the lane, each fenced by its own lease") {
  truncate_all(db());
  persistence::worker_connections pool([](int) { return db(); }, 1, {});
  actors::call_driver driver;
  actors::database_lane lane(driver, db(), persistence::outbox_statements::lane_setup, 3);
  actors::attempt_writer rows(pool, "test-processor", driver, &lane);
  actors::completion_writer completions(pool, "test-processor", driver, &rows, &lane, {});
  for (int i = 1; i <= 3; ++i)
    query_value(db(), "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                      "payloads, idempotency_key) VALUES ('thing', '" +
                          std::to_string(i) + "', 'Thing', '{}', 'k" + std::to_string(i) + "')");
  auto events = pool.outbox("test-processor")->claim("test-processor", 3, 60s);
  REQUIRE(events.size() == 3);
  query_value(db(), "UPDATE outbox_events SET lease_token = lease_token + 1000 WHERE id = " +
                        std::to_string(events[1].id));
  std::vector<persistence::attempt_row> last_rows;
  for (const auto& e : events)
    last_rows.push_back(row_of(e.id, "billing"));
  std::vector<int> answers(3, -1);
  for (std::size_t i = 0; i < 3; ++i) {
    auto run = [](actors::completion_writer& w, const persistence::claimed_event& e,
                  const persistence::attempt_row& row, int& answer) -> actors::task<void> {
      answer = co_await w.complete(e, domain::engine_outcome::fanout_succeeded, {}, &row) ? 1 : 0;
    };
    driver.spawn(run(completions, events[i], last_rows[i], answers[i]),
                 [](std::exception_ptr e) { CHECK_FALSE(e); });
  }
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (driver.running() > 0 && std::chrono::steady_clock::now() < give_up)
    driver.drive(10ms);
  CHECK(answers == std::vector<int>{1, 0, 1});
  CHECK(query_value(db(), "SELECT string_agg(id::text || ':' || status, ',' ORDER BY id) FROM "
                          "outbox_events") == "1:PROCESSED,2:PROCESSING,3:PROCESSED");
  CHECK(count_rows(db(), "aggregate_results") == 3);
}

TEST_CASE("a processor gets three connections of its own when the budget leaves one more per "
          "processor and one for the janitor to share") {
  conf::outbox_settings o;
  CHECK(actors::own_connections(o) == 3); // the defaults: 13 connections for three processors
  o.connections = 12;
  CHECK(actors::own_connections(o) == 0);
  o.pool_size = 1;
  o.calls_in_flight = 4;
  o.connections = 5;
  CHECK(actors::own_connections(o) == 3);
  o.connections = 4; // one left to share: not enough
  CHECK(actors::own_connections(o) == 0);
  o.pool_size = 2;
  o.connections = 9;
  CHECK(actors::own_connections(o) == 3);
  o.connections = 8;
  CHECK(actors::own_connections(o) == 0);
  o.connections = 9;
  o.calls_in_flight = 1; // one run at a time: nothing to overlap
  CHECK(actors::own_connections(o) == 0);
  o.calls_in_flight = 16;
  CHECK(actors::own_connections(o) == 3);
  o.calls_in_flight = 17; // many: blocking statements group more, which the cores need more
  CHECK(actors::own_connections(o) == 0);
}
