// Restart backoff of supervised workers: how long a crashed child waits before it is started
// again, and when its run of crashes is forgotten. Pure: the caller reads the clock.
#pragma once

#include <chrono>
#include <optional>

namespace outboxd::domain {

/// The rule. The restart after a first crash waits `first`; every further crash in a row doubles
/// the wait, up to `cap`. A child that has run `healthy` since its last (re)start is trusted
/// again: its next crash counts as a first one.
///
/// `healthy` defaults to twice the cap: long enough that a child which always crashes shortly
/// after its start keeps waiting the cap, short enough that a rare crash (say one a day) never
/// inherits the wait of crashes long past.
struct restart_backoff {
  std::chrono::milliseconds first{500};
  std::chrono::milliseconds cap{30000};
  std::chrono::milliseconds healthy{60000};

  /// The wait before the restart that follows crash number `crashes` of a run (1 = the first);
  /// `first` for anything below 1.
  std::chrono::milliseconds delay(int crashes) const;
};

/// One child's starts and crashes, as its supervisor keeps them.
class restart_history {
public:
  using time_point = std::chrono::steady_clock::time_point;

  /// The child was started (or restarted) at `at`.
  void started(time_point at);

  /// The child crashed at `at`. Forgets the earlier crashes when the child had run
  /// `rule.healthy` since its last start, counts this one, and returns how long to wait before
  /// restarting it.
  std::chrono::milliseconds crashed(const restart_backoff& rule, time_point at);

  /// Crashes in the current run (0 before any; 1 again after a reset and a new crash).
  int crashes() const { return crashes_; }

  /// The wait returned by the last crashed() (zero before any crash).
  std::chrono::milliseconds last_delay() const { return last_delay_; }

private:
  std::optional<time_point> started_;
  int crashes_ = 0;
  std::chrono::milliseconds last_delay_{0};
};

} // namespace outboxd::domain
