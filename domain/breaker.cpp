// The circuit breaker's transitions and the token bucket's arithmetic.
#include "domain/breaker.hpp"

#include "domain/names.hpp"

#include <algorithm>

namespace outboxd::domain {
namespace {

constexpr name_table_entry<breaker_state> state_names[] = {
    {breaker_state::closed, "closed"},
    {breaker_state::open, "open"},
    {breaker_state::half_open, "half_open"},
};

std::chrono::nanoseconds seconds_of(double s) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s));
}

} // namespace

std::string_view to_string(breaker_state state) {
  return name_in(state_names, state);
}

circuit_breaker::admission circuit_breaker::admit(steady_time now) {
  if (!settings_.enabled || state_ == breaker_state::closed)
    return {true, false, {}};
  if (state_ == breaker_state::open && now < open_until_)
    return {false, false, open_until_};
  if (probe_in_flight_) // half-open: the probe decides; ask again after a cool-down
    return {false, false, now + settings_.open_for};
  state_ = breaker_state::half_open;
  probe_in_flight_ = true;
  return {true, true, {}};
}

std::optional<breaker_state>
circuit_breaker::report(bool failed, bool probe, steady_time now,
                        std::optional<std::chrono::milliseconds> retry_after) {
  if (!settings_.enabled)
    return std::nullopt;
  if (probe) {
    probe_in_flight_ = false;
    if (failed) {
      cool_down_ = std::min(cool_down_ * 2, settings_.max_open_for);
      open(now, retry_after);
      return state_;
    }
    state_ = breaker_state::closed;
    failures_ = 0;
    cool_down_ = settings_.open_for;
    return state_;
  }
  if (state_ != breaker_state::closed) {
    // Started before the circuit opened: the probe decides, but a wait the partner asks for holds.
    if (failed && retry_after && state_ == breaker_state::open)
      open_until_ = std::max(open_until_, now + std::min(*retry_after, settings_.max_open_for));
    return std::nullopt;
  }
  if (!failed) {
    failures_ = 0;
    return std::nullopt;
  }
  if (++failures_ < settings_.failure_threshold)
    return std::nullopt;
  cool_down_ = settings_.open_for;
  open(now, retry_after);
  return state_;
}

void circuit_breaker::open(steady_time now, std::optional<std::chrono::milliseconds> retry_after) {
  open_until_ = now + cool_down_;
  if (retry_after)
    open_until_ = std::max(open_until_, now + std::min(*retry_after, settings_.max_open_for));
  state_ = breaker_state::open;
}

void circuit_breaker::abandon_probe() {
  if (probe_in_flight_ && state_ == breaker_state::half_open)
    probe_in_flight_ = false;
}

token_bucket::token_bucket(double per_second, steady_time now)
    : per_second_(per_second), capacity_(std::max(1.0, per_second)), tokens_(capacity_),
      last_(now) {}

void token_bucket::refill(steady_time now) {
  if (now <= last_)
    return;
  tokens_ = std::min(capacity_,
                     tokens_ + std::chrono::duration<double>(now - last_).count() * per_second_);
  last_ = now;
}

std::optional<steady_time> token_bucket::take(steady_time now, std::chrono::milliseconds max_wait) {
  refill(now);
  if (tokens_ >= 1) {
    tokens_ -= 1;
    return now;
  }
  // Tokens below zero are promises to calls that wait for them, in order.
  auto wait = seconds_of((1 - tokens_) / per_second_);
  if (wait > max_wait)
    return std::nullopt;
  tokens_ -= 1;
  return now + wait;
}

steady_time token_bucket::next_token(steady_time now) {
  refill(now);
  return tokens_ >= 1 ? now : now + seconds_of((1 - tokens_) / per_second_);
}

} // namespace outboxd::domain
