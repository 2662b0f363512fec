// Attempt outcomes and the retry / dead-letter decision, in one place for the fan-out, the
// cancellation and the dead-letter compensation.
#include "domain/attempt.hpp"

#include "domain/delivery.hpp"

#include <array>
#include <utility>

namespace outboxd::domain {
namespace {

constexpr std::array<std::pair<attempt_outcome, std::string_view>, 4> outcome_names{{
    {attempt_outcome::success, "success"},
    {attempt_outcome::retryable, "retryable"},
    {attempt_outcome::non_retryable, "non_retryable"},
    {attempt_outcome::skipped, "skipped"},
}};

} // namespace

std::string_view to_string(attempt_outcome outcome) {
  for (const auto& [o, name] : outcome_names)
    if (o == outcome)
      return name;
  return "?";
}

std::optional<attempt_outcome> parse_attempt_outcome(std::string_view name) {
  for (const auto& [o, n] : outcome_names)
    if (n == name)
      return o;
  return std::nullopt;
}

std::string_view to_string(dead_letter_reason reason) {
  switch (reason) {
  case dead_letter_reason::max_retries_exceeded:
    return "MAX_RETRIES_EXCEEDED";
  case dead_letter_reason::non_retryable_error:
    return "NON_RETRYABLE_ERROR";
  case dead_letter_reason::cancellation_failed:
    return "CANCELLATION_FAILED";
  }
  return "?";
}

next_step decide_after_failure(run_kind run, attempt_outcome outcome, int attempt,
                               const retry_budget& budget,
                               std::optional<std::chrono::milliseconds> retry_after,
                               double jitter) {
  const bool retryable = outcome == attempt_outcome::retryable;
  if (retryable && attempt <= budget.max_retries)
    return {next_step::kind::retry,
            retry_delay(attempt, retry_after, budget.base, budget.max, jitter),
            {}};
  switch (run) {
  case run_kind::fanout:
    return {next_step::kind::dead_letter,
            {},
            retryable ? dead_letter_reason::max_retries_exceeded
                      : dead_letter_reason::non_retryable_error};
  case run_kind::cancellation:
    // A cancellation that cannot finish is never compensated again: it waits for an operator.
    return {next_step::kind::dead_letter, {}, dead_letter_reason::cancellation_failed};
  case run_kind::compensation:
    break;
  }
  return {next_step::kind::fail, {}, {}};
}

} // namespace outboxd::domain
