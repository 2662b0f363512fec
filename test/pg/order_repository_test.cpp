// Order intake on a real PostgreSQL: atomicity, idempotency, the state machine under locks,
// listing, and concurrency.
#include "domain/ports.hpp"
#include "persistence/connection_pool.hpp"
#include "persistence/order_repository.hpp"
#include "test/support/test_db.hpp"

#include <atomic>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <pqxx/pqxx>
#include <set>
#include <thread>

using namespace outboxd;
using namespace outboxd::test;

namespace {

const lazy_database db("outboxd_pg_orders");

struct fixture {
  fixture() { truncate_all(db()); }
  persistence::connection_pool pool{persistence::make_conninfo(db(), std::chrono::seconds(5)), 8,
                                    persistence::order_repository::statements()};
  persistence::order_repository repo{pool};
};

domain::new_order sample(std::string customer = "C-1", std::int64_t cents = 9999) {
  domain::new_order o;
  o.customer_id = std::move(customer);
  o.total_amount = {cents};
  o.shipping = domain::shipping_type::domestic;
  o.items = {{"SKU-1", 2}};
  return o;
}

void force_status(std::int64_t id, const char* status) {
  pqxx::connection c(db());
  pqxx::work tx(c);
  tx.exec_params("UPDATE orders SET order_status = $2 WHERE id = $1", id, status);
  tx.commit();
}

long long events_of(std::int64_t id) {
  return std::stoll(query_value(db(), "SELECT count(*) FROM outbox_events WHERE aggregate_id = '" +
                                          std::to_string(id) + "'"));
}

} // namespace

TEST_CASE_FIXTURE(fixture,
                  "creating an order commits the order and its OrderCreated event together") {
  auto out = repo.create(sample(), std::nullopt);
  CHECK(out.what == domain::create_outcome::kind::created);
  CHECK(out.value.id == 1);
  CHECK(out.value.status == domain::order_status::pending);
  CHECK(out.value.total_amount.cents == 9999);
  CHECK(out.value.created_at.size() == 24); // 2026-11-30T12:00:00.123Z
  CHECK(count_rows(db(), "orders") == 1);
  CHECK(query_value(db(), "SELECT event_type || ' ' || status || ' ' || idempotency_key || ' ' || "
                          "aggregate_type FROM outbox_events") ==
        "OrderCreated PENDING order:1:OrderCreated order");
  CHECK(query_value(db(), "SELECT payloads #>> '{billing,payload,amount}' FROM outbox_events") ==
        "99.99");
  CHECK(query_value(db(),
                    "SELECT payloads #>> '{inventory,payload,items,0,sku}' FROM outbox_events") ==
        "SKU-1");
}

TEST_CASE_FIXTURE(fixture, "a failure after the order insert leaves neither row") {
  // Occupy the event key the next order will need, so the event insert fails after the order
  // insert succeeded inside the same transaction.
  {
    pqxx::connection c(db());
    pqxx::work tx(c);
    tx.exec("INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads, "
            "idempotency_key) VALUES ('test', 'x', 'Blocker', '{}', 'order:1:OrderCreated')");
    tx.commit();
  }
  CHECK_THROWS_AS(repo.create(sample(), std::nullopt), pqxx::unique_violation);
  CHECK(count_rows(db(), "orders") == 0);
  CHECK(count_rows(db(), "outbox_events") == 1);
}

TEST_CASE_FIXTURE(fixture, "the same Idempotency-Key and body return the first order") {
  auto first = repo.create(sample(), std::string("key-1"));
  auto again = repo.create(sample(), std::string("key-1"));
  CHECK(first.what == domain::create_outcome::kind::created);
  CHECK(again.what == domain::create_outcome::kind::replayed);
  CHECK(again.value.id == first.value.id);
  CHECK(count_rows(db(), "orders") == 1);
  CHECK(count_rows(db(), "outbox_events") == 1);
}

TEST_CASE_FIXTURE(fixture, "reusing an Idempotency-Key for a different order writes nothing") {
  repo.create(sample("C-1"), std::string("key-2"));
  auto other = repo.create(sample("C-2"), std::string("key-2"));
  CHECK(other.what == domain::create_outcome::kind::key_reused);
  CHECK(other.value.customer_id == "C-1");
  CHECK(count_rows(db(), "orders") == 1);
  CHECK(count_rows(db(), "outbox_events") == 1);
}

TEST_CASE_FIXTURE(fixture, "concurrent creates with one Idempotency-Key make exactly one order") {
  std::atomic<int> created{0}, replayed{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      auto r = repo.create(sample(), std::string("same-key"));
      (r.what == domain::create_outcome::kind::created ? created : replayed)++;
    });
  for (auto& t : threads)
    t.join();
  CHECK(created == 1);
  CHECK(replayed == 7);
  CHECK(count_rows(db(), "orders") == 1);
  CHECK(count_rows(db(), "outbox_events") == 1);
}

TEST_CASE_FIXTURE(fixture, "concurrent creates each get their own order and matching event") {
  constexpr int threads_n = 6, per_thread = 25;
  std::vector<std::thread> threads;
  for (int t = 0; t < threads_n; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i)
        repo.create(sample("C-" + std::to_string(t), 100 + i), std::nullopt);
    });
  for (auto& t : threads)
    t.join();
  CHECK(count_rows(db(), "orders") == threads_n * per_thread);
  CHECK(count_rows(db(), "outbox_events") == threads_n * per_thread);
  CHECK(query_value(db(), "SELECT count(*) FROM orders o JOIN outbox_events e ON e.aggregate_id = "
                          "o.id::text AND (e.payloads #>> '{billing,payload,amount}')::numeric = "
                          "o.total_amount") == std::to_string(threads_n * per_thread));
}

/// Holds every insert into `table` (a lock in an open transaction) until release().
struct inserts_held {
  pqxx::connection c{db()};
  pqxx::work tx{c};
  explicit inserts_held(const std::string& table) {
    tx.exec("LOCK TABLE " + table + " IN EXCLUSIVE MODE");
  }
  void release() { tx.commit(); }
};

/// Waits until `n` sessions wait for a lock (the writers held by inserts_held).
void wait_lock_waiters(int n) {
  for (int i = 0; i < 1000; ++i) {
    if (query_value(db(), "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                          "AND datname = current_database()") == std::to_string(n))
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL("the writers never waited for the lock");
}

/// Waits until `n` creates wait for a writer.
void wait_queued(const persistence::order_repository& repo, std::size_t n) {
  for (int i = 0; i < 1000 && repo.intake().waiting != n; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(repo.intake().waiting == n);
}

/// Runs `create(i)` on threads 0..n-1: the first `writers` ones while inserts into `table` are
/// held, so that they become the writers and wait; the rest then queue behind them; then releases
/// the hold.
template <class Create>
void queue_behind_held_writers(persistence::order_repository& repo, int n, Create create,
                               const std::string& table = "orders") {
  constexpr int writers = persistence::order_repository::intake_writers;
  inserts_held hold(table);
  std::vector<std::thread> threads;
  for (int i = 0; i < writers; ++i)
    threads.emplace_back([&, i] { create(i); });
  wait_lock_waiters(writers);
  for (int i = writers; i < n; ++i)
    threads.emplace_back([&, i] { create(i); });
  wait_queued(repo, static_cast<std::size_t>(n - writers));
  hold.release();
  for (auto& t : threads)
    t.join();
}

TEST_CASE_FIXTURE(fixture, "creates that queue while the writers are busy commit together") {
  constexpr int n = 10;
  std::vector<domain::order> made(n);
  queue_behind_held_writers(repo, n, [&](int i) {
    auto out = repo.create(sample("C-" + std::to_string(i), 100 + i), std::nullopt);
    REQUIRE(out.what == domain::create_outcome::kind::created);
    made[i] = out.value;
  });
  // each request got its own row back
  std::set<std::int64_t> ids;
  for (int i = 0; i < n; ++i) {
    CHECK(made[i].customer_id == "C-" + std::to_string(i));
    CHECK(made[i].total_amount.cents == 100 + i);
    ids.insert(made[i].id);
  }
  CHECK(ids.size() == n);
  // two writers' transactions of one order each, then the eight queued in one
  CHECK(repo.intake().batches == 3);
  CHECK(query_value(db(), "SELECT count(DISTINCT xmin::text) FROM orders") == "3");
  CHECK(query_value(db(), "SELECT count(*) FROM orders o JOIN outbox_events e ON e.aggregate_id = "
                          "o.id::text AND e.idempotency_key = 'order:' || o.id || ':OrderCreated' "
                          "AND (e.payloads #>> '{billing,payload,amount}')::numeric = "
                          "o.total_amount AND e.xmin = o.xmin") == std::to_string(n));
  CHECK(count_rows(db(), "outbox_events") == n);
}

TEST_CASE_FIXTURE(fixture,
                  "a create the database refuses fails alone; the rest of its batch commit") {
  struct refusal {
    refusal() {
      pqxx::connection c(db());
      pqxx::nontransaction(c).exec("ALTER TABLE orders ADD CONSTRAINT test_refused "
                                   "CHECK (customer_id <> 'C-REFUSED')");
    }
    ~refusal() {
      pqxx::connection c(db());
      pqxx::nontransaction(c).exec("ALTER TABLE orders DROP CONSTRAINT test_refused");
    }
  } refused_customer;
  constexpr int n = 8, refused = 5;
  std::atomic<std::size_t> counted{0}; // what the batch metric is told
  persistence::order_repository counting{pool, nullptr, [&](std::size_t k) { counted += k; }};
  std::vector<int> outcome(n, -1); // 1 created, 0 refused
  queue_behind_held_writers(counting, n, [&](int i) {
    try {
      auto out = counting.create(sample(i == refused ? "C-REFUSED" : "C-" + std::to_string(i)),
                                 std::nullopt);
      outcome[i] = out.what == domain::create_outcome::kind::created ? 1 : -1;
    } catch (const pqxx::check_violation&) {
      outcome[i] = 0;
    }
  });
  for (int i = 0; i < n; ++i)
    CHECK(outcome[i] == (i == refused ? 0 : 1));
  CHECK(count_rows(db(), "orders") == n - 1);
  CHECK(count_rows(db(), "outbox_events") == n - 1);
  CHECK(query_value(db(), "SELECT count(*) FROM orders WHERE customer_id = 'C-REFUSED'") == "0");
  CHECK(counted == n - 1); // the failed batch is not counted, its orders written again are
}

TEST_CASE_FIXTURE(fixture, "a create that waits out the lock timeout fails alone") {
  persistence::connection_pool limited{
      persistence::make_conninfo(db(), std::chrono::seconds(5)), 4,
      persistence::order_repository::statements(),
      persistence::session_limits_sql(
          {std::chrono::milliseconds(0), std::chrono::milliseconds(300)})};
  persistence::order_repository limited_repo{limited};
  // another session inserted an order with this key and neither commits nor rolls back
  pqxx::connection other(db());
  pqxx::work pending(other);
  pending.exec("INSERT INTO orders (customer_id, total_amount, shipping_type, request_key) "
               "VALUES ('C-elsewhere', 1, 'domestic', 'held-key')");
  // requests 2..5 queue into one batch; request 3 needs the held key
  constexpr int n = 6, blocked = 3;
  std::vector<int> outcome(n, -1); // 1 created, 0 unavailable
  queue_behind_held_writers(
      limited_repo, n,
      [&](int i) {
        try {
          auto key = i == blocked ? std::optional<std::string>("held-key") : std::nullopt;
          auto out = limited_repo.create(sample("C-" + std::to_string(i)), key);
          outcome[i] = out.what == domain::create_outcome::kind::created ? 1 : -1;
        } catch (const domain::store_unavailable&) {
          outcome[i] = 0;
        }
      },
      "outbox_events");
  pending.abort();
  for (int i = 0; i < n; ++i)
    CHECK(outcome[i] == (i == blocked ? 0 : 1));
  CHECK(count_rows(db(), "orders") == n - 1);
  CHECK(count_rows(db(), "outbox_events") == n - 1);
}

TEST_CASE_FIXTURE(fixture, "hostile text in a batch is stored as sent") {
  // quotes, backslashes, braces, commas and the word NULL mean something in an array literal
  const std::vector<std::string> names = {
      "writer-0",   "writer-1", R"(he said "hi")", R"(back\slash\)",     "{brace},comma", "NULL",
      R"(\"{,}\")", "",         "ünïcode ✓",       std::string(200, '"')};
  const int n = static_cast<int>(names.size());
  std::vector<domain::create_outcome> out(n);
  queue_behind_held_writers(repo, n, [&](int i) {
    out[i] =
        repo.create(sample(names[i]), i >= 2 ? std::optional(names[i] + "|key") : std::nullopt);
  });
  CHECK(repo.intake().batches == 3);
  for (int i = 0; i < n; ++i) {
    CAPTURE(names[i]);
    CHECK(out[i].what == domain::create_outcome::kind::created);
    CHECK(out[i].value.customer_id == names[i]);
    CHECK(query_value(db(), "SELECT customer_id || '|' || coalesce(request_key, '-') FROM orders "
                            "WHERE id = " +
                                std::to_string(out[i].value.id)) ==
          names[i] + "|" + (i >= 2 ? names[i] + "|key" : "-"));
  }
  // a replay of a hostile key finds its order
  auto again = repo.create(sample(names[5]), names[5] + "|key");
  CHECK(again.what == domain::create_outcome::kind::replayed);
  CHECK(again.value.id == out[5].value.id);
}

TEST_CASE_FIXTURE(fixture, "one Idempotency-Key several times in one batch makes one order") {
  // requests 2..7 queue into one batch: four with the same body, two with another
  constexpr int n = 8;
  std::vector<domain::create_outcome> out(n);
  queue_behind_held_writers(repo, n, [&](int i) {
    if (i < 2)
      out[i] = repo.create(sample("C-writer-" + std::to_string(i)), std::nullopt);
    else
      out[i] = repo.create(sample(i < 6 ? "C-same" : "C-other"), std::string("batch-key"));
  });
  using kind = domain::create_outcome::kind;
  int created = 0;
  std::string winner;
  for (int i = 2; i < n; ++i)
    if (out[i].what == kind::created) {
      ++created;
      winner = out[i].value.customer_id;
    }
  REQUIRE(created == 1);
  for (int i = 2; i < n; ++i) {
    CHECK(out[i].value.customer_id == winner);
    if (out[i].what != kind::created)
      CHECK(out[i].what == ((i < 6) == (winner == "C-same") ? kind::replayed : kind::key_reused));
  }
  CHECK(query_value(db(), "SELECT count(*) FROM orders WHERE request_key = 'batch-key'") == "1");
  CHECK(count_rows(db(), "outbox_events") == 3);
  CHECK(repo.intake().batches == 3);
}

TEST_CASE_FIXTURE(fixture,
                  "shipping and delivering follow the state machine and queue one event each") {
  auto id = repo.create(sample(), std::nullopt).value.id;
  using kind = domain::command_outcome::kind;

  auto early = repo.execute(id, domain::order_command::ship, {});
  CHECK(early.what == kind::conflict);
  CHECK(early.reason.find("PENDING") != std::string::npos);
  CHECK(events_of(id) == 1);

  force_status(id, "CONFIRMED");
  auto shipped = repo.execute(id, domain::order_command::ship, {});
  CHECK(shipped.what == kind::applied);
  CHECK(shipped.value->status == domain::order_status::shipped);
  CHECK(repo.execute(id, domain::order_command::ship, {}).what == kind::already_done);
  CHECK(events_of(id) == 2);
  CHECK(query_value(db(), "SELECT payloads #>> '{notifications,payload,oldStatus}' || '>' || "
                          "(payloads #>> '{notifications,payload,newStatus}') FROM outbox_events "
                          "WHERE event_type = 'OrderStatusUpdated'") == "CONFIRMED>SHIPPED");

  CHECK(repo.execute(id, domain::order_command::deliver, {}).what == kind::applied);
  CHECK(repo.execute(id, domain::order_command::deliver, {}).what == kind::already_done);
  CHECK(events_of(id) == 3);
  CHECK(query_value(db(), "SELECT order_status FROM orders") == "DELIVERED");
}

TEST_CASE_FIXTURE(fixture, "cancelling twice records the reason once and queues one cancellation") {
  auto id = repo.create(sample(), std::nullopt).value.id;
  auto first = repo.execute(id, domain::order_command::cancel, "changed my mind");
  auto second = repo.execute(id, domain::order_command::cancel, "again");
  CHECK(first.what == domain::command_outcome::kind::applied);
  CHECK(first.value->status == domain::order_status::cancelling);
  CHECK(first.value->status_reason == "changed my mind");
  CHECK(second.what == domain::command_outcome::kind::already_done);
  CHECK(second.value->status_reason == "changed my mind");
  CHECK(query_value(db(), "SELECT count(*) FROM outbox_events WHERE event_type = '!OrderCreated' "
                          "AND idempotency_key = 'order:1:!OrderCreated'") == "1");
}

TEST_CASE_FIXTURE(fixture, "removal is refused before a terminal state and hides the order after") {
  auto id = repo.create(sample(), std::nullopt).value.id;
  CHECK(repo.execute(id, domain::order_command::remove, {}).what ==
        domain::command_outcome::kind::conflict);
  force_status(id, "FAILED");
  CHECK(repo.execute(id, domain::order_command::remove, {}).what ==
        domain::command_outcome::kind::applied);
  CHECK(query_value(db(), "SELECT deleted FROM orders") == "t");
  CHECK_FALSE(repo.timeline(id, 0));
  CHECK(repo.list(std::nullopt, std::nullopt, 10).empty());
  CHECK(repo.execute(id, domain::order_command::remove, {}).what ==
        domain::command_outcome::kind::not_found);
  CHECK(events_of(id) == 1); // removal writes no event
}

TEST_CASE_FIXTURE(fixture, "commands on unknown orders find nothing and write nothing") {
  CHECK(repo.execute(999, domain::order_command::cancel, "x").what ==
        domain::command_outcome::kind::not_found);
  CHECK(count_rows(db(), "outbox_events") == 0);
}

TEST_CASE_FIXTURE(fixture, "listing is newest first, filters by status and pages by cursor") {
  for (int i = 0; i < 5; ++i)
    repo.create(sample("C-" + std::to_string(i)), std::nullopt);
  force_status(2, "CONFIRMED");
  force_status(4, "CONFIRMED");
  auto all = repo.list(std::nullopt, std::nullopt, 3);
  REQUIRE(all.size() == 3);
  CHECK(all[0].id == 5);
  CHECK(all[2].id == 3);
  auto rest = repo.list(std::nullopt, all.back().id, 3);
  REQUIRE(rest.size() == 2);
  CHECK(rest[0].id == 2);
  auto confirmed = repo.list(domain::order_status::confirmed, std::nullopt, 10);
  REQUIRE(confirmed.size() == 2);
  CHECK(confirmed[0].id == 4);
}

TEST_CASE_FIXTURE(fixture, "the timeline shows the order's own events, attempts, dead letters") {
  auto id = repo.create(sample(), std::nullopt).value.id;
  {
    pqxx::connection c(db());
    pqxx::work tx(c);
    tx.exec(
        "INSERT INTO aggregate_results (event_id, aggregate_id, event_type, destination, "
        "fanout_order, attempt, endpoint_url, http_method, outcome, response_status, "
        "response_payload) VALUES (1, '1', 'OrderCreated', 'inventory', 0, 1, "
        "'http://x/api/inventory/reserve', 'POST', 'success', 200, '{\"reservationId\":\"R\"}')");
    tx.exec("INSERT INTO dead_letter_events (original_event_id, aggregate_type, aggregate_id, "
            "event_type, payloads, reason, last_error) VALUES (1, 'order', '1', 'OrderCreated', "
            "'{}', 'NON_RETRYABLE_ERROR', 'billing: 400')");
    // Another aggregate type that has an aggregate "1" too: none of it is the order's.
    tx.exec("INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads, "
            "idempotency_key, status) VALUES ('invoice', '1', 'InvoiceIssued', '{}', 'inv-1', "
            "'DEAD')");
    tx.exec("INSERT INTO aggregate_results (event_id, aggregate_type, aggregate_id, event_type, "
            "destination, fanout_order, attempt, endpoint_url, http_method, outcome) SELECT id, "
            "'invoice', '1', 'InvoiceIssued', 'mailer', 0, 1, 'http://x/mail', 'POST', "
            "'success' FROM outbox_events WHERE aggregate_type = 'invoice'");
    tx.exec("INSERT INTO dead_letter_events (original_event_id, aggregate_type, aggregate_id, "
            "event_type, payloads, reason) SELECT id, 'invoice', '1', 'InvoiceIssued', '{}', "
            "'NON_RETRYABLE_ERROR' FROM outbox_events WHERE aggregate_type = 'invoice'");
    tx.commit();
  }
  auto t = repo.timeline(id, 0);
  REQUIRE(t);
  REQUIRE(t->events.size() == 1);
  CHECK(t->events[0].event_type == "OrderCreated");
  REQUIRE(t->attempts.size() == 1);
  CHECK(t->attempts[0].aggregate_type == "order"); // written before the column: the default
  CHECK(t->attempts[0].response_payload_json == R"({"reservationId": "R"})");
  CHECK_FALSE(t->attempts[0].request_payload_json);
  REQUIRE(t->dead_letters.size() == 1);
  CHECK(t->dead_letters[0].reason == "NON_RETRYABLE_ERROR");
}

TEST_CASE_FIXTURE(fixture, "the timeline lists an order's newest 1 000 attempts and says so") {
  auto id = repo.create(sample(), std::nullopt).value.id;
  auto add_attempts = [&](int n) {
    query_value(db(), fmt::format("INSERT INTO aggregate_results (event_id, aggregate_id, "
                                  "event_type, destination, fanout_order, attempt, endpoint_url, "
                                  "http_method, outcome) SELECT 1, '{}', 'OrderCreated', "
                                  "'inventory', 0, n, 'http://x/r', 'POST', 'retryable' FROM "
                                  "generate_series(1, {}) n RETURNING 1",
                                  id, n));
  };
  add_attempts(domain::max_timeline_attempts);
  auto whole = repo.timeline(id, 0);
  REQUIRE(whole);
  CHECK(whole->attempts.size() == domain::max_timeline_attempts);
  CHECK_FALSE(whole->attempts_truncated);
  add_attempts(5); // attempts 1..5 again, newer
  auto t = repo.timeline(id, 0);
  REQUIRE(t);
  REQUIRE(t->attempts.size() == domain::max_timeline_attempts);
  CHECK(t->attempts_truncated);
  CHECK(t->attempts.front().attempt == 6); // the five oldest rows are left out
  CHECK(t->attempts.back().attempt == 5);  // the newest row comes last
  CHECK(t->attempts.front().id < t->attempts.back().id);

  // A poller that has the rows up to one id asks for the newer ones only.
  auto newest_five = repo.timeline(id, t->attempts[t->attempts.size() - 6].id);
  REQUIRE(newest_five);
  REQUIRE(newest_five->attempts.size() == 5);
  CHECK_FALSE(newest_five->attempts_truncated);
  CHECK(newest_five->attempts.front().attempt == 1);
  CHECK(newest_five->attempts.back().attempt == 5);
  CHECK(newest_five->events.size() == 1); // the rest of the timeline is whole
  auto none = repo.timeline(id, t->attempts.back().id);
  REQUIRE(none);
  CHECK(none->attempts.empty());
  CHECK_FALSE(none->attempts_truncated);
  add_attempts(domain::max_timeline_attempts + 1); // more new rows than a timeline lists
  auto capped = repo.timeline(id, t->attempts.back().id);
  REQUIRE(capped);
  CHECK(capped->attempts.size() == domain::max_timeline_attempts);
  CHECK(capped->attempts_truncated);
  CHECK(capped->attempts.front().attempt == 2);
}

TEST_CASE_FIXTURE(fixture, "the pool reconnects after its connections are killed") {
  repo.create(sample(), std::nullopt);
  query_value(db(), "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                    "application_name = 'outboxd' AND pid <> pg_backend_pid()");
  // Killed by pg_terminate_backend: the unit of work runs again on a fresh connection.
  auto again = repo.create(sample("C-2"), std::nullopt);
  CHECK(again.what == domain::create_outcome::kind::created);
  CHECK(count_rows(db(), "orders") == 2);
}

TEST_CASE("an unreachable database is reported as unavailable, not as a crash") {
  persistence::connection_pool pool(
      persistence::make_conninfo("host=127.0.0.1 port=1 user=postgres", std::chrono::seconds(1)), 2,
      persistence::order_repository::statements());
  persistence::order_repository repo(pool);
  CHECK_THROWS_AS(repo.create(sample(), std::nullopt), domain::store_unavailable);
  CHECK_THROWS_AS(repo.list(std::nullopt, std::nullopt, 5), domain::store_unavailable);
}
