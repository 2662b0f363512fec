// The restart backoff rule: the doubling wait and its cap, the reset after a healthy run, and the
// crash history a supervisor keeps per child.
#include "domain/restart_backoff.hpp"

#include <doctest/doctest.h>
#include <vector>

using namespace outboxd::domain;
using namespace std::chrono_literals;
using std::chrono::milliseconds;

namespace {
const restart_history::time_point t0{};
} // namespace

TEST_CASE("restart backoff: 500 ms doubling per crash in a row, capped at 30 s") {
  restart_backoff rule;
  CHECK(rule.delay(1) == 500ms);
  CHECK(rule.delay(2) == 1000ms);
  CHECK(rule.delay(3) == 2000ms);
  CHECK(rule.delay(6) == 16000ms);
  CHECK(rule.delay(7) == 30000ms); // 32 s, capped
  CHECK(rule.delay(8) == 30000ms);
  CHECK(rule.delay(1000000) == 30000ms);
  CHECK(rule.delay(0) == 500ms);
  CHECK(rule.delay(-3) == 500ms);
  CHECK(rule.healthy == 60000ms);
}

TEST_CASE("restart backoff: a custom rule, and a first wait above the cap is capped") {
  CHECK(restart_backoff{10ms, 50ms, 1s}.delay(3) == 40ms);
  CHECK(restart_backoff{10ms, 50ms, 1s}.delay(4) == 50ms);
  CHECK(restart_backoff{100ms, 50ms, 1s}.delay(1) == 50ms);
}

TEST_CASE("restart history: crashes soon after each restart keep growing the wait") {
  restart_backoff rule;
  restart_history h;
  CHECK(h.crashes() == 0);
  CHECK(h.last_delay() == 0ms);
  h.started(t0);
  auto at = t0;
  std::vector<milliseconds> waits;
  for (int i = 0; i < 9; ++i) {
    at += 5s; // runs 5 s, crashes
    waits.push_back(h.crashed(rule, at));
    at += waits.back();
    h.started(at);
  }
  CHECK(waits == std::vector<milliseconds>{500ms, 1s, 2s, 4s, 8s, 16s, 30s, 30s, 30s});
  CHECK(h.crashes() == 9);
  CHECK(h.last_delay() == 30s);
}

TEST_CASE("restart history: a healthy run since the last start forgets earlier crashes") {
  restart_backoff rule;
  restart_history h;
  h.started(t0);
  for (int i = 0; i < 7; ++i) {
    h.crashed(rule, t0 + 1s);
    h.started(t0 + 1s);
  }
  REQUIRE(h.crashes() == 7);
  // Just short of the healthy period: still a crash in the same run.
  CHECK(h.crashed(rule, t0 + 1s + 59999ms) == 30s);
  CHECK(h.crashes() == 8);
  h.started(t0 + 100s);
  // A full healthy period since the last start: the next crash is a first one again.
  CHECK(h.crashed(rule, t0 + 160s) == 500ms);
  CHECK(h.crashes() == 1);
  CHECK(h.last_delay() == 500ms);
  h.started(t0 + 161s);
  CHECK(h.crashed(rule, t0 + 162s) == 1s);
  CHECK(h.crashes() == 2);
}

TEST_CASE("restart history: time spent waiting for the restart does not count as healthy") {
  // A child that crashes at once after every start, waiting the cap each time, never looks
  // healthy: only the time since its last start counts.
  restart_backoff rule{500ms, 30s, 60s};
  restart_history h;
  auto at = t0;
  h.started(at);
  for (int i = 0; i < 20; ++i) {
    at += 10ms;
    auto wait = h.crashed(rule, at);
    at += wait;
    h.started(at);
  }
  CHECK(h.crashes() == 20);
  CHECK(h.last_delay() == 30s);
}

TEST_CASE("restart history: a crash before any recorded start counts without reset") {
  restart_backoff rule;
  restart_history h;
  CHECK(h.crashed(rule, t0 + 1000s) == 500ms);
  CHECK(h.crashed(rule, t0 + 2000s) == 1s);
}
