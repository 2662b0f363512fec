// The workers' shared connections on a real PostgreSQL: a worker keeps its own connection while
// there are enough, the busy ones are shared, a failed statement drops its connection, and an
// unreachable database is reported as a connection loss with a growing retry delay.
#include "persistence/worker_connections.hpp"
#include "test/support/test_db.hpp"

#include <atomic>
#include <doctest/doctest.h>
#include <future>
#include <stdexcept>
#include <thread>

using namespace outboxd;
using namespace outboxd::test;
using namespace std::chrono_literals;

namespace {

const lazy_database db("outboxd_pg_workers");

/// A pool on the test database that counts the connections it opens.
struct counted_pool {
  explicit counted_pool(int size, std::string conninfo = db())
      : pool(
            [this, conninfo](int) {
              ++opened;
              return conninfo;
            },
            size, {}) {}
  std::atomic<int> opened{0};
  persistence::worker_connections pool;
};

/// The session a lease borrowed, by its repository's address.
const void*
borrowed(const persistence::worker_connections::lease<persistence::outbox_repository>& l) {
  return l.operator->();
}

/// Runs `f` on a thread of its own (a worker other than the test's thread) and waits for it.
template <class F> auto on_other_thread(F f) {
  return std::async(std::launch::async, f).get();
}

} // namespace

TEST_CASE("statements run on a borrowed connection, which the borrowing worker keeps") {
  truncate_all(db());
  counted_pool p(4);
  query_value(db(), "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads,"
                    " idempotency_key) VALUES ('order', '1', 'OrderCreated', '{}', 'k1')");
  auto claimed = p.pool.outbox("test")->claim("test", 10, 60s);
  REQUIRE(claimed.size() == 1);
  CHECK(p.pool.outbox("test")->release(claimed[0]));

  const void* mine = borrowed(p.pool.outbox("test"));
  // Another worker borrowing while this one is idle opens its own connection ...
  const void* theirs = on_other_thread([&] { return borrowed(p.pool.outbox("other")); });
  CHECK(theirs != mine);
  CHECK(p.opened == 2);
  // ... and this worker keeps its own afterwards.
  CHECK(borrowed(p.pool.outbox("test")) == mine);
  CHECK(p.opened == 2);
}

TEST_CASE("when every connection is open, workers share them, waiting while all are in use") {
  counted_pool p(1);
  std::atomic<bool> got{false};
  std::future<const void*> waiter;
  const void* mine = nullptr;
  {
    auto lease = p.pool.outbox("holder");
    mine = borrowed(lease);
    waiter = std::async(std::launch::async, [&] {
      auto l = p.pool.outbox("waiter");
      got = true;
      return borrowed(l);
    });
    std::this_thread::sleep_for(200ms);
    CHECK_FALSE(got); // the only connection is in use
  }
  CHECK(waiter.get() == mine); // given back, and shared
  CHECK(p.opened == 1);
}

TEST_CASE("a lease that ends by an exception drops its connection") {
  counted_pool p(2);
  { auto warm = p.pool.outbox("test"); }
  CHECK(p.opened == 1);
  CHECK_THROWS_AS(
      [&] {
        auto lease = p.pool.outbox("test");
        throw std::runtime_error("statement failed");
      }(),
      std::runtime_error);
  { auto next = p.pool.outbox("test"); }
  CHECK(p.opened == 2);
}

TEST_CASE("a lost connection drops the idle ones too") {
  counted_pool p(3);
  { auto warm = p.pool.outbox("test"); }
  on_other_thread([&] { auto l = p.pool.outbox("other"); });
  CHECK(p.opened == 2);
  p.pool.lost("test", pqxx::broken_connection("server closed the connection"));
  { auto next = p.pool.outbox("test"); }
  CHECK(p.opened == 3);
}

TEST_CASE("an unreachable database is a connection loss with a growing retry delay") {
  // A port nothing listens on: connecting fails at once.
  counted_pool p(2, "host=127.0.0.1 port=1 connect_timeout=1");
  CHECK(p.pool.retry_in() == 250ms);
  try {
    p.pool.outbox("test");
    FAIL("connecting to a closed port succeeded");
  } catch (const std::exception& e) {
    CHECK(persistence::is_connection_loss(e));
  }
  CHECK(p.pool.retry_in() == 500ms);
  // Many workers failing at once raise the delay once per wait, not once each.
  CHECK_THROWS(p.pool.dlq("test"));
  CHECK(p.pool.retry_in() == 500ms);
  // The failed attempts hold no slot: both can be tried again.
  CHECK_THROWS(p.pool.outbox("test"));
  CHECK(p.opened == 3);
}
