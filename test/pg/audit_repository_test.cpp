// The consistency check's order source on a real PostgreSQL: a window of non-deleted orders with
// their status and creation time in milliseconds, and whether orders lie beyond it.
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
  auto page = repo.audited_orders({});
  CHECK_FALSE(page.older);
  CHECK_FALSE(page.newer);
  const auto& orders = page.orders;
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

TEST_CASE_FIXTURE(fixture, "a check reads a window of orders: the newest, or those after a cursor, "
                           "and says what lies beyond") {
  for (int i = 0; i < 7; ++i) // ids 1..7, 4 removed
    insert("CONFIRMED", "2026-01-02T03:04:05Z", i == 3);
  auto ids = [](const domain::audited_orders_page& p) {
    std::string out;
    for (const auto& o : p.orders)
      out += (out.empty() ? "" : ",") + std::to_string(o.id);
    return out;
  };
  auto newest = repo.audited_orders({std::nullopt, 3});
  CHECK(ids(newest) == "5,6,7");
  CHECK(newest.older);
  CHECK_FALSE(newest.newer);
  auto first = repo.audited_orders({0, 3});
  CHECK(ids(first) == "1,2,3");
  CHECK_FALSE(first.older);
  CHECK(first.newer);
  auto next = repo.audited_orders({3, 3});
  CHECK(ids(next) == "5,6,7"); // the removed order is not counted
  CHECK(next.older);
  CHECK_FALSE(next.newer);
  auto whole = repo.audited_orders({std::nullopt, 6});
  CHECK(ids(whole) == "1,2,3,5,6,7");
  CHECK_FALSE(whole.older);
}

TEST_CASE_FIXTURE(fixture, "audited orders of an empty table are none") {
  auto page = repo.audited_orders({});
  CHECK(page.orders.empty());
  CHECK_FALSE(page.older);
  CHECK(repo.audited_orders({0, 10}).orders.empty());
}

TEST_CASE("audited orders report an unreachable database as store_unavailable") {
  persistence::connection_pool dead(
      persistence::make_conninfo("host=127.0.0.1 port=1 user=postgres", std::chrono::seconds(1)), 1,
      persistence::audit_repository::statements());
  persistence::audit_repository repo(dead);
  CHECK_THROWS_AS(repo.audited_orders({}), domain::store_unavailable);
}
