// An outboxd process for end-to-end tests, on a fresh database and a free port, with fast
// retry settings, plus helpers to drive it over HTTP.
#pragma once

#include "test/support/http_client.hpp"
#include "test/support/process.hpp"

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace outboxd::test {

class outboxd_process {
public:
  /// Starts `outboxd serve` on database `conninfo` with `extra` arguments (e.g. "--set", "k=v")
  /// after the test defaults (fast backoff, short poll and reaper intervals, knobs at 0 %).
  outboxd_process(std::string name, std::string conninfo, std::vector<std::string> extra = {},
                  std::map<std::string, std::string> env = {});
  ~outboxd_process();

  /// Knobs and the ledger live at a standalone simulator on `port` (started with
  /// --set simulator.enabled=false --set simulator.baseUrl=...).
  void use_simulator(int port) { simulator_ = std::make_unique<http_client>(port); }

  /// Waits until /readyz answers 200, then quiet_world().
  void wait_ready();
  /// Waits until /readyz answers 200 (fails the test otherwise); leaves the knobs alone.
  void wait_up(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// Every simulator knob back to no failures, no late answers.
  void quiet_world();
  /// Sets simulator knobs: `services_json` is the "services" object of PUT /api/simulator/config.
  void knobs(const std::string& services_json);
  /// Creates an order and returns its id.
  long long create_order(const std::string& shipping = "domestic",
                         const std::string& amount = "99.99");
  /// Waits until the order's status is `status`; returns the last status seen.
  std::string wait_status(long long id, const std::string& status,
                          std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// The simulator ledger of one order.
  http_response ledger(long long id);
  /// The order's timeline.
  http_response timeline(long long id);

  http_client& client() { return *client_; }
  child_process& process() { return *process_; }
  int port() const { return port_; }
  std::string output() const { return process_->output(); }
  /// Stops (SIGTERM) and returns the exit code.
  std::optional<int> stop();
  /// Starts again on the same database and port (after stop() or a kill).
  void restart();

private:
  void launch();
  std::string name_;
  std::string conninfo_;
  std::vector<std::string> extra_;
  std::map<std::string, std::string> env_;
  int port_ = 0;
  int launches_ = 0;
  std::unique_ptr<child_process> process_;
  std::unique_ptr<http_client> client_;
  std::unique_ptr<http_client> simulator_;
};

/// `outboxd simulator --port <port>` as a process (the outside world that survives outboxd).
struct simulator_process {
  simulator_process();
  int port;
  child_process process;
  /// The --set arguments that point an outboxd at this simulator, then `settings` ("key=value"),
  /// each as another --set.
  std::vector<std::string> outboxd_args(std::initializer_list<const char*> settings = {}) const;
};

/// A "services" object for knobs(): every simulator knob with the same `fields`, e.g.
/// `{"failureRate":0.2}`.
std::string every_knob(const std::string& fields);

/// Entries of a ledger response whose operation is `operation` (pointers into `ledger`).
std::vector<const rapidjson::Value*> ledger_entries(const http_response& ledger,
                                                    const std::string& operation);
/// Refused: the pointers would outlive a temporary response.
std::vector<const rapidjson::Value*> ledger_entries(http_response&& ledger,
                                                    const std::string& operation) = delete;

} // namespace outboxd::test
