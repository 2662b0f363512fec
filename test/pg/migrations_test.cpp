// The migration runner: applies once, is safe to run concurrently, refuses edited history, waits
// for locks no longer than its lock timeout, and applies a new migration to a live table of
// millions of events without holding up the writes.
#include "persistence/migrations.hpp"
#include "test/support/test_db.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <future>
#include <mutex>
#include <pqxx/pqxx>
#include <thread>

using namespace outboxd;
using namespace outboxd::test;

namespace {

std::string empty_database(const std::string& name) {
  pqxx::connection admin(cluster_conninfo());
  pqxx::nontransaction tx(admin);
  tx.exec("DROP DATABASE IF EXISTS " + tx.quote_name(name) + " WITH (FORCE)");
  tx.exec("CREATE DATABASE " + tx.quote_name(name));
  return cluster_conninfo() + " dbname=" + name;
}

} // namespace

TEST_CASE("migrations apply every file once and a second run applies nothing") {
  auto conninfo = empty_database("outboxd_pg_migrate_once");
  pqxx::connection c(conninfo);
  CHECK(persistence::applied_migration_version(c) == 0);
  auto first = persistence::migrate(c);
  CHECK(first.size() == persistence::migrations().size());
  CHECK(persistence::applied_migration_version(c) == persistence::latest_migration_version());
  CHECK(persistence::migrate(c).empty());
  CHECK(query_value(conninfo, "SELECT to_regclass('dead_letter_events') IS NOT NULL") == "t");
}

TEST_CASE("upgrading clears the resolved stamp of dead letters that were written FAILED") {
  auto conninfo = empty_database("outboxd_pg_migrate_unresolved");
  pqxx::connection c(conninfo);
  std::vector<persistence::migration> before;
  for (const auto& m : persistence::migrations())
    if (m.version < 16)
      before.push_back(m);
  persistence::migrate(c, before, {});
  // As the previous version wrote them: a cancellation dead-lettered FAILED at once, stamped.
  query_value(conninfo, "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                        "payloads, status, idempotency_key) VALUES ('order', '1', '!OrderCreated', "
                        "'{}', 'DEAD', 'k1'), ('order', '2', 'OrderCreated', '{}', 'DEAD', 'k2') "
                        "RETURNING 1");
  query_value(conninfo, "INSERT INTO dead_letter_events (original_event_id, aggregate_type, "
                        "aggregate_id, event_type, payloads, reason, status, resolved_at) SELECT "
                        "id, 'order', aggregate_id, event_type, '{}', CASE id WHEN 1 THEN "
                        "'CANCELLATION_FAILED' ELSE 'NON_RETRYABLE_ERROR' END, CASE id WHEN 1 THEN "
                        "'FAILED' ELSE 'PROCESSED' END, now() FROM outbox_events RETURNING 1");
  persistence::migrate(c);
  CHECK(query_value(conninfo,
                    "SELECT string_agg(status || ' ' || (resolved_at IS NOT NULL), ', ' "
                    "ORDER BY id) FROM dead_letter_events") == "FAILED false, PROCESSED true");
}

TEST_CASE("several processes migrating one database at once do not collide") {
  auto conninfo = empty_database("outboxd_pg_migrate_race");
  std::vector<std::thread> threads;
  std::atomic<int> applied{0}, failures{0};
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      try {
        pqxx::connection c(conninfo);
        applied += static_cast<int>(persistence::migrate(c).size());
      } catch (const std::exception&) {
        ++failures;
      }
    });
  for (auto& t : threads)
    t.join();
  CHECK(failures == 0);
  CHECK(applied == static_cast<int>(persistence::migrations().size()));
}

TEST_CASE("a migration edited after it was applied is refused") {
  auto conninfo = empty_database("outboxd_pg_migrate_edited");
  pqxx::connection c(conninfo);
  persistence::migrate(c);
  {
    pqxx::work tx(c);
    tx.exec("UPDATE schema_migrations SET checksum = 'different' WHERE version = 1");
    tx.commit();
  }
  CHECK_THROWS_WITH_AS(persistence::migrate(c),
                       doctest::Contains("was changed after it was applied"), std::runtime_error);
  // The advisory lock was released: another run can take it (and fails the same way).
  pqxx::connection other(conninfo);
  CHECK_THROWS_AS(persistence::migrate(other), std::runtime_error);
}

namespace {
struct collector : pqxx::notification_receiver {
  collector(pqxx::connection& c, const std::string& channel)
      : pqxx::notification_receiver(c, channel) {}
  void operator()(const std::string& payload, int) override { payloads.push_back(payload); }
  std::vector<std::string> payloads;
};
} // namespace

TEST_CASE("notification triggers fire for rows that are pending and due, on commit") {
  auto conninfo = fresh_database("outboxd_pg_notify");
  pqxx::connection listen_conn(conninfo);
  collector outbox(listen_conn, "outbox_events_channel");
  collector dlq(listen_conn, "dlq_events_channel");
  pqxx::connection c(conninfo);
  auto insert = [&](const char* key, const char* next_retry) {
    pqxx::work tx(c);
    tx.exec_params("INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads, "
                   "idempotency_key, next_retry_at) VALUES ('order', '1', 'E', '{}', $1, "
                   "now() + $2::interval)",
                   key, next_retry);
    tx.commit();
  };
  insert("due", "0 seconds");
  insert("later", "1 hour");
  {
    pqxx::work tx(c);
    tx.exec("UPDATE outbox_events SET status = 'PROCESSING' WHERE idempotency_key = 'due'");
    tx.commit();
  }
  {
    pqxx::work tx(c); // a reset to PENDING that is due now wakes the processors again
    tx.exec("UPDATE outbox_events SET status = 'PENDING', next_retry_at = NULL "
            "WHERE idempotency_key = 'due'");
    tx.exec("INSERT INTO dead_letter_events (original_event_id, aggregate_type, aggregate_id, "
            "event_type, payloads, reason) SELECT id, 'order', '1', 'E', '{}', "
            "'MAX_RETRIES_EXCEEDED' FROM outbox_events WHERE idempotency_key = 'due'");
    tx.commit();
  }
  for (int i = 0; i < 20 && (outbox.payloads.size() < 2 || dlq.payloads.empty()); ++i)
    listen_conn.await_notification(0, 100000);
  CHECK(outbox.payloads == std::vector<std::string>{"1", "1"});
  CHECK(dlq.payloads == std::vector<std::string>{"1"});
}

namespace {

/// The compiled-in migrations and `extra` after them.
std::vector<persistence::migration> with(std::vector<persistence::migration> extra) {
  auto all = persistence::migrations();
  all.insert(all.end(), extra.begin(), extra.end());
  return all;
}

void insert_order(pqxx::transaction_base& tx, const std::string& customer) {
  tx.exec_params("INSERT INTO orders (customer_id, total_amount, shipping_type) "
                 "VALUES ($1, 10, 'domestic')",
                 customer);
}

/// Whether an order inserted and committed by another connection gets through within 10 s (the
/// write goes on in the background otherwise).
bool order_written_within_10s(const std::string& conninfo) {
  static std::vector<std::future<void>> stuck; // outlive the test rather than block it
  auto writing = std::async(std::launch::async, [conninfo] {
    pqxx::connection c(conninfo);
    pqxx::work tx(c);
    insert_order(tx, "meanwhile");
    tx.commit();
  });
  if (writing.wait_for(std::chrono::seconds(10)) == std::future_status::ready)
    return true;
  stuck.push_back(std::move(writing));
  return false;
}

/// Waits (up to 10 s) until a statement like `pattern` waits for a lock in database `name`.
bool waits_for_lock(const std::string& conninfo, const std::string& pattern) {
  for (int i = 0; i < 200; ++i) {
    if (query_value(conninfo, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                              "'Lock' AND datname = current_database() AND query LIKE '" +
                                  pattern + "'") != "0")
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

} // namespace

TEST_CASE("a migration that cannot get its lock gives up after the lock timeout, lets the writes "
          "queued behind it through, and applies once the lock is free") {
  auto conninfo = empty_database("outboxd_pg_migrate_busy");
  {
    pqxx::connection c(conninfo);
    persistence::migrate(c);
  }
  // A long transaction that wrote to orders (it holds a lock the ALTER below conflicts with).
  pqxx::connection long_conn(conninfo);
  pqxx::work long_tx(long_conn);
  insert_order(long_tx, "long");

  persistence::migrate_options options;
  options.lock_timeout = std::chrono::milliseconds(200);
  options.attempts = 50;
  options.first_retry_delay = std::chrono::milliseconds(200);
  auto migrating = std::async(std::launch::async, [&] {
    pqxx::connection c(conninfo);
    return persistence::migrate(
        c, with({{9001, "9001_note.sql", "ALTER TABLE orders ADD COLUMN note TEXT;"}}), options);
  });
  REQUIRE(waits_for_lock(conninfo, "ALTER TABLE orders%"));
  // A write that queues behind the waiting ALTER goes through once the ALTER gives up, while the
  // long transaction still holds its lock.
  CHECK(order_written_within_10s(conninfo));
  CHECK(migrating.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready);

  long_tx.commit();
  CHECK(migrating.get() == std::vector<std::string>{"9001_note.sql"});
  CHECK(query_value(conninfo, "SELECT count(*) FROM information_schema.columns WHERE "
                              "table_name = 'orders' AND column_name = 'note'") == "1");
  CHECK(query_value(conninfo, "SELECT count(*) FROM orders") == "2");
}

TEST_CASE("a database with every migration applied is checked by reading alone: a role that may "
          "not create, and a read-only session, start all the same") {
  auto conninfo = empty_database("outboxd_pg_migrate_read_alone");
  {
    pqxx::connection c(conninfo);
    persistence::migrate(c);
    pqxx::nontransaction admin(c);
    admin.exec("DO $$BEGIN CREATE ROLE outboxd_dml_only LOGIN; EXCEPTION WHEN duplicate_object "
               "THEN NULL; END$$");
    admin.exec("REVOKE CREATE ON SCHEMA public FROM PUBLIC");
    admin.exec("GRANT USAGE ON SCHEMA public TO outboxd_dml_only");
    admin.exec("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "
               "outboxd_dml_only");
  }
  pqxx::connection dml_only(conninfo + " user=outboxd_dml_only");
  CHECK(persistence::migrate(dml_only).empty());
  pqxx::connection read_only(conninfo + " options='-c default_transaction_read_only=on'");
  CHECK(persistence::migrate(read_only).empty());
  // A migration still to apply needs the rights it needs: the refusal names them.
  CHECK_THROWS_WITH_AS(
      persistence::migrate(
          dml_only, with({{9004, "9004_note.sql", "ALTER TABLE orders ADD COLUMN n TEXT;"}}), {}),
      doctest::Contains("permission denied"), pqxx::sql_error);
}

TEST_CASE("a migration that never gets its lock fails naming the sessions with the oldest open "
          "transactions") {
  auto conninfo = empty_database("outboxd_pg_migrate_blocked");
  {
    pqxx::connection c(conninfo);
    persistence::migrate(c);
  }
  pqxx::connection idle_conn(conninfo + " application_name=report-tool");
  pqxx::work idle_tx(idle_conn);
  insert_order(idle_tx, "left open"); // and left idle in its transaction
  const auto pid = std::to_string(idle_conn.backendpid());
  {
    pqxx::connection c(conninfo);
    pqxx::nontransaction session(c);
    auto described = persistence::oldest_transactions(session);
    CHECK(described.find("pid " + pid + " (report-tool, user ") != std::string::npos);
    CHECK(described.find("idle in transaction for ") != std::string::npos);
  }

  persistence::migrate_options options;
  options.lock_timeout = std::chrono::milliseconds(100);
  options.attempts = 2;
  options.first_retry_delay = std::chrono::milliseconds(50);
  pqxx::connection c(conninfo);
  try {
    persistence::migrate(
        c, with({{9003, "9003_note.sql", "ALTER TABLE orders ADD COLUMN note TEXT;"}}), options);
    FAIL("the migration got a lock the open transaction holds");
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    CHECK(message.find("9003_note.sql: a lock was not free within 100ms in 2 attempts") !=
          std::string::npos);
    CHECK(message.find("pid " + pid + " (report-tool") != std::string::npos);
  }
  idle_tx.abort();
  pqxx::nontransaction session(c);
  CHECK(persistence::oldest_transactions(session) ==
        "no other session of this database has a transaction open");
  CHECK(query_value(conninfo, "SELECT count(*) FROM schema_migrations WHERE version = 9003") ==
        "0");
}

TEST_CASE("a no-transaction migration builds its indexes concurrently without blocking writes, "
          "and rebuilds an index a failed build left invalid") {
  auto conninfo = empty_database("outboxd_pg_migrate_concurrently");
  {
    pqxx::connection c(conninfo);
    persistence::migrate(c);
    pqxx::work tx(c);
    insert_order(tx, "twice");
    insert_order(tx, "twice");
    tx.commit();
    // A unique build fails on the duplicates and leaves its index behind, INVALID.
    CHECK_THROWS(pqxx::nontransaction(c).exec(
        "CREATE UNIQUE INDEX CONCURRENTLY orders_by_customer ON orders (customer_id)"));
  }
  REQUIRE(query_value(conninfo, "SELECT count(*) FROM pg_index i JOIN pg_class c ON "
                                "c.oid = i.indexrelid WHERE c.relname = 'orders_by_customer' "
                                "AND NOT i.indisvalid") == "1");

  pqxx::connection long_conn(conninfo);
  pqxx::work long_tx(long_conn); // a concurrent build waits for this one to end ...
  insert_order(long_tx, "long");
  auto migrating = std::async(std::launch::async, [&] {
    pqxx::connection c(conninfo);
    return persistence::migrate(
        c,
        with({{9002, "9002_indexes.sql",
               "-- outboxd:no-transaction\n"
               "-- Two statements, each on its own.\n"
               "CREATE INDEX CONCURRENTLY IF NOT EXISTS orders_by_customer\n"
               "    ON orders (customer_id);\n"
               "CREATE INDEX CONCURRENTLY IF NOT EXISTS orders_by_created ON orders "
               "(created_at);\n"}}),
        {});
  });
  REQUIRE(waits_for_lock(conninfo, "%CONCURRENTLY%"));
  // ... but no write waits for it.
  CHECK(order_written_within_10s(conninfo));
  long_tx.commit();
  CHECK(migrating.get() == std::vector<std::string>{"9002_indexes.sql"});
  CHECK(query_value(conninfo, "SELECT string_agg(c.relname || ':' || i.indisvalid || ':' || "
                              "i.indisunique, ',' ORDER BY c.relname) FROM pg_index i JOIN "
                              "pg_class c ON c.oid = i.indexrelid WHERE c.relname IN "
                              "('orders_by_customer', 'orders_by_created')") ==
        "orders_by_created:true:false,orders_by_customer:true:false");
}

namespace {

/// How many events the live-migration test loads: OUTBOXD_LIVE_MIGRATION_EVENTS, else 100 000
/// (bench/live_migration.sh runs it with 5 000 000).
long long live_migration_events() {
  const char* v = std::getenv("OUTBOXD_LIVE_MIGRATION_EVENTS");
  return v && *v ? std::stoll(v) : 100000;
}

/// Writers that take orders the way the API does (an order and its event, one transaction) in a
/// loop until stopped, recording how long each transaction took and when each committed.
class order_writers {
public:
  order_writers(const std::string& conninfo, int n) {
    for (int i = 0; i < n; ++i)
      threads_.emplace_back([this, conninfo, i] { write(conninfo, i); });
  }
  ~order_writers() { stop(); }
  void stop() {
    stop_ = true;
    for (auto& t : threads_)
      if (t.joinable())
        t.join();
  }
  std::chrono::milliseconds longest_transaction() const { return longest_; }
  /// The longest time no writer committed, from the first commit to the last.
  std::chrono::milliseconds longest_gap() {
    std::sort(commits_.begin(), commits_.end());
    std::chrono::milliseconds gap{0};
    for (std::size_t i = 1; i < commits_.size(); ++i)
      gap = std::max(gap, std::chrono::duration_cast<std::chrono::milliseconds>(commits_[i] -
                                                                                commits_[i - 1]));
    return gap;
  }
  std::size_t commits() const { return commits_.size(); }

private:
  void write(const std::string& conninfo, int writer) {
    pqxx::connection c(conninfo);
    for (long n = 0; !stop_; ++n) {
      auto started = std::chrono::steady_clock::now();
      pqxx::work tx(c);
      auto id = tx.exec1("INSERT INTO orders (customer_id, total_amount, shipping_type) VALUES "
                         "('live', 10, 'domestic') RETURNING id")[0]
                    .as<std::string>();
      tx.exec_params("INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                     "payloads, idempotency_key) VALUES ('order', $1, 'OrderCreated', '{}', $2)",
                     id, fmt::format("live:{}:{}", writer, n));
      tx.commit();
      auto done = std::chrono::steady_clock::now();
      std::lock_guard lock(mutex_);
      longest_ =
          std::max(longest_, std::chrono::duration_cast<std::chrono::milliseconds>(done - started));
      commits_.push_back(done);
    }
  }
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::chrono::milliseconds longest_{0};
  std::vector<std::chrono::steady_clock::time_point> commits_;
  std::vector<std::thread> threads_;
};

} // namespace

TEST_CASE("a new migration on a live table of millions of events never blocks the writes longer "
          "than the lock timeout") {
  const long long events = live_migration_events();
  auto conninfo = empty_database("outboxd_pg_migrate_live");
  {
    pqxx::connection c(conninfo);
    persistence::migrate(c);
    for (long long from = 1; from <= events; from += 500000) {
      pqxx::work tx(c);
      tx.exec(fmt::format("INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                          "payloads, idempotency_key, status, processed_at) SELECT 'order', "
                          "g::text, 'OrderCreated', '{{\"billing\": {{\"payload\": "
                          "{{\"orderId\": 1}}}}}}', 'old:' || g, 'PROCESSED', now() FROM "
                          "generate_series({}, {}) g",
                          from, std::min(events, from + 499999)));
      tx.commit();
    }
    pqxx::nontransaction(c).exec("VACUUM ANALYZE outbox_events");
  }
  const auto lock_timeout = std::chrono::milliseconds(3000); // database.migrationLockTimeout
  persistence::migrate_options options;
  options.lock_timeout = lock_timeout;
  const int next = persistence::latest_migration_version() + 1;
  auto migrations = with({
      // Takes the strongest lock, briefly: it has to wait for the long transaction below.
      {next, fmt::format("{}_live_note.sql", next),
       "ALTER TABLE outbox_events ADD COLUMN live_note TEXT;"},
      // Reads the whole table, without blocking a write.
      {next + 1, fmt::format("{}_live_index.sql", next + 1),
       "-- outboxd:no-transaction\n"
       "CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_events_live ON outbox_events "
       "(event_type, id);\n"},
  });

  order_writers writers(conninfo, 2);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  // A transaction that wrote an event and stays open for 5 s: the ALTER waits for it, gives up
  // after the lock timeout, lets the writes queued behind it through, and tries again.
  auto long_writer = std::async(std::launch::async, [&] {
    pqxx::connection c(conninfo);
    pqxx::work tx(c);
    tx.exec("INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads, "
            "idempotency_key) VALUES ('order', 'long', 'OrderCreated', '{}', 'live:long')");
    std::this_thread::sleep_for(std::chrono::seconds(5));
    tx.commit();
  });
  const auto started = std::chrono::steady_clock::now();
  std::vector<std::string> applied;
  {
    pqxx::connection c(conninfo);
    applied = persistence::migrate(c, migrations, options);
  }
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  writers.stop();
  long_writer.get();

  MESSAGE(fmt::format("{} events: migration {} ms; {} orders written meanwhile; longest write "
                      "{} ms, longest time without a commit {} ms (lock timeout {} ms)",
                      events, took.count(), writers.commits(),
                      writers.longest_transaction().count(), writers.longest_gap().count(),
                      lock_timeout.count()));
  CHECK(applied.size() == 2);
  CHECK(took > std::chrono::seconds(5)); // it did have to wait for the long transaction
  CHECK(query_value(conninfo, "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = "
                              "i.indexrelid WHERE c.relname = 'outbox_events_live'") == "t");
  CHECK(writers.commits() > 20);
  // A write waits at most for the lock timeout (queued behind the waiting ALTER), plus the
  // machine's own slowness.
  CHECK(writers.longest_transaction() < lock_timeout + std::chrono::milliseconds(1500));
  CHECK(writers.longest_gap() < lock_timeout + std::chrono::milliseconds(1500));
}
