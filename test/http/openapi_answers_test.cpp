// docs/openapi.json against real answers: the API server on loopback over a real PostgreSQL, with
// the in-process simulator and the consistency route wired as serve wires them. Every documented
// operation is called, successes and the main errors, and every answer must fit the document.
#include "http/api_server.hpp"
#include "http/errors.hpp"
#include "persistence/audit_repository.hpp"
#include "persistence/connection_pool.hpp"
#include "persistence/dead_letter_admin.hpp"
#include "persistence/order_repository.hpp"
#include "persistence/outbox_admin.hpp"
#include "persistence/statements.hpp"
#include "simulator/consistency_route.hpp"
#include "simulator/simulator.hpp"
#include "test/support/http_client.hpp"
#include "test/support/openapi.hpp"
#include "test/support/test_db.hpp"

#include <doctest/doctest.h>
#include <fstream>
#include <pqxx/pqxx>
#include <rapidjson/document.h>
#include <rapidjson/pointer.h>
#include <set>

using namespace outboxd;
using namespace outboxd::test;

namespace {

const lazy_database db("outboxd_http_openapi");

constexpr const char* token = "s3cret";
const std::map<std::string, std::string> bearer{{"Authorization", "Bearer s3cret"}};

constexpr const char* valid_order =
    R"({"customerId":"C-1","totalAmount":99.99,"shippingType":"domestic","items":[{"sku":"A","quantity":2}]})";

struct openapi_fixture {
  openapi_fixture() {
    truncate_all(db());
    conf::server_settings s;
    s.port = 0;
    s.threads = 8;
    s.max_body_bytes = 64 * 1024;
    server = std::make_unique<http::api_server>(
        s, http::access_policy({}, token, {}),
        http::api_dependencies{orders, dead_letters, outbox, [this] {
                                 http::readiness_report r;
                                 r.checks.emplace_back("database", database_state);
                                 r.checks.emplace_back("listener", "ok");
                                 return r;
                               }});
    sim.install(server->registry());
    simulator::install_consistency_route(server->registry(), audit,
                                         [this] { return sim.ledger(); });
    port = server->bind();
    server->start();
    client = std::make_unique<http_client>(port);
    client->set_default_headers(bearer); // the admin token: every route needs one
    anonymous = std::make_unique<http_client>(port);
  }
  ~openapi_fixture() {
    client.reset();
    anonymous.reset();
    sim.stop();
    server->stop();
  }

  /// Checks one answer against the document and remembers that the operation answered `status`.
  void expect(const char* method, const char* path_template, const http_response& r) {
    CAPTURE(r.body);
    auto problem =
        validate_response(method, path_template, r.status, r.body, r.header("Content-Type"));
    CHECK_MESSAGE(problem.empty(), problem);
    CHECK_MESSAGE(!r.header("X-Request-Id").empty(), method, " ", path_template, " -> ", r.status);
    answered.insert({{method, path_template}, r.status});
  }

  void expect(const char* method, const char* path_template, const http_response& r, int status) {
    CHECK_MESSAGE(r.status == status, method, " ", path_template, ": ", r.body);
    expect(method, path_template, r);
  }

  void sql(const std::string& statement) {
    pqxx::connection c(db());
    pqxx::work tx(c);
    tx.exec(statement);
    tx.commit();
  }

  /// Attempts of every shape for event `event_id`: a success with a JSON answer, a retryable
  /// answer that was not JSON, a call that got no answer, a skipped step, and an answer kept
  /// as bytes.
  void add_attempts(std::int64_t event_id, std::int64_t order) {
    auto o = std::to_string(order);
    auto e = std::to_string(event_id);
    sql("INSERT INTO aggregate_results (event_id, aggregate_id, event_type, destination, "
        "fanout_order, attempt, endpoint_url, http_method, idempotency_key, request_payload, "
        "response_status, response_payload, response_text, outcome, error_message, duration_ms) "
        "VALUES (" +
        e + ", '" + o +
        "', 'OrderCreated', 'inventory', 0, 1, 'http://127.0.0.1/api/inventory/"
        "reserve', 'POST', '" +
        e +
        ":inventory', '{\"items\": []}', 200, '{\"reservationId\": \"RES-1\"}', NULL, "
        "'success', NULL, 12), (" +
        e + ", '" + o +
        "', 'OrderCreated', 'billing', 3, 1, 'http://127.0.0.1/api/billing', "
        "'POST', NULL, '{\"amount\": 1}', 503, NULL, 'busy', 'retryable', "
        "'HTTP 503: busy', 7), (" +
        e + ", '" + o +
        "', 'OrderCreated', 'shipping', 2, 2, 'http://127.0.0.1/api/ship', "
        "'POST', NULL, '[1, 2]', NULL, NULL, NULL, 'retryable', 'timed out', "
        "NULL), (" +
        e + ", '" + o +
        "', 'OrderCreated', 'fraudCheck', 1, 1, 'http://127.0.0.1/api/fraud', "
        "'POST', NULL, NULL, NULL, '\"text\"', NULL, 'skipped', NULL, NULL)");
    // An answer kept as bytes (not UTF-8), with its content type, cut at the size limit.
    sql("INSERT INTO aggregate_results (event_id, aggregate_id, event_type, destination, "
        "fanout_order, attempt, endpoint_url, http_method, response_status, outcome, "
        "error_message, duration_ms, response_body, response_content_type, response_truncated) "
        "VALUES (" +
        e + ", '" + o +
        "', 'OrderCreated', 'billing', 3, 2, 'http://127.0.0.1/api/billing', 'POST', 502, "
        "'retryable', 'HTTP 502: \xEF\xBF\xBD', 4, '\\x89504e47000a'::bytea, 'image/png', true)");
  }

  /// A dead letter in `status` for order `order`'s OrderCreated; returns its id.
  std::int64_t add_dead_letter(std::int64_t order, const char* status) {
    pqxx::connection c(db());
    pqxx::work tx(c);
    auto id =
        tx.exec_params1("INSERT INTO dead_letter_events (original_event_id, aggregate_type, "
                        "aggregate_id, event_type, payloads, reason, last_error, status, attempts, "
                        "revert_error) SELECT id, 'order', aggregate_id, event_type, payloads, "
                        "'MAX_RETRIES_EXCEEDED', 'billing: HTTP 503', $2, 4, 'refund refused' FROM "
                        "outbox_events WHERE aggregate_id = $1 AND event_type = 'OrderCreated' "
                        "RETURNING id",
                        std::to_string(order), status)[0]
            .as<std::int64_t>();
    tx.commit();
    return id;
  }

  std::int64_t create(const std::string& customer) {
    auto r =
        client->post("/api/orders", R"({"customerId":")" + customer +
                                        R"(","totalAmount":12.5,"shippingType":"international"})");
    REQUIRE(r.status == 201);
    return r.num("/id");
  }

  persistence::connection_pool pool{db(), 4, persistence::pooled_statements()};
  persistence::order_repository orders{pool};
  persistence::dead_letter_admin dead_letters{pool};
  persistence::outbox_admin outbox{pool};
  persistence::audit_repository audit{pool};
  simulator::simulator sim{conf::simulator_settings{}};
  std::string database_state = "ok";
  std::unique_ptr<http::api_server> server;
  int port = 0;
  std::unique_ptr<http_client> client;
  std::unique_ptr<http_client> anonymous; // sends no token
  std::set<std::pair<std::pair<std::string, std::string>, int>> answered;
};

} // namespace

TEST_CASE("the OpenAPI document lists the server's operations") {
  const std::set<openapi_operation> expected = {{"GET", "/api/admin/consistency"},
                                                {"GET", "/api/dlq"},
                                                {"GET", "/api/dlq/{id}"},
                                                {"POST", "/api/dlq/{id}/retry"},
                                                {"POST", "/api/dlq/{id}/resolve"},
                                                {"GET", "/api/orders"},
                                                {"POST", "/api/orders"},
                                                {"DELETE", "/api/orders/{id}"},
                                                {"GET", "/api/orders/{id}"},
                                                {"POST", "/api/orders/{id}/cancel"},
                                                {"PUT", "/api/orders/{id}/status"},
                                                {"GET", "/api/outbox/events"},
                                                {"GET", "/api/outbox/events/{id}"},
                                                {"GET", "/api/outbox/fanout"},
                                                {"GET", "/api/outbox/stats"},
                                                {"GET", "/api/simulator/config"},
                                                {"PUT", "/api/simulator/config"},
                                                {"GET", "/api/simulator/ledger"},
                                                {"POST", "/api/simulator/reset"},
                                                {"GET", "/healthz"},
                                                {"GET", "/metrics"},
                                                {"GET", "/readyz"}};
  auto listed = openapi_operations();
  CHECK(std::set<openapi_operation>(listed.begin(), listed.end()) == expected);
  CHECK(listed.size() == expected.size());
}

TEST_CASE("the Error schema lists every error code the server answers with") {
  std::ifstream file(std::string(OUTBOXD_SOURCE_DIR) + "/docs/openapi.json");
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  rapidjson::Document d;
  d.Parse(text.c_str());
  const auto* listed =
      rapidjson::Pointer("/components/schemas/Error/properties/error/properties/code/enum").Get(d);
  REQUIRE(listed != nullptr);
  std::set<std::string> documented;
  for (const auto& code : listed->GetArray())
    documented.insert(code.GetString());
#define OUTBOXD_ERROR_CODE(name, status) #name,
  const std::set<std::string> answered = {OUTBOXD_API_ERROR_KINDS(OUTBOXD_ERROR_CODE)};
#undef OUTBOXD_ERROR_CODE
  CHECK(documented == answered);
}

TEST_CASE("validate_response reports what breaks the schema, so the answers test cannot pass "
          "vacuously") {
  const char* order = R"({"id":1,"customerId":"C-1","totalAmount":99.99,"currency":"USD",)"
                      R"("shippingType":"domestic","status":"PENDING","statusReason":null,)"
                      R"("createdAt":"2026-01-01T00:00:00Z","updatedAt":"2026-01-01T00:00:00Z"})";
  CHECK(validate_response("POST", "/api/orders", 201, order) == "");
  CHECK(validate_response("post", "/api/orders", 201, order, "application/json") == "");

  auto missing = validate_response("POST", "/api/orders", 201, R"({"id":1,"customerId":"C-1"})");
  CHECK(missing.find("POST /api/orders -> 201") != std::string::npos);
  CHECK(missing.find("required field(s) missing: ") != std::string::npos);
  CHECK(missing.find("totalAmount") != std::string::npos);

  std::string wrong_status = order;
  wrong_status.replace(wrong_status.find("PENDING"), 7, "LOST");
  auto bad_enum = validate_response("POST", "/api/orders", 201, wrong_status);
  CHECK(bad_enum.find("/status") != std::string::npos);
  CHECK(bad_enum.find("\"LOST\" is not one of") != std::string::npos);

  auto not_nullable = std::string(order);
  not_nullable.replace(not_nullable.find(R"("customerId":"C-1")"), 18, R"("customerId":null)");
  auto bad_type = validate_response("POST", "/api/orders", 201, not_nullable);
  CHECK(bad_type.find("/customerId: is null") != std::string::npos);

  auto extra = std::string(order);
  extra.insert(1, R"("secret":true,)");
  auto unknown = validate_response("POST", "/api/orders", 201, extra);
  CAPTURE(unknown);
  CHECK(unknown.find("/secret: a field the schema does not allow") != std::string::npos);

  // Nested: an attempt inside a timeline, and the oneOf of the error details.
  auto nested =
      validate_response("GET", "/api/orders/{id}", 200,
                        std::string(R"({"order":)") + order +
                            R"(,"events":[],"deadLetters":[],"attempts":[{"id":"seven"}]})");
  CHECK(nested.find("/attempts/0") != std::string::npos);
  auto details = validate_response(
      "GET", "/api/orders", 422,
      R"({"error":{"code":"validation_failed","message":"m","details":[{"field":"limit"}]}})");
  CHECK(details.find("/error/details") != std::string::npos);
  CHECK(details.find("alternative 0") != std::string::npos);
  CHECK(validate_response("GET", "/api/orders", 422,
                          R"({"error":{"code":"validation_failed","message":"m","details":)"
                          R"([{"field":"limit","message":"too big"}]}})") == "");
  CHECK(validate_response("GET", "/api/orders", 422, R"({"error":{"code":"nope","message":"m"}})")
            .find("\"nope\" is not one of") != std::string::npos);

  // Each error status has its own codes.
  auto wrong_code = validate_response("GET", "/api/orders/{id}", 404,
                                      R"({"error":{"code":"invalid_transition","message":"m"}})");
  CAPTURE(wrong_code);
  CHECK(wrong_code.find("alternative 1: /error/code: \"invalid_transition\" is not one of "
                        "[\"not_found\"]") != std::string::npos);
  CHECK(validate_response("GET", "/api/orders/{id}", 404,
                          R"({"error":{"code":"not_found","message":"m"}})") == "");

  // Statuses, paths, bodies and media types the document does not have.
  CHECK(validate_response("GET", "/api/orders", 418, "{}").find("not documented") !=
        std::string::npos);
  CHECK(validate_response("GET", "/api/nothing", 200, "{}").find("not in") != std::string::npos);
  CHECK(validate_response("PATCH", "/api/orders", 200, "{}").find("method") != std::string::npos);
  CHECK(validate_response("DELETE", "/api/orders/{id}", 204, "{}").find("no body") !=
        std::string::npos);
  CHECK(validate_response("GET", "/healthz", 200, "ok").find("not JSON") != std::string::npos);
  CHECK(validate_response("GET", "/healthz", 200, R"({"status":"ok"})", "text/html")
            .find("Content-Type") != std::string::npos);
  CHECK(validate_response("GET", "/metrics", 200, "# anything\n", "text/plain; version=0.0.4") ==
        "");
}

TEST_CASE_FIXTURE(openapi_fixture, "every documented operation answers what the document says") {
  // An empty database first: no lag, empty pages, a ledger with nothing in it.
  expect("GET", "/api/outbox/stats", client->get("/api/outbox/stats"), 200);
  expect("GET", "/api/orders", client->get("/api/orders"), 200);
  expect("GET", "/api/simulator/ledger", client->get("/api/simulator/ledger"), 200);
  expect("GET", "/api/admin/consistency", client->get("/api/admin/consistency"), 200);

  // Orders.
  auto created = client->post("/api/orders", valid_order, {{"Idempotency-Key", "oa-1"}});
  expect("POST", "/api/orders", created, 201);
  CHECK_FALSE(created.header("Location").empty());
  auto replayed = client->post("/api/orders", valid_order, {{"Idempotency-Key", "oa-1"}});
  expect("POST", "/api/orders", replayed, 201);
  CHECK(replayed.header("Idempotent-Replayed") == "true");
  expect("POST", "/api/orders",
         client->post("/api/orders",
                      R"({"customerId":"C-2","totalAmount":5,"shippingType":"domestic"})",
                      {{"Idempotency-Key", "oa-1"}}),
         422);
  expect("POST", "/api/orders",
         client->post("/api/orders", valid_order, {{"Idempotency-Key", "has space"}}), 422);
  expect("POST", "/api/orders", client->post("/api/orders", R"({"totalAmount":-1,"x":1})"), 422);
  expect("POST", "/api/orders", client->post("/api/orders", "[]"), 422);
  expect("POST", "/api/orders", client->post("/api/orders", R"({"customerId":)"), 400);
  expect("POST", "/api/orders", client->post("/api/orders", ""), 400);
  expect("POST", "/api/orders", client->post("/api/orders", valid_order, {}, "text/plain"), 415);
  expect("POST", "/api/orders",
         client->post("/api/orders", R"({"customerId":")" + std::string(70 * 1024, 'x') + "\"}"),
         413);

  auto first = created.num("/id");
  auto second = create("C-2");
  auto third = create("C-3");
  auto id = [](std::int64_t n) { return std::to_string(n); };

  expect("GET", "/api/orders", client->get("/api/orders?limit=2"), 200);
  CHECK(client->get("/api/orders?limit=2").str("/nextCursor") == id(second));
  expect("GET", "/api/orders", client->get("/api/orders?limit=2&cursor=" + id(second)), 200);
  expect("GET", "/api/orders", client->get("/api/orders?status=PENDING"), 200);
  expect("GET", "/api/orders", client->get("/api/orders?limit=0&status=NOPE&cursor=x"), 422);

  // Events, attempts and dead letters of every shape.
  auto event = std::stoll(
      query_value(db(), "SELECT id FROM outbox_events WHERE aggregate_id = '" + id(first) + "'"));
  add_attempts(event, first);
  sql("UPDATE outbox_events SET status = 'PROCESSING', attempts = 2, lease_owner = 'w-1', "
      "lease_expires_at = now() + interval '30 seconds', last_error = 'billing: HTTP 503', "
      "next_retry_at = now() WHERE id = " +
      id(event));
  sql("UPDATE outbox_events SET status = 'PROCESSED', processed_at = now() WHERE aggregate_id = '" +
      id(third) + "'");
  auto failed = add_dead_letter(second, "FAILED");
  auto pending = add_dead_letter(first, "PENDING");
  sql("UPDATE dead_letter_events SET next_retry_at = now(), resolved_at = now() WHERE id = " +
      id(pending));

  expect("GET", "/api/orders/{id}", client->get("/api/orders/" + id(first)), 200);
  expect("GET", "/api/orders/{id}", client->get("/api/orders/" + id(second)), 200);
  expect("GET", "/api/orders/{id}", client->get("/api/orders/999"), 404);
  expect("GET", "/api/orders/{id}", client->get("/api/orders/abc"), 404);

  expect("GET", "/api/outbox/stats", client->get("/api/outbox/stats"), 200);
  expect("GET", "/api/outbox/events", client->get("/api/outbox/events"), 200);
  expect("GET", "/api/outbox/events",
         client->get("/api/outbox/events?status=PROCESSING&aggregateId=" + id(first) +
                     "&eventType=OrderCreated&limit=1"),
         200);
  expect("GET", "/api/outbox/events", client->get("/api/outbox/events?status=DONE"), 422);
  expect("GET", "/api/outbox/events/{id}", client->get("/api/outbox/events/" + id(event)), 200);
  expect("GET", "/api/outbox/events/{id}", client->get("/api/outbox/events/424242"), 404);

  expect("GET", "/api/dlq", client->get("/api/dlq"), 200);
  expect("GET", "/api/dlq", client->get("/api/dlq?status=FAILED&limit=1"), 200);
  expect("GET", "/api/dlq", client->get("/api/dlq?status=BROKEN"), 422);
  expect("GET", "/api/dlq/{id}", client->get("/api/dlq/" + id(failed)), 200);
  expect("GET", "/api/dlq/{id}", client->get("/api/dlq/" + id(pending)), 200);
  expect("GET", "/api/dlq/{id}", client->get("/api/dlq/999"), 404);
  auto retry = "/api/dlq/" + id(failed) + "/retry";
  expect("POST", "/api/dlq/{id}/retry", anonymous->post(retry, ""), 401);
  expect("POST", "/api/dlq/{id}/retry", client->post(retry, "", bearer), 202);
  expect("POST", "/api/dlq/{id}/retry", client->post(retry, "", bearer), 409);
  expect("POST", "/api/dlq/{id}/retry", client->post("/api/dlq/999/retry", "", bearer), 404);
  auto resolve = "/api/dlq/" + id(add_dead_letter(third, "FAILED")) + "/resolve";
  const std::string by_hand = R"({"reason":"refunded in the billing console"})";
  expect("POST", "/api/dlq/{id}/resolve", anonymous->post(resolve, by_hand), 401);
  expect("POST", "/api/dlq/{id}/resolve", client->post(resolve, "{}", bearer), 422);
  expect("POST", "/api/dlq/{id}/resolve", client->post(resolve, R"({"reason":" "})", bearer), 422);
  expect("POST", "/api/dlq/{id}/resolve", client->post(resolve, by_hand, bearer), 200);
  expect("POST", "/api/dlq/{id}/resolve", client->post(resolve, by_hand, bearer), 409);
  expect("POST", "/api/dlq/{id}/resolve", client->post("/api/dlq/999/resolve", by_hand, bearer),
         404);

  // Commands.
  sql("UPDATE orders SET order_status = 'CONFIRMED' WHERE id = " + id(third));
  auto status = "/api/orders/" + id(third) + "/status";
  expect("PUT", "/api/orders/{id}/status", client->put(status, R"({"status":"SHIPPED"})"), 200);
  expect("PUT", "/api/orders/{id}/status", client->put(status, R"({"status":"SHIPPED"})"), 200);
  expect("PUT", "/api/orders/{id}/status",
         client->put("/api/orders/" + id(first) + "/status", R"({"status":"DELIVERED"})"), 409);
  expect("PUT", "/api/orders/{id}/status", client->put(status, R"({"status":"CANCELLED"})"), 422);
  expect("PUT", "/api/orders/{id}/status", client->put(status, R"({"status":)"), 400);
  expect("PUT", "/api/orders/{id}/status",
         client->put(status, R"({"status":"SHIPPED"})", {}, "text/plain"), 415);
  expect("PUT", "/api/orders/{id}/status",
         client->put("/api/orders/999/status", R"({"status":"SHIPPED"})"), 404);

  auto cancel = "/api/orders/" + id(second) + "/cancel";
  expect("POST", "/api/orders/{id}/cancel", client->post(cancel, R"({"reason":"changed"})"), 202);
  expect("POST", "/api/orders/{id}/cancel", client->post(cancel, ""), 202);
  expect("POST", "/api/orders/{id}/cancel",
         client->post("/api/orders/" + id(third) + "/cancel", ""), 409);
  expect("POST", "/api/orders/{id}/cancel", client->post(cancel, R"({"reason":7})"), 422);
  expect("POST", "/api/orders/{id}/cancel", client->post(cancel, "{"), 400);
  expect("POST", "/api/orders/{id}/cancel", client->post(cancel, "{}", {}, "text/plain"), 415);
  expect("POST", "/api/orders/{id}/cancel", client->post("/api/orders/999/cancel", ""), 404);

  auto remove = "/api/orders/" + id(third);
  expect("DELETE", "/api/orders/{id}", client->del(remove, bearer), 409);
  expect("DELETE", "/api/orders/{id}", anonymous->del(remove), 401);
  sql("UPDATE orders SET order_status = 'DELIVERED' WHERE id = " + id(third));
  expect("DELETE", "/api/orders/{id}", client->del(remove, bearer), 204);
  expect("DELETE", "/api/orders/{id}", client->del(remove, bearer), 404);

  // The simulator: knobs of every shape, a ledger with reverts, duplicates and notifications.
  expect("GET", "/api/simulator/config", client->get("/api/simulator/config"), 200);
  auto knobs = R"({"seed": 7, "services": {"billing.charge": {"retryAfter": "Wed, 21 Oct 2015 )"
               R"(07:28:00 GMT", "latencyMs": [0, 1]}, "inventory.reserve": {"retryAfter": 3,)"
               R"( "latencyMs": 0, "failureRate": 0.25, "failNext": 0}}})";
  expect("PUT", "/api/simulator/config", client->put("/api/simulator/config", knobs, bearer), 200);
  expect("PUT", "/api/simulator/config", anonymous->put("/api/simulator/config", knobs), 401);
  expect("PUT", "/api/simulator/config",
         client->put("/api/simulator/config",
                     R"({"services": {"billing.charge": {"failureRate": 2, "colour": 1}}})",
                     bearer),
         422);
  expect("PUT", "/api/simulator/config", client->put("/api/simulator/config", "{", bearer), 400);
  expect("PUT", "/api/simulator/config",
         client->put("/api/simulator/config", "{}", bearer, "text/plain"), 415);
  expect("GET", "/api/simulator/config", client->get("/api/simulator/config"), 200);
  expect("PUT", "/api/simulator/config",
         client->put("/api/simulator/config",
                     R"({"services": {"inventory.reserve": {"failureRate": 0}}})", bearer),
         200);

  auto aggregate = std::map<std::string, std::string>{{"X-Aggregate-Id", id(first)}};
  auto reserved = client->post("/api/inventory/reserve", "{}", aggregate);
  REQUIRE(reserved.status == 200);
  REQUIRE(client->post("/api/inventory/reserve", "{}", aggregate).status == 200);
  REQUIRE(client
              ->del("/api/inventory/" + reserved.str("/reservationId") + "/release",
                    {{"X-Revert-Aggregate-Id", id(first)}})
              .status == 200);
  REQUIRE(client
              ->post("/api/notifications/shipping-confirmation",
                     R"({"orderId":)" + id(first) + R"(,"newStatus":"SHIPPED"})", aggregate)
              .status == 200);
  expect("GET", "/api/simulator/ledger", client->get("/api/simulator/ledger"), 200);
  CHECK(client->get("/api/simulator/ledger").json["duplicates"].Size() == 1);
  expect("GET", "/api/simulator/ledger",
         client->get("/api/simulator/ledger?aggregateId=" + id(first)), 200);
  // A CONFIRMED order with a reverted, duplicated reservation and no shipment: violations.
  sql("UPDATE orders SET order_status = 'CONFIRMED' WHERE id = " + id(first));
  auto report = client->get("/api/admin/consistency");
  expect("GET", "/api/admin/consistency", report, 200);
  CHECK(report.json["violations"].Size() > 0);
  expect("POST", "/api/simulator/reset", anonymous->post("/api/simulator/reset", ""), 401);
  expect("POST", "/api/simulator/reset", client->post("/api/simulator/reset", "", bearer), 200);

  // Health and metrics.
  expect("GET", "/healthz", client->get("/healthz"), 200);
  expect("GET", "/readyz", client->get("/readyz"), 200);
  database_state = "connection refused";
  expect("GET", "/readyz", client->get("/readyz"), 503);
  expect("GET", "/metrics", client->get("/metrics"), 200);

  // The fan-out table route is being added on another branch at the same time as this test.
  // Until it is merged the server has no such route (a generic 404): skip it then. Once merged,
  // it is checked like every other operation, and the coverage check below expects it.
  auto fanout = client->get("/api/outbox/fanout");
  bool fanout_served =
      !(fanout.status == 404 && fanout.str("/error/message").rfind("no route", 0) == 0);
  if (fanout_served)
    expect("GET", "/api/outbox/fanout", fanout, 200);
  else
    MESSAGE("GET /api/outbox/fanout is not served on this branch yet: not checked");

  // Every documented operation answered at least one success above.
  for (const auto& op : openapi_operations()) {
    if (op.path == "/api/outbox/fanout" && !fanout_served)
      continue;
    bool succeeded = std::any_of(answered.begin(), answered.end(), [&](const auto& a) {
      return a.first.first == op.method && a.first.second == op.path && a.second < 300;
    });
    CHECK_MESSAGE(succeeded, op.method, " ", op.path, " was never called successfully");
  }
}

TEST_CASE("a database that is down answers 503 as the document says") {
  persistence::connection_pool pool(
      persistence::make_conninfo("host=127.0.0.1 port=1 user=postgres", std::chrono::seconds(1)), 2,
      persistence::order_repository::statements());
  persistence::order_repository orders(pool);
  persistence::dead_letter_admin dead_letters(pool);
  persistence::outbox_admin outbox(pool);
  conf::server_settings s;
  s.port = 0;
  s.threads = 4;
  http::api_server server(s, {},
                          {orders, dead_letters, outbox, [] { return http::readiness_report{}; }});
  auto port = server.bind();
  server.start();
  http_client client(port);
  auto unavailable = [](const char* method, const char* path, const http_response& r) {
    CHECK_MESSAGE(r.status == 503, method, " ", path);
    CHECK_MESSAGE(validate_response(method, path, r.status, r.body, r.header("Content-Type")) == "",
                  method, " ", path);
  };
  unavailable("POST", "/api/orders", client.post("/api/orders", valid_order));
  unavailable("GET", "/api/orders", client.get("/api/orders"));
  unavailable("GET", "/api/outbox/stats", client.get("/api/outbox/stats"));
  auto metrics = client.get("/metrics");
  CHECK(metrics.status == 200);
  CHECK(validate_response("GET", "/metrics", 200, metrics.body, metrics.header("Content-Type")) ==
        "");
}
