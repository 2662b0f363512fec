// Bounded statements on a real PostgreSQL: the sessions outboxd opens carry a statement timeout,
// a lock timeout and a check for vanished clients; what they cut short is told apart from a lost
// connection; and a stop can cancel the statements its workers are still inside.
#include "domain/ports.hpp"
#include "persistence/connection_pool.hpp"
#include "persistence/worker_connections.hpp"
#include "test/support/test_db.hpp"

#include <chrono>
#include <doctest/doctest.h>
#include <future>
#include <pqxx/pqxx>
#include <sys/socket.h>
#include <thread>

using namespace outboxd;
using namespace outboxd::test;
using namespace std::chrono_literals;

namespace {

const lazy_database db("outboxd_pg_statement_limits");

/// Waits until `done()` holds; false after `deadline`.
template <class F> bool eventually(F done, std::chrono::milliseconds deadline = 15s) {
  auto until = std::chrono::steady_clock::now() + deadline;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until)
      return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

/// How a unit of work ended: "ok", "cancelled" (timeout or cancel), "lost", "unavailable" (the
/// pool's domain::store_unavailable), or the error's text.
template <class Work> std::string outcome(Work&& work) {
  try {
    work();
    return "ok";
  } catch (const domain::store_unavailable& e) {
    return std::string(e.what()).find("cut short") != std::string::npos ? "unavailable: cut short"
                                                                        : e.what();
  } catch (const std::exception& e) {
    if (persistence::is_cancelled_statement(e))
      return "cancelled";
    if (persistence::is_connection_loss(e))
      return "lost";
    return e.what();
  }
}

bool backend_alive(int pid) {
  return query_value(db(), "SELECT count(*) FROM pg_stat_activity WHERE pid = " +
                               std::to_string(pid)) == "1";
}

std::string insert_event() {
  return query_value(db(), "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                           "payloads, idempotency_key) VALUES ('order', '1', 'E', '{}', "
                           "gen_random_uuid()::text) RETURNING id");
}

} // namespace

TEST_CASE("a pool's sessions cut a statement at its timeout and a lock wait at the lock timeout, "
          "reported as the database being unavailable") {
  truncate_all(db());
  persistence::connection_pool pool(db(), 1, {}, persistence::session_limits_sql({300ms, 200ms}));
  const int session = pool.run([](pqxx::connection& c) { return c.backendpid(); });
  CHECK(pool.run([](pqxx::connection& c) {
    return pqxx::nontransaction(c).exec1("SHOW statement_timeout")[0].as<std::string>();
  }) == "300ms");
  CHECK(outcome([&] {
          pool.run([](pqxx::connection& c) { pqxx::nontransaction(c).exec("SELECT pg_sleep(5)"); });
        }) == "unavailable: cut short");

  auto id = insert_event();
  auto update = [&] {
    return outcome([&] {
      pool.run([&](pqxx::connection& c) {
        pqxx::work tx(c);
        tx.exec("UPDATE outbox_events SET attempts = 1 WHERE id = " + id);
        tx.commit();
      });
    });
  };
  pqxx::connection holder(db());
  pqxx::work held(holder);
  held.exec("SELECT 1 FROM outbox_events WHERE id = " + id + " FOR UPDATE");
  CHECK(update() == "unavailable: cut short");
  held.abort();
  CHECK(update() == "ok");
  // Neither cut cost the pool its connection.
  CHECK(pool.run([](pqxx::connection& c) { return c.backendpid(); }) == session);
}

TEST_CASE("PostgreSQL drops the statement of a client that vanished instead of finishing it") {
  pqxx::connection client(db());
  pqxx::nontransaction(client).exec(persistence::session_limits_sql({}));
  const int pid = client.backendpid();
  auto sleeping = std::async(std::launch::async, [&] {
    return outcome([&] { pqxx::nontransaction(client).exec("SELECT pg_sleep(120)"); });
  });
  REQUIRE(eventually([&] {
    return query_value(db(), "SELECT count(*) FROM pg_stat_activity WHERE pid = " +
                                 std::to_string(pid) + " AND query LIKE '%pg_sleep%'") == "1";
  }));
  // The client's socket goes away under it, as when its process is killed.
  ::shutdown(client.sock(), SHUT_RDWR);
  CHECK(sleeping.get() == "lost");
  // Well before the two minutes of the statement (the check runs every 2 s).
  CHECK(eventually([&] { return !backend_alive(pid); }, 20s));
}

TEST_CASE("the workers' connections can cancel the statements running on them") {
  truncate_all(db());
  persistence::worker_connections workers([](int) { return db(); }, 2, {},
                                          persistence::session_limits_sql({}));
  CHECK(workers.cancel_running() == 0);
  pqxx::connection holder(db());
  pqxx::work held(holder);
  held.exec("LOCK TABLE outbox_events IN ACCESS EXCLUSIVE MODE");
  std::atomic<bool> borrowed{false};
  auto waiting = std::async(std::launch::async, [&] {
    return outcome([&] {
      auto lease = workers.outbox("test");
      borrowed = true;
      lease->claim("test", 10, 60s); // waits for the test's lock: no lock timeout here
    });
  });
  REQUIRE(eventually([&] {
    return borrowed &&
           query_value(db(), "SELECT count(*) FROM pg_stat_activity WHERE "
                             "wait_event_type = 'Lock' AND datname = current_database()") == "1";
  }));
  CHECK(workers.cancel_running() == 1);
  CHECK(waiting.get() == "cancelled");
  held.abort();
  CHECK(workers.cancel_running() == 0); // given back
}

TEST_CASE("a pool's sessions speak UTF-8 and READ COMMITTED whatever the database's defaults say") {
  const auto name = query_value(db(), "SELECT current_database()");
  auto set_defaults = [&](const std::string& settings) {
    pqxx::connection admin(db());
    pqxx::nontransaction tx(admin);
    tx.exec("ALTER DATABASE " + tx.quote_name(name) + settings);
  };
  set_defaults(" SET client_encoding = 'LATIN1'");
  set_defaults(" SET default_transaction_isolation = 'serializable'");
  persistence::connection_pool pool(db(), 1, {}, persistence::session_limits_sql({}));
  auto show = [&](const char* setting) {
    return pool.run([&](pqxx::connection& c) {
      return pqxx::nontransaction(c).exec1(std::string("SHOW ") + setting)[0].as<std::string>();
    });
  };
  CHECK(show("client_encoding") == "UTF8");
  CHECK(show("default_transaction_isolation") == "read committed");
  // "Zoë-日本-€": 8 characters in 15 bytes of UTF-8, not 15 Latin-1 characters.
  CHECK(pool.run([](pqxx::connection& c) {
    return pqxx::nontransaction(c)
        .exec_params1("SELECT length($1::text) || ' ' || octet_length($1::text)",
                      "Zo\xc3\xab-\xe6\x97\xa5\xe6\x9c\xac-\xe2\x82\xac")[0]
        .as<std::string>();
  }) == "8 15");
  set_defaults(" RESET client_encoding");
  set_defaults(" RESET default_transaction_isolation");
}

TEST_CASE("sessions ask for TCP keepalives and a bound on unacknowledged data, unless the URL "
          "sets its own") {
  for (const std::string& url :
       {std::string("postgresql://u@db.example/x"), std::string("host=db.example dbname=x")}) {
    CAPTURE(url);
    auto conninfo = persistence::make_conninfo(url, 5s);
    CHECK(conninfo.find("keepalives_idle=10") != std::string::npos);
    CHECK(conninfo.find("tcp_user_timeout=30000") != std::string::npos);
  }
  auto own = persistence::make_conninfo("postgresql://u@db.example/x?keepalives_idle=60", 5s);
  CHECK(own.find("keepalives_idle=10") == std::string::npos);
  CHECK(own.find("keepalives_idle=60") != std::string::npos);
  // libpq takes them (and ignores them on a Unix socket).
  pqxx::connection c(persistence::make_conninfo(db(), 5s));
  CHECK(c.is_open());
}
