// A worker's connection whose statements do not block, on a real PostgreSQL: a sent statement's
// result is read once its socket says it arrived (the thread did other things meanwhile); a refusal
// comes back as libpqxx's sql_error with its SQLSTATE, a killed backend as a lost connection, and
// the next statement opens a new connection; an idle connection the server closed is noticed and
// closed.
#include "persistence/connection_pool.hpp"
#include "persistence/outbox_repository.hpp"
#include "persistence/statement_lane.hpp"
#include "test/support/test_db.hpp"

#include <chrono>
#include <doctest/doctest.h>
#include <exception>
#include <poll.h>
#include <pqxx/except>
#include <stdexcept>

using namespace outboxd;
using namespace outboxd::test;
using namespace std::chrono_literals;

namespace {

const lazy_database db("outboxd_pg_statement_lane");

/// The last completion's result, and whether it came.
struct landed {
  bool came = false;
  persistence::text_rows rows;
  std::exception_ptr error;
  persistence::statement_lane::completion sink() {
    return [this](persistence::text_rows r, std::exception_ptr e) {
      came = true;
      rows = std::move(r);
      error = std::move(e);
    };
  }
};

/// Waits on the lane's socket and reads, until its statement's completion ran (at most 10 s).
void wait_for(persistence::statement_lane& lane, const landed& l) {
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (!l.came && std::chrono::steady_clock::now() < give_up) {
    pollfd p{lane.socket(), POLLIN, 0};
    REQUIRE(::poll(&p, 1, 100) >= 0);
    if (p.revents)
      lane.on_readable();
  }
  REQUIRE(l.came);
}

std::string conninfo_named(const std::string& name) {
  return db() + " application_name=" + name;
}

long long backends_named(const std::string& name) {
  return std::stoll(query_value(
      db(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = '" + name + "'"));
}

} // namespace

TEST_CASE("a statement goes out without waiting; its rows are read when they arrive") {
  persistence::statement_lane lane(conninfo_named("lane-rows"), "SET statement_timeout = 5000");
  CHECK(lane.socket() == -1); // connects at the first statement
  landed l;
  lane.send({"sleepy", "SELECT $1::int + 1, NULL::text, pg_sleep(0.2)::text", {"41"}}, l.sink());
  CHECK(lane.busy());
  // Sent, not answered: the statement is still running on the server.
  CHECK_FALSE(l.came);
  CHECK(query_value(db(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                          "'lane-rows' AND state = 'active'") == "1");
  wait_for(lane, l);
  CHECK_FALSE(lane.busy());
  CHECK_FALSE(l.error);
  REQUIRE(l.rows.size() == 1);
  CHECK(l.rows[0][0] == "42");
  CHECK_FALSE(l.rows[0][1].has_value()); // NULL
  // The setup ran on the connection, and the prepared statement is reused.
  landed again;
  lane.send({"sleepy", "ignored: already prepared", {"1"}}, again.sink());
  wait_for(lane, again);
  CHECK_FALSE(again.error);
  CHECK(again.rows[0][0] == "2");
  landed setting;
  lane.send({"timeout", "SELECT current_setting('statement_timeout')", {}}, setting.sink());
  wait_for(lane, setting);
  CHECK(setting.rows[0][0] == "5s");
  landed first, second;
  lane.send({"timeout", "", {}}, first.sink());
  CHECK_THROWS_AS(lane.send({"timeout", "", {}}, second.sink()), std::logic_error); // one at a time
  wait_for(lane, first);
  CHECK_FALSE(first.error);
  CHECK_FALSE(second.came);
}

TEST_CASE("a statement the database refuses fails with its SQLSTATE; the next one opens a new "
          "connection") {
  persistence::statement_lane lane(conninfo_named("lane-refused"), "");
  landed l;
  lane.send({"divide", "SELECT 1 / $1::int", {"0"}}, l.sink());
  const auto first = lane.connections();
  wait_for(lane, l);
  REQUIRE(l.error);
  try {
    std::rethrow_exception(l.error);
  } catch (const pqxx::sql_error& e) {
    CHECK(e.sqlstate() == "22012"); // division_by_zero
    CHECK_FALSE(persistence::is_connection_loss(e));
  }
  CHECK(lane.socket() == -1);
  landed next;
  lane.send({"divide", "SELECT 1 / $1::int", {"2"}}, next.sink());
  CHECK(lane.connections() == first + 1);
  wait_for(lane, next);
  CHECK_FALSE(next.error);
  CHECK(next.rows[0][0] == "0");
  CHECK(backends_named("lane-refused") == 1);
}

TEST_CASE("a session opened while the database was read-only is replaced once it takes writes") {
  const auto name = std::string("outboxd_pg_lane_read_only");
  const auto conninfo = fresh_database(name);
  auto admin = [&](const std::string& sql) { query_value(cluster_conninfo(), sql); };
  admin("ALTER DATABASE " + name + " SET default_transaction_read_only = on");
  persistence::statement_lane lane(conninfo, "");
  landed refused;
  lane.send({"write_sql", "UPDATE orders SET updated_at = updated_at WHERE false", {}},
            refused.sink());
  wait_for(lane, refused);
  REQUIRE(refused.error);
  try {
    std::rethrow_exception(refused.error);
  } catch (const pqxx::sql_error& e) {
    CHECK(e.sqlstate() == "25006"); // read_only_sql_transaction
    CHECK(persistence::is_temporary_refusal(e));
  }
  admin("ALTER DATABASE " + name + " RESET default_transaction_read_only");
  landed accepted;
  lane.send({"write_sql", "UPDATE orders SET updated_at = updated_at WHERE false", {}},
            accepted.sink());
  wait_for(lane, accepted);
  CHECK_FALSE(accepted.error); // on a new session, which is not read-only
}

TEST_CASE(
    "a backend killed under a statement is a lost connection; the next statement reconnects") {
  persistence::statement_lane lane(conninfo_named("lane-killed"), "");
  landed l;
  lane.send({"long", "SELECT pg_sleep(30)", {}}, l.sink());
  const auto first = lane.connections();
  CHECK(query_value(db(), "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                          "WHERE application_name = 'lane-killed'") == "1");
  wait_for(lane, l);
  REQUIRE(l.error);
  try {
    std::rethrow_exception(l.error);
  } catch (const std::exception& e) {
    CHECK(persistence::is_connection_loss(e));
  }
  CHECK(lane.socket() == -1); // closed
  landed next;
  lane.send({"one", "SELECT 1", {}}, next.sink());
  CHECK(lane.connections() == first + 1);
  wait_for(lane, next);
  CHECK_FALSE(next.error);
  CHECK(next.rows[0][0] == "1");
}

TEST_CASE("an idle connection the server closed is closed when its socket says so") {
  persistence::statement_lane lane(conninfo_named("lane-idle"), "");
  landed l;
  lane.send({"one", "SELECT 1", {}}, l.sink());
  wait_for(lane, l);
  const int fd = lane.socket();
  REQUIRE(fd >= 0);
  CHECK(query_value(db(), "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                          "WHERE application_name = 'lane-idle'") == "1");
  pollfd p{fd, POLLIN, 0};
  REQUIRE(::poll(&p, 1, 5000) == 1); // readable: the server's goodbye, then end of file
  CHECK_FALSE(lane.on_readable());
  for (int i = 0; i < 10 && lane.socket() >= 0; ++i)
    if (::poll(&p, 1, 100) == 1)
      lane.on_readable();
  CHECK(lane.socket() == -1);
}

TEST_CASE("an unreachable database is a lost connection when the statement is sent") {
  persistence::statement_lane lane("host=127.0.0.1 port=1 connect_timeout=2", "");
  landed l;
  try {
    lane.send({"one", "SELECT 1", {}}, l.sink());
    FAIL("sent to a database that is not there");
  } catch (const std::exception& e) {
    CHECK(persistence::is_connection_loss(e));
  }
  CHECK_FALSE(lane.busy());
  CHECK_FALSE(l.came);
}

TEST_CASE("the outbox's statements on a lane: a claim, attempt rows, a completion fenced by its "
          "lease") {
  truncate_all(db());
  query_value(db(), "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads,"
                    " idempotency_key) VALUES ('order', '1', 'OrderCreated', '{}', 'k1'), "
                    "('order', '2', 'OrderCreated', '{}', 'k2')");
  persistence::statement_lane lane(db(), persistence::outbox_statements::lane_setup);
  landed claim;
  lane.send(persistence::outbox_statements::claim("lane-test", 5, 60s), claim.sink());
  wait_for(lane, claim);
  REQUIRE_FALSE(claim.error);
  const auto sent = std::chrono::steady_clock::now();
  auto events = persistence::outbox_statements::claimed(claim.rows, sent);
  REQUIRE(events.size() == 2);
  CHECK(events[0].id < events[1].id);
  CHECK(events[0].aggregate_id == "1");
  CHECK(events[0].attempts == 0);
  CHECK(events[0].claimed_at == sent);
  CHECK_FALSE(events[0].has_results);
  CHECK_FALSE(events[0].last_error.has_value());
  CHECK(query_value(db(), "SELECT count(*) FROM outbox_events WHERE status = 'PROCESSING' AND "
                          "lease_owner = 'lane-test'") == "2");

  persistence::attempt_row row;
  row.event_id = events[0].id;
  row.aggregate_type = "order";
  row.aggregate_id = "1";
  row.event_type = "OrderCreated";
  row.destination = "inventory";
  row.attempt = 1;
  row.endpoint_url = "http://127.0.0.1:1/inventory";
  row.http_method = "POST";
  row.response_body = std::string("\0\xff", 2);
  row.outcome = domain::attempt_outcome::success;
  landed rows;
  lane.send(persistence::outbox_statements::attempts({&row, &row}), rows.sink());
  wait_for(lane, rows);
  REQUIRE_FALSE(rows.error);
  CHECK(count_rows(db(), "aggregate_results") == 2);
  CHECK(query_value(db(), "SELECT encode(response_body, 'hex') FROM aggregate_results LIMIT 1") ==
        "00ff");

  // The second event's lease was lost meanwhile: only the first is completed.
  auto stale = events[1];
  stale.lease_token = -1;
  const std::vector<persistence::outbox_repository::completion> done{{&events[0], nullptr},
                                                                     {&stale, nullptr}};
  landed completion;
  lane.send(persistence::outbox_statements::completions({}, "order", std::nullopt, "", done, {}),
            completion.sink());
  wait_for(lane, completion);
  REQUIRE_FALSE(completion.error);
  std::vector<std::int64_t> ids;
  for (const auto& r : completion.rows)
    ids.push_back(std::stoll(*r[0]));
  CHECK(persistence::outbox_statements::completed(ids, done) == std::vector<bool>{true, false});
  CHECK(query_value(db(), "SELECT status FROM outbox_events WHERE id = " +
                              std::to_string(events[0].id)) == "PROCESSED");
  CHECK(query_value(db(), "SELECT status FROM outbox_events WHERE id = " +
                              std::to_string(events[1].id)) == "PROCESSING");
}
