// The migration runner: applies once, is safe to run concurrently, refuses edited history.
#include "persistence/migrations.hpp"
#include "test/support/test_db.hpp"

#include <doctest/doctest.h>
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
