// The outbox's units of work on a real PostgreSQL: claiming (order, per-aggregate exclusion,
// SKIP LOCKED, a cost that follows the claim's size), lease fencing, retries, dead-lettering, the
// reaper and retention.
#include "domain/lease_clock.hpp"
#include "persistence/connection_pool.hpp"
#include "persistence/dead_letter_admin.hpp"
#include "persistence/dlq_repository.hpp"
#include "persistence/outbox_repository.hpp"
#include "persistence/statements.hpp"
#include "test/support/test_db.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <memory>
#include <pqxx/pqxx>
#include <regex>
#include <set>
#include <thread>

using namespace outboxd;
using namespace outboxd::test;
using namespace std::chrono_literals;

namespace {

const lazy_database db("outboxd_pg_outbox");

void exec(const std::string& sql) {
  pqxx::connection c(db());
  pqxx::work tx(c);
  tx.exec(sql);
  tx.commit();
}

/// Inserts an event for `aggregate` and returns its id.
long long add_event(const std::string& aggregate, const std::string& type = "OrderCreated") {
  static int n = 0;
  return std::stoll(query_value(
      db(), "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads, "
            "idempotency_key) VALUES ('order', '" +
                aggregate + "', '" + type + "', '{}', 'k" + std::to_string(++n) +
                "') RETURNING id"));
}

/// An attempt row of event `id` of order `aggregate`, for `destination`.
persistence::attempt_row attempt_of(long long id, const std::string& aggregate,
                                    const std::string& destination, int attempt,
                                    std::optional<int> status, domain::attempt_outcome outcome) {
  persistence::attempt_row row;
  row.event_id = id;
  row.aggregate_id = aggregate;
  row.event_type = "OrderCreated";
  row.destination = destination;
  row.attempt = attempt;
  row.endpoint_url = "http://127.0.0.1:1/" + destination;
  row.http_method = "POST";
  row.response_status = status;
  row.outcome = outcome;
  return row;
}

struct fixture {
  fixture() { truncate_all(db()); }
  pqxx::connection conn_a{db()};
  pqxx::connection conn_b{db()};
  persistence::outbox_repository a{conn_a, {}};
  persistence::outbox_repository b{conn_b, {}};
};

std::string status_of(long long id) {
  return query_value(db(), "SELECT status FROM outbox_events WHERE id = " + std::to_string(id));
}

std::vector<long long> ids_of(const std::vector<persistence::claimed_event>& claimed) {
  std::vector<long long> out;
  for (const auto& e : claimed)
    out.push_back(e.id);
  return out;
}

/// Collects the notices the server sends on a connection.
struct notices final : pqxx::errorhandler {
  explicit notices(pqxx::connection_base& c) : pqxx::errorhandler(c) {}
  bool operator()(const char message[]) noexcept override {
    all.emplace_back(message);
    return true;
  }
  std::vector<std::string> all;
};

/// The plans (auto_explain's JSON, with buffers) of the statements `run` makes on `conn`.
template <class Run> std::vector<std::string> plans_of(pqxx::connection& conn, Run run) {
  pqxx::nontransaction(conn).exec("LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; "
                                  "SET auto_explain.log_analyze = on; "
                                  "SET auto_explain.log_buffers = on; "
                                  "SET auto_explain.log_timing = off; "
                                  "SET auto_explain.log_format = json; "
                                  "SET auto_explain.log_level = notice");
  notices got(conn);
  run();
  pqxx::nontransaction(conn).exec("SET auto_explain.log_min_duration = -1");
  return got.all;
}

/// The shared buffers (pages) the claim `run` makes on `conn` touches: the top node's counts are
/// those of the whole statement.
template <class Run> long long pages_of(pqxx::connection& conn, Run run) {
  for (const auto& n : plans_of(conn, run)) {
    if (n.find("WITH RECURSIVE") == std::string::npos && n.find("FOR UPDATE") == std::string::npos)
      continue;
    long long pages = 0;
    for (const char* key : {"Shared Hit Blocks", "Shared Read Blocks"}) {
      std::smatch m;
      REQUIRE(std::regex_search(n, m, std::regex(std::string("\"") + key + "\": ([0-9]+)")));
      pages += std::stoll(m[1]); // the first is the top node's: its children come after it
    }
    return pages;
  }
  FAIL("no plan of the claim among the notices");
  return 0;
}

} // namespace

TEST_CASE_FIXTURE(fixture, "claims take due events oldest first and lease them") {
  auto e1 = add_event("1");
  auto e2 = add_event("2");
  exec("UPDATE outbox_events SET next_retry_at = now() + interval '1 hour' WHERE id = " +
       std::to_string(e2));
  auto e3 = add_event("3");
  auto claimed = a.claim("worker-a", 10, 60s);
  REQUIRE(claimed.size() == 2);
  CHECK(claimed[0].id == e1);
  CHECK(claimed[1].id == e3);
  CHECK(claimed[0].lease_token != claimed[1].lease_token);
  CHECK(status_of(e1) == "PROCESSING");
  CHECK(query_value(db(), "SELECT lease_owner FROM outbox_events WHERE id = " +
                              std::to_string(e1)) == "worker-a");
  CHECK(b.claim("worker-b", 10, 60s).empty());
  auto due = a.next_due_in();
  REQUIRE(due);
  CHECK(*due > 3500s);
}

TEST_CASE_FIXTURE(fixture, "a claim's lease is counted from before its statement, not after") {
  // The database starts the lease when the claim runs; a claim held up (here by a table lock for
  // 300 ms) must not let its runs think they have those 300 ms more of it.
  auto e1 = add_event("1");
  pqxx::connection holder(db());
  auto lock = std::make_unique<pqxx::work>(holder);
  lock->exec("LOCK TABLE outbox_events IN SHARE ROW EXCLUSIVE MODE");
  std::chrono::steady_clock::time_point released;
  std::thread release([&] {
    std::this_thread::sleep_for(300ms);
    released = std::chrono::steady_clock::now();
    lock->commit();
  });
  const auto before = std::chrono::steady_clock::now();
  auto claimed = a.claim("worker-a", 10, 60s);
  release.join();
  REQUIRE(claimed.size() == 1);
  CHECK(claimed[0].id == e1);
  CHECK(claimed[0].claimed_at >= before);
  CHECK(claimed[0].claimed_at < released);
}

TEST_CASE_FIXTURE(fixture,
                  "a later event of an aggregate waits while an earlier one is unfinished") {
  auto first = add_event("7");
  auto second = add_event("7", "OrderStatusUpdated");
  auto other = add_event("8");
  auto claimed = a.claim("a", 10, 60s);
  REQUIRE(claimed.size() == 2);
  CHECK(claimed[0].id == first);
  CHECK(claimed[1].id == other);
  CHECK(b.claim("b", 10, 60s).empty()); // second waits for first (PROCESSING)
  REQUIRE(a.retry(claimed[0], 0ms, "inventory: HTTP 503"));
  // first is PENDING again and still ahead of second.
  auto again = b.claim("b", 10, 60s);
  REQUIRE(again.size() == 1);
  CHECK(again[0].id == first);
  CHECK(again[0].attempts == 1);
  REQUIRE(b.complete(again[0], std::nullopt));
  auto next = a.claim("a", 10, 60s);
  REQUIRE(next.size() == 1);
  CHECK(next[0].id == second);
}

TEST_CASE_FIXTURE(fixture, "an aggregate with a pending or failed dead letter is not claimed") {
  auto first = add_event("9");
  auto second = add_event("9", "!OrderCreated");
  auto claimed = a.claim("a", 10, 60s);
  REQUIRE(a.dead_letter(claimed[0], "NON_RETRYABLE_ERROR", "billing: HTTP 400"));
  CHECK(status_of(first) == "DEAD");
  CHECK(query_value(db(), "SELECT reason || ' ' || status || ' ' || last_error FROM "
                          "dead_letter_events") == "NON_RETRYABLE_ERROR PENDING billing: HTTP 400");
  CHECK(a.claim("a", 10, 60s).empty()); // the cancellation waits for the compensation
  // A compensation that failed (the order in ATTENTION) holds the cancellation until an
  // operator's redrive resolves it.
  exec("UPDATE dead_letter_events SET status = 'FAILED'");
  CHECK(a.claim("a", 10, 60s).empty());
  exec("UPDATE dead_letter_events SET status = 'PROCESSED'");
  auto next = a.claim("a", 10, 60s);
  REQUIRE(next.size() == 1);
  CHECK(next[0].id == second);
}

TEST_CASE_FIXTURE(fixture, "a claim steps over held-back and locked events to the oldest others") {
  auto first = add_event("1");
  auto held_back = add_event("1", "OrderStatusUpdated"); // behind first
  auto locked = add_event("2");
  auto dead_lettered = add_event("3");
  auto behind_letter = add_event("3", "!OrderCreated");
  auto free1 = add_event("4");
  auto free2 = add_event("5");
  auto free3 = add_event("6");
  exec("UPDATE outbox_events SET status = 'DEAD' WHERE id = " + std::to_string(dead_lettered));
  exec("INSERT INTO dead_letter_events (original_event_id, aggregate_type, aggregate_id, "
       "event_type, payloads, reason) VALUES (" +
       std::to_string(dead_lettered) +
       ", 'order', '3', 'OrderCreated', '{}', 'NON_RETRYABLE_ERROR')");
  // another claim holds `locked` for the length of this test's claims
  pqxx::connection other(db());
  pqxx::work holder(other);
  holder.exec("SELECT id FROM outbox_events WHERE id = " + std::to_string(locked) + " FOR UPDATE");

  auto claimed = a.claim("a", 3, 60s);
  CHECK(ids_of(claimed) == std::vector<long long>{first, free1, free2});
  CHECK(ids_of(a.claim("a", 10, 60s)) == std::vector<long long>{free3});
  holder.commit();
  CHECK(ids_of(a.claim("a", 10, 60s)) == std::vector<long long>{locked});
  REQUIRE(a.complete(claimed[0], std::nullopt));
  CHECK(ids_of(a.claim("a", 10, 60s)) == std::vector<long long>{held_back});
  CHECK(status_of(behind_letter) == "PENDING"); // the dead letter is still PENDING
}

TEST_CASE_FIXTURE(fixture, "claims take exactly their limit, oldest first, one after the other") {
  std::vector<long long> ids;
  for (int i = 0; i < 20; ++i)
    ids.push_back(add_event(std::to_string(100 + i)));
  CHECK(a.claim("a", 0, 60s).empty());
  std::vector<long long> got;
  for (int round = 0; round < 3; ++round) {
    auto c = ids_of(a.claim("a", 7, 60s));
    CHECK(c.size() == (round < 2 ? 7u : 6u));
    got.insert(got.end(), c.begin(), c.end());
  }
  CHECK(got == ids);
  CHECK(a.claim("a", 7, 60s).empty());
}

TEST_CASE_FIXTURE(fixture, "a claim touches pages in proportion to its size, not to the backlog, "
                           "on statistics taken while the backlog was empty") {
  // A quiet table: history only, and the statistics say so.
  exec("INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads, "
       "idempotency_key, status, processed_at) SELECT 'order', 'h' || g, 'OrderCreated', '{}', "
       "'h' || g, 'PROCESSED', now() FROM generate_series(1, 2000) g");
  exec("ANALYZE outbox_events, dead_letter_events, aggregate_results");
  // Then a burst: 3000 events of 1000 orders (two of every three held back behind the first),
  // and the first 50 run already.
  exec("INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads, "
       "idempotency_key) SELECT 'order', (g % 1000)::text, 'OrderCreated', '{}', 'b' || g "
       "FROM generate_series(0, 2999) g");
  for (const auto& e : a.claim("a", 50, 60s))
    REQUIRE(a.complete(e, std::nullopt));
  auto oldest =
      std::stoll(query_value(db(), "SELECT min(id) FROM outbox_events WHERE status = 'PENDING'"));

  auto pages = pages_of(conn_b, [&] { REQUIRE(b.claim("test", 10, 60s).size() == 10); });
  // 10 rows updated (heap and each index) and 10 steps of the walk with their probes: a few
  // hundred pages. A plan that scans the unfinished events per candidate, or sorts the backlog,
  // touches tens of thousands.
  CHECK(pages < 1500);
  CHECK(query_value(db(), "SELECT count(*) || ' ' || min(id) || ' ' || max(id) FROM outbox_events "
                          "WHERE lease_owner = 'test'") ==
        "10 " + std::to_string(oldest) + " " + std::to_string(oldest + 9));
}

TEST_CASE_FIXTURE(fixture, "a claim steps over the processed front of a burst through the due "
                           "index, with statistics that still call it pending") {
  // Statistics taken early in a burst: nearly every event pending. Then the first 9 500 run before
  // the next ANALYZE, so their rows sit, PROCESSED, before the oldest due one. A walk along the
  // primary key (filtering on status, with the probes run for every row it passes) touches each
  // of them at every claim; the due index holds none of them once their dead entries are gone.
  exec("INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads, "
       "idempotency_key) SELECT 'order', g::text, 'OrderCreated', '{}', 'b' || g "
       "FROM generate_series(1, 10000) g");
  exec("ANALYZE outbox_events, dead_letter_events, aggregate_results");
  exec("UPDATE outbox_events SET status = 'PROCESSED', processed_at = now() WHERE id IN (SELECT "
       "id FROM outbox_events ORDER BY id LIMIT 9500)");
  REQUIRE(a.claim("warm-up", 1, 60s).size() == 1); // the first walk marks the dead entries
  auto pages = pages_of(conn_b, [&] { REQUIRE(b.claim("test", 10, 60s).size() == 10); });
  // 10 rows updated and 10 steps with their probes: a few hundred pages; 9 500 rows passed on the
  // heap would be thousands.
  CHECK(pages < 1000);
}

TEST_CASE_FIXTURE(fixture, "a claim is planned once per connection, on the indexes, even when "
                           "the plan is made while the tables are empty") {
  // Statistics of empty tables: planned as usual, the claim would scan them whole at every step
  // of its walk and at every probe.
  exec("ANALYZE outbox_events, dead_letter_events, aggregate_results");
  for (int i = 0; i < 8; ++i)
    REQUIRE(a.claim("a", 10, 60s).empty());
  auto plan_runs = [&] {
    return pqxx::nontransaction(conn_a)
        .exec1("SELECT generic_plans || ' ' || custom_plans FROM pg_prepared_statements "
               "WHERE name = 'outbox_claim'")[0]
        .as<std::string>();
  };
  CHECK(plan_runs() == "8 0"); // one plan, made at the first claim and kept

  // A burst fills the table before the next ANALYZE; the kept plan still walks the indexes.
  exec("INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads, "
       "idempotency_key) SELECT 'order', g::text, 'OrderCreated', '{}', 'b' || g "
       "FROM generate_series(1, 10000) g");
  auto pages = pages_of(conn_a, [&] { REQUIRE(a.claim("a", 10, 60s).size() == 10); });
  // A few hundred pages; the plan made for empty tables touched 14 million.
  CHECK(pages < 1000);
  CHECK(plan_runs() == "9 0");
  // The planner settings were the claim's own.
  CHECK(pqxx::nontransaction(conn_a).exec1("SHOW enable_seqscan")[0].as<std::string>() == "on");
}

TEST_CASE_FIXTURE(fixture, "the due indexes are the only partial indexes over pending rows that "
                           "a claim's walk could take") {
  // Another partial index over unfinished rows, in another order, looks as cheap as the due index
  // on statistics taken while nothing was pending: in a burst the planner then sorted every
  // pending event at each step of the walk, and scanned every unfinished event for each probe.
  // The walk reads the due-order indexes; the due indexes (by id alone) would need a sort. The
  // partial indexes left hold PROCESSING, PROCESSED, DEAD or FAILED rows only, or need
  // next_retry_at IS NOT NULL, which the walk's condition does not imply. A new one must keep
  // to that (and be added here).
  CHECK(query_value(db(), "SELECT string_agg(indexname, ' ' ORDER BY indexname) FROM pg_indexes "
                          "WHERE tablename IN ('outbox_events', 'dead_letter_events') "
                          "AND indexdef LIKE '% WHERE %'") ==
        "dead_letter_events_due dead_letter_events_due_order dead_letter_events_failed "
        "dead_letter_events_leases dead_letter_events_resolved dead_letter_events_retry_due "
        "outbox_events_dead outbox_events_due outbox_events_due_order outbox_events_leases "
        "outbox_events_processed outbox_events_retry_due");
}

TEST_CASE_FIXTURE(fixture, "a claim touches pages in proportion to its size, not to the events "
                           "waiting out a retry or an open circuit") {
  // A partner's outage: 20 000 runs held back for an hour, ahead of (and among) the events that
  // are due: new ones, and two retries whose time has come.
  exec("INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads, "
       "idempotency_key, attempts, next_retry_at, failing_since) SELECT 'order', 'w' || g, "
       "'OrderCreated', '{}', 'w' || g, 1, now() + interval '1 hour', now() FROM "
       "generate_series(1, 20000) g");
  auto retry1 = add_event("r1");
  auto fresh1 = add_event("f1");
  auto retry2 = add_event("r2");
  auto fresh2 = add_event("f2");
  exec("UPDATE outbox_events SET next_retry_at = now() - interval '2 seconds' WHERE id = " +
       std::to_string(retry2));
  exec("UPDATE outbox_events SET next_retry_at = now() - interval '1 second' WHERE id = " +
       std::to_string(retry1));
  exec("ANALYZE outbox_events");
  REQUIRE(a.claim("warm-up", 0, 60s).empty());
  auto sorted_ids = [](const std::vector<persistence::claimed_event>& claimed) {
    auto ids = ids_of(claimed);
    std::sort(ids.begin(), ids.end());
    return ids;
  };
  std::vector<persistence::claimed_event> claimed;
  auto pages = pages_of(conn_b, [&] { claimed = b.claim("test", 2, 60s); });
  // Those never run first (by id), then the retries; none of the waiting ones.
  CHECK(sorted_ids(claimed) == std::vector<long long>{fresh1, fresh2});
  // Two rows updated and three steps: a few hundred pages. Stepping over the 20 000 waiting
  // entries read 120 000 buffers.
  CHECK(pages < 1000);
  pages = pages_of(conn_b, [&] { claimed = b.claim("test", 10, 60s); });
  CHECK(sorted_ids(claimed) == std::vector<long long>{retry1, retry2});
  CHECK(pages < 1000);
  CHECK(b.claim("test", 10, 60s).empty());
}

TEST_CASE_FIXTURE(fixture, "a leased event's updates find it by its key, not by a scan of the "
                           "leased ones, on statistics taken while none was leased") {
  exec("INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads, "
       "idempotency_key) SELECT 'order', g::text, 'OrderCreated', '{}', 'p' || g "
       "FROM generate_series(1, 300) g");
  auto first = a.claim("a", 1, 60s);
  REQUIRE(a.dead_letter(first[0], "MAX_RETRIES_EXCEEDED", "billing: HTTP 503"));
  exec("ANALYZE outbox_events, dead_letter_events"); // nothing leased: the statistics say so
  auto leased = a.claim("a", 299, 60s);
  REQUIRE(leased.size() == 299);
  persistence::dlq_repository dlq(conn_a, {});
  auto letters = dlq.claim("dlq", 1, 60s);
  REQUIRE(letters.size() == 1);

  auto plans = plans_of(conn_a, [&] {
    CHECK(a.extend_lease(leased[0], 60s));
    CHECK(a.complete(leased[0], std::nullopt));
    CHECK(
        a.complete_all("order", std::nullopt, "", {{&leased[1], nullptr}, {&leased[2], nullptr}}) ==
        std::vector<bool>{true, true});
    CHECK(a.retry(leased[3], 0ms, "billing: HTTP 503"));
    CHECK(a.postpone(leased[4], 1s, "billing: circuit open"));
    CHECK(a.release(leased[5]));
    CHECK(a.dead_letter(leased[6], "MAX_RETRIES_EXCEEDED", "billing: HTTP 503"));
    CHECK(dlq.extend_lease(letters[0], 60s));
    CHECK(dlq.resolve(letters[0], domain::engine_outcome::fanout_compensated, ""));
  });
  int updates = 0;
  for (const auto& plan : plans) {
    if (plan.find("\"Operation\": \"Update\"") == std::string::npos)
      continue;
    ++updates;
    INFO(plan);
    // Not the index of the leased ones (299 entries, a heap fetch each): *_leases by name, not
    // the interrupted_leases column of the query text.
    CHECK(plan.find("_leases\"") == std::string::npos);
    if (plan.find("\"Relation Name\": \"outbox_events\"") != std::string::npos)
      CHECK(plan.find("outbox_events_pkey") != std::string::npos); // (one dead letter: a page)
  }
  CHECK(updates == 9);
}

TEST_CASE_FIXTURE(fixture, "concurrent claimers get disjoint events") {
  for (int i = 0; i < 200; ++i)
    add_event(std::to_string(1000 + i));
  std::vector<persistence::claimed_event> got_a, got_b;
  std::thread ta([&] {
    for (auto c = a.claim("a", 7, 60s); !c.empty(); c = a.claim("a", 7, 60s))
      got_a.insert(got_a.end(), c.begin(), c.end());
  });
  std::thread tb([&] {
    for (auto c = b.claim("b", 7, 60s); !c.empty(); c = b.claim("b", 7, 60s))
      got_b.insert(got_b.end(), c.begin(), c.end());
  });
  ta.join();
  tb.join();
  std::set<long long> ids;
  for (const auto& e : got_a)
    ids.insert(e.id);
  for (const auto& e : got_b)
    ids.insert(e.id);
  CHECK(got_a.size() + got_b.size() == 200);
  CHECK(ids.size() == 200);
}

TEST_CASE_FIXTURE(fixture, "a worker whose lease expired cannot complete, retry or dead-letter") {
  auto id = add_event("5");
  auto mine = a.claim("a", 1, 1ms);
  REQUIRE(mine.size() == 1);
  std::this_thread::sleep_for(20ms);
  auto reaped = b.reap_expired(3);
  CHECK(reaped.returned.size() == 1);
  CHECK(query_value(db(),
                    "SELECT status || ' ' || attempts || ' ' || last_error FROM outbox_events") ==
        "PENDING 1 lease of a expired");
  auto theirs = b.claim("b", 1, 60s);
  REQUIRE(theirs.size() == 1);
  CHECK_FALSE(a.complete(mine[0], std::nullopt));
  CHECK_FALSE(a.retry(mine[0], 0ms, "x"));
  CHECK_FALSE(a.dead_letter(mine[0], "NON_RETRYABLE_ERROR", "x"));
  CHECK_FALSE(a.extend_lease(mine[0], 60s));
  CHECK(count_rows(db(), "dead_letter_events") == 0);
  CHECK(b.complete(theirs[0], std::nullopt));
  CHECK(status_of(id) == "PROCESSED");
}

TEST_CASE_FIXTURE(fixture, "after a step of the database's clock the reaper leaves expired leases "
                           "alone for a lease: the live run renews its lease and keeps it") {
  // The reaper's local clock, `lag` behind the real one: setting the lag back by a second looks,
  // to the reaper, like the database's clock stepping a second ahead.
  domain::lease_clock clock(2s);
  std::chrono::milliseconds lag{0};
  std::vector<std::chrono::system_clock::time_point> seen;
  auto guard = [&](std::chrono::system_clock::time_point database_now) {
    seen.push_back(database_now);
    return clock.read(database_now, std::chrono::steady_clock::now() - lag).may_reap;
  };
  auto id = add_event("5b");
  persistence::dlq_repository dlq_b(conn_b, {});
  CHECK(b.reap_expired(3, guard).returned.size() == 0); // the first reading: nothing expired yet
  auto mine = a.claim("a", 1, 1ms);
  REQUIRE(mine.size() == 1);
  std::this_thread::sleep_for(10ms); // its lease expired
  lag = 1s;
  CHECK(b.reap_expired(3, guard).returned.size() == 0);
  CHECK(dlq_b.reap_expired(3, guard).returned.empty());
  CHECK(status_of(id) == "PROCESSING");
  // The live run renews its lease and goes on; a lease later the reaper reaps again, and the
  // renewed lease is not expired.
  CHECK(a.extend_lease(mine[0], 60s));
  lag = -1500ms;
  CHECK(b.reap_expired(3, guard).returned.size() == 0);
  CHECK(a.complete(mine[0], std::nullopt));
  CHECK(status_of(id) == "PROCESSED");
  // Each reap read the database's now() once, in its own transaction.
  REQUIRE(seen.size() == 4);
  auto database_now = std::chrono::system_clock::time_point(std::chrono::microseconds(
      std::stoll(query_value(db(), "SELECT (extract(epoch FROM now()) * 1000000)::bigint"))));
  CHECK(seen.front() <= seen.back());
  CHECK(seen.back() <= database_now);
  CHECK(database_now - seen.front() < 60s);

  // A dead worker's lease is reaped once the hold is over.
  add_event("5c");
  REQUIRE(a.claim("a", 1, 1ms).size() == 1);
  std::this_thread::sleep_for(10ms);
  CHECK(b.reap_expired(3, guard).returned.size() == 1);
}

TEST_CASE_FIXTURE(fixture, "an event whose lease keeps expiring ends in the dead-letter queue") {
  add_event("6");
  // maxRetries 2: two expiries send it back, the third (attempt 3 of 3) dead-letters it.
  for (int i = 0; i < 2; ++i) {
    REQUIRE(a.claim("a", 1, 1ms).size() == 1);
    std::this_thread::sleep_for(5ms);
    CHECK(b.reap_expired(2).returned.size() == 1);
  }
  REQUIRE(a.claim("a", 1, 1ms).size() == 1);
  std::this_thread::sleep_for(5ms);
  CHECK(b.reap_expired(2).dead_lettered.size() == 1);
  CHECK(query_value(db(), "SELECT status || ' ' || attempts FROM outbox_events") == "DEAD 3");
  CHECK(query_value(db(), "SELECT reason FROM dead_letter_events") == "MAX_RETRIES_EXCEEDED");
}

TEST_CASE_FIXTURE(fixture, "handing a claim back keeps its attempts and makes it due now") {
  auto id = add_event("4");
  auto c = a.claim("a", 1, 60s);
  REQUIRE(a.release(c[0]));
  CHECK(query_value(db(), "SELECT status || ' ' || attempts || ' ' || (next_retry_at IS NULL) FROM "
                          "outbox_events WHERE id = " +
                              std::to_string(id)) == "PENDING 0 true");
}

TEST_CASE_FIXTURE(fixture, "a held-back event keeps its attempts; its time budget starts") {
  auto id = add_event("4h");
  auto c = a.claim("a", 1, 60s);
  REQUIRE(c.size() == 1);
  CHECK(c[0].failing_for == 0ms); // never failed
  // Another worker's token cannot postpone it.
  auto stolen = c[0];
  stolen.lease_token += 1000;
  CHECK_FALSE(b.postpone(stolen, 0ms, "held back: billing: circuit open"));
  REQUIRE(a.postpone(c[0], 0ms, "held back: billing: circuit open"));
  CHECK(query_value(db(), "SELECT status || ' ' || attempts || ' ' || last_error || ' ' || "
                          "(failing_since IS NOT NULL) FROM outbox_events WHERE id = " +
                              std::to_string(id)) ==
        "PENDING 0 held back: billing: circuit open true");
  // The time budget runs from the first failure or hold, and a retry keeps that start.
  exec("UPDATE outbox_events SET failing_since = now() - interval '90 seconds'");
  auto again = a.claim("a", 1, 60s);
  REQUIRE(again.size() == 1);
  CHECK(again[0].failing_for >= 90s);
  CHECK(again[0].failing_for < 100s);
  REQUIRE(a.retry(again[0], 0ms, "billing: HTTP 503"));
  auto third = a.claim("a", 1, 60s);
  REQUIRE(third.size() == 1);
  CHECK(third[0].attempts == 1);
  CHECK(third[0].failing_for >= 90s);
  // Given up without a call (held past its retryFor): dead, and the run is not counted.
  REQUIRE(a.dead_letter(third[0], "MAX_RETRIES_EXCEEDED", "billing: circuit open", "PENDING",
                        std::nullopt, false));
  CHECK(query_value(db(), "SELECT status || ' ' || attempts FROM outbox_events WHERE id = " +
                              std::to_string(id)) == "DEAD 1");
}

TEST_CASE_FIXTURE(fixture, "runs held back by a destination are made due at once when it is back") {
  auto billing = add_event("5h");
  auto shipping = add_event("6h");
  auto failed = add_event("7h");
  auto c = a.claim("a", 3, 60s);
  REQUIRE(c.size() == 3);
  REQUIRE(a.postpone(c[0], 3600s, "held back: billing: circuit open"));
  REQUIRE(a.postpone(c[1], 3600s, "held back: shipping: circuit open"));
  REQUIRE(a.retry(c[2], 3600s, "billing: HTTP 503")); // failed, not held: keeps its backoff
  add_event("8h"); // dead-lettered, then its compensation held back by billing too
  auto d = a.claim("a", 1, 60s);
  REQUIRE(d.size() == 1);
  REQUIRE(a.dead_letter(d[0], "MAX_RETRIES_EXCEEDED", "billing: HTTP 503"));
  persistence::dlq_repository dlq(conn_a, {});
  auto letter = dlq.claim("dlq", 1, 60s);
  REQUIRE(letter.size() == 1);
  REQUIRE(dlq.postpone(letter[0], 3600s, "held back: billing: maxConcurrency 1 calls in flight"));

  CHECK(b.make_held_due("held back: billing:") == 2);
  auto due = [](long long id) {
    return query_value(db(), "SELECT next_retry_at <= now() FROM outbox_events WHERE id = " +
                                 std::to_string(id));
  };
  CHECK(due(billing) == "t");
  CHECK(due(shipping) == "f");
  CHECK(due(failed) == "f");
  CHECK(query_value(db(), "SELECT next_retry_at <= now() FROM dead_letter_events") == "t");
  CHECK(b.make_held_due("held back: billing:") == 0); // nothing left to wake
}

TEST_CASE_FIXTURE(fixture, "a dead letter is postponed and its lease extended only by its holder") {
  add_event("4d");
  auto c = a.claim("a", 1, 60s);
  REQUIRE(a.dead_letter(c[0], "MAX_RETRIES_EXCEEDED", "billing: HTTP 503"));
  persistence::dlq_repository dlq_a(conn_a, {});
  persistence::dlq_repository dlq_b(conn_b, {});
  auto d = dlq_a.claim("dlq-a", 10, 60s);
  REQUIRE(d.size() == 1);
  CHECK(d[0].failing_for == 0ms);
  auto stolen = d[0];
  stolen.lease_token += 1000;
  CHECK_FALSE(dlq_b.extend_lease(stolen, 60s));
  CHECK_FALSE(dlq_b.postpone(stolen, 0ms, "held back"));
  CHECK(dlq_a.extend_lease(d[0], 120s));
  CHECK(query_value(db(), "SELECT lease_expires_at > now() + interval '100 seconds' FROM "
                          "dead_letter_events") == "t");
  REQUIRE(dlq_a.postpone(d[0], 0ms, "held back: shipping: circuit open"));
  CHECK(query_value(db(), "SELECT status || ' ' || attempts || ' ' || revert_error || ' ' || "
                          "(failing_since IS NOT NULL) FROM dead_letter_events") ==
        "PENDING 0 held back: shipping: circuit open true");
  auto again = dlq_a.claim("dlq-a", 10, 60s);
  REQUIRE(again.size() == 1);
  CHECK(again[0].attempts == 0);
}

TEST_CASE_FIXTURE(fixture, "a claim tells whether earlier runs of the event left result rows") {
  auto id = add_event("8");
  auto first = a.claim("a", 1, 60s);
  REQUIRE(first.size() == 1);
  CHECK_FALSE(first[0].has_results); // a first run has nothing to resume from
  a.record_attempt(attempt_of(id, "8", "inventory", 1, 200, domain::attempt_outcome::success));
  REQUIRE(a.release(first[0]));
  auto again = b.claim("b", 1, 60s);
  REQUIRE(again.size() == 1);
  CHECK(again[0].has_results);
}

TEST_CASE_FIXTURE(fixture, "retention deletes old processed events in batches and keeps the rest") {
  for (int i = 0; i < 5; ++i)
    add_event(std::to_string(i));
  exec("UPDATE outbox_events SET status = 'PROCESSED', processed_at = now() - interval '2 days' "
       "WHERE id <= 3");
  exec("UPDATE outbox_events SET status = 'PROCESSED', processed_at = now() WHERE id = 4");
  CHECK(a.delete_processed(24h, 2) == 2);
  CHECK(a.delete_processed(24h, 2) == 1);
  CHECK(a.delete_processed(24h, 2) == 0);
  CHECK(count_rows(db(), "outbox_events") == 2);
}

TEST_CASE_FIXTURE(fixture, "retention deletes old resolved dead letters only, oldest first") {
  // Five dead letters: resolved two days ago (two), resolved now, FAILED and PENDING long ago.
  for (int i = 0; i < 5; ++i) {
    auto event = add_event(std::to_string(i));
    exec("UPDATE outbox_events SET status = 'DEAD' WHERE id = " + std::to_string(event));
    exec("INSERT INTO dead_letter_events (original_event_id, aggregate_type, aggregate_id, "
         "event_type, payloads, reason) SELECT id, aggregate_type, aggregate_id, event_type, "
         "payloads, 'NON_RETRYABLE_ERROR' FROM outbox_events WHERE id = " +
         std::to_string(event));
  }
  exec("UPDATE dead_letter_events SET status = 'PROCESSED', resolved_at = now() - interval '2 "
       "days' - id * interval '1 minute' WHERE id <= 2");
  exec("UPDATE dead_letter_events SET status = 'PROCESSED', resolved_at = now() WHERE id = 3");
  exec("UPDATE dead_letter_events SET status = 'FAILED', failed_at = now() - interval '9 days' "
       "WHERE id = 4");
  exec("UPDATE dead_letter_events SET failed_at = now() - interval '9 days' WHERE id = 5");
  persistence::dlq_repository dlq(conn_a, {});
  CHECK(dlq.delete_resolved(24h, 1) == 1);
  CHECK(query_value(db(), "SELECT string_agg(id::text, ',' ORDER BY id) FROM "
                          "dead_letter_events") == "1,3,4,5"); // the older of the two first
  CHECK(dlq.delete_resolved(24h, 10) == 1);
  CHECK(dlq.delete_resolved(24h, 10) == 0);
  CHECK(query_value(db(), "SELECT string_agg(id::text || status, ',' ORDER BY id) FROM "
                          "dead_letter_events") == "3PROCESSED,4FAILED,5PENDING");
  // The DEAD events of deleted dead letters stay: DEAD events are never deleted automatically.
  CHECK(query_value(db(), "SELECT count(*) FROM outbox_events WHERE status = 'DEAD'") == "5");
}

TEST_CASE_FIXTURE(fixture, "the audit names the aggregate type, and lookups by aggregate use it") {
  // Two aggregates "7" of different types whose events retention has deleted: the audit is all
  // that is left of them.
  for (auto [event, type] : {std::pair{5, "order"}, std::pair{9, "invoice"}}) {
    persistence::attempt_row row;
    row.event_id = event;
    row.aggregate_type = type;
    row.aggregate_id = "7";
    row.event_type = "OrderCreated";
    row.destination = "inventory";
    row.attempt = 1;
    row.endpoint_url = "http://x/reserve";
    row.http_method = "POST";
    a.record_attempt(row);
  }
  CHECK(query_value(db(), "SELECT string_agg(event_id || ':' || aggregate_type, ',' ORDER BY id) "
                          "FROM aggregate_results") == "5:order,9:invoice");
  CHECK(a.latest_event_id("order", "7", "OrderCreated") == 5);
  CHECK(a.latest_event_id("invoice", "7", "OrderCreated") == 9);
  CHECK_FALSE(a.latest_event_id("shipment", "7", "OrderCreated"));
}

TEST_CASE_FIXTURE(fixture,
                  "attempt rows are appended and the latest success per destination is found") {
  auto id = add_event("3");
  persistence::attempt_row row;
  row.event_id = id;
  row.aggregate_id = "3";
  row.event_type = "OrderCreated";
  row.endpoint_url = "http://sim/api/inventory/reserve";
  row.http_method = "POST";
  row.destination = "inventory";
  row.outcome = domain::attempt_outcome::retryable;
  row.response_status = 503;
  row.error_message = "HTTP 503";
  a.record_attempt(row);
  row.outcome = domain::attempt_outcome::success;
  row.response_status = 200;
  row.response_payload_json = R"({"reservationId":"RES-1"})";
  row.request_payload_json = R"({"orderId":3})";
  row.error_message.reset();
  a.record_attempt(row);
  row.destination = "fraudCheck";
  row.fanout_order = 1;
  row.response_text = "not json";
  row.response_payload_json.reset();
  a.record_attempt(row);
  row.destination = "inventory.revert";
  row.fanout_order = 0;
  a.record_attempt(row);
  auto s = a.successes(id);
  REQUIRE(s.size() == 2);
  CHECK(s[0].destination == "inventory");
  CHECK(s[0].response_json == R"({"reservationId": "RES-1"})");
  CHECK(s[1].destination == "fraudCheck");
  CHECK_FALSE(s[1].response_json);
  CHECK(a.reverted_destinations(id) == std::vector<std::string>{"inventory"});
  CHECK(count_rows(db(), "aggregate_results") == 4);
}

TEST_CASE_FIXTURE(fixture, "dead letters are claimed with a lease and fenced like events") {
  add_event("11");
  auto c = a.claim("a", 1, 60s);
  REQUIRE(a.dead_letter(c[0], "MAX_RETRIES_EXCEEDED", "billing: HTTP 503"));
  persistence::dlq_repository dlq_a(conn_a, {});
  persistence::dlq_repository dlq_b(conn_b, {});
  auto d = dlq_a.claim("dlq-a", 10, 1ms);
  REQUIRE(d.size() == 1);
  CHECK(d[0].last_error == "billing: HTTP 503");
  CHECK(dlq_b.claim("dlq-b", 10, 60s).empty());
  std::this_thread::sleep_for(10ms);
  auto reaped = dlq_b.reap_expired(3);
  CHECK(reaped.returned == std::vector<std::int64_t>{d[0].id});
  CHECK(reaped.dead_lettered.empty());
  CHECK(reaped.attention.empty());
  auto again = dlq_b.claim("dlq-b", 10, 60s);
  REQUIRE(again.size() == 1);
  CHECK_FALSE(dlq_a.resolve(d[0], domain::engine_outcome::fanout_compensated, ""));
  CHECK(dlq_b.retry(again[0], 0ms, "shipping.revert: HTTP 503"));
  auto third = dlq_a.claim("dlq-a", 10, 60s);
  REQUIRE(third.size() == 1);
  CHECK(third[0].attempts == 2);
  CHECK(dlq_a.fail(third[0], "shipping.revert: HTTP 400", "shipping.revert"));
  CHECK(query_value(db(), "SELECT status || ' ' || revert_error || ' ' || failed_step FROM "
                          "dead_letter_events") == "FAILED shipping.revert: HTTP 400 "
                                                   "shipping.revert");
}

TEST_CASE_FIXTURE(fixture, "a dead letter whose lease expires with no retry left is FAILED, and "
                           "the reap says which order needs attention") {
  add_event("12");
  auto c = a.claim("a", 1, 60s);
  REQUIRE(a.dead_letter(c[0], "MAX_RETRIES_EXCEEDED", "billing: HTTP 503"));
  persistence::dlq_repository dlq(conn_a, {});
  auto d = dlq.claim("dlq-a", 10, 1ms);
  REQUIRE(d.size() == 1);
  std::this_thread::sleep_for(10ms);
  auto reaped = dlq.reap_expired(0);
  CHECK(reaped.returned.empty());
  CHECK(reaped.dead_lettered == std::vector<std::int64_t>{d[0].id});
  CHECK(reaped.attention ==
        std::vector<std::string>{fmt::format("dead letter {} (order 12)", d[0].id)});
  CHECK(query_value(db(), "SELECT status || ' ' || revert_error FROM dead_letter_events") ==
        "FAILED lease of dlq-a expired");
}

TEST_CASE_FIXTURE(fixture, "a dead letter waits for an earlier unfinished event of its aggregate "
                           "and the claim steps over it") {
  auto earlier = add_event("20");
  auto e = a.claim("a", 10, 60s); // earlier is being run
  REQUIRE(ids_of(e) == std::vector<long long>{earlier});
  auto failed = add_event("20", "OrderStatusUpdated");
  auto other = add_event("21");
  exec("UPDATE outbox_events SET status = 'DEAD' WHERE id IN (" + std::to_string(failed) + ", " +
       std::to_string(other) + ")");
  for (auto [event, aggregate] : {std::pair{failed, "20"}, std::pair{other, "21"}})
    exec("INSERT INTO dead_letter_events (original_event_id, aggregate_type, aggregate_id, "
         "event_type, payloads, reason) VALUES (" +
         std::to_string(event) + ", 'order', '" + aggregate +
         "', 'OrderCreated', '{}', 'NON_RETRYABLE_ERROR')");
  persistence::dlq_repository dlq(conn_a, {});
  auto got = dlq.claim("dlq", 10, 60s);
  REQUIRE(got.size() == 1);
  CHECK(got[0].original_event_id == other);
  CHECK(dlq.claim("dlq", 10, 60s).empty());
  REQUIRE(a.complete(e[0], std::nullopt));
  CHECK(dlq.claim("dlq", 0, 60s).empty());
  auto next = dlq.claim("dlq", 10, 60s);
  REQUIRE(next.size() == 1);
  CHECK(next[0].original_event_id == failed);
}

TEST_CASE("the order hooks move the order inside the completing transaction") {
  truncate_all(db());
  exec("INSERT INTO orders (customer_id, total_amount, shipping_type) VALUES ('C', 1, 'domestic')");
  persistence::order_hooks hooks;
  pqxx::connection conn(db());
  persistence::outbox_repository repo(conn, {{"order", &hooks}});
  add_event("1");
  auto c = repo.claim("a", 1, 60s);
  REQUIRE(repo.complete(c[0], domain::engine_outcome::fanout_succeeded));
  CHECK(query_value(db(), "SELECT order_status FROM orders") == "CONFIRMED");

  exec("UPDATE orders SET order_status = 'CANCELLING'");
  add_event("1", "!OrderCreated");
  auto cancel = repo.claim("a", 1, 60s);
  REQUIRE(repo.dead_letter(cancel[0], "CANCELLATION_FAILED", "billing.revert: HTTP 400", "FAILED",
                           domain::engine_outcome::compensation_failed));
  CHECK(query_value(db(), "SELECT order_status || ' ' || status_reason FROM orders") ==
        "ATTENTION billing.revert: HTTP 400");
  // Written FAILED, it waits for an operator: not resolved; the revert's error where an operator
  // looks for it.
  CHECK(query_value(db(), "SELECT status || ' ' || (resolved_at IS NOT NULL) || ' ' || "
                          "revert_error FROM dead_letter_events") ==
        "FAILED false billing.revert: HTTP 400");
}

TEST_CASE("an event queued for an order with an id that is no number completes and names no "
          "order") {
  // Another writer's event for aggregate type "order" with an id outboxd never gives an order:
  // its completion and its compensation used to fail on the cast to a number, for ever.
  truncate_all(db());
  exec("INSERT INTO orders (customer_id, total_amount, shipping_type) VALUES ('C', 1, 'domestic')");
  persistence::order_hooks hooks;
  pqxx::connection conn(db());
  persistence::outbox_repository repo(conn, {{"order", &hooks}});
  add_event("live");
  auto c = repo.claim("a", 1, 60s);
  REQUIRE(c.size() == 1);
  CHECK(repo.complete(c[0], domain::engine_outcome::fanout_succeeded));
  add_event("99999999999999999999"); // too large for an order id
  auto big = repo.claim("a", 1, 60s);
  REQUIRE(big.size() == 1);
  REQUIRE(repo.dead_letter(big[0], "NON_RETRYABLE_ERROR", "billing: HTTP 400"));
  persistence::dlq_repository dlq(conn, {{"order", &hooks}});
  auto d = dlq.claim("dlq", 1, 60s);
  REQUIRE(d.size() == 1);
  CHECK(dlq.resolve(d[0], domain::engine_outcome::fanout_compensated, "billing: HTTP 400"));
  CHECK(query_value(db(), "SELECT order_status FROM orders") == "PENDING"); // untouched
}

TEST_CASE("an order moves only from the states its outcome moves, and only with the lease") {
  truncate_all(db());
  exec("INSERT INTO orders (customer_id, total_amount, shipping_type, order_status) "
       "VALUES ('C', 1, 'domestic', 'CANCELLING')");
  auto order = [] { return query_value(db(), "SELECT order_status FROM orders"); };
  persistence::order_hooks hooks;
  pqxx::connection conn(db());
  persistence::outbox_repository repo(conn, {{"order", &hooks}});

  // OrderCreated succeeding under a queued cancellation leaves the order to the cancellation.
  add_event("1");
  auto c = repo.claim("a", 1, 60s);
  REQUIRE(repo.complete(c[0], domain::engine_outcome::fanout_succeeded, "ignored"));
  CHECK(order() == "CANCELLING");
  CHECK(query_value(db(), "SELECT coalesce(status_reason, 'none') FROM orders") == "none");

  // A worker that lost its lease moves nothing.
  exec("UPDATE orders SET order_status = 'PENDING'");
  add_event("1");
  auto lost = repo.claim("a", 1, 1ms);
  REQUIRE(lost.size() == 1);
  std::this_thread::sleep_for(5ms);
  REQUIRE(repo.reap_expired(3).returned.size() == 1);
  CHECK_FALSE(repo.complete(lost[0], domain::engine_outcome::fanout_succeeded));
  CHECK_FALSE(repo.dead_letter(lost[0], "NON_RETRYABLE_ERROR", "x", "FAILED",
                               domain::engine_outcome::compensation_failed));
  CHECK(order() == "PENDING");

  // The dead-letter processor's transitions: a compensated OrderCreated fails the order.
  auto retaken = repo.claim("a", 1, 60s);
  REQUIRE(retaken.size() == 1);
  REQUIRE(repo.dead_letter(retaken[0], "NON_RETRYABLE_ERROR", "billing: HTTP 400"));
  persistence::dlq_repository dlq(conn, {{"order", &hooks}});
  auto d = dlq.claim("dlq", 1, 60s);
  REQUIRE(d.size() == 1);
  REQUIRE(dlq.resolve(d[0], domain::engine_outcome::fanout_compensated, "billing: HTTP 400"));
  CHECK(query_value(db(), "SELECT order_status || ' ' || status_reason FROM orders") ==
        "FAILED billing: HTTP 400");

  // The reaper dead-letters a cancellation out of attempts and puts its order in ATTENTION.
  exec("UPDATE orders SET order_status = 'CANCELLING'");
  add_event("1", "!OrderCreated");
  REQUIRE(repo.claim("a", 1, 1ms).size() == 1);
  std::this_thread::sleep_for(5ms);
  CHECK(repo.reap_expired(0).dead_lettered.size() == 1);
  CHECK(query_value(db(), "SELECT order_status || ' ' || status_reason FROM orders") ==
        "ATTENTION lease of a expired");
  CHECK(query_value(db(), "SELECT status FROM dead_letter_events WHERE reason = "
                          "'CANCELLATION_FAILED'") == "FAILED");
}

TEST_CASE_FIXTURE(fixture,
                  "claims and attempt rows commit asynchronously, the next change does not") {
  // Each switches synchronous_commit off for its own transaction only: were it set for the
  // session, the completion after it would no longer wait for the WAL flush that makes them
  // durable.
  auto show = [this] { return pqxx::nontransaction(conn_a).exec1("SHOW synchronous_commit")[0]; };
  pqxx::nontransaction(conn_a).exec("SET synchronous_commit = on"); // the test cluster runs off
  REQUIRE(show().as<std::string>() == "on");
  auto id = add_event("9");
  auto claimed = a.claim("a", 1, 60s);
  REQUIRE(claimed.size() == 1);
  CHECK(show().as<std::string>() == "on");
  a.record_attempt(
      attempt_of(id, "9", "inventory", 1, std::nullopt, domain::attempt_outcome::success));
  CHECK(show().as<std::string>() == "on");
  CHECK(count_rows(db(), "aggregate_results") == 1);
}

TEST_CASE_FIXTURE(fixture, "step states name the runs with a row of each step, and the reaper "
                           "records the runs it took back: they may have been cut off mid-call") {
  auto id = add_event("10");
  auto first = a.claim("a", 1, 1ms);
  REQUIRE(first.size() == 1);
  auto row = attempt_of(id, "10", "inventory", 1, 200, domain::attempt_outcome::success);
  row.run = first[0].lease_token;
  a.record_attempt(row);
  row = attempt_of(id, "10", "billing", 1, 503, domain::attempt_outcome::retryable);
  row.run = first[0].lease_token;
  a.record_attempt(row);
  // A compensation's re-send belongs to no run: not listed, and its success moves no run on.
  auto resend = attempt_of(id, "10", "billing", 2, 503, domain::attempt_outcome::retryable);
  resend.run = domain::compensation_run;
  a.record_attempt(resend);
  resend.response_status = 200;
  resend.outcome = domain::attempt_outcome::success;
  a.record_attempt(resend);
  CHECK(a.interrupted_runs(id).empty());
  std::this_thread::sleep_for(20ms);
  REQUIRE(b.reap_expired(3).returned.size() == 1); // cut off: its lease ran out
  auto second = b.claim("b", 1, 1ms);
  REQUIRE(second.size() == 1);
  CHECK(second[0].lease_token > first[0].lease_token);
  std::this_thread::sleep_for(20ms);
  REQUIRE(b.reap_expired(1).dead_lettered.size() == 1); // and so is the next, dead-lettered
  CHECK(a.interrupted_runs(id) ==
        std::vector<std::int64_t>{first[0].lease_token, second[0].lease_token});
  // A run held back because the database refused its row counts as cut off too; one held back
  // by a gate does not.
  auto other = add_event("11");
  auto held = a.claim("a", 1, 60s);
  REQUIRE(held.size() == 1);
  CHECK(a.postpone(held[0], 0ms, "held back: inventory: circuit open"));
  CHECK(a.interrupted_runs(other).empty());
  auto refused = a.claim("a", 1, 60s);
  REQUIRE(refused.size() == 1);
  CHECK(a.postpone(refused[0], 0ms, "held back: database refused a statement", true));
  CHECK(a.interrupted_runs(other) == std::vector<std::int64_t>{refused[0].lease_token});

  auto states = a.step_states(id);
  CHECK(states["inventory"].state == domain::step_state::succeeded);
  CHECK(states["inventory"].done_in == first[0].lease_token);
  CHECK(states["billing"].state == domain::step_state::succeeded);
  CHECK_FALSE(states["billing"].done_in.has_value());
  CHECK(states["billing"].runs == std::vector<std::int64_t>{first[0].lease_token});
}

TEST_CASE_FIXTURE(fixture, "a call that never left (no connection, no TLS session) leaves its "
                           "step answered, one that may have reached the partner unanswered") {
  auto id = add_event("11");
  auto never_sent = [&](const std::string& destination, int attempt, const char* error) {
    auto row = attempt_of(id, "11", destination, attempt, std::nullopt,
                          domain::attempt_outcome::retryable);
    row.error_message = error;
    a.record_attempt(row);
  };
  never_sent("billing", 1, "connection failed: Failed to connect to 127.0.0.1 port 1");
  never_sent("billing", 2, "connect timeout after 2000ms: Connection timed out");
  never_sent("billing", 3, "TLS: certificate verify failed: self-signed certificate");
  never_sent("shipping", 1, "connection failed: Could not resolve host: nowhere.invalid");
  never_sent("shipping", 2,
             "read failed or timed out: timeout, the call's deadline of 5000ms "
             "passed: Operation timed out");
  auto states = a.step_states(id);
  CHECK(states["billing"].state == domain::step_state::answered);
  CHECK(states["shipping"].state == domain::step_state::unanswered);
}

TEST_CASE("a reap goes on past rows the database refuses, and fails a dead letter whose order "
          "cannot be put in ATTENTION") {
  truncate_all(db());
  for (int i = 0; i < 2; ++i)
    exec("INSERT INTO orders (customer_id, total_amount, shipping_type) VALUES ('C', 1, "
         "'domestic')");
  // Order 1 cannot change, nor can the events of order 3.
  exec(R"sql(CREATE OR REPLACE FUNCTION test_refuse_order() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.id = 1 THEN
    RAISE EXCEPTION 'test refuses changes of order 1';
  END IF;
  RETURN NEW;
END $$)sql");
  exec(R"sql(CREATE OR REPLACE FUNCTION test_refuse_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.aggregate_id = '3' THEN
    RAISE EXCEPTION 'test refuses changes of order 3';
  END IF;
  RETURN NEW;
END $$)sql");
  persistence::order_hooks hooks;
  pqxx::connection conn(db());
  persistence::outbox_repository repo(conn, {{"order", &hooks}});
  persistence::dlq_repository dlq(conn, {{"order", &hooks}});
  // Dead letters of both orders, claimed, their leases expired, no retry left.
  for (const char* order : {"1", "2"}) {
    add_event(order);
    auto c = repo.claim("a", 1, 60s);
    REQUIRE(repo.dead_letter(c[0], "MAX_RETRIES_EXCEEDED", "billing: HTTP 503"));
  }
  auto letters = dlq.claim("dlq-a", 10, 1ms);
  REQUIRE(letters.size() == 2);
  // Events of two other orders, leased, expired.
  for (const char* order : {"3", "4"})
    add_event(order, "OrderStatusUpdated");
  auto events = repo.claim("a", 10, 1ms);
  REQUIRE(events.size() == 2);
  std::this_thread::sleep_for(10ms);
  exec("CREATE TRIGGER test_refuse_orders BEFORE UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION "
       "test_refuse_order()");
  exec("CREATE TRIGGER test_refuse_events BEFORE UPDATE ON outbox_events FOR EACH ROW EXECUTE "
       "FUNCTION test_refuse_events()");

  auto reaped = repo.reap_expired(5);
  CHECK(reaped.returned.size() == 1); // order 4's event
  REQUIRE(reaped.refused.size() == 1);
  CHECK(reaped.refused[0].find("(order 3): ERROR:  test refuses changes of order 3") !=
        std::string::npos);

  auto letters_reaped = dlq.reap_expired(0);
  CHECK(letters_reaped.dead_lettered.size() == 2); // both FAILED
  CHECK(letters_reaped.attention.size() == 2);
  REQUIRE(letters_reaped.refused.size() == 1);
  CHECK(letters_reaped.refused[0].find("(order 1): its order could not be put in ATTENTION") !=
        std::string::npos);
  CHECK(query_value(db(), "SELECT string_agg(status, ' ' ORDER BY id) FROM dead_letter_events") ==
        "FAILED FAILED");
  CHECK(query_value(db(), "SELECT string_agg(order_status, ' ' ORDER BY id) FROM orders") ==
        "PENDING ATTENTION");
  exec("DROP TRIGGER test_refuse_orders ON orders");
  exec("DROP TRIGGER test_refuse_events ON outbox_events");
}

TEST_CASE("resolving a dead letter whose settling of a step failed with no row of that step "
          "records the step settled, from the event's own columns") {
  truncate_all(db());
  exec("INSERT INTO orders (customer_id, total_amount, shipping_type, order_status) VALUES "
       "('C', 1, 'domestic', 'ATTENTION')");
  persistence::order_hooks hooks;
  persistence::connection_pool pool{db(), 1, persistence::pooled_statements()};
  persistence::dead_letter_admin admin{pool, {{"order", &hooks}}};
  // A run was cut off during its first call of billing (no row); the compensation's re-send to
  // settle it was held back until its time ran out.
  auto event = add_event("1");
  exec("UPDATE outbox_events SET status = 'DEAD', attempts = 1 WHERE id = " +
       std::to_string(event));
  auto letter = query_value(
      db(), fmt::format("INSERT INTO dead_letter_events (original_event_id, aggregate_type, "
                        "aggregate_id, event_type, payloads, reason, status, revert_error, "
                        "failed_step) VALUES ({}, 'order', '1', 'OrderCreated', '{{}}', "
                        "'MAX_RETRIES_EXCEEDED', 'FAILED', 'billing held back', 'billing') "
                        "RETURNING id",
                        event));
  auto resumed = admin.resolve(std::stoll(letter), "resolved by an operator: no charge made");
  REQUIRE(resumed.value);
  CHECK(resumed.value->status == "PENDING"); // the compensation goes on with the other steps
  CHECK(query_value(db(), "SELECT destination || ' ' || outcome || ' ' || aggregate_id || ' ' || "
                          "event_type || ' ' || error_message FROM aggregate_results") ==
        "billing.revert skipped 1 OrderCreated resolved by an operator: no charge made");
}

TEST_CASE("an operator resolves a FAILED dead letter by hand: its order leaves ATTENTION as a "
          "compensation would have left it") {
  truncate_all(db());
  for (int i = 0; i < 2; ++i)
    exec("INSERT INTO orders (customer_id, total_amount, shipping_type, order_status, "
         "status_reason) VALUES ('C', 1, 'domestic', 'ATTENTION', 'billing.revert: HTTP 400')");
  persistence::order_hooks hooks;
  persistence::connection_pool pool{db(), 1, persistence::pooled_statements()};
  persistence::dead_letter_admin admin{pool, {{"order", &hooks}}};
  // Order 1's fan-out failed and its compensation too; order 2's cancellation could not revert.
  auto letter_of = [&](const char* order, const char* event_type, const char* reason) {
    auto event = add_event(order, event_type);
    exec("UPDATE outbox_events SET status = 'DEAD' WHERE id = " + std::to_string(event));
    return std::stoll(query_value(
        db(), fmt::format("INSERT INTO dead_letter_events (original_event_id, aggregate_type, "
                          "aggregate_id, event_type, payloads, reason, status, revert_error) "
                          "VALUES ({}, 'order', '{}', '{}', '{{}}', '{}', 'FAILED', 'HTTP 400') "
                          "RETURNING id",
                          event, order, event_type, reason)));
  };
  auto forward = letter_of("1", "OrderCreated", "NON_RETRYABLE_ERROR");
  auto cancellation = letter_of("2", "!OrderCreated", "CANCELLATION_FAILED");
  using kind = domain::redrive_outcome::kind;

  auto done = admin.resolve(forward, "resolved by an operator: refunded in the billing console");
  CHECK(done.what == kind::redriven);
  REQUIRE(done.value);
  CHECK(done.value->status == "PROCESSED");
  CHECK(done.value->revert_error == "resolved by an operator: refunded in the billing console");
  CHECK(admin.resolve(cancellation, "resolved by an operator: cancelled by phone").what ==
        kind::redriven);
  CHECK(query_value(db(), "SELECT string_agg(order_status || ' ' || status_reason, '; ' ORDER BY "
                          "id) FROM orders") ==
        "FAILED resolved by an operator: refunded in the billing console; CANCELLED resolved by "
        "an operator: cancelled by phone");
  // Only a FAILED one, once.
  auto again = admin.resolve(forward, "resolved by an operator: twice");
  CHECK(again.what == kind::not_failed);
  CHECK(admin.resolve(424242, "resolved by an operator: none").what == kind::not_found);
  exec("UPDATE dead_letter_events SET status = 'PENDING' WHERE id = " +
       std::to_string(cancellation));
  CHECK(admin.resolve(cancellation, "resolved by an operator: pending").what == kind::not_failed);
}
