// The engine's decisions about attempts: how one ended (the outcome of a call or step), and what
// a run does next when it failed: retry after a delay, dead-letter with a reason, or give up its
// compensation. Pure functions; the caller supplies the jitter.
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

namespace outboxd::domain {

/// How one attempt of a step ended. `skipped`: no route matched an optional destination, which
/// counts as done.
enum class attempt_outcome { success, retryable, non_retryable, skipped };

/// The stored and reported name: "success", "retryable", "non_retryable", "skipped".
std::string_view to_string(attempt_outcome outcome);

/// The outcome named `name` (as to_string writes it); nullopt for any other text.
std::optional<attempt_outcome> parse_attempt_outcome(std::string_view name);

/// Whether a step with this outcome is done: a success, or a skip.
constexpr bool is_done(attempt_outcome outcome) {
  return outcome == attempt_outcome::success || outcome == attempt_outcome::skipped;
}

/// Why an event went to the dead-letter queue.
enum class dead_letter_reason { max_retries_exceeded, non_retryable_error, cancellation_failed };

/// The stored and reported name: "MAX_RETRIES_EXCEEDED", "NON_RETRYABLE_ERROR",
/// "CANCELLATION_FAILED".
std::string_view to_string(dead_letter_reason reason);

/// What kind of run failed: the fan-out of a forward event, the compensation of a cancellation
/// event, or the compensation of a dead letter.
enum class run_kind { fanout, cancellation, compensation };

/// How many retries a run may have, for how long, and how long it waits before each.
struct retry_budget {
  int max_retries = 0;
  std::chrono::milliseconds base{0}; // backoff of the first retry
  std::chrono::milliseconds max{0};  // no delay is longer
  /// No retry is due later than this after the run's first failure.
  std::chrono::milliseconds retry_for = std::chrono::milliseconds::max();
};

/// What follows a failed run.
struct next_step {
  enum class kind {
    retry,       // try the run again after `delay`
    dead_letter, // the event goes to the dead-letter queue for `reason`
    fail,        // the dead letter's compensation failed for good: the order needs attention
  };
  kind what = kind::fail;
  std::chrono::milliseconds delay{0};                                  // for retry
  dead_letter_reason reason = dead_letter_reason::non_retryable_error; // for dead_letter
  bool out_of_time = false; // a retryable failure gave up because retry_for was spent
};

/// The decision after run number `attempt` (1 = the first run) ended with `outcome`, `failing_for`
/// after the first failure of the run (zero when this is the first). A retryable outcome is
/// retried after retry_delay(attempt, `retry_after`, budget.base, budget.max, `jitter`) while
/// `attempt` <= budget.max_retries and that retry is due within budget.retry_for of the first
/// failure. Otherwise a fan-out is dead-lettered
/// (MAX_RETRIES_EXCEEDED when it was retryable, else NON_RETRYABLE_ERROR), a cancellation is
/// dead-lettered as CANCELLATION_FAILED, and a dead letter's compensation fails. Any outcome but
/// `retryable` is final.
next_step decide_after_failure(run_kind run, attempt_outcome outcome, int attempt,
                               std::chrono::milliseconds failing_for, const retry_budget& budget,
                               std::optional<std::chrono::milliseconds> retry_after, double jitter);

/// Whether a run `failing_for` after its first failure (or its first hold) has spent
/// budget.retry_for: what decides a run that is held back again.
bool out_of_time(std::chrono::milliseconds failing_for, const retry_budget& budget);

/// The wait before a run the database could not record (a lock, a full disk, a refusing trigger)
/// is tried again. Such a run spends no retry and is never given up for it: the partners were not
/// at fault, and giving up would revert calls that succeeded. The wait grows with how long the
/// run has been failing (`failing_for`), from budget.base to budget.max.
std::chrono::milliseconds database_hold_delay(std::chrono::milliseconds failing_for,
                                              const retry_budget& budget);

/// The end of a run of `run` whose retry_for is spent: a fan-out is dead-lettered
/// (MAX_RETRIES_EXCEEDED), a cancellation too (CANCELLATION_FAILED), a compensation fails.
next_step give_up_for_time(run_kind run);

} // namespace outboxd::domain
