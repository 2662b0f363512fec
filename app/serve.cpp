// The serve and migrate sequences: load → migrate → start HTTP → wait for a signal → stop in
// reverse order.
#include "actors/engine.hpp"
#include "app/commands.hpp"
#include "app/served_routes.hpp"
#include "conf/loader.hpp"
#include "domain/ports.hpp"
#include "http/api_server.hpp"
#include "log/log.hpp"
#include "metrics/metrics.hpp"
#include "persistence/aggregate_hooks.hpp"
#include "persistence/audit_repository.hpp"
#include "persistence/connection_pool.hpp"
#include "persistence/dead_letter_admin.hpp"
#include "persistence/intake_notifier.hpp"
#include "persistence/migrations.hpp"
#include "persistence/order_repository.hpp"
#include "persistence/outbox_admin.hpp"
#include "persistence/statements.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fmt/format.h>
#include <mutex>
#include <optional>
#include <pqxx/pqxx>
#include <thread>

namespace outboxd::app {
namespace {

using namespace std::chrono_literals;

sigset_t shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP); // a closed terminal: stop as cleanly as for the others
  return set;
}

const char* signal_name(int sig) {
  return sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "SIGINT";
}

/// Waits up to `timeout` for a shutdown signal (which must be blocked): the signal, or 0.
int wait_for_signal(std::chrono::milliseconds timeout) {
  auto set = shutdown_signals();
  timespec ts{static_cast<time_t>(timeout.count() / 1000),
              static_cast<long>((timeout.count() % 1000) * 1000000)};
  return std::max(sigtimedwait(&set, nullptr, &ts), 0);
}

/// How much longer than outbox.shutdownTimeout a stop may take (the statements cancelled 2 s
/// after it, the runs' grace, the HTTP server's last answers) before the process exits anyway.
constexpr auto stop_margin = 5s;

/// Ends the process when the stop that `first` began takes longer than `limit` (a database that
/// stopped answering holds statements and requests that no timeout of ours reaches), or at once
/// on a second shutdown signal.
void watch_the_stop(int first, std::chrono::milliseconds limit) {
  std::thread([first, limit] {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        log::error("main",
                   "the stop has taken {}ms, longer than outbox.shutdownTimeout and its margin "
                   "(a database or a client that does not answer); exiting now",
                   limit.count());
        std::_Exit(exit_failure);
      }
      if (int again = wait_for_signal(left)) {
        log::warn("main", "received {} during the stop that {} began; exiting now",
                  signal_name(again), signal_name(first));
        std::_Exit(exit_failure);
      }
    }
  }).detach();
}

/// Applies migrations, retrying an unreachable database until `startup_timeout`. Returns false
/// when it gave up or a shutdown signal arrived.
bool migrate_with_retry(const conf::settings& s) {
  auto conninfo = persistence::make_conninfo(s.database.url, s.database.connect_timeout);
  auto deadline = std::chrono::steady_clock::now() + s.database.startup_timeout;
  auto delay = 250ms;
  for (;;) {
    try {
      pqxx::connection conn(conninfo);
      persistence::migrate_options options;
      options.lock_timeout = s.database.migration_lock_timeout;
      auto applied = persistence::migrate(conn, options);
      for (const auto& name : applied)
        log::info("migrate", "applied {}", name);
      const int at = persistence::applied_migration_version(conn);
      const int known = persistence::latest_migration_version();
      if (at > known)
        log::warn("migrate",
                  "schema is at version {}, newer than this binary's {}: a newer outboxd migrated "
                  "it; this one runs on it as in a rolling upgrade, and should be replaced",
                  at, known);
      else
        log::info("migrate", "schema is at version {}", at);
      return true;
    } catch (const pqxx::broken_connection& e) {
      // libpq says FATAL when a server answered and refused (a wrong password, a missing
      // database or role, a server still starting): retried as well, since an init job may be
      // creating them, but said as it is.
      const char* what = std::strstr(e.what(), "FATAL:") ? "database refused the connection"
                                                         : "database unreachable";
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        log::error("migrate", "{}, giving up after database.startupTimeout={}ms: {}", what,
                   s.database.startup_timeout.count(), e.what());
        return false;
      }
      auto wait = std::min(delay, left);
      log::warn("migrate", "{}, retrying in {}ms: {}", what, wait.count(), e.what());
      if (wait_for_signal(wait)) {
        log::info("main", "stopped while waiting for the database");
        return false;
      }
      delay = std::min<std::chrono::milliseconds>(delay * 2, 5s);
    } catch (const std::exception& e) {
      log::error("migrate", "migration failed: {}", e.what());
      return false;
    }
  }
}

// Pretty-printed JSON on one line: its line breaks and indentation go (a JSON string holds no raw
// line break, so none is inside one).
std::string one_line(std::string_view pretty) {
  std::string out;
  out.reserve(pretty.size());
  for (std::size_t i = 0; i < pretty.size(); ++i) {
    if (pretty[i] != '\n') {
      out += pretty[i];
      continue;
    }
    while (i + 1 < pretty.size() && pretty[i + 1] == ' ')
      ++i;
  }
  return out;
}

} // namespace

int migrate(const conf::settings& settings) {
  auto signals = shutdown_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return migrate_with_retry(settings) ? exit_ok : exit_failure;
}

int serve(const conf::settings& settings, const std::string& effective_json) {
  // Block the shutdown signals before any thread starts, so they all inherit the mask and the
  // main thread alone receives them through sigwait.
  auto signals = shutdown_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  log::info("main", "outboxd starting with configuration: {}", one_line(effective_json));
  for (const auto& warning : conf::start_up_warnings(settings))
    log::warn("main", "{}", warning);

  if (!migrate_with_retry(settings))
    return exit_failure;

  persistence::intake_notifier notifier(persistence::make_conninfo(
      settings.database.url, settings.database.connect_timeout, "outboxd-notifier"));
  persistence::connection_pool pool(
      persistence::make_conninfo(settings.database.url, settings.database.connect_timeout),
      settings.database.pool_size, persistence::pooled_statements(),
      persistence::session_limits_sql(
          {settings.database.statement_timeout, settings.database.lock_timeout}) +
          "; " + persistence::intake_notifier::session_setup);
  persistence::order_repository orders(pool, &notifier, [](std::size_t n) {
    metrics::global().intake_batch_orders.observe({}, static_cast<double>(n));
  });
  persistence::order_hooks order_hooks;
  const persistence::hooks_by_type hooks{{std::string(domain::order_aggregate), &order_hooks}};
  persistence::dead_letter_admin dead_letters(pool, hooks);
  persistence::outbox_admin outbox(pool);
  actors::engine engine(settings, hooks);

  std::mutex said_mutex; // what the log last said of readiness ("" before the first probe)
  std::string said;
  auto readiness = [&pool, &engine, &said_mutex, &said] {
    http::readiness_report report;
    try {
      auto [version, read_only] = pool.run([](pqxx::connection& c) {
        const bool read_only = pqxx::nontransaction(c)
                                   .exec1("SELECT current_setting('transaction_read_only')")[0]
                                   .as<std::string>() == "on";
        std::pair out{persistence::applied_migration_version(c), read_only};
        // A session keeps the read-only default it was opened with: the next probe asks a new
        // one, which sees the database writable again.
        if (read_only)
          c.disconnect();
        return out;
      });
      // A standby, or default_transaction_read_only: nothing can be taken or delivered.
      report.checks.emplace_back("database", read_only ? "read-only" : "ok");
      report.checks.emplace_back("migrations",
                                 version >= persistence::latest_migration_version()
                                     ? "ok"
                                     : fmt::format("schema at version {}, expected {}", version,
                                                   persistence::latest_migration_version()));
    } catch (const domain::store_unavailable& e) {
      // The probe is open to anyone: libpq's text (the host, port or socket, the user) stays in
      // the log.
      log::debug("http", "readiness: {}", e.what());
      report.checks.emplace_back("database", "unreachable");
    }
    report.checks.emplace_back("listener", engine.listening() ? "ok" : "not connected");
    // The probes come every few seconds: the log says when the answer changes.
    std::string now;
    for (const auto& [name, state] : report.checks)
      if (state != "ok")
        now += fmt::format("{}{}: {}", now.empty() ? "" : ", ", name, state);
    now = now.empty() ? "ok" : now;
    std::lock_guard lock(said_mutex);
    if (now != said) {
      if (said.empty())
        log::info("http", "{}", now == "ok" ? "ready" : "not ready yet: " + now);
      else if (now == "ok")
        log::info("http", "ready again (was {})", said);
      else
        log::warn("http", "not ready: {}", now);
      said = now;
    }
    return report;
  };

  http::api_server server(
      settings.server, http::policy_of(settings),
      {orders, dead_letters, outbox, readiness, [&engine] { return engine.destinations(); }},
      settings.http);
  persistence::audit_repository audit(pool);
  auto sim = install_served_routes(server.registry(), settings, audit);
  int port = 0;
  try {
    port = server.bind();
  } catch (const std::exception& e) {
    log::error("main", "{}", e.what());
    return exit_failure;
  }
  if (settings.outbox.enabled)
    engine.start();
  else
    log::info("main", "outbox.enabled=false: taking orders, processing none");
  server.start();
  // An IPv6 address goes in brackets in a URL (http://[::1]:9000).
  const auto& host = settings.server.host;
  const auto url_host = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  log::info("main", "outboxd listening on http://{}:{} (web UI: http://{}:{}/)", url_host, port,
            host == "0.0.0.0" ? "127.0.0.1"
            : host == "::"    ? "[::1]"
                              : url_host,
            port);

  int sig = 0;
  sigwait(&signals, &sig);
  log::info("main", "received {}, shutting down", signal_name(sig));
  watch_the_stop(sig, settings.outbox.shutdown_timeout + stop_margin);
  // Reverse order. The engine stops first: its calls in flight may be to this process's own
  // simulator, which must still answer them; intake stays open meanwhile (orders just queue).
  if (sim)
    sim->stop(); // simulated latencies end now, so calls in flight return at once
  engine.stop();
  log::info("main", "engine stopped");
  server.stop();
  log::info("main", "HTTP server stopped; bye");
  return exit_ok;
}

} // namespace outboxd::app
