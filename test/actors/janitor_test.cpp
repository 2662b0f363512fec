// The janitor's retention on a real PostgreSQL: a backlog of old rows larger than a batch is
// deleted until none is left, what is recent or unfinished stays, and /metrics counts it.
#include "actors/engine.hpp"
#include "metrics/metrics.hpp"
#include "test/support/test_db.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <thread>

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
  actors::engine eng(s, {});
  eng.start();
  bool done = false;
  for (int i = 0; i < 300 && !done; ++i) { // the first run starts 5 s after the engine
    std::this_thread::sleep_for(100ms);
    done = number("SELECT count(*) FROM outbox_events WHERE processed_at < now() - interval "
                  "'1 hour'") == 0 &&
           number("SELECT count(*) FROM dead_letter_events WHERE status = 'PROCESSED'") == 0;
  }
  eng.stop();
  CHECK(done);
  CHECK(number("SELECT count(*) FROM outbox_events WHERE status = 'PROCESSED'") == 10);
  CHECK(number("SELECT count(*) FROM outbox_events WHERE status = 'PENDING'") == 1);
  CHECK(number("SELECT count(*) FROM outbox_events WHERE status = 'DEAD'") == 4);
  CHECK(query_value(db(), "SELECT string_agg(aggregate_id || ':' || status, ',') FROM "
                          "dead_letter_events") == "d4:FAILED");
  CHECK(deleted_from("outbox_events") - events_before == 2500);
  CHECK(deleted_from("dead_letter_events") - letters_before == 3);
}
