// The real outboxd binary as a process: sub-commands, exit codes, start-up, intake, shutdown.
#include "test/support/http_client.hpp"
#include "test/support/outboxd_process.hpp"
#include "test/support/process.hpp"
#include "test/support/test_db.hpp"

#include <csignal>
#include <doctest/doctest.h>
#include <fstream>
#include <rapidjson/document.h>
#include <set>
#include <sstream>
#include <thread>
#include <unistd.h>

using namespace outboxd::test;
using namespace std::chrono_literals;

namespace {

std::string log_path(const std::string& name) {
  return scratch_file(name + ".log");
}

std::string temp_file(const std::string& name, const std::string& content) {
  auto path = scratch_file(name);
  std::ofstream(path) << content;
  return path;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

} // namespace

TEST_CASE("--help lists the sub-commands") {
  auto [code, out] = run_command({OUTBOXD_BINARY, "--help"});
  CHECK(code == 0);
  CHECK(contains(out, "serve"));
  CHECK(contains(out, "migrate"));
  CHECK(contains(out, "check-config"));
}

TEST_CASE("check-config prints the effective configuration with secrets masked") {
  auto [code, out] = run_command(
      {OUTBOXD_BINARY, "check-config", "--set", "admin.token=topsecret"},
      {{"OUTBOXD_SERVER_PORT", "9123"}, {"DATABASE_URL", "postgresql://u:hunter2@db/outboxd"}});
  CHECK(code == 0);
  CHECK(contains(out, "http://127.0.0.1:9123/api/inventory/reserve"));
  CHECK_FALSE(contains(out, "topsecret"));
  CHECK_FALSE(contains(out, "hunter2"));
  CHECK(contains(out, "configuration is valid"));
}

TEST_CASE("a broken configuration stops start-up with exit code 2 naming the key") {
  auto [code, out] = run_command({OUTBOXD_BINARY, "serve", "--set", "outbox.poolSize=0"});
  CHECK(code == 2);
  CHECK(contains(out, "outbox.poolSize"));

  auto file =
      temp_file("bad.json", R"({"http": {"fanout": {"OrderCreated": ["inventory", "nowhere"]}}})");
  auto [code2, out2] = run_command({OUTBOXD_BINARY, "check-config", "--config", file});
  CHECK(code2 == 2);
  CHECK(contains(out2, "nowhere"));
  ::unlink(file.c_str());

  auto [code3, out3] =
      run_command({OUTBOXD_BINARY, "check-config"}, {{"OUTBOXD_SERVER_PROT", "1"}});
  CHECK(code3 == 2);
  CHECK(contains(out3, "OUTBOXD_SERVER_PROT"));

  // Settings of a real destination: each refused, by serve and check-config alike.
  for (const char* command : {"serve", "check-config"})
    for (auto [set, key] : std::initializer_list<std::pair<const char*, const char*>>{
             {"http.routes.billing.maxResponseBytes=-1", "http.routes.billing.maxResponseBytes"},
             {"http.routes.billing.timeout=0s", "http.routes.billing.timeout"},
             {"http.routes.billing.tls.caFile=/nonexistent/ca.pem",
              "http.routes.billing.tls.caFile"},
             {"outbox.retryFor=500ms", "outbox.retryFor"},
             {"http.routes.billing.timeout=90s", "outbox.leaseTimeout"},
             {"http.routes.billing.circuitBreaker.failureThreshold=0",
              "http.routes.billing.circuitBreaker.failureThreshold"}}) {
      CAPTURE(command);
      CAPTURE(set);
      auto [c, o] = run_command({OUTBOXD_BINARY, command, "--set", set});
      CHECK(c == 2);
      CHECK(contains(o, key));
    }
}

TEST_CASE("an unknown argument is a usage error") {
  auto [code, out] = run_command({OUTBOXD_BINARY, "serve", "--frobnicate"});
  CHECK(code == 2);
  CHECK(contains(out, "--frobnicate"));
  // One configuration file: a second one would silently replace the first.
  for (const auto& twice : std::vector<std::vector<std::string>>{
           {OUTBOXD_BINARY, "check-config", "--config", "/dev/null", "--config", "/dev/null"},
           {OUTBOXD_BINARY, "check-config", "--config=/a.json", "--config", "/b.json"}}) {
    auto [c, o] = run_command(twice);
    CHECK(c == 2);
    CHECK(contains(o, "--config is given more than once"));
  }
}

TEST_CASE("migrate applies the schema to an empty database and exits 0") {
  auto conninfo = cluster_conninfo() + " dbname=outboxd_e2e_migrate";
  query_value(cluster_conninfo(), "DROP DATABASE IF EXISTS outboxd_e2e_migrate WITH (FORCE)");
  query_value(cluster_conninfo(), "CREATE DATABASE outboxd_e2e_migrate");
  auto [code, out] = run_command({OUTBOXD_BINARY, "migrate"}, {{"DATABASE_URL", conninfo}});
  CHECK(code == 0);
  CHECK(contains(out, "001_schema.sql"));
  CHECK(query_value(conninfo, "SELECT count(*) FROM schema_migrations") != "0");
  auto [again, out2] = run_command({OUTBOXD_BINARY, "migrate"}, {{"DATABASE_URL", conninfo}});
  CHECK(again == 0);
  CHECK_FALSE(contains(out2, "applied 001"));
}

TEST_CASE("serve takes orders over HTTP and stops cleanly on SIGTERM") {
  auto conninfo = fresh_database("outboxd_e2e_serve");
  int port = free_port();
  child_process p({OUTBOXD_BINARY, "serve"},
                  {{"DATABASE_URL", conninfo}, {"OUTBOXD_SERVER_PORT", std::to_string(port)}},
                  log_path("serve"));
  http_client client(port);
  REQUIRE_MESSAGE(wait_until([&] { return client.get("/readyz").status == 200; }, 20s), p.output());
  auto created = client.post(
      "/api/orders", R"({"customerId":"C-9","totalAmount":10.5,"shippingType":"international"})");
  CHECK(created.status == 201);
  // The order and its OrderCreated event were committed together; the engine confirms it.
  CHECK(query_value(conninfo,
                    "SELECT count(*) FROM orders o JOIN outbox_events e ON "
                    "e.aggregate_id = o.id::text AND e.event_type = 'OrderCreated'") == "1");
  CHECK(wait_until([&] { return client.get("/api/orders/1").str("/order/status") == "CONFIRMED"; },
                   20s));
  p.signal(SIGTERM);
  CHECK(p.wait_exit(10s) == 0);
  auto out = p.output();
  CHECK(contains(out, "listening on http://127.0.0.1:" + std::to_string(port)));
  CHECK(contains(out, "SIGTERM"));
  CHECK(contains(out, "order 1 created"));
}

TEST_CASE("an IPv6 address is written in brackets in the URL serve says it listens on") {
  auto conninfo = fresh_database("outboxd_e2e_ipv6");
  int port = free_port();
  child_process p({OUTBOXD_BINARY, "serve", "--set", "server.host=::1"},
                  {{"DATABASE_URL", conninfo}, {"OUTBOXD_SERVER_PORT", std::to_string(port)}},
                  log_path("ipv6"));
  const auto line = "listening on http://[::1]:" + std::to_string(port) +
                    " (web UI: http://[::1]:" + std::to_string(port) + "/)";
  const auto no_ipv6 = "cannot listen on ::1";
  REQUIRE_MESSAGE(
      wait_until([&] { return contains(p.output(), line) || contains(p.output(), no_ipv6); }, 20s),
      p.output());
  if (contains(p.output(), no_ipv6)) {
    MESSAGE("this machine has no IPv6 loopback: the brackets are not checked");
    return;
  }
  p.signal(SIGTERM);
  CHECK(p.wait_exit(10s) == 0);
}

TEST_CASE("SIGHUP (a closed terminal) stops serve as cleanly as SIGTERM") {
  auto conninfo = fresh_database("outboxd_e2e_hangup");
  int port = free_port();
  child_process p({OUTBOXD_BINARY, "serve"},
                  {{"DATABASE_URL", conninfo}, {"OUTBOXD_SERVER_PORT", std::to_string(port)}},
                  log_path("hangup"));
  http_client client(port);
  REQUIRE_MESSAGE(wait_until([&] { return client.get("/readyz").status == 200; }, 20s), p.output());
  p.signal(SIGHUP);
  CHECK(p.wait_exit(10s) == 0);
  CHECK(contains(p.output(), "received SIGHUP, shutting down"));
  CHECK(contains(p.output(), "HTTP server stopped; bye"));
}

TEST_CASE("a stop held up by a database that no longer answers ends after shutdownTimeout and "
          "its margin; a second signal ends it at once") {
  for (bool second_signal : {false, true}) {
    CAPTURE(second_signal);
    const std::string database = second_signal ? "outboxd_e2e_frozen_twice" : "outboxd_e2e_frozen";
    auto conninfo = fresh_database(database);
    int port = free_port();
    child_process p({OUTBOXD_BINARY, "serve", "--set", "outbox.shutdownTimeout=1s"},
                    {{"DATABASE_URL", conninfo}, {"OUTBOXD_SERVER_PORT", std::to_string(port)}},
                    log_path(database));
    http_client client(port);
    REQUIRE_MESSAGE(wait_until([&] { return client.get("/readyz").status == 200; }, 20s),
                    p.output());
    // The backends serving this outboxd stop answering (a hung database host, as the process
    // sees it; the other tests' databases are untouched).
    auto pids = query_value(cluster_conninfo(),
                            "SELECT string_agg(pid::text, ' ') FROM pg_stat_activity WHERE "
                            "datname = '" +
                                database + "'");
    REQUIRE_FALSE(pids.empty());
    auto signal_backends = [&](const char* sig) {
      CHECK(std::system(("kill -" + std::string(sig) + " " + pids).c_str()) == 0);
    };
    signal_backends("STOP");
    // A readiness probe now waits for ever on its connection, and with it the HTTP server's stop.
    std::thread probe([port] { http_client(port).get("/readyz"); });
    std::this_thread::sleep_for(300ms);
    auto started = std::chrono::steady_clock::now();
    p.signal(SIGTERM);
    if (second_signal) {
      std::this_thread::sleep_for(500ms);
      p.signal(SIGINT);
    }
    auto code = p.wait_exit(30s); // 1 s + the 5 s margin, on a slow machine
    auto took = std::chrono::steady_clock::now() - started;
    signal_backends("CONT");
    probe.join();
    CHECK(code == 1);
    CHECK(contains(p.output(), second_signal
                                   ? "received SIGINT during the stop that SIGTERM began"
                                   : "longer than outbox.shutdownTimeout and its margin"));
    if (second_signal)
      CHECK(took < 5s); // not the margin's wait
  }
}

TEST_CASE("serve exits 1 when its port is taken") {
  auto conninfo = fresh_database("outboxd_e2e_port");
  int port = free_port();
  child_process first({OUTBOXD_BINARY, "serve"},
                      {{"DATABASE_URL", conninfo}, {"OUTBOXD_SERVER_PORT", std::to_string(port)}},
                      log_path("port-first"));
  http_client client(port);
  REQUIRE(wait_until([&] { return client.get("/healthz").status == 200; }, 20s));
  auto [code, out] =
      run_command({OUTBOXD_BINARY, "serve"},
                  {{"DATABASE_URL", conninfo}, {"OUTBOXD_SERVER_PORT", std::to_string(port)}});
  CHECK(code == 1);
  CHECK(contains(out, "cannot listen"));
  first.signal(SIGINT);
  CHECK(first.wait_exit(10s) == 0);
}

TEST_CASE("serve gives up with exit 1 when the database stays unreachable") {
  auto [code, out] = run_command({OUTBOXD_BINARY, "serve", "--set", "database.startupTimeout=1s"},
                                 {{"DATABASE_URL", "host=127.0.0.1 port=1 user=postgres"},
                                  {"OUTBOXD_SERVER_PORT", std::to_string(free_port())}});
  CHECK(code == 1);
  CHECK(contains(out, "database unreachable"));
}

TEST_CASE("serve says the database refused it (a missing database), retries, and gives up") {
  auto [code, out] =
      run_command({OUTBOXD_BINARY, "serve", "--set", "database.startupTimeout=1500ms"},
                  {{"DATABASE_URL", cluster_conninfo() + " dbname=outboxd_e2e_no_such_database"},
                   {"OUTBOXD_SERVER_PORT", std::to_string(free_port())}});
  CHECK(code == 1);
  CHECK(contains(out, "database refused the connection, retrying in"));
  CHECK(contains(out, "giving up after database.startupTimeout=1500ms"));
  CHECK(contains(out, "outboxd_e2e_no_such_database\" does not exist"));
  CHECK_FALSE(contains(out, "database unreachable"));
}

TEST_CASE("log.format=json writes one JSON object per line, tagged with the actor") {
  auto conninfo = fresh_database("outboxd_e2e_json_log");
  int port = free_port();
  child_process p({OUTBOXD_BINARY, "serve", "--set", "log.format=json", "--set", "log.level=debug",
                   "--set", "admin.token=hidden-token"},
                  {{"DATABASE_URL", conninfo}, {"OUTBOXD_SERVER_PORT", std::to_string(port)}},
                  log_path("json"));
  http_client client(port);
  REQUIRE(wait_until([&] { return client.get("/readyz").status == 200; }, 20s));
  // A wrong token and a right one, sent with debug logging on: neither may reach the log.
  client.set_default_headers({{"Authorization", "Bearer wrong-hidden-guess"}});
  CHECK(client.get("/api/orders").status == 401);
  client.set_default_headers({{"Authorization", "Bearer hidden-token"}});
  client.post("/api/orders", R"({"customerId":"C-1","totalAmount":5,"shippingType":"domestic"})");
  REQUIRE(wait_until(
      [&] { return client.get("/api/orders/1").str("/order/status") == "CONFIRMED"; }, 20s));
  CHECK(client.post("/api/orders", R"({"customerId":"C-1","totalAmount":5,"shippingType":"x"})")
            .status == 422);
  p.signal(SIGTERM);
  CHECK(p.wait_exit(10s) == 0);
  auto out = p.output();
  // The refusal's line says why.
  CHECK(contains(out, "POST /api/orders 422 "));
  CHECK(contains(out, "shippingType"));
  CHECK_FALSE(contains(out, "hidden-token"));
  CHECK_FALSE(contains(out, "wrong-hidden-guess"));
  std::istringstream lines(out);
  std::string line;
  int parsed = 0;
  std::set<std::string> actors;
  while (std::getline(lines, line)) {
    rapidjson::Document d;
    d.Parse(line.c_str());
    REQUIRE_MESSAGE(!d.HasParseError(), line);
    REQUIRE(d.IsObject());
    CHECK(d.HasMember("ts"));
    CHECK(d.HasMember("level"));
    CHECK(d.HasMember("msg"));
    actors.insert(d["actor"].GetString());
    ++parsed;
  }
  CHECK(parsed > 10);
  for (const auto* a : {"main", "supervisor", "outbox-processor-1", "pg-listener", "http"})
    CHECK_MESSAGE(actors.count(a) == 1, a);
}

TEST_CASE("a read-only database gets 503s and a not-ready probe, the workers wait it out, and "
          "orders flow again once it is writable") {
  auto conninfo = fresh_database("outboxd_e2e_read_only");
  auto admin = [&](const std::string& sql) { query_value(cluster_conninfo(), sql); };
  auto reconnect_everyone = [&] { // as a failover to a standby, then back, would
    admin("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = "
          "'outboxd_e2e_read_only' AND pid <> pg_backend_pid()");
  };
  outboxd_process p("read-only", conninfo);
  p.wait_ready();
  auto first = p.create_order();
  CHECK(p.wait_status(first, "CONFIRMED") == "CONFIRMED");

  admin("ALTER DATABASE outboxd_e2e_read_only SET default_transaction_read_only = on");
  reconnect_everyone();
  http_response refused;
  REQUIRE_MESSAGE(wait_until(
                      [&] {
                        refused = p.client().post(
                            "/api/orders",
                            R"({"customerId":"C-1","totalAmount":10,"shippingType":"domestic"})");
                        return refused.status == 503 &&
                               contains(p.output(), "the database refused for now");
                      },
                      20s),
                  refused.status << " " << refused.body);

  auto ready = p.client().get("/readyz");
  CHECK(ready.status == 503);
  CHECK(ready.body.find("read-only") != std::string::npos);
  CHECK(contains(p.output(), "not ready: database: read-only")); // once, with the change
  std::this_thread::sleep_for(3s); // claims, reaps and retention meet the read-only database
  CHECK_FALSE(contains(p.output(), "crashed"));
  CHECK_FALSE(contains(p.output(), "unhandled exception"));
  // One warning for the spell, not one per worker per try (about twenty a second before).
  std::size_t warnings = 0;
  for (auto at = p.output().find("refused for now, trying again"); at != std::string::npos;
       at = p.output().find("refused for now, trying again", at + 1))
    ++warnings;
  CHECK(warnings == 1);

  // Writable again, without a failover's reconnections: sessions opened while it was read-only
  // keep that default, so outboxd must open new ones.
  admin("ALTER DATABASE outboxd_e2e_read_only RESET default_transaction_read_only");
  p.wait_up();
  CHECK(contains(p.output(), "ready again (was database: read-only"));
  auto again = p.create_order();
  CHECK(p.wait_status(again, "CONFIRMED") == "CONFIRMED");
}
