// Attempt outcomes and the retry / dead-letter decision, in one place for the fan-out, the
// cancellation and the dead-letter compensation.
#include "domain/attempt.hpp"

#include "domain/delivery.hpp"
#include "domain/names.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace outboxd::domain {
namespace {

constexpr name_table_entry<attempt_outcome> outcome_names[] = {
    {attempt_outcome::success, "success"},
    {attempt_outcome::retryable, "retryable"},
    {attempt_outcome::non_retryable, "non_retryable"},
    {attempt_outcome::skipped, "skipped"},
};

constexpr name_table_entry<dead_letter_reason> reason_names[] = {
    {dead_letter_reason::max_retries_exceeded, "MAX_RETRIES_EXCEEDED"},
    {dead_letter_reason::non_retryable_error, "NON_RETRYABLE_ERROR"},
    {dead_letter_reason::cancellation_failed, "CANCELLATION_FAILED"},
};

} // namespace

std::string_view to_string(attempt_outcome outcome) {
  return name_in(outcome_names, outcome);
}

std::optional<attempt_outcome> parse_attempt_outcome(std::string_view name) {
  return value_in(outcome_names, name);
}

std::string_view to_string(dead_letter_reason reason) {
  return name_in(reason_names, reason);
}

bool out_of_time(std::chrono::milliseconds failing_for, const retry_budget& budget) {
  return failing_for >= budget.retry_for;
}

std::chrono::milliseconds database_hold_delay(std::chrono::milliseconds failing_for,
                                              const retry_budget& budget) {
  return std::clamp(failing_for / 2, budget.base, std::max(budget.base, budget.max));
}

next_step give_up_for_time(run_kind run) {
  return decide_after_failure(run, attempt_outcome::retryable, 1, std::chrono::milliseconds{0},
                              {1, {}, {}, std::chrono::milliseconds{0}}, std::nullopt, 0);
}

next_step decide_after_failure(run_kind run, attempt_outcome outcome, int attempt,
                               std::chrono::milliseconds failing_for, const retry_budget& budget,
                               std::optional<std::chrono::milliseconds> retry_after,
                               double jitter) {
  const bool retryable = outcome == attempt_outcome::retryable;
  bool timed_out = false;
  if (retryable && attempt <= budget.max_retries) {
    auto delay = retry_delay(attempt, retry_after, budget.base, budget.max, jitter);
    if (failing_for < budget.retry_for && delay <= budget.retry_for - failing_for)
      return {next_step::kind::retry, delay, {}, false};
    timed_out = true;
  }
  switch (run) {
  case run_kind::fanout:
    return {next_step::kind::dead_letter,
            {},
            retryable ? dead_letter_reason::max_retries_exceeded
                      : dead_letter_reason::non_retryable_error,
            timed_out};
  case run_kind::cancellation:
    // A cancellation that cannot finish is never compensated again: it waits for an operator.
    return {next_step::kind::dead_letter, {}, dead_letter_reason::cancellation_failed, timed_out};
  case run_kind::compensation:
    break;
  }
  return {next_step::kind::fail, {}, {}, timed_out};
}

} // namespace outboxd::domain
