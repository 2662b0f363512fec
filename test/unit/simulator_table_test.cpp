// The simulator's data: every endpoint has its reference bodies, templates render as the
// reference writes them, and a ledger entry survives its JSON round trip.
#include "simulator/body_template.hpp"
#include "simulator/endpoints.hpp"
#include "simulator/knobs.hpp"
#include "simulator/ledger_entry.hpp"

#include <algorithm>
#include <doctest/doctest.h>
#include <set>

using namespace outboxd::simulator;

TEST_CASE("every endpoint names a knob, has a reference body and failure bodies, and every knob "
          "has an endpoint") {
  const auto& bodies = reference_bodies();
  std::set<std::string_view> knobs_seen;
  for (const auto& ep : endpoints()) {
    CAPTURE(ep.path);
    CHECK(is_knob_name(ep.knob));
    knobs_seen.insert(ep.knob);
    CHECK(bodies.has(ep.body));
    CHECK(bodies.has(failure_template(ep.knob, mode::knobs)));
    CHECK(bodies.has(failure_template(ep.knob, mode::fail)));
    CHECK(ep.applies.has_value() != ep.reverts.has_value());
    CHECK(ep.is_revert() == !ep.revert_verb.empty());
  }
  CHECK(knobs_seen.size() == knob_names.size());
  CHECK(endpoints().size() == 14);
}

TEST_CASE("every template renders with the values the pipeline and the endpoints provide") {
  body_values v;
  for (const char* name :
       {"id", "aggregate", "pathId", "orderId", "shippingType", "customerId", "tracking",
        "riskLevel", "velocityCheck", "currency", "reason", "refundId", "retryAfter", "operation"})
    v.set(name, "x");
  for (const char* name : {"now", "expiresAt", "estimatedDelivery", "riskScore", "status"})
    v.set(name, std::int64_t{1});
  v.set("amount", 2.5);
  v.set_raw("items", "[]");
  v.set_raw("address", "{}");
  for (const auto& name : reference_bodies().names()) {
    CAPTURE(name);
    CHECK_NOTHROW(reference_bodies().render(name, v));
  }
}

TEST_CASE("a template keeps numbers as written, fills placeholders and drops unset members") {
  body_templates t(R"({"a": {"cost": 12.50, "id": "{id}", "ref": "CUST-{now}", "gone": "{nope}",
                            "list": ["{id}", "{nope}", true, null], "raw": "{obj}"}})");
  body_values v;
  v.set("id", "RES-1");
  v.set("now", std::int64_t{42});
  v.set_raw("obj", R"({"k":1})");
  CHECK(t.render("a", v) ==
        R"({"cost":12.50,"id":"RES-1","ref":"CUST-42","list":["RES-1",true,null],"raw":{"k":1}})");
  CHECK_THROWS_AS(t.render("b", v), std::logic_error);
  CHECK_THROWS_AS(body_templates("[1]"), std::invalid_argument);
}

TEST_CASE("a ledger entry survives its JSON round trip") {
  ledger_snapshot l;
  l.started_at_ms = 1767268800000;
  ledger_entry a;
  a.id = "RES-42-1767268800123-7";
  a.aggregate_id = "42";
  a.operation = "inventory.reserve";
  a.kind = "reservation";
  a.idempotency_key = "42:inventory";
  a.revert_requests = 2;
  a.reverted = true;
  a.applied_at_ms = 1767268800123;
  a.applied_seq = 1;
  a.reverted_at_ms = 1767268800200;
  a.reverted_seq = 3;
  ledger_entry b;
  b.id = "NOTIF-42-1767268800150-8";
  b.aggregate_id = "42";
  b.operation = "notifications.send";
  b.kind = "notification";
  b.notification_type = "review_request";
  b.applied_at_ms = 1767268800150;
  b.applied_seq = 2;
  l.entries = {a, b};

  auto json = ledger_json(l);
  auto parsed = parse_ledger_json(json);
  REQUIRE(parsed);
  const auto& p = parsed.value();
  CHECK(p.started_at_ms == l.started_at_ms);
  REQUIRE(p.entries.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& x = l.entries[i];
    const auto& y = p.entries[i];
    CHECK(y.id == x.id);
    CHECK(y.aggregate_id == x.aggregate_id);
    CHECK(y.operation == x.operation);
    CHECK(y.kind == x.kind);
    CHECK(y.notification_type == x.notification_type);
    CHECK(y.idempotency_key == x.idempotency_key);
    CHECK(y.revert_requests == x.revert_requests);
    CHECK(y.reverted == x.reverted);
    CHECK(y.applied_at_ms == x.applied_at_ms);
    CHECK(y.applied_seq == x.applied_seq);
    CHECK(y.reverted_at_ms == x.reverted_at_ms);
    CHECK(y.reverted_seq == x.reverted_seq);
  }
  CHECK(ledger_json(p) == json);
  CHECK(json.find(R"("revertedAt":"2026-01-01T12:00:00.200Z")") != std::string::npos);
  CHECK(ledger_json(l, std::string("7")).find(R"("entries":[])") != std::string::npos);
}
