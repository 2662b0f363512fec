// Restart backoff: the doubling wait, its cap, and the reset after a healthy run.
#include "domain/restart_backoff.hpp"

#include <algorithm>

namespace outboxd::domain {

std::chrono::milliseconds restart_backoff::delay(int crashes) const {
  auto d = first;
  // Doubling stops at the cap, so no number of crashes can overflow the wait.
  for (int i = 1; i < crashes && d < cap; ++i)
    d *= 2;
  return std::min(d, cap);
}

void restart_history::started(time_point at) {
  started_ = at;
}

std::chrono::milliseconds restart_history::crashed(const restart_backoff& rule, time_point at) {
  if (started_ && at - *started_ >= rule.healthy)
    crashes_ = 0;
  ++crashes_;
  last_delay_ = rule.delay(crashes_);
  return last_delay_;
}

} // namespace outboxd::domain
