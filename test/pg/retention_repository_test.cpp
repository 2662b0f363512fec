// Retention of the audit and of removed orders on a real PostgreSQL: only old rows of settled
// aggregates with nothing unfinished go, the cursor passes what must stay, an export sees every
// row before it is deleted and a failing one deletes nothing, and removed orders go only when
// nothing of them is unfinished.
#include "persistence/aggregate_hooks.hpp"
#include "persistence/retention_repository.hpp"
#include "test/support/test_db.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <pqxx/pqxx>
#include <stdexcept>

using namespace outboxd;
using namespace outboxd::test;
using namespace std::chrono_literals;

namespace {

const lazy_database db("outboxd_pg_retention");

void exec(const std::string& sql) {
  pqxx::connection c(db());
  pqxx::work tx(c);
  tx.exec(sql);
  tx.commit();
}

/// An order in `status` and returns its id.
long long add_order(const std::string& status, bool removed = false,
                    const std::string& removed_ago = "2 days") {
  return std::stoll(query_value(
      db(), "INSERT INTO orders (customer_id, total_amount, shipping_type, order_status, deleted, "
            "updated_at) VALUES ('C-1', 10, 'domestic', '" +
                status + "', " + (removed ? "true" : "false") + ", now() - interval '" +
                removed_ago + "') RETURNING id"));
}

/// `n` audit rows of aggregate `type`/`id`, written `age` ago.
void add_audit(const std::string& type, long long id, int n, const std::string& age) {
  exec("INSERT INTO aggregate_results (event_id, aggregate_type, aggregate_id, event_type, "
       "destination, fanout_order, attempt, endpoint_url, http_method, outcome, request_payload, "
       "published_at) SELECT 1, '" +
       type + "', '" + std::to_string(id) +
       "', 'OrderCreated', 'inventory', 0, g, 'http://x/reserve', 'POST', 'success', "
       "'{\"line\": \"a\\nb\"}', now() - interval '" +
       age + "' FROM generate_series(1, " + std::to_string(n) + ") g");
}

/// An event of aggregate `type`/`id` in `status`.
long long add_event(const std::string& type, long long id, const std::string& status) {
  static int n = 0;
  return std::stoll(query_value(
      db(), "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads, "
            "idempotency_key, status) VALUES ('" +
                type + "', '" + std::to_string(id) + "', 'E', '{}', 'r" + std::to_string(++n) +
                "', '" + status + "') RETURNING id"));
}

/// A dead letter of aggregate `type`/`id` in `status` (on a DEAD event).
void add_dead_letter(const std::string& type, long long id, const std::string& status) {
  auto event = add_event(type, id, "DEAD");
  exec("INSERT INTO dead_letter_events (original_event_id, aggregate_type, aggregate_id, "
       "event_type, payloads, reason, status) SELECT id, aggregate_type, aggregate_id, "
       "event_type, payloads, 'NON_RETRYABLE_ERROR', '" +
       status + "' FROM outbox_events WHERE id = " + std::to_string(event));
}

std::string audit_of(long long aggregate) {
  return query_value(db(), "SELECT count(*) FROM aggregate_results WHERE aggregate_id = '" +
                               std::to_string(aggregate) + "'");
}

struct fixture {
  fixture() { truncate_all(db()); }
  persistence::order_hooks hooks;
  pqxx::connection conn{db()};
  persistence::retention_repository repo{conn, {{"order", &hooks}}};

  /// Runs audit retention from the start until it catches up; rows deleted.
  int drain_audit(
      std::chrono::milliseconds age, int batch,
      const std::function<void(const std::vector<persistence::expiring_audit_row>&)>& keep = {}) {
    std::int64_t cursor = 0;
    int deleted = 0;
    for (int i = 0; i < 100; ++i) {
      auto b = repo.delete_settled_audit(cursor, age, batch, keep);
      CHECK(b.scanned_to >= cursor);
      cursor = b.scanned_to;
      deleted += b.deleted;
      if (b.caught_up)
        return deleted;
    }
    FAIL("audit retention never caught up");
    return deleted;
  }
};

} // namespace

TEST_CASE_FIXTURE(fixture, "audit retention deletes old rows of settled aggregates with nothing "
                           "unfinished, and keeps every other row") {
  auto delivered = add_order("DELIVERED");
  auto cancelled = add_order("CANCELLED");
  auto failed = add_order("FAILED");
  auto confirmed = add_order("CONFIRMED"); // may still be cancelled: its audit says what to undo
  auto attention = add_order("ATTENTION"); // an operator's redrive may still compensate it
  auto notifying = add_order("DELIVERED"); // its notification is still pending
  auto stuck = add_order("CANCELLED");     // a dead letter waits for the operator
  auto recent = add_order("DELIVERED");    // written within the window
  const long long gone = 999999;           // removed for good: settled
  for (auto id : {delivered, cancelled, failed, confirmed, attention, notifying, stuck, gone})
    add_audit("order", id, 3, "2 days");
  add_audit("invoice", 77, 2, "2 days"); // a type without hooks: settled once nothing is open
  add_audit("invoice", 78, 2, "2 days");
  add_audit("order", recent, 3, "1 hour"); // the walk stops at the first row this young
  add_event("order", notifying, "PENDING");
  add_dead_letter("order", stuck, "FAILED");
  add_event("invoice", 78, "PROCESSING");

  // Batches of 2 walk the rows and stop at the first one inside the window.
  CHECK(drain_audit(24h, 2) == 3 * 4 + 2);
  for (auto id : {delivered, cancelled, failed, gone})
    CHECK(audit_of(id) == "0");
  for (auto id : {confirmed, attention, notifying, stuck, recent})
    CHECK(audit_of(id) == "3");
  CHECK(query_value(db(), "SELECT string_agg(DISTINCT aggregate_id, ',') FROM aggregate_results "
                          "WHERE aggregate_type = 'invoice'") == "78");

  // Once the order is delivered and its notification done, the next pass takes its rows.
  exec("UPDATE outbox_events SET status = 'PROCESSED' WHERE aggregate_id = '" +
       std::to_string(notifying) + "'");
  exec("UPDATE orders SET order_status = 'CANCELLED' WHERE id = " + std::to_string(confirmed));
  CHECK(drain_audit(24h, 1000) == 6);
  CHECK(audit_of(notifying) == "0");
  CHECK(audit_of(confirmed) == "0");
}

TEST_CASE_FIXTURE(fixture, "the cursor passes rows that must stay, so a batch does not read them "
                           "again") {
  auto confirmed = add_order("CONFIRMED");
  auto delivered = add_order("DELIVERED");
  add_audit("order", confirmed, 5, "2 days");
  add_audit("order", delivered, 5, "2 days");
  auto first = repo.delete_settled_audit(0, 24h, 5, {});
  CHECK(first.deleted == 0); // the five kept rows
  CHECK_FALSE(first.caught_up);
  auto second = repo.delete_settled_audit(first.scanned_to, 24h, 5, {});
  CHECK(second.deleted == 5);
  CHECK(second.scanned_to > first.scanned_to);
  auto third = repo.delete_settled_audit(second.scanned_to, 24h, 5, {});
  CHECK(third.deleted == 0);
  CHECK(third.caught_up);
  CHECK(third.scanned_to == second.scanned_to);
}

TEST_CASE_FIXTURE(fixture, "an export sees every row as JSON with its day before the delete, and "
                           "a failing export deletes nothing") {
  auto delivered = add_order("DELIVERED");
  add_audit("order", delivered, 3, "2 days");
  CHECK_THROWS_AS(repo.delete_settled_audit(
                      0, 24h, 10, [](const auto&) { throw std::runtime_error("disk full"); }),
                  std::runtime_error);
  CHECK(audit_of(delivered) == "3");

  std::vector<persistence::expiring_audit_row> seen;
  CHECK(drain_audit(24h, 10, [&](const auto& rows) {
          seen.insert(seen.end(), rows.begin(), rows.end());
          // The rows are still there while the export runs: a crash now loses nothing.
          CHECK(audit_of(delivered) == "3");
        }) == 3);
  REQUIRE(seen.size() == 3);
  const auto day = query_value(
      db(), "SELECT to_char((now() - interval '2 days') AT TIME ZONE 'UTC', 'YYYY-MM-DD')");
  for (const auto& r : seen) {
    CHECK(r.day == day);
    CHECK(r.json.find(fmt::format("\"id\":{}", r.id)) != std::string::npos);
    CHECK(r.json.find("\"aggregate_type\":\"order\"") != std::string::npos);
    CHECK(r.json.find("\"request_payload\":{\"line\": \"a\\nb\"}") != std::string::npos);
    CHECK(r.json.find('\n') == std::string::npos); // one line per row
  }
  CHECK(audit_of(delivered) == "0");
}

TEST_CASE_FIXTURE(fixture, "removed orders are deleted for good once old and finished, oldest "
                           "first") {
  auto old_a = add_order("DELIVERED", true, "3 days");
  add_order("CANCELLED", true, "2 days");
  auto fresh = add_order("DELIVERED", true, "1 hour");
  auto kept = add_order("DELIVERED");                    // not removed
  auto busy = add_order("DELIVERED", true, "5 days");    // its notification is still pending
  auto waiting = add_order("CANCELLED", true, "5 days"); // a dead letter waits for the operator
  add_event("order", busy, "PENDING");
  add_dead_letter("order", waiting, "PENDING");
  CHECK(repo.delete_removed_orders(24h, 1) == 1);
  CHECK(query_value(db(), "SELECT count(*) FROM orders WHERE id = " + std::to_string(old_a)) ==
        "0"); // the oldest removal first
  CHECK(repo.delete_removed_orders(24h, 10) == 1);
  CHECK(repo.delete_removed_orders(24h, 10) == 0);
  CHECK(query_value(db(), "SELECT string_agg(id::text, ',' ORDER BY id) FROM orders") ==
        fmt::format("{},{},{},{}", fresh, kept, busy, waiting));
}
