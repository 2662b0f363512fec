// The statements of a processor's runs written together on a real PostgreSQL: the attempt rows
// of several runs commit in one transaction before any of those runs goes on, and so do their
// completions, each fenced by its own lease; a lost connection fails every run that waited on the
// flush, and none of them goes on; a row the database refuses fails only its own run.
#include "actors/attempt_writer.hpp"
#include "actors/call_driver.hpp"
#include "actors/completion_writer.hpp"
#include "persistence/connection_pool.hpp"
#include "persistence/worker_connections.hpp"
#include "test/actors/recording_runs.hpp"
#include "test/support/partner.hpp"
#include "test/support/test_db.hpp"

#include <atomic>
#include <doctest/doctest.h>
#include <exception>
#include <pqxx/except>
#include <thread>
#include <vector>

using namespace outboxd;
using namespace outboxd::test;
using namespace std::chrono_literals;

namespace {

const lazy_database db("outboxd_actor_attempt_rows");

/// Recording runs on this file's database.
struct runs : recording_runs {
  explicit runs(int connections = 1,
                std::chrono::microseconds linger_below = actors::call_driver::fast_call)
      : recording_runs(db(), connections, linger_below) {}
};

/// Of three runs of one row each, the middle one's the database refused: that run failed with the
/// refusal and did not go on; the other two went on with at least `committed` rows in.
void check_middle_refused(const runs& r, long long committed) {
  CHECK_FALSE(r.errors[0]);
  CHECK_FALSE(r.errors[2]);
  CHECK(r.went_on[0] >= committed);
  CHECK(r.went_on[2] >= committed);
  CHECK(r.went_on[1] == -1);
  REQUIRE(r.errors[1]);
  inspect(r.errors[1], [](const std::exception& e) {
    CHECK(dynamic_cast<const pqxx::sql_error*>(&e));
    CHECK_FALSE(persistence::is_connection_loss(e));
  });
}

} // namespace

TEST_CASE("the attempt rows of several runs commit in one transaction before any run goes on") {
  truncate_all(db());
  runs r;
  for (int i = 1; i <= 5; ++i)
    r.spawn({row_of(i, "inventory")});
  r.spawn({row_of(6, "inventory"), row_of(6, "fraud")}); // back to back: the next flush
  CHECK(r.writer.pending() == 6);
  CHECK(count_rows(db(), "aggregate_results") == 0);
  for (auto n : r.went_on)
    CHECK(n == -1); // all wait for their rows

  r.driver.drive(0ms);
  CHECK(r.writer.pending() == 0);
  CHECK(r.driver.running() == 0);
  for (std::size_t i = 0; i < r.went_on.size(); ++i) {
    CHECK_FALSE(r.errors[i]);
    CHECK(r.went_on[i] >= 6); // its own row was committed, with the others of its flush
  }
  CHECK(count_rows(db(), "aggregate_results") == 7);
  // One transaction for the first row of every run, one more for the row recorded after it.
  CHECK(query_value(db(), "SELECT count(DISTINCT xmin::text) FROM aggregate_results") == "2");
  CHECK(query_value(db(), "SELECT count(DISTINCT xmin::text) FROM aggregate_results "
                          "WHERE destination = 'inventory'") == "1");
  CHECK(query_value(db(), "SELECT request_payload->>'sku' FROM aggregate_results WHERE "
                          "event_id = 6 AND destination = 'fraud'") == "A-1");
}

TEST_CASE("a lost connection fails every run waiting on the flush, and none of them goes on") {
  truncate_all(db());
  runs r;
  (void)r.pool.outbox("test-processor")->next_due_in(); // the connection the flush will use
  for (int i = 1; i <= 3; ++i)
    r.spawn({row_of(i, "inventory"), row_of(i, "fraud")});
  REQUIRE(r.writer.pending() == 3);
  CHECK(query_value(db(), "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                          "WHERE datname = current_database() AND pid <> pg_backend_pid()") == "1");

  r.driver.drive(0ms);
  CHECK(r.driver.running() == 0);
  for (std::size_t i = 0; i < r.went_on.size(); ++i) {
    CHECK(r.went_on[i] == -1);
    REQUIRE(r.errors[i]);
    inspect(r.errors[i], [](const std::exception& e) {
      INFO(e.what());
      CHECK(persistence::is_connection_loss(e));
    });
  }
  CHECK(count_rows(db(), "aggregate_results") == 0);
}

TEST_CASE("a row the database refuses fails only its own run; the others' rows commit") {
  truncate_all(db());
  runs r;
  auto bad = row_of(2, "inventory");
  bad.request_payload_json = "{not json";
  r.spawn({row_of(1, "inventory")});
  r.spawn({bad});
  r.spawn({row_of(3, "inventory")});

  r.driver.drive(0ms);
  check_middle_refused(r, 2);
  CHECK(query_value(db(), "SELECT string_agg(event_id::text, ',' ORDER BY event_id) FROM "
                          "aggregate_results") == "1,3");
}

TEST_CASE("a row refused in a later statement of a large flush: the statements before it are not "
          "written twice") {
  truncate_all(db());
  runs r;
  // More rows than one statement takes; the refused one is in the second statement.
  const int n = static_cast<int>(persistence::outbox_repository::max_rows_per_insert) + 10;
  const int bad_one = n - 3;
  for (int i = 1; i <= n; ++i) {
    auto row = row_of(i, "inventory");
    if (i == bad_one)
      row.request_payload_json = "{not json";
    r.spawn({row});
  }
  r.driver.drive(0ms);
  for (int i = 1; i <= n; ++i) {
    CAPTURE(i);
    CHECK(static_cast<bool>(r.errors[i - 1]) == (i == bad_one));
  }
  // One row per run that went on, none twice.
  CHECK(count_rows(db(), "aggregate_results") == n - 1);
  CHECK(query_value(db(), "SELECT count(DISTINCT event_id) FROM aggregate_results") ==
        std::to_string(n - 1));
}

TEST_CASE("runs cancelled while their rows wait are dropped with the rows unwritten") {
  truncate_all(db());
  runs r;
  r.spawn({row_of(1, "inventory")});
  r.spawn({row_of(2, "inventory")});
  REQUIRE(r.writer.pending() == 2);
  r.driver.cancel_all();
  CHECK(r.writer.pending() == 0);
  CHECK(r.driver.running() == 0);
  r.driver.drive(0ms);
  CHECK(count_rows(db(), "aggregate_results") == 0);
  CHECK(r.went_on == std::vector<long long>{-1, -1});
}

namespace {

/// Claims `n` new events (aggregates 1..n) on `pool`.
std::vector<persistence::claimed_event> claim_events(persistence::worker_connections& pool, int n) {
  for (int i = 1; i <= n; ++i)
    query_value(db(), "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                      "payloads, idempotency_key) VALUES ('thing', '" +
                          std::to_string(i) + "', 'Thing', '{}', 'k" + std::to_string(i) + "')");
  return pool.outbox("test-processor")->claim("test-processor", n, 60s);
}

} // namespace

TEST_CASE("completions of several runs commit in one transaction, each fenced by its own lease") {
  truncate_all(db());
  persistence::worker_connections pool([](int) { return db(); }, 1, {});
  actors::call_driver driver;
  actors::completion_writer completions(pool, "test-processor", driver);
  auto events = claim_events(pool, 3);
  REQUIRE(events.size() == 3);
  // Another worker took event 2 over: its completion must change nothing.
  query_value(db(), "UPDATE outbox_events SET lease_token = lease_token + 1000 WHERE id = " +
                        std::to_string(events[1].id));
  std::vector<persistence::attempt_row> last_rows;
  for (const auto& e : events)
    last_rows.push_back(row_of(e.id, "billing"));
  std::vector<int> answers(3, -1); // -1: not resumed yet
  std::vector<std::exception_ptr> errors(3);
  for (std::size_t i = 0; i < 3; ++i) {
    auto run = [](actors::completion_writer& w, const persistence::claimed_event& e,
                  const persistence::attempt_row& row, int& answer) -> actors::task<void> {
      answer = co_await w.complete(e, domain::engine_outcome::fanout_succeeded, {}, &row) ? 1 : 0;
    };
    driver.spawn(run(completions, events[i], last_rows[i], answers[i]),
                 [&errors, i](std::exception_ptr error) { errors[i] = error; });
  }
  CHECK(completions.pending() == 3);
  CHECK(answers == std::vector<int>{-1, -1, -1});

  driver.drive(0ms);
  CHECK(answers == std::vector<int>{1, 0, 1});
  for (const auto& error : errors)
    CHECK_FALSE(error);
  CHECK(query_value(db(), "SELECT string_agg(id::text || ':' || status, ',' ORDER BY id) FROM "
                          "outbox_events") == "1:PROCESSED,2:PROCESSING,3:PROCESSED");
  // The calls were made: every last row commits, with its completion or without one.
  CHECK(count_rows(db(), "aggregate_results") == 3);
  CHECK(query_value(db(), "SELECT count(DISTINCT xmin::text) FROM (SELECT xmin FROM "
                          "outbox_events WHERE status = 'PROCESSED' UNION ALL SELECT xmin FROM "
                          "aggregate_results) t") == "1");
}

TEST_CASE("a completion refused in a later statement of a large flush: the statements before it "
          "are not written twice") {
  truncate_all(db());
  persistence::worker_connections pool([](int) { return db(); }, 1, {});
  actors::call_driver driver;
  actors::completion_writer completions(pool, "test-processor", driver);
  // More completions than one statement takes; the refused one (its last row is not JSON) is in
  // the second statement.
  const int n = static_cast<int>(persistence::outbox_repository::max_rows_per_insert) + 10;
  const int bad_one = n - 3;
  auto events = claim_events(pool, n);
  REQUIRE(events.size() == static_cast<std::size_t>(n));
  std::vector<persistence::attempt_row> last_rows;
  for (const auto& e : events) {
    last_rows.push_back(row_of(e.id, "billing"));
    if (e.id == bad_one)
      last_rows.back().request_payload_json = "{not json";
  }
  std::vector<int> answers(n, -1);
  std::vector<std::exception_ptr> errors(n);
  for (int i = 0; i < n; ++i) {
    auto run = [](actors::completion_writer& w, const persistence::claimed_event& e,
                  const persistence::attempt_row& row, int& answer) -> actors::task<void> {
      answer = co_await w.complete(e, domain::engine_outcome::fanout_succeeded, {}, &row) ? 1 : 0;
    };
    driver.spawn(run(completions, events[i], last_rows[i], answers[i]),
                 [&errors, i](std::exception_ptr error) { errors[i] = error; });
  }
  driver.drive(0ms);
  for (int i = 0; i < n; ++i) {
    CAPTURE(events[i].id);
    CHECK(static_cast<bool>(errors[i]) == (events[i].id == bad_one));
    if (events[i].id != bad_one)
      CHECK(answers[i] == 1); // completed, and told so
  }
  CHECK(count_rows(db(), "aggregate_results") == n - 1);
  CHECK(query_value(db(), "SELECT count(*) FROM outbox_events WHERE status = 'PROCESSED'") ==
        std::to_string(n - 1));
}

TEST_CASE("a lost connection fails every completion waiting on the flush") {
  truncate_all(db());
  persistence::worker_connections pool([](int) { return db(); }, 1, {});
  actors::call_driver driver;
  actors::completion_writer completions(pool, "test-processor", driver);
  auto events = claim_events(pool, 2);
  REQUIRE(events.size() == 2);
  std::vector<int> answers(2, -1);
  std::vector<std::exception_ptr> errors(2);
  for (std::size_t i = 0; i < 2; ++i) {
    auto run = [](actors::completion_writer& w, const persistence::claimed_event& e,
                  int& answer) -> actors::task<void> {
      answer = co_await w.complete(e, domain::engine_outcome::fanout_succeeded, {}, nullptr);
    };
    driver.spawn(run(completions, events[i], answers[i]),
                 [&errors, i](std::exception_ptr error) { errors[i] = error; });
  }
  CHECK(query_value(db(), "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                          "WHERE datname = current_database() AND pid <> pg_backend_pid()") == "1");
  driver.drive(0ms);
  CHECK(answers == std::vector<int>{-1, -1});
  for (const auto& error : errors) {
    REQUIRE(error);
    inspect(error, [](const std::exception& e) { CHECK(persistence::is_connection_loss(e)); });
  }
  CHECK(query_value(db(), "SELECT count(*) FROM outbox_events WHERE status = 'PROCESSING'") == "2");
}

namespace {

/// Runs recording attempt rows (see runs) and, on the same driver, runs completing claimed events,
/// with the rows riding on the completions' statements when the driver's calls are `fast` (one
/// call to a partner that answers at once teaches it so).
struct rides : runs {
  explicit rides(bool fast = true)
      : runs(1, fast ? std::chrono::hours(1) : actors::call_driver::fast_call),
        completions(pool, "test-processor", driver, &writer) {
    if (!fast)
      return;
    auto call = [](rides& r) -> actors::task<void> {
      client::call_request req;
      req.method = "POST";
      req.url = "http://127.0.0.1:" + std::to_string(r.fast_partner.port) + "/";
      co_await r.driver.call(req);
    };
    bool called = false;
    driver.spawn(call(*this), [&called](std::exception_ptr) { called = true; });
    for (auto deadline = std::chrono::steady_clock::now() + 10s;
         !called && std::chrono::steady_clock::now() < deadline;)
      driver.drive(50ms);
    REQUIRE(driver.calls_are_fast());
  }

  /// A run that completes `e` with `last_row`; answers[i] is 1 when it was completed.
  void complete(const persistence::claimed_event& e, const persistence::attempt_row& last_row) {
    const auto i = answers.size();
    answers.push_back(-1);
    completion_errors.emplace_back();
    auto run = [](rides& r, std::size_t i, const persistence::claimed_event& e,
                  const persistence::attempt_row& row) -> actors::task<void> {
      r.answers[i] =
          co_await r.completions.complete(e, domain::engine_outcome::fanout_succeeded, {}, &row);
    };
    driver.spawn(run(*this, i, e, last_row),
                 [this, i](std::exception_ptr error) { completion_errors[i] = error; });
  }

  /// Empties the tables and claims one new event.
  persistence::claimed_event claim_one() {
    truncate_all(db());
    auto events = claim_events(pool, 1);
    REQUIRE(events.size() == 1);
    return events.front();
  }

  test::partner fast_partner;
  actors::completion_writer completions;
  std::vector<int> answers; // -1: not resumed
  std::vector<std::exception_ptr> completion_errors;
};

} // namespace

TEST_CASE("the attempt rows of other runs ride on a completion: one transaction for both") {
  rides r;
  const auto event = r.claim_one();
  const auto last_row = row_of(event.id, "billing");
  r.spawn({row_of(101, "inventory")});
  r.spawn({row_of(102, "inventory"), row_of(102, "fraud")}); // its second row: the next flush
  r.complete(event, last_row);
  REQUIRE(r.writer.pending() == 2);
  REQUIRE(r.completions.pending() == 1);

  r.driver.drive(0ms);
  CHECK(r.answers == std::vector<int>{1});
  CHECK_FALSE(r.completion_errors[0]);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK_FALSE(r.errors[i]);
    CHECK(r.went_on[i] >= 3); // its row committed before it went on
  }
  CHECK(count_rows(db(), "aggregate_results") == 4);
  // The completion, its last row and the first rows of both runs: one commit; the row recorded
  // after one of them: another.
  CHECK(query_value(db(), "SELECT count(DISTINCT xmin::text) FROM (SELECT xmin FROM "
                          "outbox_events WHERE status = 'PROCESSED' UNION ALL SELECT xmin FROM "
                          "aggregate_results WHERE destination <> 'fraud') t") == "1");
  CHECK(query_value(db(), "SELECT count(DISTINCT xmin::text) FROM aggregate_results") == "2");
}

TEST_CASE("a riding row the database refuses fails only its own run; the completion and the "
          "other riders commit") {
  rides r;
  const auto event = r.claim_one();
  const auto last_row = row_of(event.id, "billing");
  auto bad = row_of(102, "inventory");
  bad.request_payload_json = "{not json";
  r.spawn({row_of(101, "inventory")});
  r.spawn({bad});
  r.spawn({row_of(103, "inventory")});
  r.complete(event, last_row);

  r.driver.drive(0ms);
  CHECK(r.answers == std::vector<int>{1});
  CHECK_FALSE(r.completion_errors[0]);
  check_middle_refused(r, 3);
  CHECK(query_value(db(), "SELECT string_agg(event_id::text, ',' ORDER BY event_id) FROM "
                          "aggregate_results") == std::to_string(event.id) + ",101,103");
  CHECK(query_value(db(), "SELECT status FROM outbox_events") == "PROCESSED");
}

TEST_CASE("a completion the database refuses fails only its own run; the rows riding on it "
          "commit on their own") {
  rides r;
  const auto event = r.claim_one();
  auto bad_last_row = row_of(event.id, "billing");
  bad_last_row.request_payload_json = "{not json";
  r.spawn({row_of(101, "inventory")});
  r.spawn({row_of(102, "inventory")});
  r.complete(event, bad_last_row);

  r.driver.drive(0ms);
  CHECK(r.answers == std::vector<int>{-1});
  REQUIRE(r.completion_errors[0]);
  inspect(r.completion_errors[0],
          [](const std::exception& e) { CHECK(dynamic_cast<const pqxx::sql_error*>(&e)); });
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK_FALSE(r.errors[i]);
    CHECK(r.went_on[i] >= 2);
  }
  CHECK(query_value(db(), "SELECT string_agg(event_id::text, ',' ORDER BY event_id) FROM "
                          "aggregate_results") == "101,102");
  CHECK(query_value(db(), "SELECT status FROM outbox_events") == "PROCESSING");
}

TEST_CASE("a lost connection fails a completion and every row riding on it") {
  rides r;
  const auto event = r.claim_one();
  const auto last_row = row_of(event.id, "billing");
  r.spawn({row_of(101, "inventory")});
  r.spawn({row_of(102, "inventory")});
  r.complete(event, last_row);
  CHECK(query_value(db(), "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                          "WHERE datname = current_database() AND pid <> pg_backend_pid()") == "1");

  r.driver.drive(0ms);
  CHECK(r.driver.running() == 0);
  CHECK(r.answers == std::vector<int>{-1});
  REQUIRE(r.completion_errors[0]);
  inspect(r.completion_errors[0],
          [](const std::exception& e) { CHECK(persistence::is_connection_loss(e)); });
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(r.went_on[i] == -1);
    REQUIRE(r.errors[i]);
    inspect(r.errors[i],
            [](const std::exception& e) { CHECK(persistence::is_connection_loss(e)); });
  }
  CHECK(count_rows(db(), "aggregate_results") == 0);
  CHECK(query_value(db(), "SELECT status FROM outbox_events") == "PROCESSING");
}

TEST_CASE("with slow calls, rows commit on their own, without waiting for a completion's commit") {
  rides r(false);
  REQUIRE_FALSE(r.driver.calls_are_fast());
  const auto event = r.claim_one();
  const auto last_row = row_of(event.id, "billing");
  r.spawn({row_of(101, "inventory")});
  r.complete(event, last_row);
  r.driver.drive(0ms);
  CHECK(r.answers == std::vector<int>{1});
  CHECK_FALSE(r.errors[0]);
  CHECK(r.went_on[0] >= 1);
  CHECK(query_value(db(), "SELECT count(DISTINCT xmin::text) FROM aggregate_results") == "2");
  // The row's statement went first (its transaction began first).
  CHECK(query_value(db(),
                    "SELECT (SELECT xmin::text::bigint FROM aggregate_results WHERE "
                    "event_id = 101) < (SELECT xmin::text::bigint FROM outbox_events)") == "t");
}

TEST_CASE("with slow calls, the call after a committed row goes out before the completions' "
          "statement") {
  rides r(false);
  // A slow call first: the driver learns its calls are slow.
  r.fast_partner.handle([](const test::partner::request& req) {
    test::partner::answer a;
    if (req.path == "/slow")
      a.delay = 20ms;
    return a;
  });
  auto call = [](rides& r, std::string path,
                 const persistence::attempt_row* row) -> actors::task<void> {
    if (row)
      co_await r.writer.record(*row);
    client::call_request req;
    req.method = "POST";
    req.url = "http://127.0.0.1:" + std::to_string(r.fast_partner.port) + path;
    co_await r.driver.call(req);
  };
  int ended = 0;
  auto count_end = [&ended](std::exception_ptr) { ++ended; };
  r.driver.spawn(call(r, "/slow", nullptr), count_end);
  for (auto deadline = std::chrono::steady_clock::now() + 10s;
       ended < 1 && std::chrono::steady_clock::now() < deadline;)
    r.driver.drive(50ms);
  REQUIRE(ended == 1);
  REQUIRE_FALSE(r.driver.calls_are_fast());

  const auto event = r.claim_one();
  const auto last_row = row_of(event.id, "billing");
  const auto row = row_of(101, "inventory");
  r.driver.spawn(call(r, "/next", &row), count_end);
  r.complete(event, last_row);
  // The completions' statement waits for the event's row, locked here until the next call has
  // reached the partner (its connection accepted; or 10 s have passed: the call did not go out
  // before that statement).
  pqxx::connection blocker(db());
  pqxx::work lock(blocker);
  lock.exec("SELECT 1 FROM outbox_events WHERE id = " + std::to_string(event.id) + " FOR UPDATE");
  std::atomic<bool> call_came{false};
  std::thread release([&] {
    for (auto deadline = std::chrono::steady_clock::now() + 10s;
         !call_came && std::chrono::steady_clock::now() < deadline;
         std::this_thread::sleep_for(5ms))
      call_came = r.fast_partner.connection_count() == 2;
    lock.commit();
  });
  r.driver.drive(0ms);
  release.join();
  CHECK(call_came);
  CHECK(r.answers == std::vector<int>{1});
  for (auto deadline = std::chrono::steady_clock::now() + 10s;
       ended < 2 && std::chrono::steady_clock::now() < deadline;)
    r.driver.drive(50ms);
  CHECK(ended == 2);
}

TEST_CASE("rows ride only on a small flush of completions, at most a few of them") {
  truncate_all(db());
  rides r;
  // More completions than ride_limit: the rows are a statement of their own.
  auto events = claim_events(r.pool, 9);
  REQUIRE(events.size() == 9);
  std::vector<persistence::attempt_row> last_rows;
  for (const auto& e : events)
    last_rows.push_back(row_of(e.id, "billing"));
  r.spawn({row_of(101, "inventory")});
  for (std::size_t i = 0; i < events.size(); ++i)
    r.complete(events[i], last_rows[i]);
  r.driver.drive(0ms);
  CHECK_FALSE(r.errors[0]);
  CHECK(query_value(db(), "SELECT count(DISTINCT xmin::text) FROM aggregate_results") == "2");
  CHECK(query_value(db(), "SELECT count(*) FROM outbox_events WHERE status = 'PROCESSED'") == "9");
}
