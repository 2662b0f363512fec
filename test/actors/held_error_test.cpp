// What a held run's last_error keeps: the gate's reason, and its destination's answer before the
// hold, so that a run that gives up while held still says what the partner answered.
#include "actors/event_runner.hpp"

#include <doctest/doctest.h>
#include <string>

using outboxd::actors::held_error;
using outboxd::actors::last_answer;

TEST_CASE("a hold keeps the destination's last answer across holds, and only that destination's") {
  const std::string reason = "billing: circuit open";
  const std::string answer = "billing: HTTP 503: {\"error\":\"payment_gateway_unavailable\"}";
  // The first hold after a failure keeps it; later holds keep what the first kept.
  auto first = held_error(reason, answer);
  CHECK(first == "held back: billing: circuit open; last answer: " + answer);
  CHECK(last_answer(reason, first) == answer);
  CHECK(held_error(reason, first) == first);
  // Nothing to keep: no failure before, another destination's, or a hold that kept none.
  CHECK(held_error(reason) == "held back: billing: circuit open");
  CHECK(held_error(reason, "inventory: HTTP 503: down") == "held back: billing: circuit open");
  CHECK(held_error(reason, "held back: billing: circuit open") ==
        "held back: billing: circuit open");
  CHECK_FALSE(last_answer(reason, std::nullopt));
  // A destination's name that another's begins with is not that one.
  CHECK_FALSE(last_answer("bill: circuit open", answer));
}
