// The circuit breaker's transitions and the token bucket, on a clock the test moves.
#include "domain/breaker.hpp"

#include <doctest/doctest.h>

using namespace outboxd::domain;
using namespace std::chrono_literals;

namespace {

const breaker_settings three{true, 3, 5s, 20s};
const steady_time t0{};

/// Fails `n` admitted calls at `at`.
void fail_calls(circuit_breaker& b, int n, steady_time at) {
  for (int i = 0; i < n; ++i) {
    auto a = b.admit(at);
    REQUIRE(a.allowed);
    b.report(true, a.probe, at);
  }
}

} // namespace

TEST_CASE("failures in a row open the circuit; a success in between resets the count") {
  circuit_breaker b(three);
  fail_calls(b, 2, t0);
  b.report(false, false, t0); // a success: the destination is up
  fail_calls(b, 2, t0);
  CHECK(b.state() == breaker_state::closed);
  CHECK(b.failures_in_a_row() == 2);
  auto a = b.admit(t0);
  REQUIRE(a.allowed);
  CHECK(b.report(true, a.probe, t0) == breaker_state::open);
  CHECK(b.state() == breaker_state::open);
  CHECK(b.open_until() == t0 + 5s);
}

TEST_CASE("an open circuit admits nothing until its cool-down, then one probe") {
  circuit_breaker b(three);
  fail_calls(b, 3, t0);
  auto refused = b.admit(t0 + 4s);
  CHECK_FALSE(refused.allowed);
  CHECK(refused.retry_at == t0 + 5s);
  auto probe = b.admit(t0 + 5s);
  CHECK(probe.allowed);
  CHECK(probe.probe);
  CHECK(b.state() == breaker_state::half_open);
  // Everything else waits for the probe's answer.
  auto other = b.admit(t0 + 5s);
  CHECK_FALSE(other.allowed);
  CHECK(other.retry_at > t0 + 5s);
  // The probe succeeds: closed, and the count starts again.
  CHECK(b.report(false, true, t0 + 6s) == breaker_state::closed);
  CHECK(b.admit(t0 + 6s).allowed);
  CHECK(b.failures_in_a_row() == 0);
}

TEST_CASE("a failed probe opens the circuit again for twice as long, up to the maximum") {
  circuit_breaker b(three);
  fail_calls(b, 3, t0);
  auto at = t0 + 5s;
  std::chrono::milliseconds expected[] = {10s, 20s, 20s};
  for (auto cool_down : expected) {
    auto probe = b.admit(at);
    REQUIRE(probe.probe);
    CHECK(b.report(true, true, at) == breaker_state::open);
    CHECK(b.cool_down() == cool_down);
    CHECK(b.open_until() == at + cool_down);
    CHECK_FALSE(b.admit(at + cool_down - 1ms).allowed);
    at += cool_down;
  }
  // A success after all that closes it, and the next opening starts from the first cool-down.
  auto probe = b.admit(at);
  b.report(false, probe.probe, at);
  fail_calls(b, 3, at);
  CHECK(b.open_until() == at + 5s);
}

TEST_CASE("answers of calls that started before the circuit opened change nothing") {
  circuit_breaker b(three);
  fail_calls(b, 3, t0);
  CHECK_FALSE(b.report(false, false, t0 + 1s).has_value());
  CHECK(b.state() == breaker_state::open);
  CHECK_FALSE(b.report(true, false, t0 + 1s).has_value());
  CHECK(b.open_until() == t0 + 5s);
}

TEST_CASE("a Retry-After longer than the cool-down keeps the circuit open that long, up to the "
          "maximum") {
  circuit_breaker b(three);
  fail_calls(b, 2, t0);
  // The call that opens the circuit asks for 12 s: no probe before then.
  auto a = b.admit(t0);
  CHECK(b.report(true, a.probe, t0, 12s) == breaker_state::open);
  CHECK(b.open_until() == t0 + 12s);
  CHECK_FALSE(b.admit(t0 + 11s).allowed);
  // A shorter one than the cool-down changes nothing; a late failure asking for more extends.
  CHECK_FALSE(b.report(true, false, t0 + 10s, 1s).has_value());
  CHECK(b.open_until() == t0 + 12s);
  CHECK_FALSE(b.report(true, false, t0 + 2s, 15s).has_value());
  CHECK(b.open_until() == t0 + 17s);
  // A failed probe asking for an hour waits the maximum, not the hour.
  auto probe = b.admit(t0 + 17s);
  REQUIRE(probe.probe);
  CHECK(b.report(true, true, t0 + 17s, 3600s) == breaker_state::open);
  CHECK(b.open_until() == t0 + 17s + 20s);
  // Once closed, a Retry-After alone (below the threshold) opens nothing.
  auto last = b.admit(t0 + 37s);
  b.report(false, last.probe, t0 + 37s);
  CHECK_FALSE(b.report(true, false, t0 + 38s, 60s).has_value());
  CHECK(b.state() == breaker_state::closed);
}

TEST_CASE("an abandoned probe lets the next call probe") {
  circuit_breaker b(three);
  fail_calls(b, 3, t0);
  REQUIRE(b.admit(t0 + 5s).probe);
  CHECK_FALSE(b.admit(t0 + 5s).allowed);
  b.abandon_probe();
  auto again = b.admit(t0 + 5s);
  CHECK(again.allowed);
  CHECK(again.probe);
}

TEST_CASE("a disabled breaker admits every call and never opens") {
  circuit_breaker b({false, 1, 5s, 20s});
  fail_calls(b, 50, t0);
  CHECK(b.state() == breaker_state::closed);
  CHECK(b.admit(t0).allowed);
}

TEST_CASE("the token bucket allows a second's worth at once, then paces calls") {
  token_bucket bucket(4, t0);
  for (int i = 0; i < 4; ++i)
    CHECK(bucket.take(t0, 0ms) == t0);
  // Empty: a call that may not wait gets nothing and learns when the next token comes.
  CHECK_FALSE(bucket.take(t0, 0ms).has_value());
  CHECK(bucket.next_token(t0) == t0 + 250ms);
  // Calls that may wait are promised the coming tokens in order.
  CHECK(bucket.take(t0, 1s) == t0 + 250ms);
  CHECK(bucket.take(t0, 1s) == t0 + 500ms);
  CHECK_FALSE(bucket.take(t0, 600ms).has_value()); // the next is 750 ms away
  // Tokens come back with time, up to the capacity.
  CHECK(bucket.take(t0 + 10s, 0ms) == t0 + 10s);
}

TEST_CASE("a rate below one a second still allows one call, then waits its interval") {
  token_bucket bucket(0.5, t0);
  CHECK(bucket.take(t0, 0ms) == t0);
  CHECK_FALSE(bucket.take(t0 + 1s, 0ms).has_value());
  CHECK(bucket.next_token(t0 + 1s) == t0 + 2s);
  CHECK(bucket.take(t0 + 2s, 0ms) == t0 + 2s);
}
