// The janitor's retention on a real PostgreSQL: a backlog of old rows larger than a batch is
// deleted until none is left, what is recent or unfinished stays, the audit of settled orders is
// exported before it goes (and stays when the export fails), and /metrics counts it.
#include "actors/engine.hpp"
#include "metrics/metrics.hpp"
#include "persistence/aggregate_hooks.hpp"
#include "test/support/test_db.hpp"

#include <doctest/doctest.h>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <thread>
#include <unistd.h>

using namespace outboxd;
using namespace outboxd::test;
using namespace std::chrono_literals;

namespace {

const lazy_database db("outboxd_actor_janitor");

long long number(const std::string& sql) {
  return std::stoll(query_value(db(), sql));
}

double deleted_from(const char* table) {
  return metrics::global().retention_deleted.value({{"table", table}});
}

persistence::order_hooks& order_hooks() {
  static persistence::order_hooks hooks;
  return hooks;
}

/// Runs an engine until `done` holds (at most 30 s); whether it did.
template <class Done> bool run_engine_until(const conf::settings& s, Done done) {
  actors::engine eng(s, {{"order", &order_hooks()}});
  eng.start();
  bool ok = false;
  for (int i = 0; i < 300 && !ok; ++i) { // the first run starts 5 s after the engine
    std::this_thread::sleep_for(100ms);
    ok = done();
  }
  eng.stop();
  return ok;
}

} // namespace

TEST_CASE("retention deletes a backlog of old rows batch after batch until none is left, and "
          "keeps what is recent or unfinished") {
  truncate_all(db());
  // 2 500 events processed two hours ago (more than two batches), 10 just now, one pending (due
  // tomorrow, so that it stays pending).
  query_value(db(), "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                    "payloads, idempotency_key, status, processed_at) SELECT 'order', g::text, "
                    "'E', '{}', 'k' || g, 'PROCESSED', now() - interval '2 hours' "
                    "FROM generate_series(1, 2500) g");
  query_value(db(), "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                    "payloads, idempotency_key, status, processed_at) SELECT 'order', g::text, "
                    "'E', '{}', 'k' || g, 'PROCESSED', now() FROM generate_series(2501, 2510) g");
  query_value(db(), "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                    "payloads, idempotency_key, next_retry_at) VALUES ('order', '9999', 'E', '{}', "
                    "'pending', now() + interval '1 day')");
  // Dead letters of four DEAD events: three resolved two hours ago, one FAILED.
  query_value(db(), "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                    "payloads, idempotency_key, status) SELECT 'order', 'd' || g, 'E', '{}', "
                    "'dead' || g, 'DEAD' FROM generate_series(1, 4) g");
  query_value(db(), "INSERT INTO dead_letter_events (original_event_id, aggregate_type, "
                    "aggregate_id, event_type, payloads, reason, status, resolved_at) SELECT id, "
                    "aggregate_type, aggregate_id, event_type, payloads, 'NON_RETRYABLE_ERROR', "
                    "CASE WHEN aggregate_id = 'd4' THEN 'FAILED' ELSE 'PROCESSED' END, "
                    "now() - interval '2 hours' FROM outbox_events WHERE status = 'DEAD'");
  const double events_before = deleted_from("outbox_events");
  const double letters_before = deleted_from("dead_letter_events");

  conf::settings s;
  s.database.url = db();
  s.outbox.pool_size = 1;
  s.outbox.connections = 3;
  s.outbox.retention = 1h;
  s.dlq.retention = 1h;
  s.outbox.reaper_interval = 60s;
  CHECK(run_engine_until(s, [] {
    return number("SELECT count(*) FROM outbox_events WHERE processed_at < now() - interval "
                  "'1 hour'") == 0 &&
           number("SELECT count(*) FROM dead_letter_events WHERE status = 'PROCESSED'") == 0;
  }));
  CHECK(number("SELECT count(*) FROM outbox_events WHERE status = 'PROCESSED'") == 10);
  CHECK(number("SELECT count(*) FROM outbox_events WHERE status = 'PENDING'") == 1);
  CHECK(number("SELECT count(*) FROM outbox_events WHERE status = 'DEAD'") == 4);
  CHECK(query_value(db(), "SELECT string_agg(aggregate_id || ':' || status, ',') FROM "
                          "dead_letter_events") == "d4:FAILED");
  CHECK(deleted_from("outbox_events") - events_before == 2500);
  CHECK(deleted_from("dead_letter_events") - letters_before == 3);
}

namespace {

/// Two orders with audit rows written two hours ago: one DELIVERED (settled), one CONFIRMED (it
/// may still be cancelled); and an order removed two hours ago. Returns the DELIVERED one's id.
std::string settled_and_open_orders() {
  truncate_all(db());
  query_value(db(), "INSERT INTO orders (id, customer_id, total_amount, shipping_type, "
                    "order_status, deleted, updated_at) VALUES (1, 'C', 10, 'domestic', "
                    "'DELIVERED', false, now()), (2, 'C', 10, 'domestic', 'CONFIRMED', false, "
                    "now()), (3, 'C', 10, 'domestic', 'CANCELLED', true, now() - interval "
                    "'2 hours') RETURNING 1");
  query_value(db(), "INSERT INTO aggregate_results (event_id, aggregate_id, event_type, "
                    "destination, fanout_order, attempt, endpoint_url, http_method, outcome, "
                    "published_at) SELECT 1, o, 'OrderCreated', 'inventory', 0, g, 'http://x', "
                    "'POST', 'success', now() - interval '2 hours' FROM generate_series(1, 3) g, "
                    "(VALUES ('1'), ('2')) v(o) RETURNING 1");
  return "1";
}

conf::settings audit_retention_settings(const std::string& export_dir) {
  conf::settings s;
  s.database.url = db();
  s.outbox.pool_size = 1;
  s.outbox.connections = 3;
  s.outbox.reaper_interval = 60s;
  s.audit.retention = 1h;
  s.audit.export_dir = export_dir;
  s.orders.retention = 1h;
  return s;
}

std::string temp_folder(const char* name) {
  auto dir = std::filesystem::temp_directory_path() /
             fmt::format("outboxd-{}-{}", name, static_cast<long>(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

} // namespace

TEST_CASE("audit retention exports and deletes the old rows of settled orders only, and removed "
          "orders go for good") {
  settled_and_open_orders();
  const auto dir = temp_folder("export");
  const double exported_before = metrics::global().audit_exported.value({});
  const double audit_before = deleted_from("aggregate_results");
  const double orders_before = deleted_from("orders");
  CHECK(run_engine_until(audit_retention_settings(dir), [] {
    return number("SELECT count(*) FROM aggregate_results WHERE aggregate_id = '1'") == 0 &&
           number("SELECT count(*) FROM orders WHERE id = 3") == 0;
  }));
  CHECK(number("SELECT count(*) FROM aggregate_results WHERE aggregate_id = '2'") == 3);
  CHECK(number("SELECT count(*) FROM orders") == 2);
  CHECK(metrics::global().audit_exported.value({}) - exported_before == 3);
  CHECK(deleted_from("aggregate_results") - audit_before == 3);
  CHECK(deleted_from("orders") - orders_before == 1);
  // One file for the day the rows were written, one JSON object per line.
  const auto day = query_value(
      db(), "SELECT to_char((now() - interval '2 hours') AT TIME ZONE 'UTC', 'YYYY-MM-DD')");
  std::ifstream file(dir + "/aggregate_results-" + day + ".jsonl");
  REQUIRE(file.good());
  std::string line;
  int lines = 0;
  while (std::getline(file, line)) {
    ++lines;
    CHECK(line.rfind("{\"id\":", 0) == 0);
    CHECK(line.find("\"aggregate_id\":\"1\"") != std::string::npos);
  }
  CHECK(lines == 3);
  std::filesystem::remove_all(dir);
}

TEST_CASE("an audit export that cannot be written deletes nothing, and is counted") {
  settled_and_open_orders();
  const auto dir = temp_folder("export-broken");
  const auto day = query_value(
      db(), "SELECT to_char((now() - interval '2 hours') AT TIME ZONE 'UTC', 'YYYY-MM-DD')");
  // The day's file is a folder: opening it for writing fails (also for root).
  std::filesystem::create_directories(dir + "/aggregate_results-" + day + ".jsonl");
  const double failures_before =
      metrics::global().retention_failures.value({{"table", "aggregate_results"}});
  CHECK(run_engine_until(audit_retention_settings(dir), [&] {
    return metrics::global().retention_failures.value({{"table", "aggregate_results"}}) >
           failures_before;
  }));
  CHECK(number("SELECT count(*) FROM aggregate_results") == 6);
  CHECK(number("SELECT count(*) FROM orders WHERE id = 3") == 0); // the rest of retention goes on
  std::filesystem::remove_all(dir);
}
