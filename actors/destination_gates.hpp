// The gate in front of every destination, shared by all workers of the process: its circuit
// breaker, its limit of calls in flight (maxConcurrency) and its rate (ratePerSecond). A worker
// asks before each call; it gets a permit, or is told to hold the run back and when to try again.
// Transitions are logged and counted; health() is what the stats, the UI and /metrics show.
#pragma once

#include "domain/attempt.hpp"
#include "domain/breaker.hpp"
#include "domain/routing.hpp"

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

namespace outboxd::actors {

class destination_gates {
  struct gate;

public:
  using clock = std::chrono::steady_clock;
  /// How long a call may wait for a free slot or a token before its run is held back instead.
  static constexpr std::chrono::milliseconds max_limit_wait{1000};
  /// How soon a call that found no free slot asks again.
  static constexpr std::chrono::milliseconds slot_poll{10};

  explicit destination_gates(const domain::routing_table& routing);
  ~destination_gates();
  destination_gates(const destination_gates&) = delete;
  destination_gates& operator=(const destination_gates&) = delete;

  /// The right to make one call. Report its outcome; a permit dropped without a report (its
  /// run was interrupted) frees its slot and, if it was the probe, lets another call probe.
  class permit {
  public:
    permit(permit&& other) noexcept;
    permit& operator=(permit&&) = delete;
    ~permit();
    /// Reports the call's outcome and the wait its Retry-After asked for; true when it closed
    /// the circuit (a probe succeeded).
    bool report(domain::attempt_outcome outcome,
                std::optional<std::chrono::milliseconds> retry_after = std::nullopt);
    /// Whether the call probes an open circuit (half-open).
    bool probe() const { return probe_; }
    /// When the call may start: the rate token it took comes then (nullopt: at once).
    std::optional<clock::time_point> not_before() const { return not_before_; }

  private:
    friend class destination_gates;
    permit(destination_gates* owner, gate* g, bool probe,
           std::optional<clock::time_point> not_before = std::nullopt)
        : owner_(owner), gate_(g), probe_(probe), not_before_(not_before) {}
    destination_gates* owner_;
    gate* gate_;
    bool probe_;
    std::optional<clock::time_point> not_before_;
    bool reported_ = false;
  };

  /// The run must not call now: it is rescheduled after `delay`, without spending its budget.
  struct hold {
    std::chrono::milliseconds delay{0};
    std::string reason; // e.g. "billing: circuit open (5 failed calls in a row)"
  };

  /// No free slot now: ask again at `at`.
  struct retry {
    clock::time_point at;
  };

  /// Asks to call destination `name` (a revert asks for its destination) without waiting: a
  /// permit (start the call at its not_before(), a token at most max_limit_wait away), a hold,
  /// or, while every slot is taken and `give_up_at` has not passed, when to ask again. A caller
  /// passes the same `give_up_at` (its first ask + max_limit_wait) on every ask of one call.
  /// `who` tags the log lines.
  std::variant<permit, hold, retry> try_enter(const std::string& name, const std::string& who,
                                              clock::time_point give_up_at);

  /// Every destination's state now.
  std::vector<domain::destination_health> health() const;

private:
  /// The call of a permit ended (`outcome`, the wait its Retry-After asked for), or was never
  /// made; the state it moved the circuit to, if it did.
  std::optional<domain::breaker_state>
  finish(gate& g, bool probe, std::optional<domain::attempt_outcome> outcome,
         std::optional<std::chrono::milliseconds> retry_after = std::nullopt);

  std::map<std::string, std::unique_ptr<gate>, std::less<>> gates_;
};

} // namespace outboxd::actors
