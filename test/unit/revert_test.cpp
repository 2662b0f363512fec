// Compensation planning: finding the route behind a stored endpoint and building revert calls from
// the shipped templates, with hostile stored values that must not change the host, path or body.
#include "conf/loader.hpp"
#include "domain/delivery.hpp"
#include "domain/revert.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <rapidjson/document.h>
#include <set>
#include <string>
#include <vector>

using namespace outboxd::domain;

namespace {

constexpr std::string_view base = "http://127.0.0.1:9000";

rapidjson::Document parse(const std::string& json) {
  rapidjson::Document d;
  d.Parse(json.c_str());
  REQUIRE_FALSE(d.HasParseError());
  return d;
}

outboxd::conf::settings shipped() {
  auto loaded = outboxd::conf::load({});
  REQUIRE_MESSAGE(loaded.value.has_value(), "the built-in configuration must load");
  REQUIRE(loaded.value->simulator.base_url == base);
  return *loaded.value;
}

const destination& shipped_destination(const outboxd::conf::settings& s, const char* name) {
  auto it = s.http.destinations.find(name);
  REQUIRE(it != s.http.destinations.end());
  return it->second;
}

/// The revert template of the shipped route of `name` whose URL ends with `path`.
const revert_template& shipped_revert(const outboxd::conf::settings& s, const char* name,
                                      const std::string& path) {
  const auto& d = shipped_destination(s, name);
  const route* r = route_for_url(d, std::string(base) + path);
  REQUIRE_MESSAGE(r != nullptr, path);
  REQUIRE(r->revert.has_value());
  return *r->revert;
}

std::string url(std::string_view path) {
  return std::string(base) + std::string(path);
}

destination with_urls(std::vector<std::string> urls) {
  destination d;
  d.name = "test";
  for (auto& u : urls)
    d.routes.push_back({std::move(u), std::nullopt, std::nullopt});
  return d;
}

/// "response:$.x" / "request:$.x" as the loader would read it.
extraction from(const char* spec) {
  std::string_view s = spec;
  extraction x;
  x.from = s.rfind("request:", 0) == 0 ? extraction::source::request : extraction::source::response;
  auto path = json_path::parse(s.substr(s.find(':') + 1));
  REQUIRE(path.ok());
  x.path = path.value();
  return x;
}

revert_template make_template(std::string url_template, std::map<std::string, std::string> extract,
                              std::string payload_json = {}, std::string method = "POST") {
  revert_template t;
  t.url = std::move(url_template);
  t.method = std::move(method);
  for (const auto& [name, spec] : extract)
    t.extract.emplace(name, from(spec.c_str()));
  t.payload_json = std::move(payload_json);
  return t;
}

std::set<std::string> keys_of(const rapidjson::Value& v) {
  std::set<std::string> keys;
  for (const auto& m : v.GetObject())
    keys.emplace(m.name.GetString(), m.name.GetStringLength());
  return keys;
}

std::string text(const rapidjson::Value& v) {
  return {v.GetString(), v.GetStringLength()};
}

bool names(const error& e, const std::string& fragment) {
  return e.message.find(fragment) != std::string::npos;
}

const std::vector<std::string> hostile_values = {
    "../../admin",
    "..",
    ".",
    "x?y=1#z",
    R"("},"evil":true,"a":")",
    R"(\", \"evil\": true)",
    "%2e%2e%2fadmin",
    "//evil.example/steal",
    "@evil.example",
    "a b\r\nX-Injected: 1",
    "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80",
    "{customerId}",
    std::string(max_url_value_bytes, 'x'),
    std::string(max_url_value_bytes, '/'),
};

} // namespace

TEST_CASE("a destination with one url finds that route for its own URL") {
  auto s = shipped();
  const auto& inventory = shipped_destination(s, "inventory");
  CHECK(route_for_url(inventory, url("/api/inventory/reserve")) == &inventory.routes[0]);
  CHECK(route_for_url(inventory, url("/api/inventory/release")) == nullptr);
}

TEST_CASE("a call to a URL the configuration no longer has is reverted by the destination's "
          "revert when all its routes revert alike") {
  auto s = shipped();
  // The partner moved: calls made before still revert, with the revert configured now.
  const auto& inventory = shipped_destination(s, "inventory");
  CHECK(route_to_revert(inventory, "http://old-host:8080/api/inventory/reserve") ==
        &inventory.routes[0]);
  const auto& notifications = shipped_destination(s, "notifications"); // all read-only
  CHECK(route_to_revert(notifications, "http://old-host/notify") == &notifications.routes[0]);
  // Routes that revert differently are not guessed between.
  const auto& shipping = shipped_destination(s, "shipping");
  CHECK(route_to_revert(shipping, url("/api/international-shipping")) == &shipping.routes[1]);
  CHECK(route_to_revert(shipping, "http://old-host/api/domestic-shipping") == nullptr);
  CHECK(route_miss(shipping, "http://old-host/api/domestic-shipping") ==
        "cannot tell which configured route called http://old-host/api/domestic-shipping: no "
        "route of shipping has that URL now (changed since the call?) and its routes revert "
        "differently");
  CHECK(route_to_revert(with_urls({}), "http://h/a") == nullptr);
}

TEST_CASE("the shipped shipping and billing routes are told apart by the called URL") {
  auto s = shipped();
  const auto& shipping = shipped_destination(s, "shipping");
  CHECK(route_for_url(shipping, url("/api/domestic-shipping")) == &shipping.routes[0]);
  CHECK(route_for_url(shipping, url("/api/international-shipping")) == &shipping.routes[1]);
  const auto& billing = shipped_destination(s, "billing");
  CHECK(route_for_url(billing, url("/api/billing")) == &billing.routes[0]);
  CHECK(route_for_url(billing, url("/api/high-value-processing")) == &billing.routes[1]);
  const auto& notifications = shipped_destination(s, "notifications");
  CHECK(route_for_url(notifications, url("/api/notifications/review-request")) ==
        &notifications.routes[1]);
}

TEST_CASE("a URL with extra segments, a trailing slash, a query or another host does not match") {
  auto s = shipped();
  const auto& shipping = shipped_destination(s, "shipping");
  for (const char* u :
       {"http://127.0.0.1:9000/api/domestic-shipping/x",
        "http://127.0.0.1:9000/api/domestic-shipping/",
        "http://127.0.0.1:9000/api/domestic-shipping?x=1",
        "http://127.0.0.1:9000/api/domestic-shipping#f",
        "http://127.0.0.1:9001/api/domestic-shipping", "http://evil/api/domestic-shipping",
        "http://127.0.0.1:9000/api/domestic-shippingX", "/api/domestic-shipping", ""})
    CHECK_MESSAGE(route_for_url(shipping, u) == nullptr, u);
}

TEST_CASE("a placeholder matches exactly one non-empty path segment") {
  auto d = with_urls({"http://h/api/orders/{orderId}/items", "http://h/api/orders/{orderId}"});
  CHECK(route_for_url(d, "http://h/api/orders/42/items") == &d.routes[0]);
  CHECK(route_for_url(d, "http://h/api/orders/42") == &d.routes[1]);
  CHECK(route_for_url(d, "http://h/api/orders/a%2Fb%3F") == &d.routes[1]);
  CHECK(route_for_url(d, "http://h/api/orders/42/items/extra") == nullptr);
  CHECK(route_for_url(d, "http://h/api/orders/42/43") == nullptr);
  CHECK(route_for_url(d, "http://h/api/orders/") == nullptr);
  CHECK(route_for_url(d, "http://h/api/orders//items") == nullptr);
  CHECK(route_for_url(d, "http://h/api/orders/42?x=1") == nullptr);
  CHECK(route_for_url(d, "http://h/api/orders/42#x") == nullptr);
  CHECK(route_for_url(d, "http://h/api/orders") == nullptr);
}

TEST_CASE("placeholders inside a segment match the rest of that segment only") {
  auto d = with_urls({"http://h/o/order-{id}.json", "http://h/p/{a}-{b}"});
  CHECK(route_for_url(d, "http://h/o/order-42.json") == &d.routes[0]);
  CHECK(route_for_url(d, "http://h/o/order-4.2.json") == &d.routes[0]);
  CHECK(route_for_url(d, "http://h/o/order-.json") == nullptr);
  CHECK(route_for_url(d, "http://h/o/order-42") == nullptr);
  CHECK(route_for_url(d, "http://h/o/order-4/2.json") == nullptr);
  CHECK(route_for_url(d, "http://h/p/x-y-z") == &d.routes[1]);
  CHECK(route_for_url(d, "http://h/p/x-") == nullptr);
  CHECK(route_for_url(d, "http://h/p/-y") == nullptr);
}

TEST_CASE("literal braces that are not placeholders must appear as they are") {
  auto d = with_urls({"http://h/a/{}/{not valid}"});
  CHECK(route_for_url(d, "http://h/a/{}/{not valid}") == &d.routes[0]);
  CHECK(route_for_url(d, "http://h/a/x/{not valid}") == nullptr);
}

TEST_CASE("the first matching route wins and a destination without routes finds none") {
  auto d = with_urls({"http://h/a/{x}", "http://h/a/fixed"});
  CHECK(route_for_url(d, "http://h/a/fixed") == &d.routes[0]);
  CHECK(route_for_url(with_urls({}), "http://h/a") == nullptr);
}

TEST_CASE("routes that match one URL and revert differently are not guessed between") {
  auto d =
      with_urls({"http://h/pay", "http://h/pay", "http://h/ship/{id}", "http://h/ship/express"});
  revert_template usd{"http://h/pay/{tx}/refund-usd", "POST", {}, ""};
  revert_template eur = usd;
  eur.url = "http://h/pay/{tx}/refund-eur";
  d.routes[0].revert = usd;
  d.routes[1].revert = eur;
  d.routes[2].revert = revert_template{"http://h/ship/{id}/cancel", "POST", {}, ""};
  d.routes[3].revert = revert_template{"http://h/express/{id}/cancel", "POST", {}, ""};
  CHECK(route_for_url(d, "http://h/pay") == nullptr);
  CHECK(route_miss(d, "http://h/pay") ==
        "cannot tell which configured route called http://h/pay: routes 0, 1 of test match it "
        "and revert differently");
  CHECK(route_for_url(d, "http://h/ship/express") == nullptr);
  CHECK(route_for_url(d, "http://h/ship/42") == &d.routes[2]); // only one matches
  CHECK(route_miss(d, "http://h/other") ==
        "cannot tell which configured route called http://h/other: no route of test has that URL "
        "now (changed since the call?) and its routes revert differently");
  // Alike reverts (here the same template) leave nothing to tell apart: the first one serves.
  d.routes[1].revert = usd;
  CHECK(route_for_url(d, "http://h/pay") == &d.routes[0]);
  CHECK(same_revert(d.routes[0], d.routes[1]));
  CHECK_FALSE(same_revert(d.routes[0], d.routes[2]));
  CHECK(urls_overlap("http://h/ship/{id}", "http://h/ship/express"));
  CHECK(urls_overlap("http://h/ship/express", "http://h/ship/{id}"));
  CHECK_FALSE(urls_overlap("http://h/ship/{id}", "http://h/ship/{id}/x"));
}

TEST_CASE("every URL fill_url makes from hostile values leads back to its route") {
  auto d = with_urls({"http://h/api/orders/{orderId}/cancel", "http://h/api/orders/{orderId}"});
  for (const auto& value : hostile_values) {
    auto filled = fill_url(d.routes[0].url, {{"orderId", value}});
    REQUIRE(filled.ok());
    CHECK(route_for_url(d, filled.value()) == &d.routes[0]);
  }
}

TEST_CASE("the shipped inventory revert releases the reservation with DELETE and no body") {
  auto s = shipped();
  const auto& inventory = shipped_destination(s, "inventory");
  REQUIRE(inventory.routes[0].revert.has_value());
  auto request = parse(R"({"orderId":42,"totalAmount":10.5,"shippingType":"domestic","items":[]})");
  auto response = parse(R"({"reservationId":"RES-7","status":"RESERVED"})");
  auto call = build_revert(*inventory.routes[0].revert, &request, &response);
  REQUIRE(call.ok());
  CHECK(call.value().url == url("/api/inventory/RES-7/release"));
  CHECK(call.value().method == "DELETE");
  CHECK(call.value().body_json.empty());
}

TEST_CASE("the shipped shipping reverts cancel the shipment with ids from response and request") {
  auto s = shipped();
  auto request =
      parse(R"({"orderId":42,"customerId":"C-1","shippingType":"domestic","totalAmount":99.99})");
  auto response = parse(R"({"shipmentId":"SHP-9","status":"CREATED"})");
  for (std::string kind : {"domestic", "international"}) {
    const auto& t = shipped_revert(s, "shipping", "/api/" + kind + "-shipping");
    auto call = build_revert(t, &request, &response);
    REQUIRE(call.ok());
    CHECK(call.value().url == url("/api/" + kind + "-shipping/SHP-9/cancel"));
    CHECK(call.value().method == "POST");
    auto body = parse(call.value().body_json);
    CHECK(keys_of(body) == std::set<std::string>{"reason", "shipmentId", "orderId", "customerId"});
    CHECK(text(body["reason"]) == "payment_failed");
    CHECK(text(body["shipmentId"]) == "SHP-9");
    REQUIRE(body["orderId"].IsInt64());
    CHECK(body["orderId"].GetInt64() == 42);
    CHECK(text(body["customerId"]) == "C-1");
  }
}

TEST_CASE("the shipped billing revert refunds the transaction with the charged amount") {
  auto s = shipped();
  const auto& t = shipped_revert(s, "billing", "/api/billing");
  auto request = parse(R"({"orderId":42,"amount":99.99,"currency":"EUR"})");
  auto response = parse(R"({"transaction":{"id":"TX-5","status":"CHARGED"}})");
  auto call = build_revert(t, &request, &response);
  REQUIRE(call.ok());
  CHECK(call.value().url == url("/api/billing/TX-5/refund"));
  CHECK(call.value().method == "POST");
  auto body = parse(call.value().body_json);
  CHECK(keys_of(body) == std::set<std::string>{"transactionId", "amount", "currency", "reason"});
  CHECK(text(body["transactionId"]) == "TX-5");
  REQUIRE(body["amount"].IsNumber());
  CHECK(body["amount"].GetDouble() == 99.99);
  CHECK(call.value().body_json.find("\"amount\":99.99") != std::string::npos);
  CHECK(text(body["currency"]) == "EUR");
  CHECK(text(body["reason"]) == "order_failed");
}

TEST_CASE("the shipped high-value revert cancels the processing with the charged amount") {
  auto s = shipped();
  const auto& t = shipped_revert(s, "billing", "/api/high-value-processing");
  auto request = parse(R"({"orderId":43,"amount":1500,"currency":"USD"})");
  auto response = parse(R"({"processingId":"HV-1"})");
  auto call = build_revert(t, &request, &response);
  REQUIRE(call.ok());
  CHECK(call.value().url == url("/api/high-value-processing/HV-1/cancel"));
  auto body = parse(call.value().body_json);
  REQUIRE(body["amount"].IsInt64());
  CHECK(body["amount"].GetInt64() == 1500);
  CHECK(text(body["processingId"]) == "HV-1");
}

TEST_CASE("the shipped fraud check has nothing to revert") {
  auto s = shipped();
  const auto& fraud = shipped_destination(s, "fraudCheck");
  const route* r = route_for_url(fraud, url("/api/fraud/check"));
  REQUIRE(r != nullptr);
  CHECK_FALSE(r->revert.has_value());
}

TEST_CASE("hostile response values give one encoded segment on the original host and a body "
          "with exactly the template's keys") {
  auto s = shipped();
  const auto& t = shipped_revert(s, "shipping", "/api/domestic-shipping");
  const std::string prefix = url("/api/domestic-shipping/");
  auto request = parse(R"({"orderId":42,"customerId":"C-1"})");
  for (const auto& value : hostile_values) {
    rapidjson::Document response;
    response.SetObject();
    response.AddMember("shipmentId", rapidjson::Value(value, response.GetAllocator()),
                       response.GetAllocator());
    auto call = build_revert(t, &request, &response);
    REQUIRE(call.ok());
    const auto& u = call.value().url;
    REQUIRE(u.rfind(prefix, 0) == 0);
    REQUIRE(u.size() > prefix.size() + 7);
    CHECK(u.substr(u.size() - 7) == "/cancel");
    auto segment = u.substr(prefix.size(), u.size() - prefix.size() - 7);
    CHECK(segment == percent_encode_segment(value));
    CHECK(segment.find_first_of("/?#\\ \"\r\n") == std::string::npos);
    CHECK(segment != "..");
    CHECK(segment != ".");

    auto body = parse(call.value().body_json);
    CHECK(keys_of(body) == std::set<std::string>{"reason", "shipmentId", "orderId", "customerId"});
    CHECK(text(body["shipmentId"]) == value);
    CHECK(text(body["customerId"]) == "C-1");
    CHECK(text(body["reason"]) == "payment_failed");
  }
}

TEST_CASE("hostile request values stay inside their string in the body") {
  auto s = shipped();
  const auto& t = shipped_revert(s, "shipping", "/api/international-shipping");
  auto response = parse(R"({"shipmentId":"SHP-1"})");
  for (const auto& value : hostile_values) {
    rapidjson::Document request;
    request.SetObject();
    request.AddMember("orderId", 1, request.GetAllocator());
    request.AddMember("customerId", rapidjson::Value(value, request.GetAllocator()),
                      request.GetAllocator());
    auto call = build_revert(t, &request, &response);
    REQUIRE(call.ok());
    auto body = parse(call.value().body_json);
    CHECK(keys_of(body) == std::set<std::string>{"reason", "shipmentId", "orderId", "customerId"});
    CHECK(text(body["customerId"]) == value);
  }
}

TEST_CASE("a placeholder inside a longer string takes the value's text, without quotes") {
  auto t = make_template("http://h/r/{id}",
                         {{"id", "response:$.id"},
                          {"orderId", "request:$.orderId"},
                          {"name", "request:$.name"},
                          {"flag", "request:$.flag"},
                          {"amount", "request:$.amount"}},
                         R"({"ref":"order-{orderId}","who":"by {name}!","both":"{orderId}/{name}",)"
                         R"("flag":"f={flag}","amount":"{amount} USD"})");
  auto request = parse(R"({"orderId":42,"name":"Ann \"A\"","flag":true,"amount":99.99})");
  auto response = parse(R"({"id":"X"})");
  auto call = build_revert(t, &request, &response);
  REQUIRE(call.ok());
  auto body = parse(call.value().body_json);
  CHECK(text(body["ref"]) == "order-42");
  CHECK(text(body["who"]) == "by Ann \"A\"!");
  CHECK(text(body["both"]) == "42/Ann \"A\"");
  CHECK(text(body["flag"]) == "f=true");
  CHECK(text(body["amount"]) == "99.99 USD");
}

TEST_CASE("a whole-string placeholder keeps the value's JSON type") {
  auto t = make_template("http://h/r",
                         {{"n", "request:$.n"},
                          {"b", "request:$.b"},
                          {"o", "request:$.o"},
                          {"a", "request:$.a"},
                          {"s", "request:$.s"}},
                         R"({"n":"{n}","b":"{b}","o":"{o}","a":"{a}","s":"{s}","pad":" {s}"})");
  auto request = parse(R"({"n":-7,"b":false,"o":{"k":[1,"two"]},"a":[1,{"x":null}],"s":"50"})");
  auto call = build_revert(t, &request, nullptr);
  REQUIRE(call.ok());
  auto body = parse(call.value().body_json);
  REQUIRE(body["n"].IsInt());
  CHECK(body["n"].GetInt() == -7);
  REQUIRE(body["b"].IsBool());
  CHECK_FALSE(body["b"].GetBool());
  CHECK(body["o"] == request["o"]);
  CHECK(body["a"] == request["a"]);
  REQUIRE(body["s"].IsString());
  CHECK(text(body["s"]) == "50");
  CHECK(text(body["pad"]) == " 50");
}

TEST_CASE("placeholders are filled in nested values but never in keys") {
  auto t = make_template("http://h/r", {{"id", "response:$.id"}},
                         R"({"{id}":"{id}","nested":{"list":["{id}","x-{id}",{"deep":"{id}"}]},)"
                         R"("n":1,"t":true,"z":null})");
  auto response = parse(R"({"id":"A"})");
  auto call = build_revert(t, nullptr, &response);
  REQUIRE(call.ok());
  CHECK(call.value().body_json ==
        R"({"{id}":"A","nested":{"list":["A","x-A",{"deep":"A"}]},"n":1,"t":true,"z":null})");
}

TEST_CASE("a substituted value that looks like a placeholder is not filled again") {
  auto t = make_template("http://h/r", {{"a", "response:$.a"}, {"b", "response:$.b"}},
                         R"({"x":"{a}","y":"pre {a}"})");
  auto response = parse(R"({"a":"{b}","b":"secret"})");
  auto call = build_revert(t, nullptr, &response);
  REQUIRE(call.ok());
  auto body = parse(call.value().body_json);
  CHECK(text(body["x"]) == "{b}");
  CHECK(text(body["y"]) == "pre {b}");
}

TEST_CASE("numbers and booleans in a URL placeholder become their JSON text") {
  auto t = make_template("http://h/r/{n}/{b}/{d}",
                         {{"n", "response:$.n"}, {"b", "response:$.b"}, {"d", "response:$.d"}});
  auto response = parse(R"({"n":42,"b":true,"d":-1.5})");
  auto call = build_revert(t, nullptr, &response);
  REQUIRE(call.ok());
  CHECK(call.value().url == "http://h/r/42/true/-1.5");
}

TEST_CASE("a number a double cannot hold exactly, or an overlong URL value, is an error naming the "
          "placeholder") {
  auto t = make_template("http://h/r/{n}", {{"n", "response:$.n"}});
  for (const char* exact : {R"({"n":9007199254740993})", R"({"n":18446744073709551615})",
                            R"({"n":-9223372036854775808})", R"({"n":1e15})", R"({"n":0.5})"}) {
    auto response = parse(exact);
    CHECK_MESSAGE(build_revert(t, nullptr, &response).ok(), exact);
  }
  for (const char* inexact :
       {R"({"n":12345678901234567890123})", R"({"n":1e300})", R"({"n":-18446744073709551616})"}) {
    auto response = parse(inexact);
    auto call = build_revert(t, nullptr, &response);
    REQUIRE_FALSE_MESSAGE(call.ok(), inexact);
    CHECK(names(call.err(), "{n}"));
    CHECK(names(call.err(), "too large to copy exactly"));
  }
  auto long_id = parse(fmt::format(R"({{"n":"{}"}})", std::string(max_url_value_bytes + 1, 'L')));
  auto call = build_revert(t, nullptr, &long_id);
  REQUIRE_FALSE(call.ok());
  CHECK(names(call.err(), "{n}"));
  CHECK(names(call.err(), "2049 bytes long"));
  auto longest = parse(fmt::format(R"({{"n":"{}"}})", std::string(max_url_value_bytes, 'L')));
  CHECK(build_revert(t, nullptr, &longest).ok());
  // In a body, a long value is a string like any other.
  auto in_body = make_template("http://h/r", {{"n", "response:$.n"}}, R"({"id":"{n}"})");
  CHECK(build_revert(in_body, nullptr, &long_id).ok());
}

TEST_CASE("a missing or null value is an error naming the placeholder") {
  auto s = shipped();
  const auto& t = shipped_revert(s, "shipping", "/api/domestic-shipping");
  auto request = parse(R"({"orderId":42,"customerId":"C-1"})");
  for (const char* response_json :
       {R"({})", R"({"shipmentId":null})", R"({"other":"x"})", R"([])", R"("text")", "null"}) {
    auto response = parse(response_json);
    auto call = build_revert(t, &request, &response);
    REQUIRE_FALSE_MESSAGE(call.ok(), response_json);
    CHECK(names(call.err(), "{shipmentId}"));
    CHECK(names(call.err(), "response:$.shipmentId"));
  }
  auto response = parse(R"({"shipmentId":"SHP-1"})");
  auto no_customer = parse(R"({"orderId":42,"customerId":null})");
  auto call = build_revert(t, &no_customer, &response);
  REQUIRE_FALSE(call.ok());
  CHECK(names(call.err(), "{customerId}"));
  CHECK(names(call.err(), "null"));
  auto no_order = parse(R"({"customerId":"C-1"})");
  call = build_revert(t, &no_order, &response);
  REQUIRE_FALSE(call.ok());
  CHECK(names(call.err(), "{orderId}"));
  CHECK(names(call.err(), "missing"));
}

TEST_CASE("a missing stored request or response is an error naming the placeholder") {
  auto s = shipped();
  const auto& t = shipped_revert(s, "billing", "/api/billing");
  auto request = parse(R"({"orderId":42,"amount":10,"currency":"USD"})");
  auto response = parse(R"({"transaction":{"id":"TX-1"}})");
  auto call = build_revert(t, &request, nullptr);
  REQUIRE_FALSE(call.ok());
  CHECK(names(call.err(), "{transactionId}"));
  CHECK(names(call.err(), "response"));
  call = build_revert(t, nullptr, &response);
  REQUIRE_FALSE(call.ok());
  CHECK(names(call.err(), "request"));
  CHECK((names(call.err(), "{amount}") || names(call.err(), "{currency}")));
  CHECK_FALSE(build_revert(t, nullptr, nullptr).ok());
}

TEST_CASE("an object, an array or an empty string in a URL placeholder is an error naming it") {
  auto t = make_template("http://h/r/{id}/cancel", {{"id", "response:$.id"}});
  for (const char* json : {R"({"id":{"a":1}})", R"({"id":[1]})", R"({"id":{}})", R"({"id":[]})"}) {
    auto response = parse(json);
    auto call = build_revert(t, nullptr, &response);
    REQUIRE_FALSE_MESSAGE(call.ok(), json);
    CHECK(names(call.err(), "{id}"));
  }
  auto empty = parse(R"({"id":""})");
  auto call = build_revert(t, nullptr, &empty);
  REQUIRE_FALSE(call.ok());
  CHECK(names(call.err(), "{id}"));
  CHECK(names(call.err(), "empty"));
}

TEST_CASE("a placeholder without an extract entry is an error naming it") {
  auto in_url = make_template("http://h/r/{id}", {});
  CHECK(names(build_revert(in_url, nullptr, nullptr).err(), "{id}"));
  auto in_body = make_template("http://h/r", {}, R"({"a":"{ghost}"})");
  auto response = parse("{}");
  auto call = build_revert(in_body, nullptr, &response);
  REQUIRE_FALSE(call.ok());
  CHECK(names(call.err(), "{ghost}"));
  CHECK(names(call.err(), "extract"));
}

TEST_CASE("unused extract entries need no value") {
  auto t = make_template("http://h/r/{id}", {{"id", "response:$.id"}, {"x", "request:$.x"}});
  auto response = parse(R"({"id":"A"})");
  auto call = build_revert(t, nullptr, &response);
  REQUIRE(call.ok());
  CHECK(call.value().url == "http://h/r/A");
}

TEST_CASE("a value that is not valid UTF-8 is refused in a body and encoded in a URL") {
  rapidjson::Document response;
  response.SetObject();
  response.AddMember("id", rapidjson::Value("a\xFF\xFE", response.GetAllocator()),
                     response.GetAllocator());
  auto in_url = make_template("http://h/r/{id}", {{"id", "response:$.id"}});
  auto call = build_revert(in_url, nullptr, &response);
  REQUIRE(call.ok());
  CHECK(call.value().url == "http://h/r/a%FF%FE");
  auto in_body = make_template("http://h/r", {{"id", "response:$.id"}}, R"({"id":"{id}"})");
  call = build_revert(in_body, nullptr, &response);
  REQUIRE_FALSE(call.ok());
  CHECK(names(call.err(), "{id}"));
  CHECK(names(call.err(), "UTF-8"));
}

TEST_CASE("a template without payload has an empty body, and an empty object stays one") {
  auto response = parse(R"({"id":"A"})");
  auto none = make_template("http://h/r/{id}", {{"id", "response:$.id"}}, "", "DELETE");
  auto call = build_revert(none, nullptr, &response);
  REQUIRE(call.ok());
  CHECK(call.value().body_json.empty());
  CHECK(call.value().method == "DELETE");
  auto empty = make_template("http://h/r/{id}", {{"id", "response:$.id"}}, "{}");
  call = build_revert(empty, nullptr, &response);
  REQUIRE(call.ok());
  CHECK(call.value().body_json == "{}");
}

TEST_CASE("a revert URL template with a placeholder in the host is refused") {
  auto t = make_template("http://{host}/r", {{"host", "response:$.host"}});
  auto response = parse(R"({"host":"evil.example"})");
  auto call = build_revert(t, nullptr, &response);
  REQUIRE_FALSE(call.ok());
  CHECK(names(call.err(), "{host}"));
}

// Runs are named by their lease tokens (here 10, 20, 30, ...); step_history: {state, the first
// run with a success of it, the runs with a row of it}.
namespace {
step_history done(std::int64_t run) {
  return {step_state::succeeded, run, {run}};
}
} // namespace

TEST_CASE("the step where the fan-out stopped is uncertain when a call of it went unanswered") {
  using enum step_state;
  const std::vector<std::string> fanout{"inventory", "fraudCheck", "shipping", "billing"};
  // Stopped at billing after a timeout: the charge may have been made.
  CHECK(uncertain_step(fanout,
                       {{"inventory", done(10)},
                        {"fraudCheck", done(10)},
                        {"shipping", {skipped, 10, {10}}},
                        {"billing", {unanswered, std::nullopt, {10, 20, 30, 40}}}},
                       {}) == "billing");
}

TEST_CASE("a run cut off at a step without leaving a row of it makes the step uncertain") {
  using enum step_state;
  const std::vector<std::string> fanout{"inventory", "fraudCheck", "shipping"};
  // Run 20 was cut off after fraudCheck succeeded in it, at shipping: no row at all.
  CHECK(uncertain_step(fanout, {{"inventory", done(10)}, {"fraudCheck", done(20)}}, {20}) ==
        "shipping");
  // Cut off before fraudCheck succeeded (in the run after it): it was at fraudCheck, which is
  // settled; shipping was only reached by run 30, which answered 503.
  CHECK(uncertain_step(fanout,
                       {{"inventory", done(10)},
                        {"fraudCheck", {succeeded, 30, {10, 30}}},
                        {"shipping", {answered, std::nullopt, {30}}}},
                       {20}) == std::nullopt);
  // Runs 20 and 40 answered 503 at shipping; 30 was cut off there (its row missing): whatever
  // the later runs heard, 30's call may have been applied.
  CHECK(uncertain_step(fanout,
                       {{"inventory", done(10)},
                        {"fraudCheck", done(20)},
                        {"shipping", {answered, std::nullopt, {20, 40}}}},
                       {30}) == "shipping");
  // Cut off after its row of shipping was written (its answer, a 503, was in): nothing unknown.
  CHECK(uncertain_step(fanout,
                       {{"inventory", done(10)},
                        {"fraudCheck", done(20)},
                        {"shipping", {answered, std::nullopt, {20, 30}}}},
                       {30}) == std::nullopt);
}

TEST_CASE("a step no run sent (held back by an open circuit) is not settled, whatever the "
          "attempt numbers say") {
  using enum step_state;
  const std::vector<std::string> fanout{"inventory", "fraudCheck"};
  // Every run was held back before inventory: nothing was sent, and none was cut off.
  CHECK(uncertain_step(fanout, {}, {}) == std::nullopt);
  // fraudCheck answered 503 in run 10, a probe run 20 answered 503 again (both with the same
  // attempt number); run 30 was cut off at it: uncertain, though every attempt number has a row.
  CHECK(uncertain_step(
            fanout, {{"inventory", done(10)}, {"fraudCheck", {answered, std::nullopt, {10, 20}}}},
            {30}) == "fraudCheck");
  CHECK(uncertain_step(
            fanout, {{"inventory", done(10)}, {"fraudCheck", {answered, std::nullopt, {10, 20}}}},
            {}) == std::nullopt);
}

TEST_CASE("a compensation's own successful re-send does not move a cut-off run on to the next "
          "step") {
  using enum step_state;
  const std::vector<std::string> fanout{"inventory", "fraudCheck", "billing"};
  // Run 10 was cut off at fraudCheck; the compensation's re-send of it succeeded (no run), then
  // the compensation stopped before its first revert. Billing was never sent.
  CHECK(uncertain_step(fanout,
                       {{"inventory", done(5)}, {"fraudCheck", {succeeded, std::nullopt, {}}}},
                       {10}) == std::nullopt);
}

TEST_CASE("runs before they were recorded (run 0) count as cut off at the first unfinished step") {
  using enum step_state;
  const std::vector<std::string> fanout{"inventory", "fraudCheck"};
  // Rows of no run (0): the history from before the upgrade.
  CHECK(uncertain_step(fanout,
                       {{"inventory", done(0)}, {"fraudCheck", {answered, std::nullopt, {}}}},
                       {0}) == "fraudCheck");
  CHECK(uncertain_step(fanout, {}, {0}) == "inventory");
  // A definite answer since settles it.
  CHECK(uncertain_step(fanout,
                       {{"inventory", done(0)}, {"fraudCheck", {refused, std::nullopt, {30}}}},
                       {0}) == std::nullopt);
}

TEST_CASE("a refused step, or one that succeeded, is never settled") {
  using enum step_state;
  const std::vector<std::string> fanout{"inventory", "fraudCheck", "shipping", "billing"};
  CHECK(uncertain_step(fanout,
                       {{"inventory", done(10)}, {"fraudCheck", {refused, std::nullopt, {10}}}},
                       {10}) == std::nullopt);
  CHECK(uncertain_step(fanout,
                       {{"inventory", done(10)},
                        {"fraudCheck", done(10)},
                        {"shipping", done(10)},
                        {"billing", done(10)}},
                       {10}) == std::nullopt);
}

TEST_CASE("once a revert was attempted, nothing is settled again") {
  using enum step_state;
  const std::vector<std::string> fanout{"inventory", "shipping", "billing"};
  // The shipping settle succeeded and its revert ran; billing was never called.
  CHECK(uncertain_step(fanout,
                       {{"inventory", done(10)},
                        {"shipping", {succeeded, 0, {10}}},
                        {"shipping.revert", done(0)},
                        {"inventory.revert", {unanswered, std::nullopt, {}}}},
                       {10}) == std::nullopt);
}
