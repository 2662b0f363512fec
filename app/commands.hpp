// The sub-commands of the outboxd binary.
#pragma once

#include "conf/settings.hpp"

#include <string>

namespace outboxd::app {

/// Process exit codes shared by every sub-command.
inline constexpr int exit_ok = 0;
inline constexpr int exit_failure = 1;
inline constexpr int exit_usage = 2; // bad command line or configuration

/// `outboxd serve`: migrate, start the HTTP server (and the engine), run until SIGTERM/SIGINT.
int serve(const conf::settings& settings, const std::string& effective_json);

/// `outboxd migrate`: apply pending migrations and exit.
int migrate(const conf::settings& settings);

/// `outboxd simulator --port N`: serve only the simulated external services (and /healthz) on
/// server.host:port, no database, until SIGTERM/SIGINT (exit 0); exit 1 when the port is busy.
int simulator(const conf::settings& settings, int port);

} // namespace outboxd::app
