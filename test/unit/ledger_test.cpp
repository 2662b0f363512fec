// The simulator's ledger keeps its newest entries within its bounds, and forgetting an entry moves
// its start past it, so that the consistency check counts what it may have concerned as unchecked.
#include "simulator/ledger.hpp"

#include <doctest/doctest.h>
#include <string>
#include <thread>
#include <vector>

using namespace outboxd::simulator;

namespace {
side_effect charge(const std::string& aggregate) {
  return {aggregate, "billing.charge", "charge", "TXN", std::nullopt, std::nullopt};
}
} // namespace

TEST_CASE("past its entry bound the ledger forgets the oldest entries and starts after them") {
  side_effect_ledger ledger(3);
  const auto started = ledger.started_at_ms();
  std::vector<ledger_entry> applied;
  for (int i = 0; i < 5; ++i) {
    applied.push_back(ledger.apply(charge("a" + std::to_string(i))));
    std::this_thread::sleep_for(std::chrono::milliseconds(2)); // distinct moments
  }
  CHECK(ledger.size() == 3);
  auto kept = ledger.entries();
  REQUIRE(kept.size() == 3);
  CHECK(kept.front().id == applied[2].id);
  CHECK(kept.back().id == applied[4].id);
  // Orders created up to the second entry's moment are before the ledger's start now.
  CHECK(ledger.started_at_ms() > applied[1].applied_at_ms);
  CHECK(ledger.started_at_ms() <= applied[2].applied_at_ms);
  CHECK(ledger.started_at_ms() > started);
  // A forgotten entry is not found; a kept one reverts by id and as the aggregate's newest.
  CHECK(ledger.revert("billing.charge", applied[0].id).what == revert_result::kind::not_found);
  CHECK(ledger.revert("billing.charge", applied[3].id).what == revert_result::kind::reverted);
  CHECK(ledger.revert("billing.charge", applied[3].id).what ==
        revert_result::kind::already_reverted);
  CHECK(ledger.revert_latest("billing.charge", "a4").what == revert_result::kind::reverted);
  CHECK(ledger.revert_latest("billing.charge", "a1").what == revert_result::kind::not_found);
}

TEST_CASE("past its byte bound the ledger forgets the oldest entries; a reset empties it") {
  side_effect_ledger ledger(1000, 4096);
  for (int i = 0; i < 200; ++i)
    ledger.apply(charge(std::string(200, 'x') + std::to_string(i)));
  CHECK(ledger.size() >= 1);
  CHECK(ledger.size() < 20);
  CHECK(ledger.entries().back().aggregate_id == std::string(200, 'x') + "199");
  ledger.reset();
  CHECK(ledger.size() == 0);
  auto again = ledger.apply(charge("b"));
  CHECK(ledger.revert("billing.charge", again.id).what == revert_result::kind::reverted);
}
