// simulator::check_consistency against hand-built orders and ledgers: every violation kind of
// the orders-vs-outside-world check, and what is not a violation.
#include "simulator/consistency.hpp"

#include <doctest/doctest.h>

using namespace outboxd::domain;
using namespace outboxd::simulator;

namespace {

constexpr std::int64_t started = 1'000'000;

/// Builds ledger entries with an increasing seq, like the simulator does.
class ledger_builder {
public:
  ledger_entry& add(std::int64_t order, const char* operation, const char* kind, const char* id) {
    ledger_entry r;
    r.aggregate_id = std::to_string(order);
    r.operation = operation;
    r.kind = kind;
    r.id = id;
    r.applied_seq = ++seq_;
    snapshot_.entries.push_back(r);
    return snapshot_.entries.back();
  }
  ledger_entry& reserve(std::int64_t order, const char* id = "RES-1") {
    return add(order, "inventory.reserve", "reservation", id);
  }
  ledger_entry& fraud(std::int64_t order, const char* id = "FRAUD-1") {
    return add(order, "fraudCheck.check", "fraudCheck", id);
  }
  ledger_entry& ship(std::int64_t order, const char* id = "SHIP-DOM-1") {
    return add(order, "shipping.domestic.create", "shipment", id);
  }
  ledger_entry& charge(std::int64_t order, const char* id = "TXN-1") {
    return add(order, "billing.charge", "charge", id);
  }
  ledger_entry& high_value(std::int64_t order, const char* id = "HV-1") {
    return add(order, "highValue.process", "highValueProcessing", id);
  }
  ledger_entry& notify(std::int64_t order, const char* type, const char* id) {
    auto& r = add(order, "notifications.send", "notification", id);
    r.notification_type = type;
    return r;
  }
  /// A full successful fan-out of `order`.
  void succeeded(std::int64_t order) {
    reserve(order);
    fraud(order);
    ship(order);
    charge(order);
  }
  /// Reverts the entry with `id` now (one revert request).
  void revert(const char* id, int requests = 1) {
    for (auto& e : snapshot_.entries)
      if (e.id == id) {
        e.reverted = true;
        e.revert_requests = requests;
        e.reverted_seq = ++seq_;
      }
  }
  ledger_snapshot snapshot() const {
    auto s = snapshot_;
    s.started_at_ms = started;
    return s;
  }

private:
  ledger_snapshot snapshot_;
  std::int64_t seq_ = 0;
};

audited_order audited(std::int64_t id, order_status status, std::int64_t created = started + 10) {
  return {id, status, created};
}

consistency_report check(const std::vector<audited_order>& orders, const ledger_builder& l) {
  return check_consistency(orders, l.snapshot());
}

/// The single problem reported, or a failure.
std::string only_problem(const consistency_report& r) {
  REQUIRE(r.violations.size() == 1);
  return r.violations[0].problem;
}

} // namespace

TEST_CASE("orders in flight, in ATTENTION, or created before the ledger started are unchecked") {
  ledger_builder l;
  auto r =
      check({audited(1, order_status::pending), audited(2, order_status::cancelling),
             audited(3, order_status::attention), audited(4, order_status::confirmed, started - 1),
             audited(5, order_status::failed, started - 500)},
            l);
  CHECK(r.checked == 0);
  CHECK(r.unchecked == 5);
  CHECK(r.violations.empty());
}

TEST_CASE("a confirmed, shipped or delivered order with each step applied once is consistent") {
  ledger_builder l;
  l.succeeded(2);
  l.reserve(3, "RES-3");
  l.fraud(3, "FRAUD-3");
  l.add(3, "shipping.international.create", "shipment", "SHIP-INTL-3");
  l.high_value(3, "HV-3");
  l.notify(3, "shipping_confirmation", "NOTIF-1");
  l.succeeded(4);
  l.notify(4, "shipping_confirmation", "NOTIF-2");
  l.notify(4, "review_request", "NOTIF-3");
  auto r = check({audited(2, order_status::confirmed), audited(3, order_status::shipped),
                  audited(4, order_status::delivered)},
                 l);
  CHECK(r.checked == 3);
  CHECK(r.unchecked == 0);
  CHECK(r.violations.empty());
}

TEST_CASE("a confirmed order that misses a step is a violation naming the step") {
  struct missing_case {
    const char* step;
    const char* message;
  };
  for (auto c : {missing_case{"reservation", "no reservation was applied (inventory.reserve) but "
                                             "the order is CONFIRMED"},
                 missing_case{"fraud", "no fraud check was applied (fraudCheck.check)"},
                 missing_case{"shipment", "no shipment was applied (shipping.domestic.create or "
                                          "shipping.international.create)"},
                 missing_case{"payment", "no payment was applied (billing.charge or "
                                         "highValue.process) but the order is CONFIRMED"}}) {
    std::string step = c.step;
    CAPTURE(step);
    ledger_builder l;
    if (step != "reservation")
      l.reserve(8);
    if (step != "fraud")
      l.fraud(8);
    if (step != "shipment")
      l.ship(8);
    if (step != "payment")
      l.charge(8);
    auto r = check({audited(8, order_status::confirmed)}, l);
    CHECK(r.checked == 1);
    CHECK(only_problem(r).find(c.message) == 0);
    CHECK(r.violations[0].order_id == 8);
  }
}

TEST_CASE("a confirmed order with nothing applied at all reports every missing step") {
  ledger_builder l;
  auto r = check({audited(9, order_status::confirmed)}, l);
  CHECK(r.violations.size() == 4);
}

TEST_CASE("a succeeded order charged by both billing routes is a violation") {
  ledger_builder l;
  l.succeeded(2);
  l.high_value(2, "HV-2");
  CHECK(only_problem(check({audited(2, order_status::confirmed)}, l)) ==
        "2 payments were applied (billing.charge TXN-1, highValue.process HV-2) but the order is "
        "CONFIRMED and needs exactly one");
}

TEST_CASE("a succeeded order with a step applied twice is a violation listing both ids") {
  ledger_builder l;
  l.succeeded(2);
  l.reserve(2, "RES-2");
  CHECK(only_problem(check({audited(2, order_status::shipped)}, l)) ==
        "2 reservations were applied (inventory.reserve RES-1, inventory.reserve RES-2) but the "
        "order is SHIPPED and needs exactly one");

  ledger_builder both;
  both.succeeded(4);
  both.add(4, "shipping.international.create", "shipment", "SHIP-INTL-4");
  CHECK(only_problem(check({audited(4, order_status::confirmed)}, both))
            .find("2 shipments were applied (shipping.domestic.create SHIP-DOM-1, "
                  "shipping.international.create SHIP-INTL-4)") == 0);
}

TEST_CASE("a succeeded order with a reverted step is a violation") {
  ledger_builder l;
  l.succeeded(2);
  l.revert("SHIP-DOM-1");
  CHECK(only_problem(check({audited(2, order_status::delivered)}, l)) ==
        "shipping.domestic.create SHIP-DOM-1 was reverted but the order is DELIVERED");
}

TEST_CASE("the same notification sent twice is a duplicate; different notifications are not") {
  ledger_builder l;
  l.succeeded(2);
  l.notify(2, "shipping_confirmation", "NOTIF-1");
  l.notify(2, "review_request", "NOTIF-2");
  l.notify(2, "shipping_confirmation", "NOTIF-3");
  CHECK(only_problem(check({audited(2, order_status::delivered)}, l)) ==
        "notifications.send (shipping_confirmation) was applied 2 times under different "
        "idempotency keys (notifications.send NOTIF-1, notifications.send NOTIF-3) but must be "
        "applied once; the order is DELIVERED");
}

TEST_CASE("a failed or cancelled order whose steps were reverted newest first is consistent") {
  ledger_builder l;
  l.succeeded(2); // RES-1, FRAUD-1, SHIP-DOM-1, TXN-1 for order 2
  l.revert("TXN-1");
  l.revert("SHIP-DOM-1");
  l.revert("RES-1");
  l.reserve(3, "RES-3");
  l.fraud(3, "FRAUD-3");
  l.revert("RES-3");
  auto r = check({audited(2, order_status::cancelled), audited(3, order_status::failed),
                  audited(5, order_status::failed)},
                 l);
  CHECK(r.checked == 3);
  // The fraud checks stay active: they are read only and have nothing to revert.
  CHECK(r.violations.empty());
}

TEST_CASE("a failed order with a step still active is a violation") {
  ledger_builder l;
  l.reserve(42, "RES-42-1");
  l.fraud(42);
  l.ship(42, "SHIP-DOM-42-3");
  l.revert("SHIP-DOM-42-3");
  CHECK(only_problem(check({audited(42, order_status::failed)}, l)) ==
        "inventory.reserve RES-42-1 is still active but the order is FAILED");
}

TEST_CASE("a step reverted by two revert requests is a violation") {
  ledger_builder l;
  l.reserve(7, "RES-7");
  l.charge(7, "TXN-7");
  l.revert("TXN-7", 2);
  l.revert("RES-7");
  CHECK(only_problem(check({audited(7, order_status::cancelled)}, l)) ==
        "billing.charge TXN-7 received 2 revert requests but must be reverted exactly once; the "
        "order is CANCELLED");
}

TEST_CASE("reverts out of reverse order of application are a violation") {
  ledger_builder l;
  l.reserve(6, "RES-6");
  l.fraud(6);
  l.ship(6, "SHIP-DOM-6");
  l.revert("RES-6"); // first applied, but reverted first: compensation ran FIFO
  l.revert("SHIP-DOM-6");
  CHECK(only_problem(check({audited(6, order_status::failed)}, l)) ==
        "inventory.reserve RES-6 was reverted before shipping.domestic.create SHIP-DOM-6 "
        "although it was applied first; compensation must run in reverse order of application "
        "(the order is FAILED)");
}

TEST_CASE("duplicates are violations for a failed order too, read-only steps included") {
  ledger_builder l;
  l.fraud(6, "FRAUD-a");
  l.fraud(6, "FRAUD-b");
  auto problem = only_problem(check({audited(6, order_status::failed)}, l));
  CHECK(problem == "fraudCheck.check was applied 2 times under different idempotency keys "
                   "(fraudCheck.check FRAUD-a, fraudCheck.check FRAUD-b) but must be applied "
                   "once; the order is FAILED");
}

TEST_CASE("entries of other aggregates are ignored and violations come in order id order") {
  ledger_builder l;
  l.reserve(30, "RES-30");
  l.reserve(10, "RES-10");
  l.add(99, "inventory.reserve", "reservation", "RES-99"); // order 99 is not in the database
  auto r = check({audited(30, order_status::failed), audited(10, order_status::cancelled),
                  audited(20, order_status::failed)},
                 l);
  CHECK(r.checked == 3);
  REQUIRE(r.violations.size() == 2);
  CHECK(r.violations[0].order_id == 10);
  CHECK(r.violations[1].order_id == 30);
}

TEST_CASE("revertible kinds are reservation, shipment, charge and high-value processing") {
  CHECK(is_revertible_kind("reservation"));
  CHECK(is_revertible_kind("shipment"));
  CHECK(is_revertible_kind("charge"));
  CHECK(is_revertible_kind("highValueProcessing"));
  CHECK_FALSE(is_revertible_kind("fraudCheck"));
  CHECK_FALSE(is_revertible_kind("notification"));
}
