// Coalesced intake notifications on a real PostgreSQL: the API's sessions insert events without
// the trigger's NOTIFY, the notifier announces them instead (the newest id), also after its
// connection was cut, and every other write still notifies per row.
#include "persistence/connection_pool.hpp"
#include "persistence/intake_notifier.hpp"
#include "persistence/order_repository.hpp"
#include "test/support/test_db.hpp"

#include <doctest/doctest.h>
#include <pqxx/pqxx>

using namespace outboxd;
using namespace outboxd::test;

namespace {

const lazy_database db("outboxd_pg_intake_notifier");

struct listener : pqxx::notification_receiver {
  explicit listener(pqxx::connection& c)
      : pqxx::notification_receiver(c, "outbox_events_channel") {}
  void operator()(const std::string& payload, int) override { payloads.push_back(payload); }
  std::vector<std::string> payloads;
};

/// A pool whose sessions leave their inserts' notifications to a notifier, as the API's do.
struct fixture {
  fixture() { truncate_all(db()); }
  persistence::connection_pool pool{persistence::make_conninfo(db(), std::chrono::seconds(5)), 4,
                                    persistence::order_repository::statements(),
                                    persistence::intake_notifier::session_setup};
  pqxx::connection listen_conn{db()};
  listener heard{listen_conn};

  /// Waits (up to 10 s) until a notification names `id`; what was heard until then stays in
  /// `heard.payloads`.
  bool hear(std::int64_t id) {
    for (int i = 0; i < 100; ++i) {
      for (const auto& p : heard.payloads)
        if (p == std::to_string(id))
          return true;
      listen_conn.await_notification(0, 100000);
    }
    return false;
  }
  /// What arrives within `ms` (for "nothing arrives").
  std::size_t heard_within(int ms) {
    listen_conn.await_notification(0, ms * 1000);
    listen_conn.get_notifs();
    return heard.payloads.size();
  }
};

domain::new_order sample(int n) {
  domain::new_order o;
  o.customer_id = "C-" + std::to_string(n);
  o.total_amount = {1000 + n};
  o.shipping = domain::shipping_type::domestic;
  o.items = {{"SKU-1", 1}};
  return o;
}

std::int64_t newest_event() {
  return std::stoll(query_value(db(), "SELECT max(id) FROM outbox_events"));
}

} // namespace

TEST_CASE_FIXTURE(fixture, "a coalescing session's inserts do not notify by themselves") {
  persistence::order_repository orders(pool); // no notifier: nobody announces
  orders.create(sample(1), std::nullopt);
  CHECK(count_rows(db(), "outbox_events") == 1);
  CHECK(heard_within(300) == 0);
}

TEST_CASE_FIXTURE(fixture, "a coalescing session's reset of an event to PENDING still notifies") {
  persistence::order_repository orders(pool);
  orders.create(sample(1), std::nullopt);
  pool.run([](pqxx::connection& c) {
    pqxx::work tx(c);
    tx.exec("UPDATE outbox_events SET status = 'PROCESSING'");
    tx.exec("UPDATE outbox_events SET status = 'PENDING'");
    tx.commit();
  });
  CHECK(hear(newest_event()));
}

TEST_CASE_FIXTURE(fixture, "the notifier announces the newest committed event of the orders "
                           "taken, created or changed") {
  persistence::intake_notifier notifier(
      persistence::make_conninfo(db(), std::chrono::seconds(5), "outboxd-notifier-test"));
  persistence::order_repository orders(pool, &notifier);
  std::int64_t last_order = 0;
  for (int i = 0; i < 30; ++i)
    last_order = orders.create(sample(i), std::nullopt).value.id;
  REQUIRE(hear(newest_event()));
  // Each notification names an event that exists, newer than the one before it.
  std::int64_t previous = 0;
  for (const auto& p : heard.payloads) {
    auto id = std::stoll(p);
    CHECK(id > previous);
    CHECK(id <= newest_event());
    previous = id;
  }
  CHECK(heard.payloads.size() <= 30);

  auto cancelled = orders.execute(last_order, domain::order_command::cancel, "changed my mind");
  REQUIRE(cancelled.what == domain::command_outcome::kind::applied);
  CHECK(hear(newest_event()));
  CHECK(newest_event() == 31);
}

TEST_CASE_FIXTURE(fixture, "the notifier reconnects when its connection is cut and still "
                           "announces what it owes") {
  persistence::intake_notifier notifier(
      persistence::make_conninfo(db(), std::chrono::seconds(5), "outboxd-notifier-cut"));
  persistence::order_repository orders(pool, &notifier);
  orders.create(sample(1), std::nullopt);
  REQUIRE(hear(newest_event()));
  CHECK(query_value(db(), "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                          "WHERE application_name = 'outboxd-notifier-cut'") == "1");
  orders.create(sample(2), std::nullopt);
  CHECK(hear(newest_event()));
  CHECK(query_value(db(), "SELECT count(*) FROM pg_stat_activity "
                          "WHERE application_name = 'outboxd-notifier-cut'") == "1");
}

TEST_CASE("a notifier that cannot reach the database neither blocks the commits it is told of "
          "nor its own destruction") {
  auto nowhere = persistence::make_conninfo("host=127.0.0.1 port=1 dbname=none",
                                            std::chrono::seconds(1), "outboxd-notifier-nowhere");
  auto notifier = std::make_unique<persistence::intake_notifier>(nowhere);
  for (int i = 1; i <= 100; ++i)
    notifier->committed(i);
  notifier.reset(); // returns after one last attempt (a hang here fails the run's timeout)
}
