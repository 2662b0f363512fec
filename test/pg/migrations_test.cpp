// The migration runner: applies once, is safe to run concurrently, refuses edited history.
#include "persistence/migrations.hpp"
#include "test/support/test_db.hpp"

#include <chrono>
#include <doctest/doctest.h>
#include <future>
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
