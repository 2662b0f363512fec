// Loads settings: defaults (the embedded conf/application.json) < file < environment < --set.
#pragma once

#include "conf/settings.hpp"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace outboxd::conf {

/// Where configuration comes from. `environment` is passed in (main gives the process
/// environment) so loading is a pure function of its inputs.
struct load_options {
  std::optional<std::string> config_path;         // a JSON file merged over the built-in defaults
  std::vector<std::string> set_overrides;         // "outbox.poolSize=8", applied last
  std::map<std::string, std::string> environment; // OUTBOXD_* keys and DATABASE_URL are used
};

/// Either settings (and the effective configuration as JSON, secrets masked) or every problem
/// found, each naming its key: "outbox.poolSize must be > 0, got 0".
struct load_result {
  std::optional<settings> value;
  std::string effective_json;
  std::vector<std::string> errors;
};

/// Reads, merges, overrides, resolves `${simulator.baseUrl}` and validates.
load_result load(const load_options& options);

/// Whether a server bound to `host` is reachable from this machine only (127.x, ::1, localhost).
bool is_loopback_host(std::string_view host);

/// What a valid configuration still deserves a WARN for at start-up, each naming its keys:
/// TLS verification turned off, call timeouts that do not fit in outbox.leaseTimeout.
std::vector<std::string> start_up_warnings(const settings& s);

/// The built-in default configuration (conf/application.json as compiled in).
std::string_view default_config_text();

/// Parses "250ms", "2s", "5m", "1h", "7d" or "0"; nullopt when malformed or negative.
std::optional<milliseconds> parse_duration(std::string_view text);

/// The process environment as a map, for `load_options::environment`.
std::map<std::string, std::string> process_environment();

/// `url` with any password replaced by "***" (libpq URLs and key=value strings).
std::string mask_database_url(std::string_view url);

} // namespace outboxd::conf
