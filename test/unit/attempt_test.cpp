// The engine's attempt decisions: outcome names at the storage edge, and what follows a failed
// fan-out, cancellation or dead-letter compensation.
#include "domain/attempt.hpp"
#include "domain/delivery.hpp"

#include <doctest/doctest.h>

using namespace outboxd::domain;
using namespace std::chrono_literals;

namespace {

const retry_budget budget{3, 1000ms, 60000ms};

} // namespace

TEST_CASE("attempt outcomes are stored by the names the result table and the API use") {
  CHECK(to_string(attempt_outcome::success) == "success");
  CHECK(to_string(attempt_outcome::retryable) == "retryable");
  CHECK(to_string(attempt_outcome::non_retryable) == "non_retryable");
  CHECK(to_string(attempt_outcome::skipped) == "skipped");
  for (auto o : {attempt_outcome::success, attempt_outcome::retryable,
                 attempt_outcome::non_retryable, attempt_outcome::skipped})
    CHECK(parse_attempt_outcome(to_string(o)) == o);
  CHECK_FALSE(parse_attempt_outcome("SUCCESS"));
  CHECK_FALSE(parse_attempt_outcome(""));
}

TEST_CASE("a success and a skip finish a step; the failures do not") {
  CHECK(is_done(attempt_outcome::success));
  CHECK(is_done(attempt_outcome::skipped));
  CHECK_FALSE(is_done(attempt_outcome::retryable));
  CHECK_FALSE(is_done(attempt_outcome::non_retryable));
}

TEST_CASE("dead-letter reasons have their stored names") {
  CHECK(to_string(dead_letter_reason::max_retries_exceeded) == "MAX_RETRIES_EXCEEDED");
  CHECK(to_string(dead_letter_reason::non_retryable_error) == "NON_RETRYABLE_ERROR");
  CHECK(to_string(dead_letter_reason::cancellation_failed) == "CANCELLATION_FAILED");
}

TEST_CASE("a retryable failure is retried while the budget lasts, with the backoff delay") {
  for (auto run : {run_kind::fanout, run_kind::cancellation, run_kind::compensation}) {
    for (int attempt = 1; attempt <= budget.max_retries; ++attempt) {
      auto next = decide_after_failure(run, attempt_outcome::retryable, attempt, 0ms, budget,
                                       std::nullopt, 1.0);
      CHECK(next.what == next_step::kind::retry);
      CHECK(next.delay == retry_delay(attempt, std::nullopt, budget.base, budget.max, 1.0));
    }
  }
  // The first retry waits base (jitter 1.0), the third four times as long; jitter 0 halves it.
  CHECK(decide_after_failure(run_kind::fanout, attempt_outcome::retryable, 1, 0ms, budget,
                             std::nullopt, 1.0)
            .delay == 1000ms);
  CHECK(decide_after_failure(run_kind::fanout, attempt_outcome::retryable, 3, 0ms, budget,
                             std::nullopt, 1.0)
            .delay == 4000ms);
  CHECK(decide_after_failure(run_kind::fanout, attempt_outcome::retryable, 3, 0ms, budget,
                             std::nullopt, 0.0)
            .delay == 2000ms);
}

TEST_CASE("a Retry-After answer sets the delay, capped by the maximum") {
  auto next = decide_after_failure(run_kind::cancellation, attempt_outcome::retryable, 1, 0ms,
                                   budget, 7s, 0.3);
  CHECK(next.what == next_step::kind::retry);
  CHECK(next.delay == 7000ms);
  CHECK(decide_after_failure(run_kind::compensation, attempt_outcome::retryable, 1, 0ms, budget,
                             std::chrono::hours(1), 0.3)
            .delay == budget.max);
}

TEST_CASE("a fan-out out of retries is dead-lettered as MAX_RETRIES_EXCEEDED") {
  auto next = decide_after_failure(run_kind::fanout, attempt_outcome::retryable,
                                   budget.max_retries + 1, 0ms, budget, std::nullopt, 0.5);
  CHECK(next.what == next_step::kind::dead_letter);
  CHECK(next.reason == dead_letter_reason::max_retries_exceeded);
}

TEST_CASE("a refused fan-out is dead-lettered at once as NON_RETRYABLE_ERROR") {
  auto next = decide_after_failure(run_kind::fanout, attempt_outcome::non_retryable, 1, 0ms, budget,
                                   std::nullopt, 0.5);
  CHECK(next.what == next_step::kind::dead_letter);
  CHECK(next.reason == dead_letter_reason::non_retryable_error);
}

TEST_CASE("a cancellation that cannot finish is dead-lettered as CANCELLATION_FAILED") {
  for (auto [outcome, attempt] : {std::pair{attempt_outcome::retryable, budget.max_retries + 1},
                                  std::pair{attempt_outcome::non_retryable, 1}}) {
    auto next = decide_after_failure(run_kind::cancellation, outcome, attempt, 0ms, budget,
                                     std::nullopt, 0.5);
    CHECK(next.what == next_step::kind::dead_letter);
    CHECK(next.reason == dead_letter_reason::cancellation_failed);
  }
}

TEST_CASE("a dead letter's compensation that cannot finish fails for good") {
  CHECK(decide_after_failure(run_kind::compensation, attempt_outcome::retryable,
                             budget.max_retries + 1, 0ms, budget, std::nullopt, 0.5)
            .what == next_step::kind::fail);
  CHECK(decide_after_failure(run_kind::compensation, attempt_outcome::non_retryable, 1, 0ms, budget,
                             std::nullopt, 0.5)
            .what == next_step::kind::fail);
}

TEST_CASE("no retries at all: the first retryable failure is final") {
  const retry_budget none{0, 1000ms, 60000ms};
  CHECK(decide_after_failure(run_kind::fanout, attempt_outcome::retryable, 1, 0ms, none,
                             std::nullopt, 0.5)
            .what == next_step::kind::dead_letter);
}

TEST_CASE("retries stop once retry_for after the first failure is spent, whatever the count") {
  retry_budget timed{100, 1000ms, 60000ms, 10min};
  // 9 minutes in, a retry due within the budget is still made.
  auto next = decide_after_failure(run_kind::fanout, attempt_outcome::retryable, 20, 9min, timed,
                                   std::nullopt, 1.0);
  CHECK(next.what == next_step::kind::retry);
  CHECK_FALSE(next.out_of_time);
  // One that would be due after the budget is not: the event is dead-lettered, out of time.
  next = decide_after_failure(run_kind::fanout, attempt_outcome::retryable, 20, 9min + 30s, timed,
                              std::nullopt, 1.0);
  CHECK(next.what == next_step::kind::dead_letter);
  CHECK(next.reason == dead_letter_reason::max_retries_exceeded);
  CHECK(next.out_of_time);
  // The same for a compensation: it fails for good.
  CHECK(decide_after_failure(run_kind::compensation, attempt_outcome::retryable, 2, 10min, timed,
                             std::nullopt, 0.5)
            .what == next_step::kind::fail);
  // The count still bounds a budget with time left.
  next = decide_after_failure(run_kind::fanout, attempt_outcome::retryable, 101, 1min, timed,
                              std::nullopt, 0.5);
  CHECK(next.what == next_step::kind::dead_letter);
  CHECK_FALSE(next.out_of_time);
  CHECK(out_of_time(10min, timed));
  CHECK_FALSE(out_of_time(10min - 1ms, timed));
  // Without a time bound, nothing is ever out of time.
  CHECK_FALSE(out_of_time(std::chrono::hours(24 * 365), budget));
}

TEST_CASE("a run held back past its retry_for gives up like a run out of retries") {
  auto fanout = give_up_for_time(run_kind::fanout);
  CHECK(fanout.what == next_step::kind::dead_letter);
  CHECK(fanout.reason == dead_letter_reason::max_retries_exceeded);
  CHECK(fanout.out_of_time);
  CHECK(give_up_for_time(run_kind::cancellation).reason == dead_letter_reason::cancellation_failed);
  CHECK(give_up_for_time(run_kind::compensation).what == next_step::kind::fail);
}

TEST_CASE("a run the database could not record waits longer the longer it fails, within the "
          "backoff") {
  using std::chrono::milliseconds;
  retry_budget b{3, milliseconds{1000}, milliseconds{60000}, milliseconds{3600000}};
  CHECK(database_hold_delay(milliseconds{0}, b) == milliseconds{1000});
  CHECK(database_hold_delay(milliseconds{1500}, b) == milliseconds{1000});
  CHECK(database_hold_delay(milliseconds{30000}, b) == milliseconds{15000});
  CHECK(database_hold_delay(milliseconds{7200000}, b) == milliseconds{60000}); // past retryFor too
  b.max = milliseconds{500}; // a max below the base: the base
  CHECK(database_hold_delay(milliseconds{100000}, b) == milliseconds{1000});
}
