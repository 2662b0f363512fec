// outboxd entry point: parse the command line, load the configuration, run the sub-command.
#include "app/commands.hpp"
#include "conf/loader.hpp"
#include "log/log.hpp"

#include <charconv>
#include <cstdio>
#include <fmt/format.h>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr int default_simulator_port = 9100;

constexpr const char* usage = R"(usage: outboxd [command] [--config FILE] [--set key=value]...

commands:
  serve         run the service: migrations, HTTP API and UI, outbox engine (default)
  migrate       apply pending database migrations and exit
  check-config  validate the configuration, print the effective values (secrets masked)
  simulator     run only the simulated external services (no database) on --port N

options:
  --config FILE        JSON configuration merged over the built-in conf/application.json
  --set key=value      override one key, e.g. --set outbox.poolSize=8 (repeatable)
  --port N             simulator only: the port to listen on (default 9100; 0 picks a free one)
  -h, --help           show this help
  --version            print the version and exit

Every key can also be set with OUTBOXD_<PATH> environment variables (OUTBOXD_SERVER_PORT=9123);
the database comes from database.url, DATABASE_URL or the PG* variables.
Exit codes: 0 success, 1 runtime failure, 2 bad command line or configuration.
)";

outboxd::log::level to_log(outboxd::conf::log_level l) {
  using L = outboxd::conf::log_level;
  switch (l) {
  case L::debug:
    return outboxd::log::level::debug;
  case L::warn:
    return outboxd::log::level::warn;
  case L::error:
    return outboxd::log::level::error;
  case L::info:
    break;
  }
  return outboxd::log::level::info;
}

} // namespace

int main(int argc, char** argv) {
  using namespace outboxd;
  std::string command = "serve";
  conf::load_options options;
  std::vector<std::string_view> args(argv + 1, argv + argc);
  int port = default_simulator_port;
  bool port_given = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto a = args[i];
    if (a == "--version") {
      fmt::print("outboxd {}\n", OUTBOXD_VERSION);
      return app::exit_ok;
    }
    if (a == "-h" || a == "--help" || a == "help") {
      std::fputs(usage, stdout);
      return app::exit_ok;
    }
    if ((a == "--config" || a.rfind("--config=", 0) == 0) && options.config_path) {
      // One file: a second would silently replace the first (merge them into one instead).
      fmt::print(stderr, "outboxd: --config is given more than once\n\n{}", usage);
      return app::exit_usage;
    }
    if ((a == "--config" || a == "--set") && i + 1 < args.size()) {
      (a == "--config" ? options.config_path.emplace() : options.set_overrides.emplace_back()) =
          std::string(args[++i]);
    } else if (a.rfind("--config=", 0) == 0) {
      options.config_path = std::string(a.substr(9));
    } else if (a.rfind("--set=", 0) == 0) {
      options.set_overrides.emplace_back(a.substr(6));
    } else if (a == "--port" || a.rfind("--port=", 0) == 0) {
      auto text =
          a == "--port" ? (i + 1 < args.size() ? args[++i] : std::string_view()) : a.substr(7);
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
      if (text.empty() || ec != std::errc() || end != text.data() + text.size() || port < 0 ||
          port > 65535) {
        fmt::print(stderr, "outboxd: --port must be a port number 0..65535, got '{}'\n\n{}", text,
                   usage);
        return app::exit_usage;
      }
      port_given = true;
    } else if (i == 0 &&
               (a == "serve" || a == "migrate" || a == "check-config" || a == "simulator")) {
      command = std::string(a);
    } else {
      fmt::print(stderr, "outboxd: unknown argument '{}'\n\n{}", a, usage);
      return app::exit_usage;
    }
  }

  if (port_given && command != "simulator") {
    fmt::print(stderr, "outboxd: --port is only for the simulator command\n\n{}", usage);
    return app::exit_usage;
  }

  options.environment = conf::process_environment();
  auto loaded = conf::load(options);
  if (!loaded.value) {
    for (const auto& e : loaded.errors)
      fmt::print(stderr, "outboxd: configuration error: {}\n", e);
    return app::exit_usage;
  }
  const auto& settings = *loaded.value;
  log::configure(to_log(settings.log.level), settings.log.format == conf::log_format::json
                                                 ? log::format::json
                                                 : log::format::text);

  if (command == "check-config") {
    fmt::print("{}\n", loaded.effective_json);
    for (const auto& warning : conf::start_up_warnings(settings))
      fmt::print(stderr, "outboxd: warning: {}\n", warning);
    fmt::print(stderr, "outboxd: configuration is valid\n");
    return app::exit_ok;
  }
  if (command == "migrate")
    return app::migrate(settings);
  if (command == "simulator")
    return app::simulator(settings, port);
  return app::serve(settings, loaded.effective_json);
}
