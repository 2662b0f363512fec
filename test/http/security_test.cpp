// Who may call what, on the server `outboxd serve` builds: every served route × {no token, a
// wrong token, each role} against the role this file expects of it (a new route fails until it is
// listed here), wrong tokens of every shape, and the forgery rules (content type, Origin, CORS).
// The database is never reached: a request that passes the checks gets a 503 from its handler,
// so a 401, 403 or 415 proves the handler did not run.
#include "http/auth.hpp"
#include "http/listener.hpp"
#include "simulator/simulator.hpp"
#include "test/http/served_server.hpp"
#include "test/support/http_client.hpp"
#include "test/support/raw_http.hpp"
#include "test/support/test_db.hpp"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <httplib.h>
#include <ifaddrs.h>
#include <map>
#include <netinet/in.h>
#include <optional>

using namespace outboxd;
using namespace outboxd::test;

namespace {

std::string hex_sha256(const std::string& token) {
  std::string out;
  for (auto byte : http::sha256(token))
    out += fmt::format("{:02x}", byte);
  return out;
}

const lazy_database db("outboxd_http_security");

const char* read_token = "read-token-7f3a";
const char* write_token = "write-token-91cc";
const char* admin_token = "admin-token-0d5e";

std::string tokens_setting() {
  return fmt::format(R"(auth.tokens=[{{"name":"dash","role":"read","sha256":"{}"}},)"
                     R"({{"name":"shop","role":"write","sha256":"{}"}},)"
                     R"({{"name":"ops","role":"admin","sha256":"{}"}}])",
                     hex_sha256(read_token), hex_sha256(write_token), hex_sha256(admin_token));
}

/// What each route of outboxd's API needs. Simulated partner services and the UI's files are
/// open by their kind; everything else must be listed here.
const std::map<openapi_operation, http::access> expected_access = {
    {{"GET", "/healthz"}, http::access::open},
    {{"GET", "/readyz"}, http::access::open},
    {{"GET", "/metrics"}, http::access::metrics},
    {{"POST", "/api/orders"}, http::access::write},
    {{"GET", "/api/orders"}, http::access::read},
    {{"GET", "/api/orders/{id}"}, http::access::read},
    {{"PUT", "/api/orders/{id}/status"}, http::access::write},
    {{"POST", "/api/orders/{id}/cancel"}, http::access::write},
    {{"DELETE", "/api/orders/{id}"}, http::access::admin},
    {{"GET", "/api/outbox/stats"}, http::access::read},
    {{"GET", "/api/outbox/fanout"}, http::access::read},
    {{"GET", "/api/outbox/events"}, http::access::read},
    {{"GET", "/api/outbox/events/{id}"}, http::access::read},
    {{"GET", "/api/dlq"}, http::access::read},
    {{"GET", "/api/dlq/{id}"}, http::access::read},
    {{"POST", "/api/dlq/{id}/retry"}, http::access::admin},
    {{"POST", "/api/dlq/{id}/resolve"}, http::access::admin},
    {{"GET", "/api/simulator/config"}, http::access::read},
    {{"PUT", "/api/simulator/config"}, http::access::admin},
    {{"POST", "/api/simulator/reset"}, http::access::admin},
    {{"GET", "/api/simulator/ledger"}, http::access::read},
    {{"GET", "/api/admin/consistency"}, http::access::admin},
};

http::access expected_of(const http::route_info& r) {
  if (r.kind != http::route_kind::api)
    return http::access::open;
  auto it = expected_access.find({r.method, r.path});
  return it == expected_access.end() ? http::access::open : it->second;
}

std::string concrete(std::string path) {
  for (auto at = path.find('{'); at != std::string::npos; at = path.find('{'))
    path.replace(at, path.find('}', at) - at + 1, "1");
  return path;
}

http_response call(http_client& c, const std::string& method, const std::string& path,
                   const std::map<std::string, std::string>& headers) {
  if (method == "GET") {
    c.set_default_headers(headers);
    auto r = c.get(path);
    c.set_default_headers({});
    return r;
  }
  if (method == "POST")
    return c.post(path, "{}", headers);
  if (method == "PUT")
    return c.put(path, "{}", headers);
  return c.del(path, headers);
}

struct identity {
  const char* name;
  std::optional<std::string> token; // nullopt: no Authorization header
  int rank;                         // 0 none/wrong, 1 read, 2 write, 3 admin
};

const identity identities[] = {
    {"no token", std::nullopt, 0}, {"a wrong token", "not-a-token", 0}, {"read", read_token, 1},
    {"write", write_token, 2},     {"admin", admin_token, 3},
};

int rank_needed(http::access a) {
  switch (a) {
  case http::access::open:
    return 0;
  case http::access::read:
  case http::access::metrics: // auth.metricsRole defaults to read
    return 1;
  case http::access::write:
    return 2;
  case http::access::admin:
    return 3;
  }
  return 3;
}

} // namespace

TEST_CASE("every route is listed with the role it needs, and the server enforces that role") {
  served_server s(true, {tokens_setting()});
  int port = s.start();
  http_client client(port);
  int checked = 0;
  for (const auto& r : s.server->served_routes()) {
    CAPTURE(r.method);
    CAPTURE(r.path);
    if (r.kind == http::route_kind::api)
      CHECK_MESSAGE(expected_access.count({r.method, r.path}) == 1,
                    "a new route: list the role it needs in expected_access");
    CHECK(r.needs == expected_of(r));
    int needed = rank_needed(expected_of(r));
    for (const auto& who : identities) {
      CAPTURE(who.name);
      std::map<std::string, std::string> headers;
      if (who.token)
        headers["Authorization"] = "Bearer " + *who.token;
      auto answer = call(client, r.method, concrete(r.path), headers);
      if (needed == 0 || who.rank >= needed) {
        CHECK(answer.status != 401);
        CHECK(answer.status != 403);
      } else if (who.rank == 0) {
        CHECK(answer.status == 401);
        CHECK(answer.body.find(R"("code":"unauthorized")") != std::string::npos);
        CHECK(answer.header("WWW-Authenticate") == "Bearer realm=\"outboxd\"");
      } else {
        CHECK(answer.status == 403);
        CHECK(answer.body.find(R"("code":"forbidden")") != std::string::npos);
      }
      ++checked;
    }
  }
  CHECK(checked > 5 * 40);
}

TEST_CASE("a wrong token of any shape or length gets the same 401, and no token is echoed") {
  served_server s(false, {tokens_setting()});
  http_client client(s.start());
  std::string admin(admin_token);
  const std::string wrong[] = {
      "",
      "x",
      admin.substr(0, admin.size() - 1),
      admin + "x",
      std::string(64, 'a'),
      hex_sha256(admin_token), // the configured digest itself is not a token
      std::string(5000, 'z'),
      " " + admin + "x",
  };
  std::optional<std::string> first_body;
  for (const auto& token : wrong) {
    CAPTURE(token.size());
    client.set_default_headers({{"Authorization", "Bearer " + token}});
    auto r = client.get("/api/orders");
    CHECK(r.status == 401);
    CHECK(r.body.find(token.empty() ? "\x01" : token) == std::string::npos);
    if (!token.empty() && token != " " + admin + "x") {
      if (!first_body)
        first_body = r.body;
      CHECK(r.body == *first_body);
    }
  }
  for (const char* header : {"Basic YWRtaW46YWRtaW4=", "Bearer", "Token abc", admin_token}) {
    CAPTURE(header);
    client.set_default_headers({{"Authorization", header}});
    CHECK(client.get("/api/orders").status == 401);
  }
  // A token is the bytes sent: percent-encoded, it is another string (the HTTP library would
  // have decoded it).
  std::string encoded;
  for (unsigned char c : admin)
    encoded += fmt::format("%{:02X}", c);
  for (const auto& header : {"Bearer%20" + admin, "Bearer " + encoded}) {
    CAPTURE(header);
    client.set_default_headers({{"Authorization", header}});
    CHECK(client.get("/api/orders").status == 401);
  }
  // The scheme is case-insensitive and surrounding spaces are ignored, as HTTP allows.
  client.set_default_headers({{"Authorization", std::string("bearer  ") + read_token + " "}});
  CHECK(client.get("/api/orders").status != 401);
}

TEST_CASE("auth.metricsRole and auth.allowAnonymous decide what a request without a token gets") {
  {
    served_server s(false, {tokens_setting(), "auth.metricsRole=none"});
    http_client client(s.start());
    CHECK(client.get("/metrics").status == 200);
    CHECK(client.get("/api/orders").status == 401);
  }
  {
    served_server s(false, {tokens_setting(), "auth.metricsRole=admin"});
    http_client client(s.start());
    client.set_default_headers({{"Authorization", std::string("Bearer ") + write_token}});
    CHECK(client.get("/metrics").status == 403);
  }
  {
    served_server s(true, {tokens_setting(), "auth.allowAnonymous=true"});
    http_client client(s.start());
    CHECK(client.get("/api/orders").status == 503); // read: allowed, the database is not there
    CHECK(client.post("/api/orders", "{}").status == 401);
    client.set_default_headers({{"Authorization", "Bearer wrong"}});
    CHECK(client.get("/api/orders").status == 401); // a wrong token is never anonymous
  }
  {
    served_server s(true,
                    {tokens_setting(), "auth.allowAnonymous=true", "auth.anonymousRole=write"});
    http_client client(s.start());
    CHECK(client.post("/api/orders", "{}").status == 422); // validated, so allowed
    CHECK(client.post("/api/dlq/1/retry", "").status == 401);
  }
  {
    // The plain-text admin.token of older configurations is one more admin token.
    served_server s(true, {"admin.token=legacy-secret"});
    http_client client(s.start());
    CHECK(client.get("/api/orders").status == 401);
    client.set_default_headers({{"Authorization", "Bearer legacy-secret"}});
    CHECK(client.post("/api/dlq/1/retry", "").status == 503);
  }
}

TEST_CASE("without tokens on loopback everything is open, as before") {
  served_server s(true);
  http_client client(s.start());
  CHECK(client.get("/api/orders").status == 503);
  CHECK(client.post("/api/dlq/1/retry", "").status == 503);
  CHECK(client.get("/api/admin/consistency").status != 401);
}

// What a web page of another site can make a browser send, without and with tokens configured.
TEST_CASE("a page of another site cannot change anything: forms, text bodies, foreign origins") {
  served_server s(true, {R"(server.allowedOrigins=["https://ops.example.com"])"});
  int port = s.start();
  auto send = [&](const std::string& method, const std::string& path, const std::string& headers,
                  const std::string& body = "") {
    raw_connection c(port);
    c.send(method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) + "\r\n" +
           headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
    return c.read_response(std::chrono::seconds(5));
  };
  const std::string cancel = "/api/orders/1/cancel";
  // An HTML form's content types, with no Origin (an old browser) or a foreign one.
  for (const char* type :
       {"application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain"}) {
    CAPTURE(type);
    // A malformed multipart body is refused by the HTTP library before routing (400).
    bool multipart = std::string(type).rfind("multipart/", 0) == 0;
    auto r = send("POST", cancel, std::string("Content-Type: ") + type + "\r\n", "reason=x");
    CHECK(r.status == (multipart ? 400 : 415));
    if (!multipart)
      CHECK(r.body.find("Content-Type: application/json") != std::string::npos);
    auto foreign = send(
        "POST", cancel,
        std::string("Content-Type: ") + type + "\r\nOrigin: https://evil.example\r\n", "reason=x");
    CHECK(foreign.status == (multipart ? 400 : 403));
  }
  CHECK(send("POST", cancel, "").status == 415); // no type at all, empty body
  // JSON from a foreign origin (only possible after a preflight, which it does not get).
  auto foreign_json =
      send("POST", cancel, "Content-Type: application/json\r\nOrigin: https://evil.example\r\n");
  CHECK(foreign_json.status == 403);
  CHECK(foreign_json.body.find("server.allowedOrigins") != std::string::npos);
  CHECK(send("POST", cancel, "Content-Type: application/json\r\nOrigin: null\r\n").status == 403);
  CHECK(send("POST", cancel, "Content-Type: application/json\r\nSec-Fetch-Site: cross-site\r\n")
            .status == 403);
  CHECK(send("DELETE", "/api/orders/1", "Origin: https://evil.example\r\n").status == 403);
  CHECK(send("PUT", "/api/simulator/config", "Origin: https://evil.example\r\n", "{}").status ==
        403);
  // The simulated partners are open to calls, but not to other sites' pages either.
  CHECK(send("POST", "/api/billing", "Origin: https://evil.example\r\n", "{}").status == 403);

  // The UI's own origin, and a configured one, pass (the handler runs: 503 without a database).
  auto same =
      send("POST", cancel,
           "Content-Type: application/json\r\nOrigin: http://127.0.0.1:" + std::to_string(port) +
               "\r\nSec-Fetch-Site: same-origin\r\n");
  CHECK(same.status == 503);
  auto allowed =
      send("POST", cancel, "Content-Type: application/json\r\nOrigin: https://ops.example.com\r\n");
  CHECK(allowed.status == 503);
  CHECK(allowed.head.find("Access-Control-Allow-Origin: https://ops.example.com") !=
        std::string::npos);
  // A token header is what a page cannot add without a preflight: it passes without a JSON type.
  CHECK(send("POST", cancel, "Authorization: Bearer anything\r\n").status == 503);

  // Preflights: answered for the configured origin only.
  auto preflight = [&](const char* origin) {
    return send("OPTIONS", cancel,
                std::string("Origin: ") + origin +
                    "\r\nAccess-Control-Request-Method: POST\r\n"
                    "Access-Control-Request-Headers: content-type, authorization\r\n");
  };
  auto ok = preflight("https://ops.example.com");
  CHECK(ok.status == 204);
  CHECK(ok.head.find("Access-Control-Allow-Origin: https://ops.example.com") != std::string::npos);
  CHECK(ok.head.find("Access-Control-Allow-Headers: Authorization, Content-Type") !=
        std::string::npos);
  auto refused = preflight("https://evil.example");
  CHECK(refused.status == 403);
  CHECK(refused.head.find("Access-Control-Allow") == std::string::npos);
  // A read from a foreign origin gets its answer but no CORS header, so its page cannot see it.
  auto read = send("GET", "/healthz", "Origin: https://evil.example\r\n");
  CHECK(read.status == 200);
  CHECK(read.head.find("Access-Control-Allow-Origin") == std::string::npos);
}

TEST_CASE("a request's method and path are logged with nothing that could fake the line's fields") {
  // the text log escapes line breaks; the path's spaces would still fake "<status> <duration>"
  CHECK(http::loggable("/api/orders/1\n2026 ERROR [dlq-processor-1] forged 404 0.7ms") ==
        "/api/orders/1%0A2026%20ERROR%20[dlq-processor-1]%20forged%20404%200.7ms");
  CHECK(http::loggable("/api/inventory/caf\xc3\xa9/release\x7f") ==
        "/api/inventory/caf%C3%A9/release%7F");
  CHECK(http::loggable("GET") == "GET");
}

TEST_CASE("a Range header gets the whole answer once, never a multipart copy of it") {
  served_server s(true);
  int port = s.start();
  std::string ranges = "bytes=0-";
  for (int i = 0; i < 500; ++i)
    ranges += ",0-";
  for (const char* path : {"/", "/ui/app.js", "/healthz"}) {
    CAPTURE(path);
    raw_connection plain(port);
    plain.send(fmt::format("GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path));
    auto whole = plain.read_response(std::chrono::seconds(5));
    raw_connection ranged(port);
    ranged.send(
        fmt::format("GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\nRange: {}\r\n\r\n", path, ranges));
    auto r = ranged.read_response(std::chrono::seconds(5));
    CHECK(r.status == 200);
    CHECK(r.body.size() == whole.body.size());
    CHECK(r.head.find("multipart/byteranges") == std::string::npos);
  }
}

TEST_CASE("answers say not to sniff their type, and the API's not to be cached") {
  served_server s(true);
  http_client client(s.start());
  for (const char* path : {"/api/orders", "/metrics", "/healthz", "/no-such-route"}) {
    CAPTURE(path);
    auto r = client.get(path);
    CHECK(r.header("X-Content-Type-Options") == "nosniff");
    if (std::string(path) != "/no-such-route")
      CHECK(r.header("Cache-Control") == "no-store");
  }
  auto page = client.get("/");
  CHECK(page.header("X-Content-Type-Options") == "nosniff");
  CHECK(page.header("Cache-Control") == "no-cache"); // the UI's files: revalidated, not stored
  CHECK(page.headers.count("X-Content-Type-Options") == 1);
}

TEST_CASE("a NUL in a header value, or a second Host, is a malformed request") {
  served_server s(true);
  int port = s.start();
  using namespace std::string_literals;
  for (const auto& extra : {"Authorization: Bearer abc\0junk\r\n"s, "Host: elsewhere\r\n"s}) {
    raw_connection c(port);
    c.send("GET /api/orders HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra + "\r\n");
    CHECK(c.read_response(std::chrono::seconds(5)).status == 400);
  }
}

TEST_CASE("the simulated partners inside outboxd answer this machine only") {
  CHECK(simulator::is_loopback_peer("127.0.0.1"));
  CHECK(simulator::is_loopback_peer("127.3.2.1"));
  CHECK(simulator::is_loopback_peer("::1"));
  CHECK(simulator::is_loopback_peer("::ffff:127.0.0.1"));
  CHECK_FALSE(simulator::is_loopback_peer("192.0.2.2"));
  CHECK_FALSE(simulator::is_loopback_peer("::ffff:10.0.0.1"));
  CHECK_FALSE(simulator::is_loopback_peer("fd00::2"));
  CHECK_FALSE(simulator::is_loopback_peer("1127.0.0.1"));
  CHECK_FALSE(simulator::is_loopback_peer(""));

  served_server s(true, {"server.host=0.0.0.0", "auth.allowAnonymous=true"});
  int port = s.start();
  const std::string reserve = R"({"orderId": 1, "items": [{"sku": "A", "quantity": 1}]})";
  httplib::Headers headers{{"Idempotency-Key", "8:inventory"}, {"X-Aggregate-Id", "1"}};
  httplib::Client local("127.0.0.1", port);
  CHECK(local.Post("/api/inventory/reserve", headers, reserve, "application/json")->status == 200);
  // Forwarded by a proxy on this machine: from loopback, but not outboxd's own call.
  for (const char* forwarded : {"Forwarded", "X-Forwarded-For", "X-Real-IP"}) {
    CAPTURE(forwarded);
    auto proxied = headers;
    proxied.emplace(forwarded, "198.51.100.7");
    proxied.find("Idempotency-Key")->second = std::string("7:") + forwarded;
    CHECK(local.Post("/api/inventory/reserve", proxied, reserve, "application/json")->status ==
          403);
  }
  // The same request from this machine's address on another interface, when it has one.
  ifaddrs* list = nullptr;
  REQUIRE(::getifaddrs(&list) == 0);
  std::string outside;
  for (auto* a = list; a && outside.empty(); a = a->ifa_next)
    if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET) {
      char text[INET_ADDRSTRLEN] = {};
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text,
                  sizeof text);
      if (!simulator::is_loopback_peer(text))
        outside = text;
    }
  ::freeifaddrs(list);
  if (outside.empty()) {
    MESSAGE("no interface but loopback: the refusal of other machines is covered above only");
    return;
  }
  httplib::Client remote(outside, port);
  headers = {{"Idempotency-Key", "9:inventory"}, {"X-Aggregate-Id", "1"}};
  auto refused = remote.Post("/api/inventory/reserve", headers, reserve, "application/json");
  REQUIRE(refused);
  CHECK(refused->status == 403);
  CHECK(refused->body.find("outboxd simulator") != std::string::npos);
  // The key was not used up: outboxd's own call with it applies.
  CHECK(local.Post("/api/inventory/reserve", headers, reserve, "application/json")->status == 200);
  CHECK(local.Get("/api/simulator/ledger")->body.find("9:inventory") != std::string::npos);
  // The API itself still answers other machines (anonymous access was allowed here).
  CHECK(remote.Get("/healthz")->status == 200);
}

TEST_CASE("a simulated partner refuses an aggregate id longer than the database takes") {
  served_server s(true);
  httplib::Client c("127.0.0.1", s.start());
  httplib::Headers headers{{"X-Aggregate-Id", std::string(256, 'x')}};
  auto r =
      c.Post("/api/notifications/status-update", headers,
             R"({"orderId": 1, "customerId": "c", "newStatus": "SHIPPED"})", "application/json");
  REQUIRE(r);
  CHECK(r->status == 422);
  CHECK(r->body.find("X-Aggregate-Id") != std::string::npos);
  CHECK(c.Get("/api/simulator/ledger")->body.find("xxxx") == std::string::npos);
}

// DNS rebinding: a page of attacker.example, whose name now points at this machine, is
// same-origin for the browser; without tokens its requests carry Host: attacker.example.
TEST_CASE("a browser without a token must name this server by address, localhost or its name") {
  served_server s(true, {R"(server.allowedOrigins=["https://ops.example.com"])"});
  int port = s.start();
  auto get = [&](const std::string& host, const std::string& browser_headers) {
    raw_connection c(port);
    c.send("GET /api/orders HTTP/1.1\r\nHost: " + host + "\r\n" + browser_headers + "\r\n");
    return c.read_response(std::chrono::seconds(5));
  };
  const std::string same_origin = "Sec-Fetch-Site: same-origin\r\nSec-Fetch-Mode: cors\r\n";
  const auto p = std::to_string(port);
  auto rebound = get("attacker.example:" + p, same_origin);
  CHECK(rebound.status == 403);
  CHECK(rebound.body.find("not 'attacker.example'") != std::string::npos);
  CHECK(get("attacker.example:" + p, "Origin: http://attacker.example:" + p + "\r\n").status ==
        403);
  // The server's own names pass (503: no database here).
  for (const std::string& host :
       {"127.0.0.1:" + p, "localhost:" + p, "[::1]:" + p, std::string("LocalHost"),
        "ui.localhost:" + p, std::string("ops.example.com")}) {
    CAPTURE(host);
    CHECK(get(host, same_origin).status == 503);
  }
  // Without a token, a client that is not a browser is judged by its Host as well: over plain
  // HTTP a rebound page's read carries no browser marker at all.
  CHECK(get("outboxd.internal:" + p, "").status == 403);
  // A page of another site that makes the browser fetch a route (an <img>, a <script>): it
  // cannot read the answer, but the work would be done; an allowed origin's fetch passes.
  for (const char* site : {"cross-site", "same-site"}) {
    CAPTURE(site);
    auto embedded = get("127.0.0.1:" + p, fmt::format("Sec-Fetch-Site: {}\r\nSec-Fetch-Dest: "
                                                      "image\r\nSec-Fetch-Mode: no-cors\r\n",
                                                      site));
    CHECK(embedded.status == 403);
    CHECK(embedded.body.find("another site") != std::string::npos);
  }
  CHECK(get("127.0.0.1:" + p, "Origin: https://ops.example.com\r\nSec-Fetch-Site: "
                              "cross-site\r\nSec-Fetch-Mode: cors\r\n")
            .status == 503);
  // Open routes (the UI's files, the probes) are not the point.
  raw_connection ui(port);
  ui.send("GET / HTTP/1.1\r\nHost: attacker.example\r\n" + same_origin + "\r\n");
  CHECK(ui.read_response(std::chrono::seconds(5)).status == 200);
}

TEST_CASE("with tokens, a browser's token is what counts, whatever the name") {
  served_server s(true, {tokens_setting(), "server.host=0.0.0.0"});
  int port = s.start();
  raw_connection c(port);
  c.send(fmt::format("GET /api/orders HTTP/1.1\r\nHost: outboxd.example\r\nSec-Fetch-Site: "
                     "same-origin\r\nAuthorization: Bearer {}\r\n\r\n",
                     read_token));
  CHECK(c.read_response(std::chrono::seconds(5)).status == 503);
}

// DNS rebinding over plain HTTP: a page of http://rebind.attacker.test:PORT whose name now points
// at this machine calls fetch('/api/orders'). The browser sends no Origin (same-origin GET) and
// no Sec-Fetch-* (not a potentially trustworthy URL): only the Host names the page's site.
namespace {

const std::string rebinding_customer = "C-rebind-secret";

/// A served server over the test database, with one order in it.
struct rebinding_target {
  explicit rebinding_target(std::vector<std::string> sets) {
    truncate_all(db());
    server.emplace(true, std::move(sets), db());
    port = server->start();
    auto created = send(
        "POST", "/api/orders", "127.0.0.1:" + std::to_string(port),
        fmt::format("Content-Type: application/json\r\nAuthorization: Bearer {}\r\n", write_token),
        R"({"customerId":")" + rebinding_customer +
            R"(","totalAmount":10,"shippingType":"domestic",)"
            R"("items":[{"sku":"A","quantity":1}]})");
    REQUIRE(created.status == 201);
  }

  raw_response send(const std::string& method, const std::string& path, const std::string& host,
                    const std::string& headers, const std::string& body = "") const {
    raw_connection c(port);
    c.send(fmt::format("{} {} HTTP/1.1\r\nHost: {}\r\n{}Content-Length: {}\r\n\r\n{}", method, path,
                       host, headers, body.size(), body));
    return c.read_response(std::chrono::seconds(5));
  }

  /// What the rebound page's fetch('/api/orders') sends.
  raw_response rebound_get(const std::string& path,
                           const std::string& name = "rebind.attacker.test",
                           const std::string& extra = "") const {
    auto host = name + ":" + std::to_string(port);
    return send("GET", path, host,
                fmt::format("Accept: */*\r\nReferer: http://{}/\r\nUser-Agent: Mozilla/5.0 (X11; "
                            "Linux x86_64)\r\n{}",
                            host, extra));
  }

  std::optional<served_server> server;
  int port = 0;
};

} // namespace

TEST_CASE("without a token, a request by a name not this server's is refused, browser or not") {
  // The README demo: no tokens at all (the order is created with a token the server ignores).
  rebinding_target t({});
  for (const char* path : {"/api/orders", "/api/orders/1", "/api/dlq", "/api/outbox/events",
                           "/api/outbox/stats", "/api/simulator/ledger"}) {
    CAPTURE(path);
    auto r = t.rebound_get(path);
    CHECK(r.status == 403);
    CHECK(r.body.find(R"("code":"forbidden")") != std::string::npos);
    CHECK(r.body.find("server.allowedHosts") != std::string::npos);
    CHECK(r.body.find("not 'rebind.attacker.test'") != std::string::npos);
    CHECK(r.body.find(rebinding_customer) == std::string::npos);
  }
  CHECK(t.rebound_get("/api/orders", "REBIND.Attacker.Test").status == 403);
  // Nor can it change anything (with the JSON type a same-origin fetch may send).
  auto cancel =
      t.send("POST", "/api/orders/1/cancel", "rebind.attacker.test:" + std::to_string(t.port),
             "Content-Type: application/json\r\n");
  CHECK(cancel.status == 403);
  // The probes answer by any name (Kubernetes calls them by the pod's address, a load balancer by
  // whatever name it was given).
  CHECK(t.rebound_get("/healthz").status == 200);
  CHECK(t.rebound_get("/readyz").status == 200);
  // By its address or localhost the same request reads the orders.
  for (std::string host : {"127.0.0.1", "localhost", "[::1]"}) {
    CAPTURE(host);
    auto r = t.send("GET", "/api/orders", host + ":" + std::to_string(t.port), "Accept: */*\r\n");
    CHECK(r.status == 200);
    CHECK(r.body.find(rebinding_customer) != std::string::npos);
  }
}

TEST_CASE("a name listed in server.allowedHosts may be used without a token") {
  rebinding_target t({R"(server.allowedHosts=["rebind.attacker.test","outboxd"])"});
  auto r = t.rebound_get("/api/orders");
  CHECK(r.status == 200);
  CHECK(r.body.find(rebinding_customer) != std::string::npos);
  // A compose service calling http://outboxd:9000, in any case.
  CHECK(t.send("GET", "/api/orders", "OUTBOXD:9000", "").status == 200);
  CHECK(t.rebound_get("/api/orders", "outboxd.attacker.test").status == 403);
}

TEST_CASE("with auth.allowAnonymous, a request with a valid token is not judged by its Host") {
  rebinding_target t({tokens_setting(), "auth.allowAnonymous=true"});
  auto anonymous = t.rebound_get("/api/orders");
  CHECK(anonymous.status == 403);
  CHECK(anonymous.body.find("server.allowedHosts") != std::string::npos);
  // A rebound page cannot hold a token; a client that has one may call by any name.
  auto with_token = t.rebound_get("/api/orders", "rebind.attacker.test",
                                  fmt::format("Authorization: Bearer {}\r\n", read_token));
  CHECK(with_token.status == 200);
  CHECK(with_token.body.find(rebinding_customer) != std::string::npos);
  // A wrong token is never anonymous: 401, whatever the name.
  CHECK(t.rebound_get("/api/orders", "rebind.attacker.test", "Authorization: Bearer wrong\r\n")
            .status == 401);
}

TEST_CASE("a browser's call to a simulated partner must name this server; outboxd's may use any") {
  // With tokens: the partners' routes are open all the same (outboxd calls them without one).
  served_server s(true, {tokens_setting()});
  int port = s.start();
  const auto p = std::to_string(port);
  const std::string reserve = R"({"orderId": 1, "items": [{"sku": "A", "quantity": 1}]})";
  auto post = [&](const std::string& host, const std::string& key, const std::string& extra) {
    raw_connection c(port);
    c.send(fmt::format("POST /api/inventory/reserve HTTP/1.1\r\nHost: {}\r\nContent-Type: "
                       "application/json\r\nIdempotency-Key: {}\r\nX-Aggregate-Id: 1\r\n{}"
                       "Content-Length: {}\r\n\r\n{}",
                       host, key, extra, reserve.size(), reserve));
    return c.read_response(std::chrono::seconds(5));
  };
  auto ledger = [&] {
    httplib::Client c("127.0.0.1", port);
    auto r =
        c.Get("/api/simulator/ledger", {{"Authorization", std::string("Bearer ") + read_token}});
    REQUIRE(r);
    REQUIRE(r->status == 200);
    return r->body;
  };
  const std::string rebound = "rebind.attacker.test:" + p;
  // A rebound page burning the Idempotency-Key of a future order.
  auto refused = post(rebound, "41:inventory", "Origin: http://" + rebound + "\r\n");
  CHECK(refused.status == 403);
  CHECK(refused.body.find("simulated services") != std::string::npos);
  CHECK(refused.body.find("server.allowedHosts") != std::string::npos);
  CHECK(post(rebound, "42:inventory", "Sec-Fetch-Site: same-origin\r\nSec-Fetch-Mode: cors\r\n")
            .status == 403);
  auto used = ledger();
  CHECK(used.find("41:inventory") == std::string::npos);
  CHECK(used.find("42:inventory") == std::string::npos);
  // outboxd's own call (no Origin, no Sec-Fetch-*) reaches the partner by any name.
  CHECK(post(rebound, "41:inventory", "").status == 200);
  CHECK(ledger().find("41:inventory") != std::string::npos);
  // A page of this server itself, by its address, is not refused by the name.
  CHECK(post("127.0.0.1:" + p, "43:inventory", "Origin: http://127.0.0.1:" + p + "\r\n").status ==
        200);
}
