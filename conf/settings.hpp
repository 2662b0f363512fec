// outboxd's settings: one struct per section of conf/application.json.
#pragma once

#include "domain/routing.hpp"
#include "simulator/knobs.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace outboxd::conf {

using std::chrono::milliseconds;

struct server_settings {
  std::string host = "127.0.0.1";
  int port = 9000;
  int threads = 32;                     // HTTP worker threads; one per request being run
  std::size_t max_body_bytes = 1 << 20; // larger bodies get 413
  milliseconds read_timeout{5000};      // per read, over TLS (plain HTTP has request_timeout)
  milliseconds write_timeout{5000};
  milliseconds keep_alive_timeout{5000};
  milliseconds request_timeout{10000};      // a request's headers and body must arrive within it
  int max_connections = 512;                // open connections; over it the oldest idle is shed
  int max_connections_per_client = 256;     // open connections from one client address
  std::vector<std::string> allowed_origins; // origins a browser may call from besides the API's own
  std::vector<std::string> allowed_hosts;   // names a request without a token may use in Host
  struct {
    std::string cert_file;      // PEM; set with key_file, the listener speaks HTTPS only
    std::string key_file;       // PEM
    std::string client_ca_file; // PEM; set: every client must present a certificate it signed
  } tls;
};

struct database_settings {
  std::string url; // libpq URL or key=value string; empty = the PG* environment variables
  int pool_size = 8;
  milliseconds connect_timeout{5000};
  milliseconds startup_timeout{60000};   // how long start-up keeps retrying an unreachable database
  milliseconds statement_timeout{30000}; // every statement outboxd runs (0 = none; not migrations)
  milliseconds lock_timeout{10000};      // every wait for a lock (0 = none)
  milliseconds migration_lock_timeout{3000}; // a migration's wait for a lock, then it retries
};

struct backoff_settings {
  milliseconds base{1000};
  milliseconds max{60000};
};

struct outbox_settings {
  bool enabled = true;     // false: intake and API only, no processors in this process
  int pool_size = 3;       // processors: one thread each, each with its dead-letter child
  int calls_in_flight = 4; // runs (and so calls) in flight per processor, completions aside
  // Database connections of the processors, their children and the janitor: three of each
  // processor's own when there are at least 4 x pool_size + 1 (actors::own_connections), the rest
  // shared.
  int connections = 13;
  int batch_size = 100;
  milliseconds poll_interval{2000};
  bool use_listen_notify = true;
  int max_retries = 30;
  backoff_settings backoff;
  milliseconds retry_for{3600000}; // no retry is due later than this after the first failure
  milliseconds lease_timeout{60000};
  milliseconds reaper_interval{10000};
  milliseconds retention{0}; // 0 disables the retention job
  milliseconds shutdown_timeout{10000};
};

struct dlq_settings {
  int max_retries = 30;
  backoff_settings backoff;
  milliseconds retry_for{3600000};
  milliseconds retention{0}; // resolved dead letters older than this are deleted; 0 keeps them
};

struct audit_settings {
  milliseconds retention{
      0};                 // audit rows of settled aggregates older than this are deleted; 0 keeps
  std::string export_dir; // when set, rows are appended there as JSON lines before deletion
};

struct orders_settings {
  milliseconds retention{0}; // orders removed longer ago than this are deleted for good; 0 keeps
};

// The knob type belongs to the simulator's pure knob library (conf links it, never the server).
using retry_after_knob = simulator::retry_after_knob;
using simulator_knobs = simulator::service_knobs;

struct simulator_settings {
  bool enabled = true;
  std::string base_url; // resolved: never empty after loading
  std::uint64_t seed = 42;
  std::map<std::string, simulator_knobs> services; // by knob name, e.g. "billing.charge"
};

/// What a caller may do. Each role includes the ones before it: admin can write, write can read.
enum class role { read = 1, write, admin };

/// One accepted bearer token, known by the SHA-256 digest of its text only.
struct token_settings {
  std::string name; // for logs: which token was used
  role granted = role::read;
  std::array<unsigned char, 32> sha256{};
};

struct auth_settings {
  bool allow_anonymous = false;     // requests without a token, when tokens are configured
  role anonymous_role = role::read; // ... are served with this role
  std::optional<role> metrics_role = role::read; // nullopt ("none"): /metrics needs no token
  std::vector<token_settings> tokens;
};

struct admin_settings {
  std::string token; // a plain-text admin token, accepted besides auth.tokens; empty: none
};

enum class log_level { debug, info, warn, error };
enum class log_format { text, json };

struct log_settings {
  log_level level = log_level::info;
  log_format format = log_format::text;
};

struct settings {
  server_settings server;
  database_settings database;
  outbox_settings outbox;
  dlq_settings dlq;
  audit_settings audit;
  orders_settings orders;
  domain::routing_table http;
  simulator_settings simulator;
  auth_settings auth;
  admin_settings admin;
  log_settings log;
};

} // namespace outboxd::conf
