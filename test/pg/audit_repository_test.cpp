// The consistency check's order source on a real PostgreSQL: every non-deleted order with its
// status and creation time in milliseconds.
#include "domain/ports.hpp"
#include "persistence/audit_repository.hpp"
#include "persistence/connection_pool.hpp"
#include "test/support/test_db.hpp"

#include <doctest/doctest.h>
#include <pqxx/pqxx>

using namespace outboxd;
using namespace outboxd::test;

namespace {

const lazy_database db("outboxd_pg_audit");

struct fixture {
  fixture() { truncate_all(db()); }

  void insert(const char* status, const char* created_at, bool deleted = false) {
    pqxx::connection c(db());
    pqxx::work tx(c);
    tx.exec_params("INSERT INTO orders (customer_id, total_amount, shipping_type, order_status, "
                   "created_at, deleted) VALUES ('C-1', 10, 'domestic', $1, $2::timestamptz, $3)",
                   status, created_at, deleted);
    tx.commit();
  }

  persistence::connection_pool pool{persistence::make_conninfo(db(), std::chrono::seconds(5)), 2,
                                    persistence::audit_repository::statements()};
  persistence::audit_repository repo{pool};
};

} // namespace

TEST_CASE_FIXTURE(fixture, "audited orders are the non-deleted orders by id with status and ms") {
  insert("FAILED", "2026-01-02T03:04:05.678Z");
  insert("DELIVERED", "2026-01-02T03:04:05.678Z", true);
  insert("CONFIRMED", "2026-01-02T03:04:05.6789Z");
  insert("ATTENTION", "1999-12-31T23:59:59.999+02:00");
  auto orders = repo.audited_orders();
  REQUIRE(orders.size() == 3);
  CHECK(orders[0].id == 1);
  CHECK(orders[0].status == domain::order_status::failed);
  CHECK(orders[0].created_at_ms == 1767323045678);
  CHECK(orders[1].id == 3);
  CHECK(orders[1].status == domain::order_status::confirmed);
  CHECK(orders[1].created_at_ms == 1767323045678); // microseconds are truncated, not rounded
  CHECK(orders[2].id == 4);
  CHECK(orders[2].status == domain::order_status::attention);
  CHECK(orders[2].created_at_ms == 946677599999);
}

TEST_CASE_FIXTURE(fixture, "audited orders of an empty table are none") {
  CHECK(repo.audited_orders().empty());
}

TEST_CASE("audited orders report an unreachable database as store_unavailable") {
  persistence::connection_pool dead(
      persistence::make_conninfo("host=127.0.0.1 port=1 user=postgres", std::chrono::seconds(1)), 1,
      persistence::audit_repository::statements());
  persistence::audit_repository repo(dead);
  CHECK_THROWS_AS(repo.audited_orders(), domain::store_unavailable);
}
