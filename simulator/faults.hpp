// The simulator's run-time fault knobs and its seeded random generator: decides, per call,
// whether a simulated service fails, how long it waits and whether it answers late.
#pragma once

#include "conf/settings.hpp"

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <rapidjson/document.h>
#include <string>
#include <string_view>
#include <vector>

namespace outboxd::simulator {

/// What one call of a knob-driven endpoint does.
struct fault_decision {
  bool fail = false;            // answer with failure_status instead of applying
  int status = 503;             // the failure status
  retry_after_knob retry_after; // sent as Retry-After on a failure
  std::chrono::milliseconds latency{0};
  std::chrono::milliseconds late{0}; // > 0: apply, then answer this much later
};

/// Knob state for the twelve knobs plus one std::mt19937_64, all under one mutex, so that a
/// given seed and sequence of calls gives the same decisions. Thread-safe.
class fault_injector {
public:
  /// Starts from `settings.services` (missing knobs get the defaults) and `settings.seed`; reset()
  /// returns to exactly this state.
  explicit fault_injector(const conf::simulator_settings& settings);

  /// Draws the decision for one call of `knob` (one of knob_names). `failNext` > 0 fails
  /// the call and counts down; otherwise the call fails with probability failureRate. A call
  /// that does not fail is late with probability lateRate. Latency is uniform in [min, max].
  fault_decision decide(std::string_view knob);

  /// A uniform integer in [0, bound), from the same generator (tracking numbers, bin locations).
  std::uint64_t draw(std::uint64_t bound);

  /// Applies a PUT /api/simulator/config body, `{"seed": N, "services": {knob: {fields}}}`, all
  /// or nothing: returns the problems (each naming the service and field) and changes nothing
  /// when there is any. A given seed re-seeds the generator, even when it is the same value.
  std::vector<std::string> apply_patch(const rapidjson::Value& body);

  /// Restores the initial knobs and seed and re-seeds the generator.
  void reset();

  /// `{"seed": 42, "services": {"inventory.reserve": {"failureRate": 0.05, "failureStatus": 503,
  /// "retryAfter": 4, "latencyMs": [0, 0], "lateRate": 0.0, "lateMs": 0, "failNext": 0}, ...}}`
  /// with every knob, in knob_names order.
  std::string config_json() const;

  service_knobs knobs(std::string_view knob) const;
  std::uint64_t seed() const;

private:
  double uniform();

  mutable std::mutex mutex_;
  std::map<std::string, service_knobs, std::less<>> initial_;
  std::uint64_t initial_seed_;
  std::map<std::string, service_knobs, std::less<>> knobs_;
  std::uint64_t seed_;
  std::mt19937_64 rng_;
};

} // namespace outboxd::simulator
