// The reaper's watch on the database's clock: a step forward holds reaping back for one lease
// of local time; steady clocks, small drifts and steps back do not.
#include "domain/lease_clock.hpp"

#include <doctest/doctest.h>

using namespace outboxd::domain;
using namespace std::chrono_literals;

namespace {
const lease_clock::database_time d0{std::chrono::hours(24 * 365 * 56)};
const lease_clock::local_time l0{std::chrono::hours(3)};
} // namespace

TEST_CASE("lease clock: clocks that move together allow every reaping, a first reading too") {
  lease_clock clock(3000ms);
  for (int i = 0; i < 10; ++i) {
    auto v = clock.read(d0 + i * 500ms, l0 + i * 500ms);
    CHECK(v.may_reap);
    CHECK_FALSE(v.step);
  }
}

TEST_CASE("lease clock: a drift up to an eighth of a lease is no step") {
  lease_clock clock(8000ms);
  CHECK(clock.read(d0, l0).may_reap);
  // The database ran 1 s ahead of the local clock between two readings: exactly the tolerance.
  auto v = clock.read(d0 + 1500ms, l0 + 500ms);
  CHECK(v.may_reap);
  CHECK_FALSE(v.step);
}

TEST_CASE(
    "lease clock: a step forward holds reaping for one lease of local time, then it resumes") {
  lease_clock clock(3000ms);
  CHECK(clock.read(d0, l0).may_reap);
  // The database's clock jumps 6.7 s while 500 ms pass here.
  auto stepped = clock.read(d0 + 7200ms, l0 + 500ms);
  CHECK_FALSE(stepped.may_reap);
  REQUIRE(stepped.step);
  CHECK(*stepped.step == 6700ms);
  // Later readings with both clocks in step are held until a lease has passed here.
  auto held = clock.read(d0 + 9700ms, l0 + 3000ms);
  CHECK_FALSE(held.may_reap);
  CHECK_FALSE(held.step);
  CHECK_FALSE(clock.read(d0 + 10199ms, l0 + 3499ms).may_reap);
  CHECK(clock.read(d0 + 10200ms, l0 + 3500ms).may_reap);
  CHECK(clock.read(d0 + 20000ms, l0 + 13300ms).may_reap);
}

TEST_CASE("lease clock: a second step during the hold starts a new hold") {
  lease_clock clock(2000ms);
  clock.read(d0, l0);
  CHECK_FALSE(clock.read(d0 + 5000ms, l0 + 100ms).may_reap);
  auto again = clock.read(d0 + 9000ms, l0 + 1500ms); // another 2.6 s ahead
  CHECK_FALSE(again.may_reap);
  CHECK(again.step);
  CHECK_FALSE(clock.read(d0 + 10000ms, l0 + 2500ms).may_reap); // the first hold would end here
  CHECK(clock.read(d0 + 11000ms, l0 + 3500ms).may_reap);
}

TEST_CASE("lease clock: a step back is no step (leases only last longer)") {
  lease_clock clock(3000ms);
  clock.read(d0, l0);
  auto v = clock.read(d0 - 60s, l0 + 500ms);
  CHECK(v.may_reap);
  CHECK_FALSE(v.step);
}
