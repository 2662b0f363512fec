// The outbox engine and saga compensation end to end: a real outboxd process with its
// in-process simulator on a real PostgreSQL. Assertions read the order, its audit rows, the
// simulator ledger and the consistency check.
#include "test/support/outboxd_process.hpp"
#include "test/support/test_db.hpp"

#include <algorithm>
#include <csignal>
#include <doctest/doctest.h>
#include <thread>

using namespace outboxd::test;
using namespace std::chrono_literals;

namespace {

/// "destination:outcome" of every attempt of the order, in order.
std::vector<std::string> attempts(const http_response& timeline) {
  std::vector<std::string> out;
  for (const auto& a : timeline.json["attempts"].GetArray())
    out.push_back(std::string(a["destination"].GetString()) + ":" + a["outcome"].GetString());
  return out;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

int count(const std::vector<std::string>& v, const std::string& what) {
  return static_cast<int>(std::count(v.begin(), v.end(), what));
}

/// The order's one inventory reservation was released, as the simulator saw it.
void check_reservation_released(outboxd_process& p, long long id) {
  auto ledger = p.ledger(id);
  auto reservations = ledger_entries(ledger, "inventory.reserve");
  REQUIRE(reservations.size() == 1);
  CHECK(std::string((*reservations[0])["state"].GetString()) == "reverted");
}

/// Whether `p` logs `line` within 10 s. A worker logs a step once the database has answered it, so
/// the line can come a moment after the state the test saw through the API.
bool logs(outboxd_process& p, const std::string& line) {
  return wait_until([&] { return contains(p.output(), line); }, 10s);
}

void check_consistent(outboxd_process& p) {
  auto r = p.client().get("/api/admin/consistency");
  REQUIRE(r.status == 200);
  CHECK_MESSAGE(r.json["violations"].Size() == 0, r.body);
}

struct engine_fixture {
  explicit engine_fixture(std::vector<std::string> extra = {})
      : p("engine", fresh_database("outboxd_e2e_engine"), std::move(extra)) {
    p.wait_ready();
  }
  outboxd_process p;
};

} // namespace

TEST_CASE_FIXTURE(
    engine_fixture,
    "an even domestic order goes inventory, fraudCheck, shipping, billing and is confirmed") {
  auto id = p.create_order("domestic"); // order 1 is odd: use the next one
  auto even = p.create_order("domestic");
  CHECK(p.wait_status(id, "CONFIRMED") == "CONFIRMED");
  CHECK(p.wait_status(even, "CONFIRMED") == "CONFIRMED");
  auto t = p.timeline(even);
  CHECK(attempts(t) == std::vector<std::string>{"inventory:success", "fraudCheck:success",
                                                "shipping:success", "billing:success"});
  CHECK(std::string(t.json["attempts"][3]["endpointUrl"].GetString()).find("/api/billing") !=
        std::string::npos);
  CHECK(t.str("/events/0/status") == "PROCESSED");
  CHECK(std::string(t.json["attempts"][0]["responsePayload"]["reservationId"].GetString())
            .rfind("RES-", 0) == 0);
  auto ledger = p.ledger(even);
  CHECK(ledger_entries(ledger, "inventory.reserve").size() == 1);
  CHECK(ledger_entries(ledger, "shipping.domestic.create").size() == 1);
  CHECK(ledger_entries(ledger, "billing.charge").size() == 1);
  CHECK(ledger_entries(ledger, "highValue.process").empty());
  check_consistent(p);
  CHECK(logs(p, "event 2 OrderCreated order 2 processed"));
}

TEST_CASE_FIXTURE(engine_fixture,
                  "an odd international order is shipped abroad and billed as high value") {
  auto id = p.create_order("international");
  REQUIRE(id % 2 == 1);
  CHECK(p.wait_status(id, "CONFIRMED") == "CONFIRMED");
  auto ledger = p.ledger(id);
  CHECK(ledger_entries(ledger, "shipping.international.create").size() == 1);
  CHECK(ledger_entries(ledger, "highValue.process").size() == 1);
  CHECK(ledger_entries(ledger, "billing.charge").empty());
  check_consistent(p);
}

TEST_CASE_FIXTURE(engine_fixture,
                  "a retried event resumes after the destinations that already succeeded") {
  p.knobs(R"({"billing.charge":{"failNext":2,"failureStatus":503,"retryAfter":0}})");
  // An even id is billed (fraud risk 25); ids may skip one when an insert was retried.
  auto id = p.create_order();
  while (id % 2 != 0)
    id = p.create_order();
  CHECK(p.wait_status(id, "CONFIRMED") == "CONFIRMED");
  auto a = attempts(p.timeline(id));
  CHECK(count(a, "inventory:success") == 1);
  CHECK(count(a, "shipping:success") == 1);
  CHECK(count(a, "billing:success") == 1);
  CHECK(count(a, "billing:retryable") + count(a, "billing:success") >= 2);
  auto ledger = p.ledger(id);
  CHECK(ledger_entries(ledger, "inventory.reserve").size() == 1);
  CHECK(ledger_entries(ledger, "billing.charge").size() == 1);
  check_consistent(p);
}

TEST_CASE("a huge Retry-After is clamped to outbox.backoff.max") {
  outboxd_process p("clamp", fresh_database("outboxd_e2e_clamp"),
                    {"--set", "outbox.backoff.max=1s"});
  p.wait_ready();
  p.knobs(R"({"inventory.reserve":{"failNext":1,"retryAfter":999999999}})");
  auto id = p.create_order();
  CHECK(p.wait_status(id, "CONFIRMED", 15s) == "CONFIRMED");
  auto t = p.timeline(id);
  CHECK(t.str("/attempts/0/outcome") == "retryable");
  CHECK(t.num("/attempts/0/responseStatus") == 503);
  CHECK(t.str("/attempts/0/errorMessage").find("HTTP 503") == 0);
}

TEST_CASE_FIXTURE(
    engine_fixture,
    "a non-retryable answer dead-letters at once and the saga reverts shipping then inventory") {
  p.knobs(R"({"billing.charge":{"failNext":1,"failureStatus":400}})");
  p.create_order();
  auto id = p.create_order();
  CHECK(p.wait_status(id, "FAILED") == "FAILED");
  auto t = p.timeline(id);
  CHECK(attempts(t) ==
        std::vector<std::string>{"inventory:success", "fraudCheck:success", "shipping:success",
                                 "billing:non_retryable", "shipping.revert:success",
                                 "fraudCheck.revert:skipped", "inventory.revert:success"});
  CHECK(t.str("/events/0/status") == "DEAD");
  CHECK(t.str("/deadLetters/0/reason") == "NON_RETRYABLE_ERROR");
  CHECK(t.str("/deadLetters/0/status") == "PROCESSED");
  CHECK(t.str("/order/statusReason").find("billing: HTTP 400") == 0);
  auto ledger = p.ledger(id);
  auto shipment = ledger_entries(ledger, "shipping.domestic.create");
  auto reservation = ledger_entries(ledger, "inventory.reserve");
  REQUIRE(shipment.size() == 1);
  REQUIRE(reservation.size() == 1);
  CHECK(std::string((*shipment[0])["state"].GetString()) == "reverted");
  CHECK((*shipment[0])["revertRequests"].GetInt() == 1);
  CHECK(std::string((*reservation[0])["state"].GetString()) == "reverted");
  CHECK((*shipment[0])["revertedSeq"].GetInt64() < (*reservation[0])["revertedSeq"].GetInt64());
  CHECK(ledger_entries(ledger, "billing.charge").empty());
  check_consistent(p);
}

TEST_CASE("exhausted retries dead-letter the event with MAX_RETRIES_EXCEEDED") {
  outboxd_process p("exhausted", fresh_database("outboxd_e2e_exhausted"),
                    {"--set", "outbox.maxRetries=2"});
  p.wait_ready();
  p.knobs(R"({"highValue.process":{"failureRate":1.0,"failureStatus":503,"retryAfter":0}})");
  auto id = p.create_order("international");
  CHECK(p.wait_status(id, "FAILED") == "FAILED");
  auto t = p.timeline(id);
  auto a = attempts(t);
  CHECK(count(a, "billing:retryable") == 3);
  CHECK(t.str("/deadLetters/0/reason") == "MAX_RETRIES_EXCEEDED");
  CHECK(t.num("/events/0/attempts") == 3);
  CHECK(count(a, "shipping.revert:success") == 1);
  CHECK(count(a, "inventory.revert:success") == 1);
  check_consistent(p);
}

TEST_CASE("an ambiguous timeout is retried with the same Idempotency-Key and charges once") {
  outboxd_process p("late", fresh_database("outboxd_e2e_late"),
                    {"--set", "http.routes.billing.timeout=300ms"});
  p.wait_ready();
  p.knobs(R"({"billing.charge":{"lateRate":1.0,"lateMs":1000}})");
  p.create_order();
  auto id = p.create_order();
  CHECK(p.wait_status(id, "CONFIRMED") == "CONFIRMED");
  auto a = attempts(p.timeline(id));
  CHECK(count(a, "billing:retryable") >= 1);
  CHECK(count(a, "billing:success") == 1);
  auto ledger = p.ledger(id);
  auto charges = ledger_entries(ledger, "billing.charge");
  REQUIRE(charges.size() == 1);
  CHECK(std::string((*charges[0])["idempotencyKey"].GetString()).find(":billing") !=
        std::string::npos);
  check_consistent(p);
}

TEST_CASE("a charge left unanswered when retries ran out is settled by re-sending it, then "
          "refunded") {
  outboxd_process p("unanswered", fresh_database("outboxd_e2e_unanswered"),
                    {"--set", "http.routes.billing.timeout=300ms", "--set", "outbox.maxRetries=0"});
  p.wait_ready();
  // The charge is made but answered too late: the only attempt times out and the event is
  // dead-lettered with the charge applied.
  p.knobs(R"({"billing.charge":{"lateRate":1.0,"lateMs":1000}})");
  p.create_order();
  auto id = p.create_order();
  CHECK(p.wait_status(id, "FAILED") == "FAILED");
  auto a = attempts(p.timeline(id));
  CHECK(a == std::vector<std::string>{"inventory:success", "fraudCheck:success", "shipping:success",
                                      "billing:retryable", "billing:success",
                                      "billing.revert:success", "shipping.revert:success",
                                      "fraudCheck.revert:skipped", "inventory.revert:success"});
  auto ledger = p.ledger(id);
  auto charges = ledger_entries(ledger, "billing.charge");
  REQUIRE(charges.size() == 1);
  CHECK(std::string((*charges[0])["state"].GetString()) == "reverted");
  CHECK((*charges[0])["revertRequests"].GetInt() == 1);
  CHECK(logs(p, "billing may have been applied"));
  check_consistent(p);
}

TEST_CASE("a step refused for good is not re-sent by the compensation") {
  outboxd_process p("refused", fresh_database("outboxd_e2e_refused"));
  p.wait_ready();
  p.knobs(R"({"billing.charge":{"failNext":1,"failureStatus":422}})");
  p.create_order();
  auto id = p.create_order();
  CHECK(p.wait_status(id, "FAILED") == "FAILED");
  auto a = attempts(p.timeline(id));
  CHECK(count(a, "billing:non_retryable") == 1);
  CHECK(count(a, "billing:success") == 0);
  auto ledger = p.ledger(id);
  CHECK(ledger_entries(ledger, "billing.charge").empty());
  check_consistent(p);
}

TEST_CASE_FIXTURE(
    engine_fixture,
    "cancelling a confirmed order reverts billing, shipping and inventory in that order") {
  p.create_order();
  auto id = p.create_order();
  REQUIRE(p.wait_status(id, "CONFIRMED") == "CONFIRMED");
  auto first = p.client().post("/api/orders/" + std::to_string(id) + "/cancel",
                               R"({"reason":"changed my mind"})");
  auto second = p.client().post("/api/orders/" + std::to_string(id) + "/cancel", "");
  CHECK(first.status == 202);
  CHECK(second.status == 202);
  CHECK(p.wait_status(id, "CANCELLED") == "CANCELLED");
  auto a = attempts(p.timeline(id));
  std::vector<std::string> reverts;
  for (const auto& x : a)
    if (x.find(".revert:success") != std::string::npos)
      reverts.push_back(x);
  CHECK(reverts == std::vector<std::string>{"billing.revert:success", "shipping.revert:success",
                                            "inventory.revert:success"});
  auto ledger = p.ledger(id);
  CHECK(std::string((*ledger_entries(ledger, "billing.charge")[0])["state"].GetString()) ==
        "reverted");
  CHECK((*ledger_entries(ledger, "billing.charge")[0])["revertRequests"].GetInt() == 1);
  check_consistent(p);
}

TEST_CASE_FIXTURE(engine_fixture, "a cancellation waits for its order's retrying fan-out, then "
                                  "reverts exactly what was applied") {
  p.knobs(R"({"shipping.domestic.create":{"failNext":1,"retryAfter":1}})");
  p.create_order();
  auto id = p.create_order();
  // inventory and fraudCheck succeeded, shipping waits for its retry: cancel now.
  wait_until([&] { return attempts(p.timeline(id)).size() >= 3; }, 10s);
  CHECK(p.client().post("/api/orders/" + std::to_string(id) + "/cancel", "").status == 202);
  CHECK(p.wait_status(id, "CANCELLED") == "CANCELLED");
  auto ledger = p.ledger(id);
  for (const auto* op : {"inventory.reserve", "shipping.domestic.create", "billing.charge"}) {
    auto entries = ledger_entries(ledger, op);
    REQUIRE_MESSAGE(entries.size() == 1, op);
    CHECK_MESSAGE(std::string((*entries[0])["state"].GetString()) == "reverted", op);
  }
  check_consistent(p);
}

TEST_CASE_FIXTURE(engine_fixture,
                  "a revert that fails twice is retried and only the remaining steps run again") {
  p.knobs(R"({"billing.charge":{"failNext":1,"failureStatus":422},
              "shipping.domestic.cancel":{"failNext":2,"failureStatus":503,"retryAfter":0}})");
  p.create_order();
  auto id = p.create_order();
  CHECK(p.wait_status(id, "FAILED") == "FAILED");
  auto a = attempts(p.timeline(id));
  CHECK(count(a, "shipping.revert:retryable") == 2);
  CHECK(count(a, "shipping.revert:success") == 1);
  CHECK(count(a, "inventory.revert:success") == 1);
  auto ledger = p.ledger(id);
  auto reservation = ledger_entries(ledger, "inventory.reserve");
  CHECK((*reservation[0])["revertRequests"].GetInt() == 1);
  check_consistent(p);
}

TEST_CASE("a compensation that fails for good needs attention, and a redrive finishes it") {
  outboxd_process p("attention", fresh_database("outboxd_e2e_attention"),
                    {"--set", "dlq.maxRetries=1"});
  p.wait_ready();
  p.knobs(R"({"billing.charge":{"failNext":1,"failureStatus":400},
              "inventory.release":{"failureRate":1.0,"failureStatus":500,"retryAfter":0}})");
  p.create_order();
  auto id = p.create_order();
  CHECK(p.wait_status(id, "ATTENTION") == "ATTENTION");
  auto t = p.timeline(id);
  CHECK(t.str("/deadLetters/0/status") == "FAILED");
  CHECK(t.str("/deadLetters/0/revertError").find("inventory.revert") == 0);
  CHECK(logs(p, "order needs attention"));
  auto dlq_id = t.num("/deadLetters/0/id");
  p.knobs(R"({"inventory.release":{"failureRate":0}})");
  CHECK(p.client().post("/api/dlq/" + std::to_string(dlq_id) + "/retry", "").status == 202);
  CHECK(p.wait_status(id, "FAILED") == "FAILED");
  auto a = attempts(p.timeline(id));
  CHECK(count(a, "shipping.revert:success") == 1); // not reverted again on the redrive
  CHECK(count(a, "inventory.revert:success") == 1);
  check_consistent(p);
}

TEST_CASE("an operator resolves the revert that can never succeed; the other applied steps are "
          "still reverted, and the order ends FAILED") {
  auto conninfo = fresh_database("outboxd_e2e_resolve");
  outboxd_process p("resolve", conninfo);
  p.wait_ready();
  p.knobs(R"({"billing.charge":{"failNext":1,"failureStatus":400},
              "shipping.domestic.cancel":{"failureRate":1.0,"failureStatus":400}})");
  p.create_order();
  auto id = p.create_order();
  CHECK(p.wait_status(id, "ATTENTION") == "ATTENTION");
  auto t = p.timeline(id);
  auto a = attempts(t);
  CHECK(count(a, "shipping.revert:non_retryable") == 1);
  CHECK(count(a, "inventory.revert:success") == 0); // newest first: it stopped at shipping
  auto dlq_id = t.num("/deadLetters/0/id");
  auto resolved = p.client().post("/api/dlq/" + std::to_string(dlq_id) + "/resolve",
                                  R"({"reason":"shipment cancelled by phone"})");
  CHECK(resolved.status == 200);
  CHECK(resolved.str("/revertError") == "resolved by an operator: shipment cancelled by phone");
  CHECK(p.wait_status(id, "FAILED") == "FAILED");
  a = attempts(p.timeline(id));
  CHECK(count(a, "shipping.revert:skipped") == 1);
  CHECK(count(a, "fraudCheck.revert:skipped") == 1);
  CHECK(count(a, "inventory.revert:success") == 1);
  check_reservation_released(p, id);
  CHECK(query_value(conninfo, "SELECT status FROM dead_letter_events") == "PROCESSED");
}

TEST_CASE("a cancellation asked for during a compensation that then fails waits for the redrive "
          "instead of reverting around it") {
  outboxd_process p("attention-cancel", fresh_database("outboxd_e2e_attention_cancel"),
                    {"--set", "dlq.maxRetries=1"});
  p.wait_ready();
  p.knobs(R"({"billing.charge":{"failNext":1,"failureStatus":400},
              "inventory.release":{"failureRate":1.0,"failureStatus":500,"retryAfter":0,
                                   "latencyMs":1500}})");
  p.create_order();
  auto id = p.create_order();
  auto path = "/api/orders/" + std::to_string(id);
  REQUIRE(wait_until([&] { return p.timeline(id).json["deadLetters"].Size() == 1; }, 20s));
  CHECK(p.client().post(path + "/cancel", "").status == 202); // the order is still PENDING
  CHECK(p.wait_status(id, "ATTENTION") == "ATTENTION");
  // The cancellation waits while the failed dead letter is open: no second dead letter, no
  // revert of its own.
  std::this_thread::sleep_for(3s);
  auto t = p.timeline(id);
  CHECK(t.str("/order/status") == "ATTENTION");
  REQUIRE(t.json["deadLetters"].Size() == 1);
  CHECK(t.str("/deadLetters/0/status") == "FAILED");
  CHECK(t.str("/events/1/eventType") == "!OrderCreated");
  CHECK(t.str("/events/1/status") == "PENDING");
  p.knobs(R"({"inventory.release":{"failureRate":0,"latencyMs":0}})");
  CHECK(p.client()
            .post("/api/dlq/" + std::to_string(t.num("/deadLetters/0/id")) + "/retry", "")
            .status == 202);
  CHECK(p.wait_status(id, "FAILED") == "FAILED");
  // Then the cancellation runs, finds everything reverted, and leaves the order FAILED.
  REQUIRE(wait_until([&] { return p.timeline(id).str("/events/1/status") == "PROCESSED"; }, 20s));
  t = p.timeline(id);
  CHECK(t.str("/order/status") == "FAILED");
  CHECK(t.json["deadLetters"].Size() == 1);
  auto a = attempts(t);
  CHECK(count(a, "inventory.revert:success") == 1);
  CHECK(count(a, "shipping.revert:success") == 1);
  check_consistent(p);
}

TEST_CASE_FIXTURE(
    engine_fixture,
    "the listener reconnects after its backend is killed and wakes the workers again") {
  REQUIRE(wait_until([&] { return p.output().find("listening on") != std::string::npos; }, 10s));
  query_value(cluster_conninfo() + " dbname=outboxd_e2e_engine",
              "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
              "application_name = 'outboxd-listener'");
  REQUIRE(wait_until([&] { return p.output().find("reconnected; listening") != std::string::npos; },
                     15s));
  auto id = p.create_order();
  CHECK(p.wait_status(id, "CONFIRMED", 10s) == "CONFIRMED");
}

TEST_CASE("SIGTERM during a call finishes it, and a restart completes the order once") {
  simulator_process sim; // the outside world outlives the outboxd process
  outboxd_process p("sigterm", fresh_database("outboxd_e2e_sigterm"), sim.outboxd_args());
  p.use_simulator(sim.port);
  p.wait_ready();
  p.knobs(R"({"billing.charge":{"latencyMs":1500}})");
  p.create_order();
  auto id = p.create_order();
  REQUIRE(wait_until([&] { return attempts(p.timeline(id)).size() == 3; }, 10s));
  CHECK(p.stop() == 0);
  auto out = p.output();
  CHECK(out.find("engine stopped") != std::string::npos);
  // The billing call in flight was finished and recorded before the process exited.
  CHECK(out.find("→ billing POST") != std::string::npos);
  p.restart();
  p.wait_ready();
  CHECK(p.wait_status(id, "CONFIRMED") == "CONFIRMED");
  auto ledger = p.ledger(id);
  CHECK(ledger_entries(ledger, "billing.charge").size() == 1);
  CHECK(ledger.json["duplicates"].Size() == 0);
}

TEST_CASE("a cancellation that cannot revert needs attention, and a redrive cancels the order") {
  outboxd_process p("cancel-attention", fresh_database("outboxd_e2e_cancel_attention"),
                    {"--set", "outbox.maxRetries=1"});
  p.wait_ready();
  p.create_order();
  auto id = p.create_order();
  REQUIRE(p.wait_status(id, "CONFIRMED") == "CONFIRMED");
  p.knobs(R"({"billing.refund":{"failureRate":1.0,"failureStatus":503,"retryAfter":0}})");
  CHECK(
      p.client()
          .post("/api/orders/" + std::to_string(id) + "/cancel", R"({"reason":"found it cheaper"})")
          .status == 202);
  CHECK(p.wait_status(id, "ATTENTION") == "ATTENTION");
  auto t = p.timeline(id);
  REQUIRE(t.json["deadLetters"].Size() == 1);
  CHECK(t.str("/deadLetters/0/reason") == "CANCELLATION_FAILED");
  CHECK(t.str("/deadLetters/0/status") == "FAILED");
  CHECK(t.str("/deadLetters/0/eventType") == "!OrderCreated");
  CHECK(t.json["deadLetters"][0]["resolvedAt"].IsNull()); // it waits for an operator
  CHECK(t.str("/deadLetters/0/revertError").find("billing.revert") == 0);
  CHECK(t.str("/order/statusReason").find("billing.revert") == 0);
  p.knobs(R"({"billing.refund":{"failureRate":0}})");
  auto dlq = t.num("/deadLetters/0/id");
  CHECK(p.client().post("/api/dlq/" + std::to_string(dlq) + "/retry", "").status == 202);
  CHECK(p.wait_status(id, "CANCELLED") == "CANCELLED");
  // Done at last, the order has the user's reason again, not the error that needed an operator.
  CHECK(p.timeline(id).str("/order/statusReason") == "found it cheaper");
  auto ledger = p.ledger(id);
  for (const auto* op : {"inventory.reserve", "shipping.domestic.create", "billing.charge"}) {
    auto entries = ledger_entries(ledger, op);
    REQUIRE_MESSAGE(entries.size() == 1, op);
    CHECK_MESSAGE(std::string((*entries[0])["state"].GetString()) == "reverted", op);
  }
  check_consistent(p);
}

TEST_CASE("a failed cancellation's dead letter lists its reverts, and resolving it settles the "
          "failed revert and still reverts the other steps") {
  auto conninfo = fresh_database("outboxd_e2e_cancel_resolve");
  outboxd_process p("cancel-resolve", conninfo);
  p.wait_ready();
  p.create_order();
  auto id = p.create_order();
  REQUIRE(p.wait_status(id, "CONFIRMED") == "CONFIRMED");
  p.knobs(R"({"shipping.domestic.cancel":{"failureRate":1.0,"failureStatus":400}})");
  CHECK(p.client().post("/api/orders/" + std::to_string(id) + "/cancel", "").status == 202);
  CHECK(p.wait_status(id, "ATTENTION") == "ATTENTION");
  auto t = p.timeline(id);
  REQUIRE(t.json["deadLetters"].Size() == 1);
  const auto dlq = std::to_string(t.num("/deadLetters/0/id"));
  const auto cancellation = std::to_string(t.num("/deadLetters/0/originalEventId"));
  // The log follows the cancellation by the order's id and names the dead letter to act on.
  const auto order = "order " + std::to_string(id);
  CHECK(contains(p.output(), "event " + cancellation + " !OrderCreated " + order +
                                 ": cancelling, reverting what event "));
  CHECK(contains(p.output(), order + " (!OrderCreated): revert shipping POST "));
  CHECK(contains(p.output(), "; dead letter " + dlq +
                                 " (CANCELLATION_FAILED) waits for an operator to redrive or "
                                 "resolve it"));
  // Its reverts are recorded under the event it cancels; its views list them all the same.
  for (const auto& view : {"/api/dlq/" + dlq, "/api/outbox/events/" + cancellation}) {
    CAPTURE(view);
    auto d = p.client().get(view);
    REQUIRE(d.status == 200);
    auto listed = attempts(d);
    CHECK(count(listed, "billing.revert:success") == 1);
    CHECK(count(listed, "shipping.revert:non_retryable") == 1);
    CHECK(count(listed, "inventory.reserve:success") == 0); // the forward calls are not its own
  }
  p.knobs(R"({"shipping.domestic.cancel":{"failureRate":0}})"); // it was cancelled by phone
  auto resolved = p.client().post("/api/dlq/" + dlq + "/resolve",
                                  R"({"reason":"shipment cancelled by phone"})");
  CHECK(resolved.status == 200);
  CHECK(resolved.str("/status") == "PENDING"); // the compensation goes on
  CHECK(p.wait_status(id, "CANCELLED") == "CANCELLED");
  auto a = attempts(p.timeline(id));
  CHECK(count(a, "shipping.revert:skipped") == 1);
  CHECK(count(a, "shipping.revert:success") == 0); // settled by the operator, not called again
  CHECK(count(a, "inventory.revert:success") == 1);
  check_reservation_released(p, id);
  CHECK(query_value(conninfo, "SELECT status FROM dead_letter_events") == "PROCESSED");
}

TEST_CASE("resolving a cancellation whose refund was held back past its time budget settles the "
          "refund, not an old failure of the fan-out") {
  auto conninfo = fresh_database("outboxd_e2e_resolve_held");
  outboxd_process p("resolve-held", conninfo,
                    {"--set", "http.routes.billing.retryFor=2s", "--set",
                     "http.routes.billing.circuitBreaker.failureThreshold=1", "--set",
                     "http.routes.billing.circuitBreaker.openFor=8s", "--set",
                     "http.routes.billing.circuitBreaker.maxOpenFor=8s"});
  p.wait_ready();
  // The order's shipping failed once, then went through: its fan-out has a failed row.
  p.knobs(R"({"shipping.domestic.create":{"failNext":1,"retryAfter":0}})");
  auto id = p.create_order();
  REQUIRE(p.wait_status(id, "CONFIRMED") == "CONFIRMED");
  // Billing goes down: another order's charge opens its circuit, and the refund of the
  // cancellation is held back until its retryFor is spent, without a call.
  p.knobs(R"({"billing.charge":{"failureRate":1.0,"failureStatus":503,"retryAfter":0}})");
  p.create_order();
  REQUIRE(wait_until(
      [&] {
        return p.client().get("/api/outbox/stats").str("/destinations/billing/circuit") == "open";
      },
      20s));
  CHECK(p.client().post("/api/orders/" + std::to_string(id) + "/cancel", "").status == 202);
  REQUIRE(p.wait_status(id, "ATTENTION", 40s) == "ATTENTION");
  auto t = p.timeline(id);
  REQUIRE(t.json["deadLetters"].Size() == 1);
  const auto dlq = std::to_string(t.num("/deadLetters/0/id"));
  CHECK(query_value(conninfo, "SELECT failed_step FROM dead_letter_events WHERE id = " + dlq) ==
        "billing.revert");
  auto resolved =
      p.client().post("/api/dlq/" + dlq + "/resolve", R"({"reason":"refunded by hand"})");
  CHECK(resolved.status == 200);
  // The refund is the operator's; the shipment and the reservation are still undone.
  CHECK(p.wait_status(id, "CANCELLED", 30s) == "CANCELLED");
  auto a = attempts(p.timeline(id));
  CHECK(count(a, "billing.revert:skipped") == 1);
  CHECK(count(a, "shipping.revert:skipped") == 0);
  CHECK(count(a, "shipping.revert:success") == 1);
  CHECK(count(a, "inventory.revert:success") == 1);
}

TEST_CASE("with LISTEN/NOTIFY off, the safety poll still delivers every event") {
  outboxd_process p(
      "polling", fresh_database("outboxd_e2e_polling"),
      {"--set", "outbox.useListenNotify=false", "--set", "outbox.pollInterval=200ms"});
  p.wait_ready();
  auto id = p.create_order();
  CHECK(p.wait_status(id, "CONFIRMED", 10s) == "CONFIRMED");
  CHECK(p.output().find("no listener (polling only)") != std::string::npos);
  CHECK(p.output().find("pg-listener") == std::string::npos);
}

TEST_CASE_FIXTURE(engine_fixture,
                  "metrics count claims, processed events, calls by outcome and compensations "
                  "and time the claims") {
  p.knobs(R"({"billing.charge":{"failNext":1,"failureStatus":400}})");
  p.create_order();
  auto failed = p.create_order();
  CHECK(p.wait_status(failed, "FAILED") == "FAILED");
  auto m = p.client().get("/metrics").body;
  CHECK(m.find("outboxd_events_claimed_total{event_type=\"OrderCreated\"} 2") != std::string::npos);
  CHECK(m.find("outboxd_events_processed_total{event_type=\"OrderCreated\"} 1") !=
        std::string::npos);
  CHECK(m.find("outboxd_events_dead_lettered_total{event_type=\"OrderCreated\",reason=\"NON_"
               "RETRYABLE_ERROR\"} 1") != std::string::npos);
  CHECK(
      m.find(
          "outboxd_destination_calls_total{destination=\"billing\",outcome=\"non_retryable\"} 1") !=
      std::string::npos);
  CHECK(m.find("outboxd_destination_calls_total{destination=\"shipping.revert\",outcome="
               "\"success\"} 1") != std::string::npos);
  CHECK(m.find("outboxd_compensations_total{kind=\"dead_letter\",outcome=\"reverted\"} 1") !=
        std::string::npos);
  CHECK(
      m.find("outboxd_destination_call_seconds_bucket{destination=\"inventory\",le=\"+Inf\"} 2") !=
      std::string::npos);
  // every claim is timed, those that found nothing too
  CHECK(m.find("outboxd_claim_seconds_bucket{queue=\"outbox\",le=\"0.05\"}") != std::string::npos);
  CHECK(m.find("outboxd_claim_seconds_count{queue=\"dead_letter\"}") != std::string::npos);
  // the slots the runs held, on both queues (the failed order was compensated)
  CHECK(m.find("outboxd_processor_busy_slot_seconds_total{queue=\"outbox\"} ") !=
        std::string::npos);
  CHECK(m.find("outboxd_processor_busy_slot_seconds_total{queue=\"dead_letter\"} ") !=
        std::string::npos);
  // the two orders were posted one after the other: a batch each
  CHECK(m.find("outboxd_intake_batch_orders_bucket{le=\"1\"} 2\n") != std::string::npos);
  CHECK(m.find("outboxd_intake_batch_orders_sum 2\n") != std::string::npos);
}
