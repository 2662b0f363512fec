// The simulator: its internals without sockets (fault decisions, Idempotency-Key store, ledger),
// then every endpoint, knob, replay and ledger state over real HTTP on loopback. No database.
#include "conf/loader.hpp"
#include "simulator/faults.hpp"
#include "simulator/idempotency.hpp"
#include "simulator/ledger.hpp"
#include "simulator/server.hpp"
#include "simulator/simulator.hpp"
#include "test/support/http_client.hpp"
#include "test/support/legacy_auth.hpp"
#include "test/support/process.hpp"

#include <atomic>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <httplib.h>
#include <rapidjson/pointer.h>
#include <regex>
#include <set>
#include <thread>

using namespace outboxd;
using namespace outboxd::test;
using namespace std::chrono_literals;

namespace {

/// The shipped simulator settings (statuses and Retry-After of the reference) with every failure
/// rate at 0, so that a test decides which calls fail.
conf::simulator_settings quiet_settings() {
  auto loaded = conf::load({});
  REQUIRE(loaded.value);
  auto s = loaded.value->simulator;
  for (auto& [name, k] : s.services)
    k.failure_rate = 0.0;
  return s;
}

bool matches(const std::string& text, const char* pattern) {
  return std::regex_match(text, std::regex(pattern));
}

const rapidjson::Value* at(const rapidjson::Value& doc, const char* pointer) {
  return rapidjson::Pointer(pointer).Get(doc);
}

double number(const http_response& r, const char* pointer) {
  const auto* v = at(r.json, pointer);
  return v && v->IsNumber() ? v->GetDouble() : -1;
}

bool flag(const http_response& r, const char* pointer) {
  const auto* v = at(r.json, pointer);
  return v && v->IsBool() && v->GetBool();
}

bool is_null(const http_response& r, const char* pointer) {
  const auto* v = at(r.json, pointer);
  return v && v->IsNull();
}

std::size_t size_of(const http_response& r, const char* pointer) {
  const auto* v = at(r.json, pointer);
  return v && v->IsArray() ? v->Size() : 0;
}

using headers = std::map<std::string, std::string>;

headers aggregate(const std::string& id, std::optional<std::string> key = std::nullopt) {
  headers h{{"X-Aggregate-Id", id}};
  if (key)
    h.emplace("Idempotency-Key", *key);
  return h;
}

headers revert_aggregate(const std::string& id, std::optional<std::string> key = std::nullopt) {
  headers h{{"X-Revert-Aggregate-Id", id}};
  if (key)
    h.emplace("Idempotency-Key", *key);
  return h;
}

struct sim_fixture {
  explicit sim_fixture(std::string admin_token = {},
                       conf::simulator_settings settings = quiet_settings(), int threads = 24)
      : sim(settings) {
    conf::server_settings s;
    s.port = 0;
    s.threads = threads;
    server = std::make_unique<simulator::server>(s, sim, admin_token_only(admin_token));
    port = server->bind(0);
    server->start();
    client = std::make_unique<http_client>(port);
  }
  ~sim_fixture() {
    client.reset();
    server->stop();
  }

  void configure(const std::string& json, const headers& h = {}) {
    auto r = client->put("/api/simulator/config", json, h);
    REQUIRE_MESSAGE(r.status == 200, r.body);
  }

  http_response ledger(const std::string& query = "") {
    auto r = client->get("/api/simulator/ledger" + query);
    REQUIRE(r.status == 200);
    return r;
  }

  std::size_t ledger_size(const std::string& query = "") {
    return size_of(ledger(query), "/entries");
  }

  simulator::simulator sim;
  std::unique_ptr<simulator::server> server;
  int port = 0;
  std::unique_ptr<http_client> client;
};

struct admin_fixture : sim_fixture {
  admin_fixture() : sim_fixture("s3cret") {}
};

} // namespace

// --- internals ---------------------------------------------------------------------------------

TEST_SUITE("simulator internals") {

  TEST_CASE("fault decisions follow the failure rate and are reproducible from the seed") {
    auto settings = quiet_settings();
    settings.seed = 1234;
    settings.services["billing.charge"].failure_rate = 0.25;
    settings.services["billing.charge"].late_rate = 0.5;
    settings.services["billing.charge"].late_ms = 700;
    simulator::fault_injector a(settings), b(settings);
    constexpr int calls = 10000;
    int failures = 0, late = 0;
    for (int i = 0; i < calls; ++i) {
      auto d = a.decide("billing.charge");
      auto e = b.decide("billing.charge");
      REQUIRE(d.fail == e.fail);
      REQUIRE(d.late == e.late);
      failures += d.fail;
      if (d.late.count() > 0) {
        ++late;
        CHECK(d.late == 700ms);
        CHECK_FALSE(d.fail);
      }
    }
    double rate = static_cast<double>(failures) / calls;
    double late_rate = static_cast<double>(late) / (calls - failures);
    MESSAGE("failure rate 0.25 measured " << rate << ", late rate 0.5 measured " << late_rate);
    CHECK(rate == doctest::Approx(0.25).epsilon(0.08)); // +-0.02
    CHECK(late_rate == doctest::Approx(0.5).epsilon(0.05));
  }

  TEST_CASE("latency is drawn within [min, max] and reaches both ends") {
    auto settings = quiet_settings();
    settings.services["inventory.reserve"].latency_min_ms = 10;
    settings.services["inventory.reserve"].latency_max_ms = 20;
    simulator::fault_injector f(settings);
    std::set<long> seen;
    for (int i = 0; i < 2000; ++i) {
      auto d = f.decide("inventory.reserve");
      CHECK(d.latency >= 10ms);
      CHECK(d.latency <= 20ms);
      seen.insert(static_cast<long>(d.latency.count()));
    }
    CHECK(seen.size() == 11);
    CHECK(f.decide("billing.charge").latency == 0ms);
  }

  TEST_CASE("failNext fails the next calls and counts down, whatever the rate") {
    simulator::fault_injector f(quiet_settings());
    rapidjson::Document patch;
    patch.Parse(R"({"services": {"billing.refund": {"failNext": 2, "failureStatus": 500}}})");
    REQUIRE(f.apply_patch(patch).empty());
    auto first = f.decide("billing.refund");
    CHECK(first.fail);
    CHECK(first.status == 500);
    CHECK(std::get<std::int64_t>(first.retry_after) == 5);
    CHECK(f.knobs("billing.refund").fail_next == 1);
    CHECK(f.decide("billing.refund").fail);
    CHECK_FALSE(f.decide("billing.refund").fail);
    CHECK(f.knobs("billing.refund").fail_next == 0);
  }

  TEST_CASE("a knob patch is all or nothing and reset restores the initial knobs and seed") {
    simulator::fault_injector f(quiet_settings());
    auto initial = f.config_json();
    rapidjson::Document bad;
    bad.Parse(R"({"seed": 9, "services": {"billing.charge": {"failureRate": 1},
                "inventory.reserve": {"lateMs": -5}}})");
    auto errors = f.apply_patch(bad);
    REQUIRE(errors.size() == 1);
    CHECK(errors[0] == "services.inventory.reserve.lateMs must be between 0 and 600000, got -5");
    CHECK(f.config_json() == initial);
    CHECK(f.seed() == 42);

    rapidjson::Document good;
    good.Parse(R"({"seed": 9, "services": {"billing.charge": {"failureRate": 1}}})");
    CHECK(f.apply_patch(good).empty());
    CHECK(f.seed() == 9);
    CHECK(f.knobs("billing.charge").failure_rate == 1.0);
    f.reset();
    CHECK(f.config_json() == initial);
  }

  TEST_CASE("the Idempotency-Key store replays, refuses other requests and forgets failures") {
    simulator::idempotency_store store;
    auto first = store.begin("billing.charge", "k", 1);
    REQUIRE(first.what == simulator::idempotency_claim::kind::owner);
    store.complete("billing.charge", "k", first.token, {200, R"({"id":1})", {{"X-A", "b"}}});
    auto again = store.begin("billing.charge", "k", 1);
    CHECK(again.what == simulator::idempotency_claim::kind::replay);
    CHECK(again.response.body == R"({"id":1})");
    CHECK(again.response.headers.size() == 1);
    CHECK(store.begin("billing.charge", "k", 2).what ==
          simulator::idempotency_claim::kind::conflict);
    CHECK(store.begin("billing.refund", "k", 2).what == simulator::idempotency_claim::kind::owner);

    auto failing = store.begin("inventory.reserve", "f", 3);
    store.abandon("inventory.reserve", "f", failing.token);
    CHECK(store.begin("inventory.reserve", "f", 3).what ==
          simulator::idempotency_claim::kind::owner);
  }

  TEST_CASE("a request waits for an in-flight one with the same key, then replays or takes over") {
    simulator::idempotency_store store;
    auto owner = store.begin("s", "k", 7);
    // One that does not wait hears the key is in flight (and a different request, a conflict).
    CHECK(store.begin("s", "k", 7, false).what == simulator::idempotency_claim::kind::in_flight);
    CHECK(store.begin("s", "k", 8, false).what == simulator::idempotency_claim::kind::conflict);
    std::atomic<int> replays{0}, owners{0};
    std::vector<std::thread> waiters;
    for (int i = 0; i < 4; ++i)
      waiters.emplace_back([&] {
        auto c = store.begin("s", "k", 7);
        if (c.what == simulator::idempotency_claim::kind::replay)
          ++replays;
        else if (c.what == simulator::idempotency_claim::kind::owner) {
          ++owners;
          store.complete("s", "k", c.token, {200, "second", {}});
        }
      });
    // The first owner fails: exactly one waiter takes over, the others replay its answer.
    std::this_thread::sleep_for(50ms);
    store.abandon("s", "k", owner.token);
    for (auto& t : waiters)
      t.join();
    CHECK(owners == 1);
    CHECK(replays == 3);
  }

  TEST_CASE("the Idempotency-Key store evicts the oldest keys beyond its bounds") {
    simulator::idempotency_store by_count(3, std::size_t{1} << 20);
    for (int i = 0; i < 5; ++i) {
      auto c = by_count.begin("s", std::to_string(i), 1);
      by_count.complete("s", std::to_string(i), c.token, {200, "x", {}});
    }
    CHECK(by_count.size() == 3);
    CHECK(by_count.begin("s", "0", 1).what == simulator::idempotency_claim::kind::owner);
    CHECK(by_count.begin("s", "4", 1).what == simulator::idempotency_claim::kind::replay);

    simulator::idempotency_store by_bytes(1000, 2000);
    for (int i = 0; i < 5; ++i) {
      auto c = by_bytes.begin("s", std::to_string(i), 1);
      by_bytes.complete("s", std::to_string(i), c.token, {200, std::string(500, 'x'), {}});
    }
    CHECK(by_bytes.bytes() <= 2000);
    CHECK(by_bytes.size() == 3);
    CHECK(by_bytes.begin("s", "1", 1).what == simulator::idempotency_claim::kind::owner);

    auto stale = by_bytes.begin("s", "new", 1);
    by_bytes.clear();
    by_bytes.complete("s", "new", stale.token, {200, "late", {}});
    CHECK(by_bytes.size() == 0);
  }

  TEST_CASE("ledger ids are unique even within one millisecond, and across resets") {
    simulator::side_effect_ledger ledger;
    std::set<std::string> ids;
    for (int i = 0; i < 1000; ++i)
      ids.insert(ledger.apply({"1", "inventory.reserve", "reservation", "RES", {}, {}}).id);
    auto before = ledger.started_at_ms();
    ledger.reset();
    CHECK(ledger.started_at_ms() >= before);
    CHECK(ledger.size() == 0);
    for (int i = 0; i < 10; ++i)
      ids.insert(ledger.apply({"1", "inventory.reserve", "reservation", "RES", {}, {}}).id);
    CHECK(ids.size() == 1010);
    CHECK(matches(*ids.begin(), R"(RES-1-\d{13}-\d+)"));
  }

  TEST_CASE("ledger reverts by id, by operation, and the newest active entry of an aggregate") {
    simulator::side_effect_ledger ledger;
    auto a = ledger.apply({"5", "billing.charge", "charge", "TXN", {}, {}});
    auto b = ledger.apply({"5", "billing.charge", "charge", "TXN", {}, {}});
    CHECK(ledger.revert("inventory.reserve", a.id).what ==
          simulator::revert_result::kind::not_found);
    CHECK(ledger.revert("billing.charge", "TXN-nope").what ==
          simulator::revert_result::kind::not_found);
    auto latest = ledger.revert_latest("billing.charge", "5");
    CHECK(latest.what == simulator::revert_result::kind::reverted);
    CHECK(latest.entry.id == b.id);
    CHECK(ledger.revert_latest("billing.charge", "5").entry.id == a.id);
    CHECK(ledger.revert_latest("billing.charge", "5").what ==
          simulator::revert_result::kind::not_found);
    auto again = ledger.revert("billing.charge", a.id);
    CHECK(again.what == simulator::revert_result::kind::already_reverted);
    CHECK(again.entry.revert_requests == 2);
    CHECK(again.entry.reverted_seq == 4); // unchanged: the first revert's
  }

  TEST_CASE("ISO times are UTC with milliseconds") {
    CHECK(simulator::iso_time(1767323045678) == "2026-01-02T03:04:05.678Z");
    CHECK(simulator::iso_time(0) == "1970-01-01T00:00:00.000Z");
  }

} // TEST_SUITE

// --- endpoints ---------------------------------------------------------------------------------

TEST_CASE_FIXTURE(sim_fixture, "inventory reserve answers the reference's reservation") {
  auto r = client->post("/api/inventory/reserve",
                        R"({"orderId": 42, "totalAmount": 10.5, "shippingType": "international",
                            "items": [{"sku": "A-1", "quantity": 2}, {}]})",
                        aggregate("42"));
  CHECK(r.status == 200);
  CHECK(r.header("Content-Type") == "application/json");
  CHECK(matches(r.str("/reservationId"), R"(RES-42-\d{13}-\d+)"));
  CHECK(r.num("/orderId") == 42);
  CHECK(r.str("/warehouseId") == "WH-NYC-01");
  CHECK(r.str("/warehouse/name") == "NYC Distribution Center");
  CHECK(r.str("/warehouse/location/city") == "New York");
  CHECK(r.str("/warehouse/location/country") == "US");
  REQUIRE(size_of(r, "/items") == 2);
  CHECK(r.str("/items/0/sku") == "A-1");
  CHECK(r.num("/items/0/quantity") == 2);
  CHECK(flag(r, "/items/0/reserved"));
  CHECK(matches(r.str("/items/0/binLocation"), R"(A\d{1,2}-\d{1,2})"));
  CHECK(r.str("/items/1/sku") == "UNKNOWN");
  CHECK(r.num("/items/1/quantity") == 1);
  CHECK(r.str("/shippingType") == "international");
  CHECK(r.str("/status") == "reserved");
  CHECK(r.num("/expiresAt") - r.num("/reservedAt") == 900000);

  auto defaults = client->post("/api/inventory/reserve", "{}");
  CHECK(defaults.status == 200);
  CHECK(matches(defaults.str("/reservationId"), R"(RES-unknown-\d{13}-\d+)"));
  CHECK(defaults.num("/orderId") == 0);
  CHECK(size_of(defaults, "/items") == 0);
  CHECK(defaults.str("/shippingType") == "domestic");
}

TEST_CASE_FIXTURE(sim_fixture, "fraud check scores 25 for an even aggregate id and 75 otherwise") {
  auto even = client->post("/api/fraud/check", R"({"orderId": 42})", aggregate("42"));
  CHECK(even.status == 200);
  CHECK(even.str("/status") == "success");
  CHECK(matches(even.str("/checkId"), R"(FRAUD-42-\d{13}-\d+)"));
  CHECK(even.num("/riskScore") == 25);
  CHECK(even.str("/riskLevel") == "low");
  CHECK(even.str("/checks/addressVerification") == "passed");
  CHECK(even.str("/checks/cvvCheck") == "passed");
  CHECK(even.str("/checks/velocityCheck") == "passed");
  CHECK(even.num("/timestamp") > 0);

  auto odd = client->post("/api/fraud/check", "{}", aggregate("43"));
  CHECK(odd.num("/riskScore") == 75);
  CHECK(odd.str("/riskLevel") == "high");
  CHECK(odd.str("/checks/velocityCheck") == "flagged");
  CHECK(client->post("/api/fraud/check", "{}", aggregate("-8")).num("/riskScore") == 25);
  CHECK(client->post("/api/fraud/check", "{}", aggregate("abc")).num("/riskScore") == 75);
  CHECK(client->post("/api/fraud/check", "{}", aggregate("4x")).num("/riskScore") == 75);
  CHECK(client->post("/api/fraud/check", "{}").num("/riskScore") == 75);
  auto sure = client->post("/api/fraud/check/succeed", "{}", aggregate("43"));
  CHECK(sure.num("/riskScore") == 25);
  CHECK(sure.str("/checks/velocityCheck") == "passed");
}

TEST_CASE_FIXTURE(sim_fixture,
                  "domestic and international shipping answer the reference's shipment") {
  auto dom = client->post("/api/domestic-shipping",
                          R"({"orderId": 7, "customerId": "C-7", "address": {"city": "Osaka"},
                              "shippingType": "domestic", "totalAmount": 5})",
                          aggregate("7"));
  CHECK(dom.status == 200);
  CHECK(matches(dom.str("/shipmentId"), R"(SHIP-DOM-7-\d{13}-\d+)"));
  CHECK(dom.num("/orderId") == 7);
  CHECK(dom.str("/customerId") == "C-7");
  CHECK(dom.str("/carrier/code") == "YAMATO");
  CHECK(dom.str("/carrier/name") == "Yamato Transport");
  CHECK(dom.str("/carrier/service") == "Express");
  CHECK(matches(dom.str("/trackingNumber"), R"(9400\d{1,8})"));
  CHECK(dom.str("/shippingAddress/city") == "Osaka");
  CHECK(number(dom, "/cost/amount") == 12.5);
  CHECK(dom.str("/cost/currency") == "USD");
  CHECK(dom.str("/status") == "confirmed");
  CHECK(dom.num("/estimatedDelivery") - dom.num("/createdAt") == 2 * 86400000LL);

  auto intl = client->post("/api/international-shipping", R"({"orderId": "8"})", aggregate("8"));
  CHECK(intl.status == 200);
  CHECK(matches(intl.str("/shipmentId"), R"(SHIP-INTL-8-\d{13}-\d+)"));
  CHECK(intl.num("/orderId") == 8);
  CHECK(intl.str("/customerId") == "unknown");
  CHECK(intl.str("/carrier/code") == "DHL");
  CHECK(intl.str("/carrier/service") == "International Priority");
  CHECK(matches(intl.str("/trackingNumber"), R"(1Z999AA1\d{1,9})"));
  CHECK(at(intl.json, "/shippingAddress")->IsObject());
  CHECK(number(intl, "/cost/amount") == 45.0);
  CHECK(flag(intl, "/customs/declaration"));
  CHECK(matches(intl.str("/customs/reference"), R"(CUST-\d{13})"));
  CHECK(intl.str("/customs/incoterms") == "DDP");
  CHECK(flag(intl, "/insurance/required"));
  CHECK(number(intl, "/insurance/value") == 500.0);
  CHECK(intl.num("/estimatedDelivery") - intl.num("/createdAt") == 7 * 86400000LL);
}

TEST_CASE_FIXTURE(sim_fixture, "billing and high-value processing answer the reference's bodies") {
  auto charge =
      client->post("/api/billing", R"({"amount": 99.99, "currency": "EUR"})", aggregate("42"));
  CHECK(charge.status == 200);
  CHECK(charge.str("/status") == "success");
  CHECK(charge.str("/message") == "Payment processed successfully");
  CHECK(matches(charge.str("/transaction/id"), R"(TXN-42-\d{13}-\d+)"));
  CHECK(number(charge, "/transaction/amount") == 99.99);
  CHECK(charge.str("/transaction/currency") == "EUR");
  CHECK(charge.str("/transaction/status") == "completed");
  CHECK(charge.str("/aggregateId") == "42");
  CHECK(number(client->post("/api/billing", R"({"amount": "12.34"})"), "/transaction/amount") ==
        12.34);
  auto fallback = client->post("/api/billing", "{}");
  CHECK(number(fallback, "/transaction/amount") == 100.0);
  CHECK(fallback.str("/transaction/currency") == "USD");

  auto hv = client->post("/api/high-value-processing", R"({"amount": 5000, "currency": "USD"})",
                         aggregate("43"));
  CHECK(hv.status == 200);
  CHECK(hv.str("/status") == "success");
  CHECK(hv.str("/message") == "High-value order processing completed");
  CHECK(matches(hv.str("/processingId"), R"(HV-43-\d{13}-\d+)"));
  CHECK(number(hv, "/amount") == 5000.0);
  CHECK(hv.str("/additionalVerification") == "completed");
  CHECK(flag(hv, "/insuranceAdded"));
  CHECK(flag(hv, "/signatureRequired"));
}

TEST_CASE_FIXTURE(sim_fixture, "the three notifications answer the reference's bodies") {
  auto shipped = client->post(
      "/api/notifications/shipping-confirmation",
      R"({"orderId": 42, "oldStatus": "CONFIRMED", "newStatus": "SHIPPED"})", aggregate("42"));
  CHECK(shipped.status == 200);
  CHECK(shipped.str("/status") == "sent");
  CHECK(shipped.str("/notificationType") == "shipping_confirmation");
  CHECK(shipped.num("/orderId") == 42);
  CHECK(shipped.str("/message") == "Shipping confirmation sent for order 42");
  CHECK(matches(shipped.str("/notificationId"), R"(NOTIF-42-\d{13}-\d+)"));

  auto delivered = client->post("/api/notifications/review-request",
                                R"({"orderId": 42, "newStatus": "DELIVERED"})", aggregate("42"));
  CHECK(delivered.str("/notificationType") == "review_request");
  CHECK(delivered.str("/message") == "Review request sent for order 42");

  auto update =
      client->post("/api/notifications/status-update",
                   R"({"orderId": 9, "oldStatus": "PENDING", "newStatus": "X"})", aggregate("9"));
  CHECK(update.status == 200);
  CHECK(update.str("/status") == "recorded");
  CHECK(update.str("/message") == "Status update recorded for order 9");

  auto l = ledger();
  REQUIRE(size_of(l, "/entries") == 3);
  CHECK(l.str("/entries/0/kind") == "notification");
  CHECK(l.str("/entries/0/operation") == "notifications.send");
  CHECK(l.str("/entries/0/notificationType") == "shipping_confirmation");
  CHECK(l.str("/entries/2/notificationType") == "status_update");
  CHECK(size_of(l, "/duplicates") == 0);
}

TEST_CASE_FIXTURE(sim_fixture,
                  "every revert endpoint answers the reference's body for an issued id") {
  auto res = client->post("/api/inventory/reserve", "{}", aggregate("42")).str("/reservationId");
  auto released = client->del("/api/inventory/" + res + "/release", revert_aggregate("42"));
  CHECK(released.status == 200);
  CHECK(released.str("/status") == "released");
  CHECK(released.str("/message") == "Inventory reservation released");
  CHECK(released.str("/reservationId") == res);
  CHECK(released.str("/aggregateId") == "42");

  auto txn = client->post("/api/billing", "{}", aggregate("42")).str("/transaction/id");
  auto refunded = client->post(
      "/api/billing/" + txn + "/refund",
      R"({"transactionId": "x", "amount": "99.99", "currency": "USD", "reason": "order_failed"})",
      revert_aggregate("42"));
  CHECK(refunded.status == 200);
  CHECK(refunded.str("/status") == "refunded");
  CHECK(refunded.str("/message") == "Transaction refunded successfully");
  CHECK(refunded.str("/transactionId") == txn);
  CHECK(refunded.str("/refund/refundId").rfind("RFD-" + txn + "-", 0) == 0);
  CHECK(number(refunded, "/refund/amount") == 99.99);
  CHECK(refunded.str("/refund/reason") == "order_failed");
  CHECK(refunded.str("/aggregateId") == "42");

  for (bool domestic : {true, false}) {
    std::string base = domestic ? "/api/domestic-shipping" : "/api/international-shipping";
    auto ship = client->post(base, "{}", aggregate("42")).str("/shipmentId");
    auto cancelled = client->post(base + "/" + ship + "/cancel",
                                  R"({"reason": "payment_failed", "orderId": 42,
                                      "customerId": "C-1", "shipmentId": "s"})",
                                  revert_aggregate("42"));
    CHECK(cancelled.status == 200);
    CHECK(cancelled.str("/status") == "cancelled");
    CHECK(cancelled.str("/shipmentId") == ship);
    CHECK(cancelled.str("/message") ==
          (domestic ? "Domestic shipment cancelled"
                    : "International shipment cancelled (customs clearance will be aborted)"));
  }

  auto hv = client->post("/api/high-value-processing", "{}", aggregate("43")).str("/processingId");
  auto hv_cancelled =
      client->post("/api/high-value-processing/" + hv + "/cancel",
                   R"({"amount": 10, "currency": "USD", "reason": "r"})", revert_aggregate("43"));
  CHECK(hv_cancelled.status == 200);
  CHECK(hv_cancelled.str("/status") == "cancelled");
  CHECK(hv_cancelled.str("/message") == "High-value processing cancelled successfully");
  CHECK(hv_cancelled.str("/processingId") == hv);
  CHECK(hv_cancelled.str("/refund/refundId").rfind("RFD-" + hv + "-", 0) == 0);

  auto l = ledger();
  for (rapidjson::SizeType i = 0; i < 5; ++i)
    CHECK(at(l.json, "/entries")->GetArray()[i]["state"] == "reverted");
}

TEST_CASE_FIXTURE(sim_fixture,
                  "the /fail siblings answer the reference's failures and apply nothing") {
  struct fail_case {
    const char* method;
    const char* path;
    int status;
    const char* retry_after;
    const char* pointer;
    const char* error;
  };
  const fail_case cases[] = {
      {"POST", "/api/inventory/reserve/fail", 503, "4", "/error", "inventory_system_unavailable"},
      {"DELETE", "/api/inventory/release/fail", 503, "4", "/error",
       "inventory_release_unavailable"},
      {"POST", "/api/fraud/check/fail", 429, "10", "/error", "rate_limit_exceeded"},
      {"POST", "/api/domestic-shipping/fail", 503, "3", "/error", "shipping_service_unavailable"},
      {"POST", "/api/domestic-shipping/cancel/fail", 503, "2", "/message",
       "Simulated retryable error for testing DLQ retry"},
      {"POST", "/api/international-shipping/fail", 503, "3", "/error",
       "international_shipping_unavailable"},
      {"POST", "/api/international-shipping/cancel/fail", 503, "3", "/error",
       "International shipment cancellation service temporarily unavailable"},
      {"POST", "/api/billing/fail", 503, "5", "/error", "payment_gateway_unavailable"},
      {"POST", "/api/billing/refund/fail", 503, "5", "/error", "refund_service_unavailable"},
      {"POST", "/api/high-value-processing/fail", 503, "5", "/error",
       "high_value_processing_unavailable"},
      {"POST", "/api/high-value-processing/cancel/fail", 503, "5", "/error",
       "high_value_cancellation_unavailable"},
      {"POST", "/api/notifications/shipping-confirmation/fail", 503, "", "/error",
       "notification_service_unavailable"},
  };
  const char* body = R"({"orderId": 1, "newStatus": "SHIPPED", "oldStatus": "CONFIRMED"})";
  for (const auto& c : cases) {
    std::string path = c.path;
    CAPTURE(path);
    auto r = std::string(c.method) == "DELETE" ? client->del(path, revert_aggregate("1"))
                                               : client->post(path, body, revert_aggregate("1"));
    CHECK(r.status == c.status);
    CHECK(r.header("Retry-After") == c.retry_after);
    CHECK(r.str(c.pointer) == c.error);
  }
  auto fraud = client->post("/api/fraud/check/fail", "{}", aggregate("3"));
  CHECK(fraud.num("/retryAfter") == 10);
  CHECK(fraud.str("/aggregateId") == "3");
  CHECK(ledger_size() == 0);
}

TEST_CASE_FIXTURE(sim_fixture, "the /succeed siblings apply and record, ignoring the knobs") {
  configure(R"({"services": {"inventory.reserve": {"failureRate": 1},
                             "billing.charge": {"failureRate": 1},
                             "inventory.release": {"failureRate": 1}}})");
  CHECK(client->post("/api/inventory/reserve", "{}", aggregate("5")).status == 503);
  auto res = client->post("/api/inventory/reserve/succeed", "{}", aggregate("5"));
  CHECK(res.status == 200);
  CHECK(client->post("/api/fraud/check/succeed", "{}", aggregate("5")).status == 200);
  CHECK(client->post("/api/domestic-shipping/succeed", "{}", aggregate("5")).status == 200);
  CHECK(client->post("/api/international-shipping/succeed", "{}", aggregate("5")).status == 200);
  CHECK(client->post("/api/billing/succeed", "{}", aggregate("5")).status == 200);
  CHECK(client->post("/api/high-value-processing/succeed", "{}", aggregate("5")).status == 200);
  CHECK(client
            ->post("/api/notifications/status-update/succeed",
                   R"({"orderId": 5, "oldStatus": "A", "newStatus": "B"})", aggregate("5"))
            .status == 200);
  CHECK(ledger_size("?aggregateId=5") == 7);

  // A revert sibling reverts the aggregate's newest active entry, then has nothing left.
  auto released = client->del("/api/inventory/release/succeed", revert_aggregate("5"));
  CHECK(released.status == 200);
  CHECK(released.str("/reservationId") == res.str("/reservationId"));
  CHECK(ledger().str("/entries/0/state") == "reverted");
  auto nothing = client->del("/api/inventory/release/succeed", revert_aggregate("5"));
  CHECK(nothing.status == 200);
  CHECK(nothing.str("/reservationId") == "RES-5-TEST");
  CHECK(client->post("/api/billing/refund/succeed", "{}", revert_aggregate("77"))
            .str("/transactionId") == "TXN-77-TEST");
  CHECK(client->post("/api/domestic-shipping/cancel/succeed", "{}", revert_aggregate("77"))
            .str("/shipmentId") == "SHIP-DOM-77-TEST");
  CHECK(client->post("/api/international-shipping/cancel/succeed", "{}", revert_aggregate("77"))
            .str("/shipmentId") == "SHIP-INTL-77-TEST");
  CHECK(client->post("/api/high-value-processing/cancel/succeed", "{}", revert_aggregate("77"))
            .str("/processingId") == "HV-77-TEST");
}

TEST_CASE_FIXTURE(sim_fixture, "an injected failure carries the service's body, the knob's status "
                               "and Retry-After") {
  struct knob_case {
    const char* knob;
    const char* method;
    const char* path;
    int status;
    const char* retry_after;
    const char* pointer;
    const char* error;
  };
  const knob_case cases[] = {
      {"inventory.reserve", "POST", "/api/inventory/reserve", 503, "4", "/error",
       "inventory_system_unavailable"},
      {"inventory.release", "DELETE", "/api/inventory/RES-1/release", 503, "4", "/error",
       "inventory_release_unavailable"},
      {"fraudCheck.check", "POST", "/api/fraud/check", 429, "10", "/error", "rate_limit_exceeded"},
      {"shipping.domestic.create", "POST", "/api/domestic-shipping", 503, "3", "/error",
       "shipping_service_unavailable"},
      {"shipping.domestic.cancel", "POST", "/api/domestic-shipping/SHIP-DOM-9/cancel", 503, "2",
       "/shipmentId", "SHIP-DOM-9"},
      {"shipping.international.create", "POST", "/api/international-shipping", 503, "3", "/error",
       "international_shipping_unavailable"},
      {"shipping.international.cancel", "POST", "/api/international-shipping/S/cancel", 503, "3",
       "/message", "Simulated retryable error for testing DLQ retry"},
      {"billing.charge", "POST", "/api/billing", 503, "5", "/error", "payment_gateway_unavailable"},
      {"billing.refund", "POST", "/api/billing/TXN-1/refund", 503, "5", "/error",
       "refund_service_unavailable"},
      {"highValue.process", "POST", "/api/high-value-processing", 503, "5", "/error",
       "high_value_processing_unavailable"},
      {"highValue.cancel", "POST", "/api/high-value-processing/HV-1/cancel", 503, "5", "/error",
       "high_value_cancellation_unavailable"},
      {"notifications.send", "POST", "/api/notifications/review-request", 503, "", "/error",
       "notification_service_unavailable"},
  };
  const char* body = R"({"orderId": 1, "newStatus": "DELIVERED"})";
  for (const auto& c : cases) {
    std::string knob = c.knob;
    CAPTURE(knob);
    configure(R"({"services": {")" + knob + R"(": {"failNext": 1}}})");
    auto r = std::string(c.method) == "DELETE" ? client->del(c.path, revert_aggregate("1"))
                                               : client->post(c.path, body, aggregate("1"));
    CHECK(r.status == c.status);
    CHECK(r.header("Retry-After") == c.retry_after);
    CHECK(r.str(c.pointer) == c.error);
  }
  CHECK(ledger_size() == 0);

  // A status to retry reads "unavailable"; one not to retry says the partner refused.
  for (int status : {500, 503, 429, 408, 400, 404, 422}) {
    CAPTURE(status);
    configure(fmt::format(R"({{"services": {{"billing.charge": {{"failNext": 1,
                             "failureStatus": {}}}}}}})",
                          status));
    auto r = client->post("/api/billing", "{}", aggregate("1"));
    CHECK(r.status == status);
    const bool transient = status >= 500 || status == 408 || status == 429;
    CHECK(r.str("/error") == (transient ? "payment_gateway_unavailable" : "request_refused"));
    if (!transient) {
      CHECK(r.str("/message") ==
            fmt::format("billing.charge refused the request: HTTP {}, set by the simulator's "
                        "failureStatus",
                        status));
      CHECK(r.str("/aggregateId") == "1");
    }
  }
}

TEST_CASE_FIXTURE(sim_fixture, "Retry-After is sent as seconds, as an HTTP-date, or not at all") {
  configure(R"({"services": {"billing.charge": {"failureRate": 1, "retryAfter": 7}}})");
  CHECK(client->post("/api/billing", "{}").header("Retry-After") == "7");
  configure(R"({"services": {"billing.charge": {"retryAfter": "Wed, 21 Oct 2015 07:28:00 GMT"}}})");
  CHECK(client->post("/api/billing", "{}").header("Retry-After") ==
        "Wed, 21 Oct 2015 07:28:00 GMT");
  configure(R"({"services": {"billing.charge": {"retryAfter": null}}})");
  auto none = client->post("/api/billing", "{}");
  CHECK(none.status == 503);
  CHECK(none.header("Retry-After").empty());
  configure(R"({"services": {"fraudCheck.check": {"failureRate": 1, "retryAfter": 3}}})");
  CHECK(client->post("/api/fraud/check", "{}").num("/retryAfter") == 3);
}

TEST_CASE_FIXTURE(sim_fixture,
                  "bad requests get a 4xx JSON error, never a 500, and apply nothing") {
  struct bad_case {
    const char* method;
    const char* path;
    std::string body;
    const char* content_type;
    int status;
    const char* mentions;
  };
  const std::string deep = std::string(5000, '[') + std::string(5000, ']');
  const bad_case cases[] = {
      {"POST", "/api/inventory/reserve", "not json", "application/json", 400, "not valid JSON"},
      {"POST", "/api/inventory/reserve", "", "application/json", 400, "empty"},
      {"POST", "/api/inventory/reserve", "{}", "text/plain", 415, "Content-Type"},
      {"POST", "/api/inventory/reserve", "[1, 2]", "application/json", 422, "JSON object"},
      {"POST", "/api/inventory/reserve", deep, "application/json", 400, "nested deeper than 1000"},
      {"POST", "/api/inventory/reserve", R"({"items": [1]})", "application/json", 422,
       "items[0] must be an object, got 1"},
      {"POST", "/api/inventory/reserve", R"({"items": "x"})", "application/json", 422, "items"},
      {"POST", "/api/inventory/reserve", R"({"items": [{"sku": 5, "quantity": "2"}]})",
       "application/json", 422, "items[0].sku must be a string"},
      {"POST", "/api/inventory/reserve", R"({"orderId": "abc"})", "application/json", 422,
       "orderId must be an integer"},
      {"POST", "/api/fraud/check", R"({"totalAmount": "lots"})", "application/json", 422,
       "totalAmount must be a number"},
      {"POST", "/api/domestic-shipping", R"({"address": "Main St"})", "application/json", 422,
       "address must be an object"},
      {"POST", "/api/international-shipping", R"({"customerId": 5})", "application/json", 422,
       "customerId must be a string"},
      {"POST", "/api/billing", R"({"amount": true})", "application/json", 422,
       "amount must be a number"},
      {"POST", "/api/high-value-processing", R"({"currency": []})", "application/json", 422,
       "currency must be a string"},
      {"POST", "/api/billing/TXN-1/refund", "", "application/json", 400, "empty"},
      {"POST", "/api/billing/TXN-1/refund", R"({"reason": 5})", "application/json", 422,
       "reason must be a string"},
      {"POST", "/api/domestic-shipping/S/cancel", R"({"orderId": [1]})", "application/json", 422,
       "orderId must be a string or an integer"},
      {"POST", "/api/high-value-processing/HV/cancel", "{", "application/json", 400, "JSON"},
      {"POST", "/api/notifications/shipping-confirmation", "{}", "application/json", 422,
       "orderId is required; newStatus is required"},
      {"POST", "/api/notifications/status-update", R"({"orderId": 1, "newStatus": "X"})",
       "application/json", 422, "oldStatus is required"},
      {"POST", "/api/notifications/review-request", R"({"orderId": 1.5, "newStatus": "X"})",
       "application/json", 422, "orderId must be an integer"},
      {"POST", "/api/notifications/review-request/succeed", R"({"orderId": 1})", "application/json",
       422, "newStatus is required"},
      {"PUT", "/api/simulator/config", "nope", "application/json", 400, "not valid JSON"},
      {"GET", "/api/simulator/nothing", "", "", 404, "no route"},
      {"DELETE", "/api/inventory/a/b/release", "", "", 404, "no route"},
  };
  for (const auto& c : cases) {
    std::string where = std::string(c.method) + " " + c.path + " " + c.body.substr(0, 40);
    CAPTURE(where);
    http_response r;
    std::string m = c.method;
    if (m == "POST")
      r = client->post(c.path, c.body, aggregate("1"), c.content_type);
    else if (m == "PUT")
      r = client->put(c.path, c.body, {}, c.content_type);
    else if (m == "DELETE")
      r = client->del(c.path);
    else
      r = client->get(c.path);
    CHECK(r.status == c.status);
    CHECK_FALSE(r.str("/error/code").empty());
    CHECK(r.str("/error/message").find(c.mentions) != std::string::npos);
  }
  auto bad_key = client->post("/api/billing", "{}", {{"Idempotency-Key", "has space"}});
  CHECK(bad_key.status == 422);
  CHECK(bad_key.str("/error/message").find("Idempotency-Key") != std::string::npos);
  CHECK(ledger_size() == 0);
}

// --- knobs -------------------------------------------------------------------------------------

TEST_CASE_FIXTURE(sim_fixture, "the failure rate holds over 2000 calls and a seed reproduces it") {
  constexpr int calls = 2000;
  auto run = [&] {
    int failures = 0;
    for (int i = 0; i < calls; ++i) {
      auto r = client->post("/api/billing", "{}", aggregate(std::to_string(i)));
      REQUIRE((r.status == 200 || r.status == 503));
      failures += r.status == 503;
    }
    return failures;
  };
  configure(R"({"seed": 7, "services": {"billing.charge": {"failureRate": 0.3}}})");
  int failures = run();
  double rate = static_cast<double>(failures) / calls;
  MESSAGE("billing.charge failureRate 0.3 over " << calls << " calls: measured " << rate);
  CHECK(rate > 0.26);
  CHECK(rate < 0.34);
  CHECK(ledger_size() == static_cast<std::size_t>(calls - failures));

  configure(R"({"seed": 7})"); // re-seeding replays the same decisions
  CHECK(run() == failures);
}

TEST_CASE_FIXTURE(sim_fixture, "latency delays the answer, fixed or drawn from a range") {
  configure(R"({"services": {"fraudCheck.check": {"latencyMs": 150}}})");
  auto start = std::chrono::steady_clock::now();
  CHECK(client->post("/api/fraud/check", "{}").status == 200);
  CHECK(std::chrono::steady_clock::now() - start >= 145ms);

  configure(R"({"services": {"fraudCheck.check": {"latencyMs": [20, 120]}}})");
  for (int i = 0; i < 10; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    CHECK(client->post("/api/fraud/check", "{}").status == 200);
    auto took = std::chrono::steady_clock::now() - t0;
    CHECK(took >= 19ms);
    CHECK(took < 5s);
  }
  // Knobs are per operation: the others stay fast.
  auto t0 = std::chrono::steady_clock::now();
  CHECK(client->post("/api/billing", "{}").status == 200);
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
}

TEST_CASE("stopping the simulator wakes every call asleep in its latency at once") {
  sim_fixture f;
  f.configure(R"({"services": {"fraudCheck.check": {"latencyMs": 60000}}})");
  std::atomic<int> ended{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < 8; ++i)
    callers.emplace_back([&] {
      httplib::Client c("127.0.0.1", f.port);
      c.set_read_timeout(std::chrono::seconds(120));
      (void)c.Post("/api/fraud/check", "{}", "application/json");
      ++ended;
    });
  std::this_thread::sleep_for(300ms); // all eight asleep in their 60 s
  CHECK(ended == 0);
  auto start = std::chrono::steady_clock::now();
  f.server->stop();
  for (auto& t : callers)
    t.join();
  CHECK(ended == 8);
  CHECK(std::chrono::steady_clock::now() - start < 30s); // not the 60 s they were to sleep
}

TEST_CASE("calls waiting out their latency or a late answer hold no thread: two threads serve "
          "forty at once, and one key in flight is applied once") {
  sim_fixture f({}, quiet_settings(), 2);
  f.configure(R"({"services": {"fraudCheck.check": {"latencyMs": 1000},
                               "billing.charge": {"lateRate": 1, "lateMs": 1000}}})");
  constexpr int callers = 40;
  std::vector<http_response> answers(callers);
  std::vector<std::thread> threads;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < callers; ++i)
    threads.emplace_back([&, i] {
      http_client own(f.port);
      // A quarter share one key: waiting for the one in flight holds no thread either.
      answers[i] = i % 4 == 3 ? own.post("/api/billing", R"({"amount": 5})", aggregate("7", "k7"))
                   : i % 2
                       ? own.post("/api/billing", R"({"amount": 5})", aggregate(std::to_string(i)))
                       : own.post("/api/fraud/check", "{}", aggregate(std::to_string(i)));
    });
  for (auto& t : threads)
    t.join();
  auto took = std::chrono::steady_clock::now() - start;
  int replayed = 0;
  for (const auto& a : answers) {
    CHECK(a.status == 200);
    replayed += a.header("Idempotent-Replayed") == "true";
  }
  CHECK(replayed == callers / 4 - 1);
  CHECK(f.ledger_size() == callers - (callers / 4 - 1)); // one entry per call, per key for k7
  CHECK(took >= 990ms);
  // Asleep on their threads, forty one-second waits on two threads take twenty seconds.
  CHECK(took < 10s);
}

TEST_CASE_FIXTURE(sim_fixture,
                  "a late answer applies at once, answers after the caller gave up, and "
                  "a retry with the same key replays") {
  configure(R"({"services": {"billing.charge": {"lateRate": 1, "lateMs": 1500}}})");
  httplib::Client impatient("127.0.0.1", port);
  impatient.set_tcp_nodelay(true);
  impatient.set_read_timeout(std::chrono::milliseconds(300));
  auto start = std::chrono::steady_clock::now();
  auto lost =
      impatient.Post("/api/billing", {{"Idempotency-Key", "late-1"}, {"X-Aggregate-Id", "4"}},
                     R"({"amount": 10})", "application/json");
  CHECK_FALSE(lost);
  CHECK(lost.error() == httplib::Error::Read);
  CHECK(std::chrono::steady_clock::now() - start < 1400ms);

  // The charge happened although the caller saw a timeout: the ambiguous case.
  auto l = ledger();
  REQUIRE(size_of(l, "/entries") == 1);
  CHECK(l.str("/entries/0/idempotencyKey") == "late-1");
  auto txn = l.str("/entries/0/id");

  auto retry = client->post("/api/billing", R"({"amount": 10})", aggregate("4", "late-1"));
  CHECK(retry.status == 200);
  CHECK(retry.header("Idempotent-Replayed") == "true");
  CHECK(retry.str("/transaction/id") == txn);
  CHECK(ledger_size() == 1);

  // A patient caller gets the answer, late.
  auto t0 = std::chrono::steady_clock::now();
  auto slow = client->post("/api/billing", "{}", aggregate("5"));
  CHECK(slow.status == 200);
  CHECK(std::chrono::steady_clock::now() - t0 >= 1400ms);
  CHECK(ledger_size() == 2);
}

TEST_CASE_FIXTURE(sim_fixture, "failNext fails exactly the next N calls") {
  configure(R"({"services": {"inventory.reserve": {"failNext": 3}}})");
  for (int i = 0; i < 3; ++i)
    CHECK(client->post("/api/inventory/reserve", "{}").status == 503);
  CHECK(client->post("/api/inventory/reserve", "{}").status == 200);
  auto config = client->get("/api/simulator/config");
  CHECK(config.num("/services/inventory.reserve/failNext") == 0);
  CHECK(ledger_size() == 1);
}

TEST_CASE_FIXTURE(sim_fixture, "GET config lists every knob, PUT changes only what it names") {
  auto before = client->get("/api/simulator/config");
  CHECK(before.status == 200);
  CHECK(before.num("/seed") == 42);
  CHECK(at(before.json, "/services")->MemberCount() == 12);
  CHECK(number(before, "/services/billing.charge/failureRate") == 0.0);
  CHECK(before.num("/services/billing.charge/failureStatus") == 503);
  CHECK(before.num("/services/billing.charge/retryAfter") == 5);
  CHECK(before.num("/services/billing.charge/latencyMs/0") == 0);
  CHECK(before.num("/services/billing.charge/latencyMs/1") == 0);
  CHECK(number(before, "/services/billing.charge/lateRate") == 0.0);
  CHECK(before.num("/services/billing.charge/lateMs") == 0);
  CHECK(before.num("/services/billing.charge/failNext") == 0);
  CHECK(is_null(before, "/services/notifications.send/retryAfter"));

  auto put = client->put("/api/simulator/config",
                         R"({"services": {"billing.charge": {"failureRate": 0.5}}})");
  CHECK(put.status == 200);
  CHECK(number(put, "/services/billing.charge/failureRate") == 0.5);
  CHECK(put.num("/services/billing.charge/failureStatus") == 503);
  CHECK(put.num("/services/billing.charge/retryAfter") == 5);
  CHECK(put.num("/seed") == 42);
  auto after = client->get("/api/simulator/config");
  CHECK(after.body == put.body);
  CHECK(sim.config_json() == put.body);
}

TEST_CASE_FIXTURE(sim_fixture, "an invalid config change is refused with 422 and changes nothing") {
  configure(R"({"services": {"billing.charge": {"failureRate": 0.5}}})");
  auto current = client->get("/api/simulator/config").body;
  struct bad_put {
    const char* body;
    const char* mentions;
  };
  const bad_put cases[] = {
      {R"({"services": {"billing.chrage": {"failureRate": 1}}})",
       "unknown service services.billing.chrage"},
      {R"({"services": {"billing.charge": {"failureCode": 500}}})",
       "unknown key services.billing.charge.failureCode"},
      {R"({"services": {"billing.charge": {"failureRate": 2}}})",
       "services.billing.charge.failureRate must be between 0 and 1, got 2"},
      {R"({"services": {"billing.charge": {"failureStatus": 302}}})",
       "services.billing.charge.failureStatus must be between 400 and 599"},
      {R"({"services": {"billing.charge": {"latencyMs": [9, 3]}}})",
       "services.billing.charge.latencyMs must be"},
      {R"({"services": {"billing.charge": {"failureRate": 0.9},
                        "inventory.reserve": {"lateMs": -1}}})",
       "services.inventory.reserve.lateMs must be between 0 and 600000"},
      {R"({"seed": -1})", "seed must be a non-negative integer, got -1"},
      {R"({"knobs": {}})", "unknown key knobs"},
      {R"({"services": []})", "services must be an object"},
      {R"([])", "must be a JSON object"},
  };
  for (const auto& c : cases) {
    std::string body = c.body;
    CAPTURE(body);
    auto r = client->put("/api/simulator/config", body);
    CHECK(r.status == 422);
    CHECK(r.str("/error/code") == "validation_failed");
    CHECK(r.str("/error/message").find(c.mentions) != std::string::npos);
    CHECK(client->get("/api/simulator/config").body == current);
  }
  auto detailed = client->put("/api/simulator/config",
                              R"({"services": {"billing.charge": {"failureRate": 2}}})");
  CHECK(detailed.str("/error/details/0/field") == "services.billing.charge.failureRate");
}

TEST_CASE_FIXTURE(sim_fixture,
                  "a body nested 100 000 levels deep is refused with 400 on every route "
                  "that reads one, and the simulator goes on serving") {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  struct deep_request {
    const char* path;
    std::string body;
    headers extra;
  };
  const deep_request cases[] = {
      {"/api/inventory/reserve", deep, {}},                           // echoed in the 422
      {"/api/inventory/reserve", R"({"orderId": )" + deep + "}", {}}, // a wrong field's value
      {"/api/inventory/reserve", R"({"orderId": 1, "extra": )" + deep + "}",
       aggregate("1", "deep-1")},                                     // hashed for the key
      {"/api/simulator/config", R"({"services": )" + deep + "}", {}}, // a knob patch
  };
  auto knobs = client->get("/api/simulator/config").body;
  for (const auto& c : cases) {
    CAPTURE(c.path);
    auto r = std::string(c.path) == "/api/simulator/config" ? client->put(c.path, c.body, c.extra)
                                                            : client->post(c.path, c.body, c.extra);
    CHECK(r.status == 400);
    CHECK(r.str("/error/code") == "malformed_json");
    CHECK(r.str("/error/message").find("nested deeper than 1000 levels") != std::string::npos);
  }
  CHECK(client->get("/api/simulator/config").body == knobs);
  CHECK(ledger_size() == 0);
  CHECK(client->post("/api/inventory/reserve", R"({"orderId": 1})", aggregate("1", "deep-1"))
            .status == 200);
}

TEST_CASE_FIXTURE(sim_fixture, "reset restores knobs and seed and empties the ledger and the key "
                               "store") {
  auto initial = client->get("/api/simulator/config").body;
  configure(R"({"seed": 99, "services": {"billing.charge": {"failureRate": 0.7}}})");
  auto first = client->post("/api/inventory/reserve/succeed", "{}", aggregate("1", "k-reset"));
  auto started = ledger().num("/startedAtMs");
  CHECK(ledger_size() == 1);

  auto r = client->post("/api/simulator/reset", "");
  CHECK(r.status == 200);
  CHECK(r.str("/status") == "reset");
  CHECK(r.num("/startedAtMs") >= started);
  CHECK(client->get("/api/simulator/config").body == initial);
  auto l = ledger();
  CHECK(size_of(l, "/entries") == 0);
  CHECK(l.num("/startedAtMs") == r.num("/startedAtMs"));
  CHECK(l.str("/startedAt") == r.str("/startedAt"));

  auto again = client->post("/api/inventory/reserve/succeed", "{}", aggregate("1", "k-reset"));
  CHECK(again.status == 200);
  CHECK(again.header("Idempotent-Replayed").empty());
  CHECK(again.str("/reservationId") != first.str("/reservationId"));
  CHECK(ledger_size() == 1);
}

TEST_CASE_FIXTURE(admin_fixture,
                  "config changes and reset need the admin token; reading does not") {
  const headers bearer{{"Authorization", "Bearer s3cret"}};
  const char* change = R"({"services": {"billing.charge": {"failureRate": 1}}})";
  auto anonymous = client->put("/api/simulator/config", change);
  CHECK(anonymous.status == 401);
  CHECK(anonymous.str("/error/code") == "unauthorized");
  CHECK(client->put("/api/simulator/config", change, {{"Authorization", "Bearer nope"}}).status ==
        401);
  CHECK(number(client->get("/api/simulator/config"), "/services/billing.charge/failureRate") ==
        0.0);
  CHECK(client->put("/api/simulator/config", change, bearer).status == 200);
  CHECK(client->post("/api/simulator/reset", "").status == 401);
  CHECK(client->post("/api/simulator/reset", "", bearer).status == 200);
  CHECK(client->get("/api/simulator/ledger").status == 200);
  CHECK(client->post("/api/billing", "{}").status == 200); // the services themselves are open
}

// --- Idempotency-Key ---------------------------------------------------------------------------

TEST_CASE_FIXTURE(sim_fixture, "concurrent identical requests with one key apply once") {
  configure(R"({"services": {"inventory.reserve": {"latencyMs": 300}}})");
  constexpr int callers = 8;
  std::vector<http_response> answers(callers);
  std::vector<std::thread> threads;
  for (int i = 0; i < callers; ++i)
    threads.emplace_back([&, i] {
      http_client own(port);
      answers[i] = own.post("/api/inventory/reserve", R"({"orderId": 11, "items": []})",
                            aggregate("11", "11:inventory"));
    });
  for (auto& t : threads)
    t.join();
  std::set<std::string> ids;
  int replayed = 0;
  for (const auto& a : answers) {
    CHECK(a.status == 200);
    ids.insert(a.str("/reservationId"));
    replayed += a.header("Idempotent-Replayed") == "true";
  }
  CHECK(ids.size() == 1);
  CHECK(replayed == callers - 1);
  auto l = ledger();
  REQUIRE(size_of(l, "/entries") == 1);
  CHECK(l.str("/entries/0/id") == *ids.begin());
  CHECK(l.num("/entries/0/applied") == 1);
}

TEST_CASE_FIXTURE(sim_fixture, "a key reused for a different request is 422; keys are per "
                               "operation") {
  auto first = client->post("/api/billing", R"({"amount": 10})", aggregate("3", "k-1"));
  CHECK(first.status == 200);
  auto same = client->post("/api/billing", R"( { "amount" : 10 } )", aggregate("3", "k-1"));
  CHECK(same.status == 200);
  CHECK(same.header("Idempotent-Replayed") == "true");
  CHECK(same.body == first.body);
  auto other = client->post("/api/billing", R"({"amount": 11})", aggregate("3", "k-1"));
  CHECK(other.status == 422);
  CHECK(other.str("/error/code") == "idempotency_key_reused");
  CHECK(other.str("/error/message").find("k-1") != std::string::npos);
  CHECK(client->post("/api/fraud/check", R"({"amount": 11})", aggregate("3", "k-1")).status == 200);
  auto txn = first.str("/transaction/id");
  CHECK(
      client->post("/api/billing/" + txn + "/refund", "{}", revert_aggregate("3", "r-1")).status ==
      200);
  CHECK(client->post("/api/billing/TXN-other/refund", "{}", revert_aggregate("3", "r-1")).status ==
        422);
  CHECK(ledger_size() == 2);
}

TEST_CASE_FIXTURE(sim_fixture, "a failed call is not remembered: a retry with its key applies") {
  configure(R"({"services": {"shipping.domestic.create": {"failNext": 1}}})");
  CHECK(client->post("/api/domestic-shipping", "{}", aggregate("2", "k-f")).status == 503);
  auto retry = client->post("/api/domestic-shipping", "{}", aggregate("2", "k-f"));
  CHECK(retry.status == 200);
  CHECK(retry.header("Idempotent-Replayed").empty());
  auto replay = client->post("/api/domestic-shipping", "{}", aggregate("2", "k-f"));
  CHECK(replay.header("Idempotent-Replayed") == "true");
  CHECK(replay.str("/shipmentId") == retry.str("/shipmentId"));
  CHECK(ledger_size() == 1);
}

// --- ledger ------------------------------------------------------------------------------------

TEST_CASE_FIXTURE(sim_fixture, "the ledger follows an entry through apply, revert, double revert "
                               "and unknown ids") {
  auto res = client->post("/api/inventory/reserve", "{}", aggregate("8", "8:inventory"))
                 .str("/reservationId");
  auto l = ledger();
  CHECK(l.str("/entries/0/id") == res);
  CHECK(l.str("/entries/0/aggregateId") == "8");
  CHECK(l.str("/entries/0/operation") == "inventory.reserve");
  CHECK(l.str("/entries/0/kind") == "reservation");
  CHECK(l.str("/entries/0/idempotencyKey") == "8:inventory");
  CHECK(flag(l, "/entries/0/revertible"));
  CHECK(l.num("/entries/0/applied") == 1);
  CHECK(l.num("/entries/0/revertRequests") == 0);
  CHECK(l.str("/entries/0/state") == "active");
  CHECK(matches(l.str("/entries/0/appliedAt"), R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)"));
  CHECK(l.num("/entries/0/appliedAtMs") >= l.num("/startedAtMs"));
  CHECK(is_null(l, "/entries/0/revertedAt"));
  CHECK(is_null(l, "/entries/0/revertedSeq"));

  auto path = "/api/inventory/" + res + "/release";
  auto first = client->del(path, revert_aggregate("8", "8:inventory:revert"));
  CHECK(first.status == 200);
  l = ledger();
  CHECK(l.str("/entries/0/state") == "reverted");
  CHECK(l.num("/entries/0/revertRequests") == 1);
  CHECK(l.num("/entries/0/revertedAtMs") >= l.num("/entries/0/appliedAtMs"));
  CHECK(l.num("/entries/0/revertedSeq") > l.num("/entries/0/appliedSeq"));
  auto reverted_at = l.num("/entries/0/revertedAtMs");

  auto replay = client->del(path, revert_aggregate("8", "8:inventory:revert"));
  CHECK(replay.header("Idempotent-Replayed") == "true");
  CHECK(ledger().num("/entries/0/revertRequests") == 1);

  auto twice = client->del(path, revert_aggregate("8", "another-key"));
  CHECK(twice.status == 200);
  CHECK(twice.str("/status") == "released");
  CHECK(twice.str("/reservationId") == res);
  l = ledger();
  CHECK(l.str("/entries/0/state") == "reverted");
  CHECK(l.num("/entries/0/revertRequests") == 2);
  CHECK(l.num("/entries/0/revertedAtMs") == reverted_at);

  auto unknown = client->del("/api/inventory/RES-never/release", revert_aggregate("8"));
  CHECK(unknown.status == 404);
  CHECK(unknown.str("/error/code") == "not_found");
  CHECK(unknown.str("/error/message").find("RES-never") != std::string::npos);
  auto wrong_kind = client->post("/api/billing/" + res + "/refund", "{}", revert_aggregate("8"));
  CHECK(wrong_kind.status == 404);
  CHECK(ledger().num("/entries/0/revertRequests") == 2);
}

TEST_CASE_FIXTURE(sim_fixture, "the ledger filters by aggregate and lists duplicates") {
  CHECK(client->post("/api/inventory/reserve", "{}", aggregate("5", "a")).status == 200);
  CHECK(client->post("/api/inventory/reserve", "{}", aggregate("5", "b")).status == 200);
  CHECK(client->post("/api/inventory/reserve", "{}", aggregate("5", "b")).status == 200);
  CHECK(client->post("/api/fraud/check", "{}", aggregate("5", "c")).status == 200);
  CHECK(client->post("/api/inventory/reserve", "{}", aggregate("6", "a6")).status == 200);
  const char* shipped = R"({"orderId": 5, "newStatus": "SHIPPED"})";
  CHECK(client->post("/api/notifications/shipping-confirmation", shipped, aggregate("5")).status ==
        200);
  CHECK(client->post("/api/notifications/review-request", shipped, aggregate("5")).status == 200);
  CHECK(client->post("/api/notifications/shipping-confirmation", shipped, aggregate("5")).status ==
        200);

  CHECK(ledger_size() == 7);
  auto five = ledger("?aggregateId=5");
  CHECK(size_of(five, "/entries") == 6);
  REQUIRE(size_of(five, "/duplicates") == 2);
  CHECK(five.str("/duplicates/0/aggregateId") == "5");
  CHECK(five.str("/duplicates/0/operation") == "inventory.reserve");
  CHECK(five.num("/duplicates/0/count") == 2);
  CHECK(five.str("/duplicates/0/ids/0") == five.str("/entries/0/id"));
  CHECK(five.str("/duplicates/0/ids/1") == five.str("/entries/1/id"));
  CHECK(five.str("/duplicates/0/idempotencyKeys/0") == "a");
  CHECK(five.str("/duplicates/0/idempotencyKeys/1") == "b");
  CHECK(five.str("/duplicates/1/operation") == "notifications.send");
  CHECK(five.str("/duplicates/1/notificationType") == "shipping_confirmation");
  CHECK(is_null(five, "/duplicates/1/idempotencyKeys/0"));

  auto six = ledger("?aggregateId=6");
  CHECK(size_of(six, "/entries") == 1);
  CHECK(size_of(six, "/duplicates") == 0);
  CHECK(size_of(ledger("?aggregateId=nobody"), "/entries") == 0);
  CHECK(sim.ledger_json(std::string("6")) == six.body);
}

TEST_CASE_FIXTURE(sim_fixture,
                  "many concurrent callers: every apply is recorded once with a unique "
                  "id") {
  constexpr int threads = 8;
  constexpr int calls = 150;
  std::atomic<int> applied{0}, replayed{0}, other{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      http_client own(port);
      for (int i = 0; i < calls; ++i) {
        auto agg = std::to_string(t * 1000 + i);
        http_response r;
        if (i % 3 == 0)
          r = own.post("/api/fraud/check", "{}", aggregate(agg));
        else if (i % 10 == 1) // a key this thread also uses for reservations: keys are per
                              // operation, so the charge applies
          r = own.post("/api/billing", "{}",
                       aggregate(agg, "key-" + std::to_string(t) + "-" + std::to_string(i - 1)));
        else
          r = own.post("/api/inventory/reserve", "{}",
                       aggregate(agg, "key-" + std::to_string(t) + "-" + std::to_string(i % 50)));
        if (r.status != 200)
          ++other;
        else if (r.header("Idempotent-Replayed") == "true")
          ++replayed;
        else
          ++applied;
      }
    });
  for (auto& w : workers)
    w.join();
  CHECK(other == 0);
  CHECK(applied + replayed == threads * calls);
  CHECK(replayed > 0);
  auto l = ledger();
  const auto& entries = at(l.json, "/entries")->GetArray();
  CHECK(entries.Size() == static_cast<rapidjson::SizeType>(applied.load()));
  std::set<std::string> ids;
  for (const auto& e : entries)
    ids.insert(e["id"].GetString());
  CHECK(ids.size() == entries.Size());
}
