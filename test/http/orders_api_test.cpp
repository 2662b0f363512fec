// The order API over real HTTP on loopback against a real PostgreSQL: every endpoint, every
// error status, and that refused requests write nothing.
#include "conf/loader.hpp"
#include "http/api_server.hpp"
#include "persistence/connection_pool.hpp"
#include "persistence/dead_letter_admin.hpp"
#include "persistence/order_repository.hpp"
#include "persistence/outbox_admin.hpp"
#include "persistence/statements.hpp"
#include "test/support/http_client.hpp"
#include "test/support/legacy_auth.hpp"
#include "test/support/raw_http.hpp"
#include "test/support/test_db.hpp"

#include <algorithm>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <pqxx/pqxx>
#include <rapidjson/pointer.h>

using namespace outboxd;
using namespace outboxd::test;
using namespace std::string_literals;

namespace {

const lazy_database db("outboxd_http_orders");

constexpr const char* valid_order =
    R"({"customerId":"C-1","totalAmount":99.99,"shippingType":"domestic","items":[{"sku":"A","quantity":1}]})";

struct server_fixture {
  explicit server_fixture(std::string admin_token = {}, domain::routing_table routing = {}) {
    truncate_all(db());
    conf::server_settings s;
    s.port = 0;
    s.threads = 8;
    s.max_body_bytes = 64 * 1024;
    server = std::make_unique<http::api_server>(
        s, admin_token_only(admin_token),
        http::api_dependencies{repo, dead_letters, outbox,
                               [this] {
                                 http::readiness_report r;
                                 r.checks.emplace_back("database", database_state);
                                 return r;
                               }},
        std::move(routing));
    port = server->bind();
    server->start();
    client = std::make_unique<http_client>(port);
  }

  /// Row counts of every table, to show a refused request wrote nothing.
  std::string table_counts() {
    return query_value(db(), "SELECT (SELECT count(*) FROM orders) || '/' || "
                             "(SELECT count(*) FROM outbox_events) || '/' || "
                             "(SELECT count(*) FROM orders WHERE deleted)");
  }

  std::int64_t create() {
    auto r = client->post("/api/orders", valid_order);
    REQUIRE(r.status == 201);
    return r.num("/id");
  }

  void force_status(std::int64_t id, const char* status) {
    pqxx::connection c(db());
    pqxx::work tx(c);
    tx.exec_params("UPDATE orders SET order_status = $2 WHERE id = $1", id, status);
    tx.commit();
  }

  persistence::connection_pool pool{db(), 4, persistence::pooled_statements()};
  persistence::order_repository repo{pool};
  persistence::dead_letter_admin dead_letters{pool};
  persistence::outbox_admin outbox{pool};
  std::string database_state = "ok";
  std::unique_ptr<http::api_server> server;
  int port = 0;
  std::unique_ptr<http_client> client;
};

struct admin_fixture : server_fixture {
  admin_fixture() : server_fixture("s3cret") {}
};

/// A fan-out unlike the shipped one: another order, a destination without revert, one whose
/// second route has the revert.
domain::routing_table test_routing() {
  domain::routing_table t;
  domain::revert_template undo;
  undo.url = "http://127.0.0.1:1/undo";
  t.destinations["charge"].routes = {{"http://127.0.0.1:1/a", {}, {}},
                                     {"http://127.0.0.1:1/b", {}, undo}};
  t.destinations["audit"].routes = {{"http://127.0.0.1:1/audit", {}, {}}};
  t.destinations["mail"].routes = {{"http://127.0.0.1:1/mail", {}, {}}};
  t.fanout["OrderCreated"] = {"audit", "charge"};
  t.fanout["OrderStatusUpdated"] = {"mail"};
  return t;
}

struct fanout_fixture : server_fixture {
  fanout_fixture() : server_fixture({}, test_routing()) {}
};

} // namespace

TEST_CASE_FIXTURE(server_fixture,
                  "POST /api/orders answers 201 with the order and queues its event") {
  auto r = client->post("/api/orders", valid_order);
  CHECK(r.status == 201);
  CHECK(r.header("Content-Type") == "application/json");
  CHECK(r.header("Location") == "/api/orders/1");
  CHECK_FALSE(r.header("X-Request-Id").empty());
  CHECK(r.num("/id") == 1);
  CHECK(r.str("/customerId") == "C-1");
  CHECK(r.body.find(R"("totalAmount":99.99)") != std::string::npos);
  CHECK(r.str("/currency") == "USD");
  CHECK(r.str("/shippingType") == "domestic");
  CHECK(r.str("/status") == "PENDING");
  CHECK(r.json["statusReason"].IsNull());
  CHECK_FALSE(r.str("/createdAt").empty());
  CHECK(table_counts() == "1/1/0");
}

TEST_CASE_FIXTURE(server_fixture,
                  "an Idempotency-Key replays the order and refuses a different body") {
  auto first = client->post("/api/orders", valid_order, {{"Idempotency-Key", "k-1"}});
  auto again = client->post("/api/orders", valid_order, {{"Idempotency-Key", "k-1"}});
  CHECK(first.status == 201);
  CHECK(again.status == 201);
  CHECK(again.header("Idempotent-Replayed") == "true");
  CHECK(again.num("/id") == first.num("/id"));
  auto other = client->post("/api/orders",
                            R"({"customerId":"C-2","totalAmount":5,"shippingType":"domestic"})",
                            {{"Idempotency-Key", "k-1"}});
  CHECK(other.status == 422);
  CHECK(other.str("/error/code") == "idempotency_key_reused");
  auto bad_key = client->post("/api/orders", valid_order, {{"Idempotency-Key", "has space"}});
  CHECK(bad_key.status == 422);
  CHECK(bad_key.str("/error/message").find("Idempotency-Key") != std::string::npos);
  // An empty key is refused, not read as none (a create without replay protection).
  for (const char* empty : {"", "   "}) {
    auto refused = client->post("/api/orders", valid_order, {{"Idempotency-Key", empty}});
    CHECK(refused.status == 422);
    CHECK(refused.str("/error/message").find("Idempotency-Key must be 1 to 255") !=
          std::string::npos);
  }
  CHECK(table_counts() == "1/1/0");
  // The key is the bytes sent: "%6B-1" is not "k-1" decoded, it is a key of its own.
  auto encoded = client->post("/api/orders", valid_order, {{"Idempotency-Key", "%6B-1"}});
  CHECK(encoded.status == 201);
  CHECK(encoded.header("Idempotent-Replayed").empty());
  CHECK(encoded.num("/id") != first.num("/id"));
  auto encoded_again = client->post("/api/orders", valid_order, {{"Idempotency-Key", "%6B-1"}});
  CHECK(encoded_again.header("Idempotent-Replayed") == "true");
  CHECK(encoded_again.num("/id") == encoded.num("/id"));
  CHECK(table_counts() == "2/2/0");
}

TEST_CASE_FIXTURE(server_fixture, "a body whose value is followed by a NUL byte is malformed") {
  using namespace std::string_literals;
  auto r = client->post("/api/orders", std::string(valid_order) + "\0{\"customerId\":\"EVIL\"}"s);
  CHECK(r.status == 400);
  CHECK(r.str("/error/code") == "malformed_json");
  CHECK(r.str("/error/message").find("NUL") != std::string::npos);
  CHECK(table_counts() == "0/0/0");
}

TEST_CASE_FIXTURE(server_fixture, "an Idempotency-Key whose order was removed replays nothing") {
  auto first = client->post("/api/orders", valid_order, {{"Idempotency-Key", "k-gone"}});
  REQUIRE(first.status == 201);
  auto id = static_cast<std::int64_t>(first.num("/id"));
  force_status(id, "CANCELLED");
  REQUIRE(client->del("/api/orders/" + std::to_string(id)).status == 204);
  auto again = client->post("/api/orders", valid_order, {{"Idempotency-Key", "k-gone"}});
  CHECK(again.status == 422);
  CHECK(again.str("/error/code") == "idempotency_key_reused");
  CHECK(again.str("/error/message") ==
        fmt::format("Idempotency-Key 'k-gone' was used for order {}, which has since been removed",
                    id));
  CHECK(again.header("Location").empty());
  CHECK(table_counts() == "1/1/1");
}

TEST_CASE_FIXTURE(server_fixture,
                  "bad create requests get their 4xx with a JSON error and write nothing") {
  struct bad_request {
    const char* body;
    const char* content_type;
    int status;
    const char* code;
    const char* mentions;
  };
  const bad_request cases[] = {
      {R"({"customerId":"C-1","totalAmount":)", "application/json", 400, "malformed_json",
       "offset"},
      {"", "application/json", 400, "malformed_json", "empty"},
      {"not json", "application/json", 400, "malformed_json", "not valid JSON"},
      {R"({"customerId":"C-1"} trailing)", "application/json", 400, "malformed_json", "offset"},
      {"{\"customerId\":\"\xff\xfe\",\"totalAmount\":1,\"shippingType\":\"domestic\"}",
       "application/json", 400, "malformed_json", "encoding"},
      {R"({"customerId":"C","totalAmount":NaN,"shippingType":"domestic"})", "application/json", 400,
       "malformed_json", "offset"},
      {R"({"customerId":"A\udc00","totalAmount":1,"shippingType":"domestic"})", "application/json",
       400, "malformed_json", "surrogate"},
      {R"({"customerId":"C","totalAmount":1e400,"shippingType":"domestic"})", "application/json",
       400, "malformed_json", "too big"},
      {valid_order, "text/plain", 415, "unsupported_media_type", "application/json"},
      {valid_order, "application/x-www-form-urlencoded", 415, "unsupported_media_type",
       "Content-Type"},
      {R"({"totalAmount":10,"shippingType":"domestic"})", "application/json", 422,
       "validation_failed", "customerId is required"},
      {R"({"customerId":"C","totalAmount":-1,"shippingType":"domestic"})", "application/json", 422,
       "validation_failed", "totalAmount"},
      {R"({"customerId":"C","totalAmount":0,"shippingType":"domestic"})", "application/json", 422,
       "validation_failed", "totalAmount"},
      {R"({"customerId":"C","totalAmount":1e15,"shippingType":"domestic"})", "application/json",
       422, "validation_failed", "at most"},
      {R"({"customerId":"C","totalAmount":"12","shippingType":"domestic"})", "application/json",
       422, "validation_failed", "must be a number"},
      {R"({"customerId":"C","totalAmount":1,"shippingType":"teleport"})", "application/json", 422,
       "validation_failed", "shippingType"},
      {R"({"customerId":"'; DROP TABLE orders; --","totalAmount":1,"shippingType":"x"})",
       "application/json", 422, "validation_failed", "shippingType"},
      {"[]", "application/json", 422, "validation_failed", "JSON object"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.body);
    auto r = client->post("/api/orders", c.body, {}, c.content_type);
    CHECK(r.status == c.status);
    CHECK(r.str("/error/code") == c.code);
    CHECK(r.str("/error/message").find(c.mentions) != std::string::npos);
  }
  auto details = client->post("/api/orders", R"({"totalAmount":-1})");
  REQUIRE(details.json["error"]["details"].IsArray());
  CHECK(details.json["error"]["details"].Size() == 3);
  // A body of many unknown keys gets the first hundred errors, not an answer larger than itself.
  std::string many = R"({"customerId":"C","totalAmount":1,"shippingType":"domestic")";
  for (int i = 0; i < 3000; ++i)
    many += fmt::format(R"(,"k{}":0)", i);
  auto capped = client->post("/api/orders", many + "}");
  CHECK(capped.status == 422);
  REQUIRE(capped.json["error"]["details"].IsArray());
  CHECK(capped.json["error"]["details"].Size() == 100);
  CHECK(capped.str("/error/message").find("; and 2900 more errors") != std::string::npos);
  CHECK(capped.body.size() < many.size());
  CHECK(table_counts() == "0/0/0");
}

TEST_CASE_FIXTURE(server_fixture,
                  "a body over server.maxBodyBytes is refused with 413 and nothing written") {
  std::string huge = R"({"customerId":")" + std::string(100 * 1024, 'x') +
                     R"(","totalAmount":1,"shippingType":"domestic"})";
  auto r = client->post("/api/orders", huge);
  CHECK(r.status == 413);
  CHECK(r.str("/error/code") == "payload_too_large");
  CHECK(table_counts() == "0/0/0");
  http_client fresh(port);
  CHECK(fresh.get("/healthz").status == 200);
}

TEST_CASE_FIXTURE(server_fixture, "markup and SQL in strings are stored and returned verbatim") {
  auto r = client->post(
      "/api/orders", R"({"customerId":"<img src=x onerror=alert(1)>' OR 1=1 --","totalAmount":1,)"
                     R"("shippingType":"domestic"})");
  REQUIRE(r.status == 201);
  auto got = client->get("/api/orders/" + std::to_string(r.num("/id")));
  CHECK(got.str("/order/customerId") == "<img src=x onerror=alert(1)>' OR 1=1 --");
}

TEST_CASE_FIXTURE(server_fixture, "GET /api/orders lists newest first with filters and a cursor") {
  for (int i = 0; i < 3; ++i)
    create();
  force_status(2, "CONFIRMED");
  auto page = client->get("/api/orders?limit=2");
  CHECK(page.status == 200);
  REQUIRE(page.json["orders"].Size() == 2);
  CHECK(page.num("/orders/0/id") == 3);
  CHECK(page.str("/nextCursor") == "2");
  auto rest = client->get("/api/orders?limit=2&cursor=2");
  REQUIRE(rest.json["orders"].Size() == 1);
  CHECK(rest.json["nextCursor"].IsNull());
  auto confirmed = client->get("/api/orders?status=CONFIRMED");
  REQUIRE(confirmed.json["orders"].Size() == 1);
  CHECK(confirmed.num("/orders/0/id") == 2);
  CHECK(client->get("/api/orders?limit=500").status == 200); // the largest page
  for (const char* bad :
       {"/api/orders?limit=0", "/api/orders?limit=abc", "/api/orders?limit=501",
        "/api/orders?limit=4294967297", "/api/orders?limit=+5", "/api/orders?limit=5%20",
        "/api/orders?status=NOPE", "/api/orders?cursor=-3", "/api/orders?cursor=0",
        "/api/orders?cursor=99999999999999999999"}) {
    auto r = client->get(bad);
    CHECK_MESSAGE(r.status == 422, bad);
    CHECK(r.str("/error/code") == "validation_failed");
  }
}

TEST_CASE_FIXTURE(server_fixture,
                  "GET /api/orders/{id} returns the timeline, 404 for unknown ids") {
  auto id = create();
  auto r = client->get("/api/orders/" + std::to_string(id));
  CHECK(r.status == 200);
  CHECK(r.num("/order/id") == id);
  REQUIRE(r.json["events"].Size() == 1);
  CHECK(r.str("/events/0/eventType") == "OrderCreated");
  CHECK(r.str("/events/0/status") == "PENDING");
  CHECK(r.str("/events/0/idempotencyKey") == "order:1:OrderCreated");
  CHECK(r.json["events"][0]["payloads"]["billing"]["payload"]["amount"].GetDouble() ==
        doctest::Approx(99.99));
  CHECK(r.json["attempts"].IsArray());
  CHECK(r.json["deadLetters"].IsArray());
  for (const char* bad : {"/api/orders/999", "/api/orders/abc", "/api/orders/0",
                          "/api/orders/99999999999999999999"}) {
    auto missing = client->get(bad);
    CHECK_MESSAGE(missing.status == 404, bad);
    CHECK(missing.str("/error/code") == "not_found");
  }
  // A NUL byte in the id does not cut the message short (it is shown as U+FFFD).
  CHECK(client->get("/api/orders/1%00x").str("/error/message") ==
        "order '1\xEF\xBF\xBDx' not found: ids are positive integers"s);
}

TEST_CASE_FIXTURE(server_fixture,
                  "GET /api/orders/{id}?afterAttempt=N lists only the newer attempt rows") {
  auto id = create();
  query_value(db(), fmt::format("INSERT INTO aggregate_results (event_id, aggregate_id, "
                                "event_type, destination, fanout_order, attempt, endpoint_url, "
                                "http_method, outcome) SELECT 1, '{}', 'OrderCreated', "
                                "'inventory', 0, n, 'http://x/r', 'POST', 'retryable' FROM "
                                "generate_series(1, 3) n RETURNING 1",
                                id));
  const auto path = "/api/orders/" + std::to_string(id);
  auto whole = client->get(path);
  REQUIRE(whole.json["attempts"].Size() == 3);
  const auto first = whole.num("/attempts/0/id");
  auto newer = client->get(path + "?afterAttempt=" + std::to_string(first));
  CHECK(newer.status == 200);
  REQUIRE(newer.json["attempts"].Size() == 2);
  CHECK(newer.num("/attempts/0/attempt") == 2);
  CHECK(newer.json["events"].Size() == 1); // the rest of the timeline is whole
  CHECK(newer.num("/order/id") == id);
  CHECK(client->get(path + "?afterAttempt=0").json["attempts"].Size() == 3);
  auto none = client->get(path + "?afterAttempt=" + std::to_string(whole.num("/attempts/2/id")));
  CHECK(none.json["attempts"].Size() == 0);
  for (const char* bad : {"-1", "x", "1.5", "", "99999999999999999999"}) {
    auto r = client->get(path + "?afterAttempt=" + bad);
    CHECK_MESSAGE(r.status == 422, bad);
    CHECK(r.str("/error/code") == "validation_failed");
    CHECK(r.body.find("afterAttempt") != std::string::npos);
  }
  CHECK(client->get("/api/orders/999?afterAttempt=1").status == 404);
}

TEST_CASE_FIXTURE(server_fixture,
                  "PUT status ships and delivers, answers repeats from state, 409 otherwise") {
  auto id = create();
  auto path = "/api/orders/" + std::to_string(id) + "/status";
  auto early = client->put(path, R"({"status":"SHIPPED"})");
  CHECK(early.status == 409);
  CHECK(early.str("/error/code") == "invalid_transition");
  CHECK(early.str("/error/message").find("PENDING") != std::string::npos);
  CHECK(table_counts() == "1/1/0");

  force_status(id, "CONFIRMED");
  auto shipped = client->put(path, R"({"status":"SHIPPED"})");
  CHECK(shipped.status == 200);
  CHECK(shipped.str("/status") == "SHIPPED");
  CHECK(client->put(path, R"({"status":"SHIPPED"})").status == 200);
  CHECK(table_counts() == "1/2/0");
  CHECK(client->put(path, R"({"status":"DELIVERED"})").str("/status") == "DELIVERED");
  CHECK(client->put(path, R"({"status":"SHIPPED"})").status == 409);
  CHECK(table_counts() == "1/3/0");

  CHECK(client->put(path, R"({"status":"CANCELLED"})").status == 422);
  CHECK(client->put(path, R"({"status":)").status == 400);
  CHECK(client->put(path, R"({"status":"SHIPPED"})", {}, "text/plain").status == 415);
  CHECK(client->put("/api/orders/404/status", R"({"status":"SHIPPED"})").status == 404);
  CHECK(table_counts() == "1/3/0");
}

TEST_CASE_FIXTURE(server_fixture, "POST cancel answers 202, twice the same, and 409 once shipped") {
  auto id = create();
  auto path = "/api/orders/" + std::to_string(id) + "/cancel";
  auto first = client->post(path, R"({"reason":"changed my mind"})");
  CHECK(first.status == 202);
  CHECK(first.str("/status") == "CANCELLING");
  CHECK(first.str("/statusReason") == "changed my mind");
  auto second = client->post(path, "");
  CHECK(second.status == 202);
  CHECK(second.body == first.body);
  CHECK(table_counts() == "1/2/0");

  auto other = create();
  force_status(other, "SHIPPED");
  auto refused = client->post("/api/orders/" + std::to_string(other) + "/cancel", "");
  CHECK(refused.status == 409);
  CHECK(
      client->post("/api/orders/" + std::to_string(other) + "/cancel", R"({"reason":7})").status ==
      422);
  CHECK(client->post("/api/orders/77/cancel", "").status == 404);
  CHECK(table_counts() == "2/3/0");
}

TEST_CASE_FIXTURE(server_fixture, "DELETE removes terminal orders only") {
  auto id = create();
  auto path = "/api/orders/" + std::to_string(id);
  CHECK(client->del(path).status == 409);
  CHECK(table_counts() == "1/1/0");
  force_status(id, "CANCELLED");
  CHECK(client->del(path).status == 204);
  CHECK(table_counts() == "1/1/1");
  CHECK(client->get(path).status == 404);
  CHECK(client->del(path).status == 404);
}

TEST_CASE_FIXTURE(admin_fixture, "with admin.token set, DELETE needs the bearer token") {
  auto id = create();
  force_status(id, "FAILED");
  auto path = "/api/orders/" + std::to_string(id);
  CHECK(client->del(path).status == 401);
  CHECK(client->del(path, {{"Authorization", "Bearer wrong"}}).status == 401);
  CHECK(client->del(path, {{"Authorization", "Bearer s3cret-and-more"}}).status == 401);
  CHECK(table_counts() == "1/1/0");
  CHECK(client->del(path, {{"Authorization", "Bearer s3cret"}}).status == 204);
}

TEST_CASE_FIXTURE(server_fixture, "health is always ok and readiness follows its checks") {
  CHECK(client->get("/healthz").status == 200);
  auto ready = client->get("/readyz");
  CHECK(ready.status == 200);
  CHECK(ready.str("/checks/database") == "ok");
  database_state = "connection refused";
  auto not_ready = client->get("/readyz");
  CHECK(not_ready.status == 503);
  CHECK(not_ready.str("/status") == "not_ready");
}

TEST_CASE_FIXTURE(server_fixture, "unknown routes get a JSON 404") {
  auto r = client->get("/api/nothing-here");
  CHECK(r.status == 404);
  CHECK(r.str("/error/code") == "not_found");
}

TEST_CASE_FIXTURE(server_fixture, "a served path with another method gets 405 and the methods it "
                                  "answers, and changes nothing") {
  auto id = create();
  auto path = "/api/orders/" + std::to_string(id);
  auto wrong = client->post(path, R"({"status":"CANCELLED"})");
  CHECK(wrong.status == 405);
  CHECK(wrong.str("/error/code") == "method_not_allowed");
  CHECK(wrong.header("Allow") == "GET, HEAD, DELETE");
  CHECK(wrong.str("/error/message").find("it answers GET, HEAD, DELETE") != std::string::npos);
  CHECK(client->put("/api/orders", R"({})").header("Allow") == "POST, GET, HEAD");
  CHECK(client->get(path).str("/order/status") == "PENDING");
  CHECK(table_counts() == "1/1/0");
  // A path no route serves is still a 404, whatever the method.
  CHECK(client->post("/api/orders/1/nothing", "").status == 404);
}

TEST_CASE("a database that goes away turns intake into 503, not a hang or a crash") {
  persistence::connection_pool pool(
      persistence::make_conninfo("host=127.0.0.1 port=1 user=postgres", std::chrono::seconds(1)), 2,
      persistence::order_repository::statements());
  persistence::order_repository repo(pool);
  persistence::dead_letter_admin dead_letters(pool);
  persistence::outbox_admin outbox(pool);
  conf::server_settings s;
  s.port = 0;
  s.threads = 4;
  http::api_server server(s, {},
                          {repo, dead_letters, outbox, [] { return http::readiness_report{}; }});
  auto port = server.bind();
  server.start();
  http_client client(port);
  auto r = client.post("/api/orders", valid_order);
  CHECK(r.status == 503);
  CHECK(r.str("/error/code") == "unavailable");
  CHECK(client.get("/api/orders").status == 503);
}

namespace {
/// A dead letter in `status` for a new order; returns its id.
std::int64_t add_dead_letter(server_fixture& f, const char* status) {
  auto order = f.create();
  pqxx::connection c(db());
  pqxx::work tx(c);
  auto id =
      tx.exec_params1(
            "INSERT INTO dead_letter_events (original_event_id, aggregate_type, aggregate_id, "
            "event_type, payloads, reason, last_error, status, attempts) SELECT id, "
            "'order', aggregate_id, event_type, payloads, 'MAX_RETRIES_EXCEEDED', "
            "'billing: HTTP 503', $2, 4 FROM outbox_events WHERE aggregate_id = $1 RETURNING id",
            std::to_string(order), status)[0]
          .as<std::int64_t>();
  tx.commit();
  return id;
}
} // namespace

TEST_CASE_FIXTURE(server_fixture,
                  "an event's and a dead letter's detail list the newest 1 000 attempts, and every "
                  "listing cuts bodies over 16 KiB, saying so") {
  auto letter = add_dead_letter(*this, "FAILED");
  auto event = query_value(db(), "SELECT original_event_id FROM dead_letter_events");
  auto order = query_value(db(), "SELECT aggregate_id FROM dead_letter_events");
  const auto big = domain::max_listed_body_bytes + 1;
  auto add_attempts = [&](int n, const std::string& bodies) {
    query_value(db(), fmt::format("INSERT INTO aggregate_results (event_id, aggregate_id, "
                                  "event_type, destination, fanout_order, attempt, endpoint_url, "
                                  "http_method, outcome{}) SELECT {}, '{}', 'OrderCreated', "
                                  "'inventory', 0, n, 'http://x/r', 'POST', 'retryable'{} FROM "
                                  "generate_series(1, {}) n RETURNING 1",
                                  bodies.empty() ? ""
                                                 : ", request_payload, response_text,"
                                                   " response_body",
                                  event, order, bodies, n));
  };
  auto count = [](const http_response& r) {
    const auto* v = rapidjson::Pointer("/attempts").Get(r.json);
    return v && v->IsArray() ? static_cast<int>(v->Size()) : -1;
  };
  auto has = [](const http_response& r, const std::string& pointer) {
    return rapidjson::Pointer(pointer.c_str()).Get(r.json) != nullptr;
  };
  add_attempts(domain::max_timeline_attempts, "");
  for (const auto& path : {"/api/outbox/events/" + event, fmt::format("/api/dlq/{}", letter)}) {
    CAPTURE(path);
    auto whole = client->get(path);
    CHECK(count(whole) == domain::max_timeline_attempts);
    CHECK_FALSE(has(whole, "/attemptsTruncated"));
  }
  // One newer attempt, with a JSON request, a text answer and bytes each one over the cap.
  add_attempts(1, fmt::format(", jsonb_build_object('pad', repeat('p', {0})), repeat('t', {0}), "
                              "decode(repeat('00', {0}), 'hex')",
                              big));
  for (const auto& path : {"/api/outbox/events/" + event, fmt::format("/api/dlq/{}", letter),
                           "/api/orders/" + order}) {
    CAPTURE(path);
    auto r = client->get(path);
    REQUIRE(r.status == 200);
    CHECK(count(r) == domain::max_timeline_attempts);
    CHECK(r.boolean("/attemptsTruncated"));
    const auto last = fmt::format("/attempts/{}", domain::max_timeline_attempts - 1);
    CHECK(r.boolean((last + "/bodiesShortened").c_str()));
    CHECK(r.is_null((last + "/requestPayload").c_str()));
    CHECK(r.str((last + "/responseText").c_str()).size() == domain::max_listed_body_bytes);
    CHECK(r.num((last + "/responseBody/bytes").c_str()) ==
          static_cast<long long>(domain::max_listed_body_bytes));
    CHECK_FALSE(has(r, "/attempts/0/bodiesShortened"));
  }
}

TEST_CASE_FIXTURE(server_fixture,
                  "GET /api/dlq lists dead letters and GET /api/dlq/{id} shows one") {
  auto failed = add_dead_letter(*this, "FAILED");
  auto pending = add_dead_letter(*this, "PENDING");
  auto all = client->get("/api/dlq");
  CHECK(all.status == 200);
  REQUIRE(all.json["deadLetters"].Size() == 2);
  CHECK(all.num("/deadLetters/0/id") == pending);
  auto only_failed = client->get("/api/dlq?status=FAILED");
  REQUIRE(only_failed.json["deadLetters"].Size() == 1);
  CHECK(only_failed.num("/deadLetters/0/id") == failed);
  CHECK(client->get("/api/dlq?status=BROKEN").status == 422);
  auto one = client->get("/api/dlq/" + std::to_string(failed));
  CHECK(one.status == 200);
  CHECK(one.str("/deadLetter/reason") == "MAX_RETRIES_EXCEEDED");
  CHECK(one.str("/deadLetter/lastError") == "billing: HTTP 503");
  CHECK(one.json["attempts"].IsArray());
  CHECK(client->get("/api/dlq/999").status == 404);
}

TEST_CASE_FIXTURE(server_fixture, "POST /api/dlq/{id}/retry redrives only FAILED dead letters") {
  auto failed = add_dead_letter(*this, "FAILED");
  auto pending = add_dead_letter(*this, "PENDING");
  // It takes no fields: one sent is refused, naming it, and the dead letter stays FAILED.
  auto refused = client->post("/api/dlq/" + std::to_string(failed) + "/retry", R"({"bogus":1})");
  CHECK(refused.status == 422);
  CHECK(refused.str("/error/details/0/field") == "bogus");
  CHECK(client->get("/api/dlq/" + std::to_string(failed)).str("/deadLetter/status") == "FAILED");
  CHECK(client->post("/api/dlq/" + std::to_string(failed) + "/retry", "{}").status == 202);
  query_value(db(), "UPDATE dead_letter_events SET status = 'FAILED' WHERE id = " +
                        std::to_string(failed) + " RETURNING 1");
  auto redriven = client->post("/api/dlq/" + std::to_string(failed) + "/retry", "");
  CHECK(redriven.status == 202);
  CHECK(redriven.str("/status") == "PENDING");
  CHECK(redriven.num("/attempts") == 0);
  auto again = client->post("/api/dlq/" + std::to_string(failed) + "/retry", "");
  CHECK(again.status == 409);
  CHECK(again.str("/error/message").find("PENDING") != std::string::npos);
  CHECK(client->post("/api/dlq/" + std::to_string(pending) + "/retry", "").status == 409);
  CHECK(client->post("/api/dlq/424242/retry", "").status == 404);
}

TEST_CASE_FIXTURE(admin_fixture, "with admin.token set, a redrive needs the bearer token") {
  auto failed = add_dead_letter(*this, "FAILED");
  auto path = "/api/dlq/" + std::to_string(failed) + "/retry";
  CHECK(client->post(path, "").status == 401);
  CHECK(query_value(db(), "SELECT status FROM dead_letter_events") == "FAILED");
  CHECK(client->post(path, "", {{"Authorization", "Bearer s3cret"}}).status == 202);
}

TEST_CASE_FIXTURE(server_fixture, "GET /api/outbox/stats counts events, dead letters and orders") {
  create();
  create();
  add_dead_letter(*this, "FAILED");
  auto r = client->get("/api/outbox/stats");
  CHECK(r.status == 200);
  CHECK(r.num("/outbox/PENDING") == 3);
  CHECK(r.num("/deadLetters/byStatus/FAILED") == 1);
  CHECK(r.num("/deadLetters/byReason/MAX_RETRIES_EXCEEDED") == 1);
  CHECK(r.num("/orders/PENDING") == 3);
  REQUIRE(r.json["oldestDueAgeSeconds"].IsNumber());
  CHECK(r.json["oldestDueAgeSeconds"].GetDouble() >= 0);
  REQUIRE(r.json["estimated"].IsArray());
  CHECK(r.json["estimated"].Empty());
}

TEST_CASE_FIXTURE(server_fixture, "GET /api/outbox/stats counts history exactly up to 10 000 rows "
                                  "and estimates it beyond, saying which counts are estimates") {
  auto insert_processed = [](int from, int to) {
    query_value(db(), fmt::format("INSERT INTO outbox_events (aggregate_type, aggregate_id, "
                                  "event_type, payloads, idempotency_key, status, processed_at) "
                                  "SELECT 'order', g::text, 'E', '{{}}', 'p' || g, 'PROCESSED', "
                                  "now() FROM generate_series({}, {}) g RETURNING 1",
                                  from, to));
  };
  insert_processed(1, 10000);
  auto exact = client->get("/api/outbox/stats");
  CHECK(exact.num("/outbox/PROCESSED") == 10000);
  CHECK(exact.json["estimated"].Empty());
  insert_processed(10001, 25000);
  query_value(db(), "ANALYZE outbox_events; SELECT 1");
  auto r = client->get("/api/outbox/stats");
  REQUIRE(r.json["estimated"].Size() == 1);
  CHECK(std::string(r.json["estimated"][0].GetString()) == "outbox.PROCESSED");
  // PostgreSQL's estimate of the table, never below what was counted.
  CHECK(r.num("/outbox/PROCESSED") > 10000);
  CHECK(r.num("/outbox/PROCESSED") < 30000);
}

TEST_CASE_FIXTURE(
    server_fixture,
    "GET /api/outbox/events filters and pages, and shows one event with its attempts") {
  auto first = create();
  create();
  force_status(first, "CONFIRMED");
  CHECK(client->put("/api/orders/" + std::to_string(first) + "/status", R"({"status":"SHIPPED"})")
            .status == 200);
  auto all = client->get("/api/outbox/events?limit=2");
  REQUIRE(all.json["events"].Size() == 2);
  CHECK(all.num("/events/0/id") == 3);
  CHECK(all.str("/nextCursor") == "2");
  auto of_first = client->get("/api/outbox/events?aggregateId=" + std::to_string(first));
  CHECK(of_first.json["events"].Size() == 2);
  auto updates = client->get("/api/outbox/events?eventType=OrderStatusUpdated&status=PENDING");
  REQUIRE(updates.json["events"].Size() == 1);
  CHECK(updates.str("/events/0/idempotencyKey") == "order:1:OrderStatusUpdated:SHIPPED");
  CHECK(client->get("/api/outbox/events?status=DONE").status == 422);
  auto one = client->get("/api/outbox/events/1");
  CHECK(one.status == 200);
  CHECK(one.str("/event/eventType") == "OrderCreated");
  CHECK(one.json["attempts"].IsArray());
  CHECK(client->get("/api/outbox/events/99").status == 404);
}

TEST_CASE_FIXTURE(server_fixture, "GET /api/outbox/events by type alone pages through windows of "
                                  "the history, so a rare type costs no walk through all of it") {
  query_value(db(), "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                    "payloads, idempotency_key, status) VALUES ('order', '1', 'OrderCancelled', "
                    "'{}', 'rare', 'PROCESSED') RETURNING 1");
  query_value(db(), "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, "
                    "payloads, idempotency_key, status) SELECT 'order', g::text, 'OrderCreated', "
                    "'{}', 'c' || g, 'PROCESSED' FROM generate_series(2, 10050) g RETURNING 1");
  auto first = client->get("/api/outbox/events?eventType=OrderCancelled");
  REQUIRE(first.status == 200);
  CHECK(first.json["events"].Empty());
  const auto cursor = first.str("/nextCursor"); // the end of the window looked at
  REQUIRE(!cursor.empty());
  auto second = client->get("/api/outbox/events?eventType=OrderCancelled&cursor=" + cursor);
  REQUIRE(second.json["events"].Size() == 1);
  CHECK(second.num("/events/0/id") == 1);
  CHECK(second.is_null("/nextCursor"));
  // An aggregate's events, of its type.
  auto of_one = client->get("/api/outbox/events?aggregateId=1&aggregateType=order");
  CHECK(of_one.json["events"].Size() == 1);
  CHECK(
      client->get("/api/outbox/events?aggregateId=1&aggregateType=invoice").json["events"].Empty());
  // Hostile values are only values: bound as parameters, matching nothing, changing nothing.
  for (const std::string& q :
       {std::string("aggregateId=1&aggregateType=order%27%3B%20DROP%20TABLE%20outbox_events%3B--"),
        "eventType=" + std::string(1000, 'x')}) {
    auto r = client->get("/api/outbox/events?" + q);
    CAPTURE(q.substr(0, 60));
    REQUIRE(r.status == 200);
    CHECK(r.json["events"].Empty());
  }
  // A NUL would end the value where the database reads it ("1%00zzz" found aggregate 1), bytes
  // that are not UTF-8 it refuses (a 500), and a type without the aggregate it names filtered
  // nothing.
  for (auto [q, field] : {std::pair{"aggregateId=1%00zzz", "aggregateId"},
                          std::pair{"eventType=OrderCreated%00x", "eventType"},
                          std::pair{"eventType=%FF", "eventType"}, // was a 500
                          std::pair{"aggregateId=%C0%AF", "aggregateId"},
                          std::pair{"aggregateType=order", "aggregateType"}}) {
    auto r = client->get(std::string("/api/outbox/events?") + q);
    CAPTURE(q);
    CHECK(r.status == 422);
    CHECK(r.str("/error/details/0/field") == field);
  }
  CHECK(query_value(db(), "SELECT count(*) FROM outbox_events") == "10050");
}

TEST_CASE_FIXTURE(server_fixture, "request counters have a bounded set of labels whatever the "
                                  "requests say") {
  // Methods nobody serves, and ids no route knows, each once: every one would be a new series
  // if its label were the method or the path as sent.
  const std::string not_found =
      "outboxd_http_requests_total{method=\"GET\",route=\"/api/orders/{id}\",status=\"404\"} ";
  auto count = [&](const std::string& metrics) {
    auto at = metrics.find(not_found);
    return at == std::string::npos ? 0 : std::stoi(metrics.substr(at + not_found.size()));
  };
  auto before = count(client->get("/metrics").body);
  for (int i = 0; i < 20; ++i) {
    raw_connection c(port);
    c.send(fmt::format("X{}METHOD /api/orders HTTP/1.1\r\nHost: x\r\n\r\n", i));
    CHECK(c.read_response(std::chrono::seconds(5)).status != 0);
    CHECK(client->get(fmt::format("/api/orders/id-{}", std::string(i + 1, 'x'))).status == 404);
  }
  auto r = client->get("/metrics");
  REQUIRE(r.status == 200);
  CHECK(r.body.find("METHOD") == std::string::npos);
  CHECK(r.body.find("id-x") == std::string::npos);
  CHECK(r.body.find("outboxd_http_requests_total{method=\"other\",route=\"unmatched\"") !=
        std::string::npos);
  CHECK(count(r.body) == before + 20);
}

TEST_CASE_FIXTURE(server_fixture, "GET /metrics exposes request counters and database gauges") {
  create();
  add_dead_letter(*this, "FAILED");
  client->get("/api/orders/1");
  client->get("/api/nothing");
  auto r = client->get("/metrics");
  CHECK(r.status == 200);
  CHECK(r.header("Content-Type").find("text/plain") == 0);
  CHECK(r.body.find(
            "outboxd_http_requests_total{method=\"POST\",route=\"/api/orders\",status=\"201\"}") !=
        std::string::npos);
  CHECK(r.body.find("route=\"/api/orders/{id}\",status=\"200\"") != std::string::npos);
  CHECK(r.body.find("route=\"unmatched\",status=\"404\"") != std::string::npos);
  CHECK(r.body.find("outboxd_outbox_events{status=\"PENDING\"} 2\n") != std::string::npos);
  CHECK(r.body.find("outboxd_dead_letters{status=\"FAILED\"} 1\n") != std::string::npos);
  CHECK(r.body.find("outboxd_orders_attention 0\n") != std::string::npos);
  CHECK(r.body.find("# TYPE outboxd_oldest_due_event_age_seconds gauge") != std::string::npos);
}

TEST_CASE_FIXTURE(server_fixture, "events waiting out a retry are not due, but the age of the "
                                  "oldest undelivered one still shows") {
  create();
  create();
  query_value(db(), "UPDATE outbox_events SET next_retry_at = now() + interval '1 hour', "
                    "created_at = now() - interval '90 seconds' WHERE id = 1");
  query_value(db(), "UPDATE outbox_events SET next_retry_at = now() + interval '1 hour' "
                    "WHERE id = 2");
  auto stats = client->get("/api/outbox/stats");
  REQUIRE(stats.status == 200);
  CHECK(stats.json["oldestDueAgeSeconds"].IsNull()); // nothing is due
  CHECK(stats.json["oldestPendingAgeSeconds"].GetDouble() >= 90);
  auto metrics = client->get("/metrics").body;
  CHECK(metrics.find("outboxd_oldest_due_event_age_seconds 0\n") != std::string::npos);
  auto at = metrics.find("\noutboxd_oldest_pending_event_age_seconds ");
  REQUIRE(at != std::string::npos);
  CHECK(std::stod(metrics.substr(at + 42)) >= 90);
  query_value(db(), "UPDATE outbox_events SET status = 'PROCESSED', processed_at = now(), "
                    "next_retry_at = NULL");
  CHECK(client->get("/api/outbox/stats").json["oldestPendingAgeSeconds"].IsNull());
}

TEST_CASE_FIXTURE(server_fixture, "GET /metrics behind a user's lock on the outbox answers within "
                                  "a second without the database gauges, and says so") {
  create();
  CHECK(client->get("/metrics").body.find("outboxd_database_gauges_up 1\n") != std::string::npos);
  // The fixture's sessions wait for a lock without bound: without the scrape's own cap this
  // request would wait for the ALTER TABLE below and run into the client's 30 s.
  pqxx::connection locker(db());
  pqxx::work altering(locker);
  altering.exec("LOCK TABLE outbox_events IN ACCESS EXCLUSIVE MODE");
  auto r = client->get("/metrics");
  REQUIRE(r.status == 200);
  CHECK(r.body.find("outboxd_database_gauges_up 0\n") != std::string::npos);
  CHECK(r.body.find("outboxd_outbox_events{") == std::string::npos);
  CHECK(r.body.find("route=\"/api/orders\",status=\"201\"") != std::string::npos);
  altering.abort();
  CHECK(client->get("/metrics").body.find("outboxd_outbox_events{status=\"PENDING\"} 1\n") !=
        std::string::npos);
}

TEST_CASE_FIXTURE(fanout_fixture, "GET /api/outbox/fanout lists the configured fan-out") {
  auto r = client->get("/api/outbox/fanout");
  CHECK(r.status == 200);
  CHECK(r.header("Content-Type") == "application/json");
  CHECK(r.body == R"({"eventTypes":{"OrderCreated":[{"destination":"audit","revertible":false},)"
                  R"({"destination":"charge","revertible":true}],)"
                  R"("OrderStatusUpdated":[{"destination":"mail","revertible":false}]}})");
}

TEST_CASE("GET /api/outbox/fanout describes the shipped configuration") {
  auto loaded = conf::load({});
  REQUIRE(loaded.value);
  server_fixture f({}, loaded.value->http);
  auto r = f.client->get("/api/outbox/fanout");
  CHECK(r.status == 200);
  CHECK(r.body == R"({"eventTypes":{"OrderCreated":[{"destination":"inventory","revertible":true},)"
                  R"({"destination":"fraudCheck","revertible":false},)"
                  R"({"destination":"shipping","revertible":true},)"
                  R"({"destination":"billing","revertible":true}],)"
                  R"("OrderStatusUpdated":[{"destination":"notifications","revertible":false}]}})");
}

TEST_CASE_FIXTURE(server_fixture, "every listed route is served and only those") {
  auto routes = http::api_server::routes();
  CHECK(routes.size() == 17);
  using http::access;
  const http::route_info some[] = {{"GET", "/api/orders/{id}", access::read},
                                   {"POST", "/api/dlq/{id}/retry", access::admin},
                                   {"DELETE", "/api/orders/{id}", access::admin},
                                   {"GET", "/api/outbox/fanout", access::read}};
  for (const auto& want : some)
    CHECK(std::find(routes.begin(), routes.end(), want) != routes.end());
  for (const auto& r : routes) {
    CAPTURE(r.method);
    CAPTURE(r.path);
    CHECK(r.path.find("{id}") == r.path.rfind('{')); // only {id} parameters
    auto path = r.path;
    if (auto at = path.find("{id}"); at != std::string::npos)
      path.replace(at, 4, "1");
    raw_connection c(port);
    c.send(curl_request(r.method, path, port));
    auto answer = c.read_response(std::chrono::seconds(3));
    CHECK(answer.status != 0);
    CHECK(answer.body.find("no route for") == std::string::npos);
  }
  raw_connection c(port);
  c.send(curl_request("PATCH", "/api/orders/1", port));
  CHECK(c.read_response(std::chrono::seconds(3)).body.find("PATCH is not served on") !=
        std::string::npos);
  c.send(curl_request("PATCH", "/api/orders/1/nothing", port));
  CHECK(c.read_response(std::chrono::seconds(3)).body.find("no route for PATCH") !=
        std::string::npos);
}

TEST_CASE_FIXTURE(server_fixture, "a query parameter given twice, or with a raw '=' in its value, "
                                  "is refused rather than read wrongly") {
  create();
  auto twice = client->get("/api/orders?limit=5&limit=600");
  CHECK(twice.status == 400);
  CHECK(twice.str("/error/message") == "query parameter 'limit' is given more than once");
  // The name as the library reads it: percent-encoded, it is the same parameter.
  for (const char* path : {"/api/orders?limit=1&%6Cimit=2", "/api/orders?%6Cimit=2&limit=1",
                           "/api/orders?status=FAILED&%73tatus=CONFIRMED"}) {
    CAPTURE(path);
    auto encoded_twice = client->get(path);
    CHECK(encoded_twice.status == 400);
    CHECK(encoded_twice.str("/error/message").find("is given more than once") != std::string::npos);
  }
  auto raw = client->get("/api/outbox/events?aggregateId=zzz=1");
  CHECK(raw.status == 400);
  CHECK(raw.str("/error/message").find("%3D") != std::string::npos);
  auto encoded = client->get("/api/outbox/events?aggregateId=zzz%3D1");
  CHECK(encoded.status == 200);
  CHECK(encoded.body.find("\"aggregateId\":\"1\"") == std::string::npos); // not order 1's
  CHECK(client->get("/api/orders?limit=5&&status=PENDING").status == 200);
}

TEST_CASE_FIXTURE(server_fixture, "an error quoting bytes that are not UTF-8 is still UTF-8 JSON") {
  for (const char* path :
       {"/%ff", "/api/orders/%ff", "/api/orders?status=%ff", "/api/orders?limit=%c0%af"}) {
    CAPTURE(path);
    raw_connection c(port);
    c.send(curl_request("GET", path, port));
    auto answer = c.read_response(std::chrono::seconds(3));
    CHECK(answer.status >= 400);
    CHECK(answer.body.find('\xff') == std::string::npos);
    CHECK(answer.body.find("\xc0\xaf") == std::string::npos);
    rapidjson::Document doc;
    doc.Parse<rapidjson::kParseValidateEncodingFlag>(answer.body.data(), answer.body.size());
    CHECK_FALSE(doc.HasParseError());
  }
}

TEST_CASE_FIXTURE(server_fixture, "body-less requests as curl sends them are answered at once") {
  auto id = create();
  raw_connection c(port);
  // curl -X POST -H 'Content-Type: application/json' URL: what a POST needs to pass the forgery
  // rule when it carries no token.
  auto send = [&](const std::string& method, const std::string& path) {
    c.send(curl_request(method, path, port, "Content-Type: application/json\r\n"));
    return c.read_response(std::chrono::seconds(3));
  };
  auto retry = send("POST", "/api/dlq/1/retry");
  CHECK(retry.status == 404);
  CHECK(retry.body.find("dead letter 1 not found") != std::string::npos);
  auto create_empty = send("POST", "/api/orders");
  CHECK(create_empty.status == 400);
  CHECK(create_empty.body.find("request body is empty; expected a JSON object") !=
        std::string::npos);
  auto status_empty = send("PUT", "/api/orders/" + std::to_string(id) + "/status");
  CHECK(status_empty.status == 400);
  CHECK(status_empty.body.find("malformed_json") != std::string::npos);
  auto remove_pending = send("DELETE", "/api/orders/" + std::to_string(id));
  CHECK(remove_pending.status == 409);
  auto cancel = send("POST", "/api/orders/" + std::to_string(id) + "/cancel");
  CHECK_MESSAGE(cancel.status == 202, cancel.body);
  CHECK(cancel.body.find(R"("status":"CANCELLING")") != std::string::npos);
  CHECK(send("GET", "/healthz").status == 200); // still the same connection

  auto out = run_curl("POST", "/api/dlq/1/retry", port, "-H 'Content-Type: application/json'");
  REQUIRE_MESSAGE(!out.empty(), "curl did not run");
  CHECK_MESSAGE(out.substr(out.rfind('\n') + 1) == "404", out);
  CHECK(out.find("not_found") != std::string::npos);
}
