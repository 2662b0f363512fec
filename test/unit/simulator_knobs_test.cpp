// simulator::apply_knob_patch, the one validation of simulator knobs shared by the configuration
// loader and PUT /api/simulator/config: every field, every range, every message.
#include "simulator/knobs.hpp"

#include <doctest/doctest.h>
#include <rapidjson/document.h>

using namespace outboxd;

namespace {

std::vector<std::string> patch(const char* json, simulator::service_knobs& k,
                               const std::string& path = "services.billing.charge") {
  rapidjson::Document doc;
  doc.Parse(json);
  REQUIRE_FALSE(doc.HasParseError());
  return simulator::apply_knob_patch(doc, k, path);
}

bool has(const std::vector<std::string>& errors, const std::string& text) {
  for (const auto& e : errors)
    if (e.find(text) != std::string::npos)
      return true;
  return false;
}

} // namespace

TEST_CASE("a knob patch sets the fields it names and leaves the others alone") {
  simulator::service_knobs k;
  k.failure_status = 429;
  k.retry_after = std::int64_t{10};
  auto errors = patch(R"({"failureRate": 0.25, "latencyMs": [10, 20], "failNext": 3})", k);
  CHECK(errors.empty());
  CHECK(k.failure_rate == doctest::Approx(0.25));
  CHECK(k.latency_min_ms == 10);
  CHECK(k.latency_max_ms == 20);
  CHECK(k.fail_next == 3);
  CHECK(k.failure_status == 429);
  CHECK(std::get<std::int64_t>(k.retry_after) == 10);

  CHECK(patch(R"({"failureStatus": 500, "retryAfter": "Wed, 21 Oct 2015 07:28:00 GMT",
                  "latencyMs": 75, "lateRate": 1, "lateMs": 2500})",
              k)
            .empty());
  CHECK(k.failure_status == 500);
  CHECK(std::get<std::string>(k.retry_after) == "Wed, 21 Oct 2015 07:28:00 GMT");
  CHECK(k.latency_min_ms == 75);
  CHECK(k.latency_max_ms == 75);
  CHECK(k.late_rate == 1.0);
  CHECK(k.late_ms == 2500);

  CHECK(patch(R"({"retryAfter": null})", k).empty());
  CHECK(std::holds_alternative<std::monostate>(k.retry_after));
  CHECK(patch("{}", k).empty());
}

TEST_CASE("every knob field is range checked with a message naming the field and value") {
  struct bad_case {
    const char* json;
    const char* message;
  };
  const bad_case cases[] = {
      {R"({"failureRate": 1.5})",
       "services.billing.charge.failureRate must be between 0 and 1, got 1.5"},
      {R"({"failureRate": "0.5"})",
       "services.billing.charge.failureRate must be a number, got \"0.5\""},
      {R"({"failureStatus": 200})",
       "services.billing.charge.failureStatus must be between 400 and 599, got 200"},
      {R"({"failureStatus": 503.5})",
       "services.billing.charge.failureStatus must be an integer, got 503.5"},
      {R"({"retryAfter": -1})",
       "services.billing.charge.retryAfter must be null, a non-negative "
       "number of seconds or an HTTP-date string such as \"Wed, 21 Oct 2015 "
       "07:28:00 GMT\", got -1"},
      {R"({"retryAfter": ""})", "services.billing.charge.retryAfter must be null"},
      {R"({"retryAfter": "x"})", "services.billing.charge.retryAfter must be null"},
      {R"({"retryAfter": "5\r\nSet-Cookie: a=1"})", "services.billing.charge.retryAfter must be"},
      {R"({"retryAfter": "Wed, 21 Oct 2015 07:28:00 UTC"})",
       "services.billing.charge.retryAfter must be"},
      {R"({"retryAfter": "Wed, 32 Oct 2015 07:28:00 GMT"})",
       "services.billing.charge.retryAfter must be"},
      {R"({"retryAfter": true})", "services.billing.charge.retryAfter must be null"},
      {R"({"latencyMs": [5, 1]})",
       "services.billing.charge.latencyMs must be a number of milliseconds or [min, max] with 0 "
       "<= min <= max <= 60000, got [5,1]"},
      {R"({"latencyMs": 60001})", "services.billing.charge.latencyMs must be"},
      {R"({"latencyMs": [1, 2, 3]})", "services.billing.charge.latencyMs must be"},
      {R"({"lateRate": -0.1})", "services.billing.charge.lateRate must be between 0 and 1"},
      {R"({"lateMs": 600001})",
       "services.billing.charge.lateMs must be between 0 and 600000, got 600001"},
      {R"({"failNext": -1})",
       "services.billing.charge.failNext must be between 0 and 2147483647, got -1"},
      {R"({"failNext": 3000000000})",
       "services.billing.charge.failNext must be between 0 and 2147483647, got 3000000000"},
      {R"({"failureCode": 500})", "unknown key services.billing.charge.failureCode"},
      {R"({"lateMS": 5})", "unknown key services.billing.charge.lateMS (did you mean lateMs?)"},
  };
  for (const auto& c : cases) {
    std::string json = c.json;
    CAPTURE(json);
    simulator::service_knobs k;
    auto errors = patch(c.json, k);
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].find(c.message) == 0);
  }
}

TEST_CASE("a knob patch that is not an object is refused as a whole") {
  rapidjson::Document doc;
  doc.Parse("0.5");
  simulator::service_knobs k;
  auto errors = simulator::apply_knob_patch(doc, k, "simulator.services.billing.charge");
  REQUIRE(errors.size() == 1);
  CHECK(errors[0] == "simulator.services.billing.charge must be an object, got 0.5");
}

TEST_CASE("a knob patch reports every problem and applies only the valid fields") {
  simulator::service_knobs k;
  auto errors = patch(R"({"failureRate": 2, "failNext": 4, "nope": 1})", k);
  CHECK(errors.size() == 2);
  CHECK(has(errors, "failureRate must be between 0 and 1"));
  CHECK(has(errors, "unknown key services.billing.charge.nope"));
  // Documented: callers wanting all-or-nothing patch a copy.
  CHECK(k.fail_next == 4);
  CHECK(k.failure_rate == 0.0);
}

TEST_CASE("the knob names are the twelve simulated operations") {
  CHECK(simulator::knob_names.size() == 12);
  CHECK(simulator::is_knob_name("billing.charge"));
  CHECK(simulator::is_knob_name("notifications.send"));
  CHECK_FALSE(simulator::is_knob_name("billing"));
  CHECK_FALSE(simulator::is_knob_name("billing.chrage"));
  CHECK(simulator::known_knob_names().rfind("inventory.reserve, inventory.release, ", 0) == 0);
}
