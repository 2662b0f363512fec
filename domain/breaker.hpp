// What protects a destination and the engine from each other: a circuit breaker that stops calling
// a destination that keeps failing and probes it after a cool-down, and a token bucket that keeps
// calls under a partner's rate limit. Pure state machines: the caller reads the clock, locks, and
// counts calls in flight.
#pragma once

#include "domain/routing.hpp"

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace outboxd::domain {

using steady_time = std::chrono::steady_clock::time_point;

/// closed: calls go through. open: no call until the cool-down ends. half_open: one probe call
/// is in flight; the others wait for its answer.
enum class breaker_state { closed, open, half_open };

/// "closed", "open", "half_open".
std::string_view to_string(breaker_state state);

/// One destination's breaker. A call counts as failed when it is retryable (transport error,
/// timeout, 408, 425, 429, 5xx); any other answer (a success, a refusal such as 400) shows the
/// destination is up. `failure_threshold` failed calls in a row open the circuit for `open_for`;
/// then one probe is let through (half-open): its success closes the circuit, its failure opens
/// it again for twice as long as the last time, up to `max_open_for`. A failed call that asks for
/// a longer wait (its Retry-After) keeps the circuit open that long instead, up to `max_open_for`:
/// the probe does not come before the partner said it could take calls again. Answers of calls
/// that started before the circuit opened change nothing else while it is open.
class circuit_breaker {
public:
  explicit circuit_breaker(breaker_settings settings) : settings_(settings) {}

  /// Whether a call may start at `now`.
  struct admission {
    bool allowed = false;
    bool probe = false;     // the allowed call is the half-open probe: report() or abandon() it
    steady_time retry_at{}; // when not allowed: when to ask again
  };
  admission admit(steady_time now);

  /// The answer of an admitted call (`probe` as admit() said), with the wait a failed call's
  /// Retry-After asked for. Returns the new state when the state changed.
  std::optional<breaker_state> report(bool failed, bool probe, steady_time now,
                                      std::optional<std::chrono::milliseconds> retry_after = {});
  /// The probe ended without an answer (its run was interrupted): another call may probe.
  void abandon_probe();

  breaker_state state() const { return state_; }
  int failures_in_a_row() const { return failures_; }
  /// While open: when the next probe may start.
  steady_time open_until() const { return open_until_; }
  /// The cool-down of the current (or next) opening.
  std::chrono::milliseconds cool_down() const { return cool_down_; }

private:
  /// Opens the circuit until the cool-down or the asked-for wait ends, whichever is later.
  void open(steady_time now, std::optional<std::chrono::milliseconds> retry_after);

  breaker_settings settings_;
  breaker_state state_ = breaker_state::closed;
  int failures_ = 0;
  bool probe_in_flight_ = false;
  std::chrono::milliseconds cool_down_ = settings_.open_for;
  steady_time open_until_{};
};

/// A token bucket: `per_second` calls a second on average, bursts of up to one second's worth
/// (at least one call).
class token_bucket {
public:
  token_bucket(double per_second, steady_time now);

  /// Takes a token for a call at `now`. When none is left, the call may take one that is not
  /// there yet, if it comes within `max_wait`: the result is when the call may start (`now` when
  /// a token was there). nullopt: no token within `max_wait`, nothing taken; next_token() says
  /// when one comes.
  std::optional<steady_time> take(steady_time now, std::chrono::milliseconds max_wait);
  /// When the next token is there (after take() refused one).
  steady_time next_token(steady_time now);

private:
  void refill(steady_time now);

  double per_second_;
  double capacity_;
  double tokens_;
  steady_time last_;
};

/// A destination as the engine sees it at one moment (GET /api/outbox/stats, the UI, /metrics).
struct destination_health {
  std::string name;
  breaker_state state = breaker_state::closed;
  int failures_in_a_row = 0;
  std::optional<std::chrono::milliseconds> opens_again_in; // open: time left before a probe
  int in_flight = 0;                                       // calls in flight in this process
  int max_concurrency = 0;                                 // 0: no limit
  double rate_per_second = 0;                              // 0: no limit
  long long held = 0; // runs held back (breaker or limit) since start
};

} // namespace outboxd::domain
