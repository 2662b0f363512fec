// Delivery decisions: route conditions (every operator, missing and null values, the shipped
// routes), route choice, URL filling against hostile values, classification and retry timing.
#include "conf/loader.hpp"
#include "domain/delivery.hpp"

#include <chrono>
#include <climits>
#include <cmath>
#include <doctest/doctest.h>
#include <limits>
#include <rapidjson/document.h>
#include <string>
#include <vector>

using namespace outboxd::domain;
using namespace std::chrono_literals;
using std::chrono::milliseconds;

namespace {

rapidjson::Document parse(const std::string& json) {
  rapidjson::Document d;
  d.Parse(json.c_str());
  REQUIRE_FALSE(d.HasParseError());
  return d;
}

condition make_condition(const char* path, condition_operator op, condition_value value = {},
                         std::optional<std::string> previous = std::nullopt) {
  auto p = json_path::parse(path);
  REQUIRE(p.ok());
  return condition{p.value(), op, std::move(value), std::move(previous)};
}

/// Evaluates `c` against the payload `{"v": <value_json>}` reading `$.v`.
bool holds_for(condition_operator op, const std::string& value_json, condition_value literal) {
  auto payload = parse(R"({"v":)" + value_json + "}");
  return condition_holds(make_condition("$.v", op, std::move(literal)), &payload, {});
}

const std::vector<condition_operator> all_operators = {
    condition_operator::eq,       condition_operator::ne,    condition_operator::gt,
    condition_operator::gte,      condition_operator::lt,    condition_operator::lte,
    condition_operator::contains, condition_operator::exists};

outboxd::conf::settings shipped() {
  auto loaded = outboxd::conf::load({});
  REQUIRE_MESSAGE(loaded.value.has_value(), "the built-in configuration must load");
  return *loaded.value;
}

const destination& shipped_destination(const outboxd::conf::settings& s, const char* name) {
  auto it = s.http.destinations.find(name);
  REQUIRE(it != s.http.destinations.end());
  return it->second;
}

destination named(std::string name, bool required = false) {
  destination d;
  d.name = std::move(name);
  d.required = required;
  return d;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

} // namespace

TEST_CASE("eq compares strings byte for byte and numbers numerically") {
  using op = condition_operator;
  CHECK(holds_for(op::eq, R"("domestic")", std::string("domestic")));
  CHECK_FALSE(holds_for(op::eq, R"("Domestic")", std::string("domestic")));
  CHECK_FALSE(holds_for(op::eq, R"("domestic ")", std::string("domestic")));
  CHECK(holds_for(op::eq, R"("")", std::string("")));
  CHECK(holds_for(op::eq, "50", 50.0));
  CHECK(holds_for(op::eq, "50.0", 50.0));
  CHECK(holds_for(op::eq, "-0.5", -0.5));
  CHECK_FALSE(holds_for(op::eq, "51", 50.0));
}

TEST_CASE("a string literal equals a number written the same way, and a number a numeric string") {
  using op = condition_operator;
  CHECK(holds_for(op::eq, "50", std::string("50")));
  CHECK(holds_for(op::eq, "50", std::string("50.0")));
  CHECK(holds_for(op::eq, "1000", std::string("1e3")));
  CHECK_FALSE(holds_for(op::eq, "50", std::string("fifty")));
  CHECK_FALSE(holds_for(op::eq, "50", std::string(" 50")));
  CHECK(holds_for(op::eq, R"("50")", 50.0));
  CHECK_FALSE(holds_for(op::eq, R"("50x")", 50.0));
  // Two strings stay strings: "50" and "50.0" are different texts.
  CHECK_FALSE(holds_for(op::eq, R"("50.0")", std::string("50")));
}

TEST_CASE("eq on booleans matches only the same boolean") {
  using op = condition_operator;
  CHECK(holds_for(op::eq, "true", true));
  CHECK(holds_for(op::eq, "false", false));
  CHECK_FALSE(holds_for(op::eq, "true", false));
  CHECK_FALSE(holds_for(op::eq, R"("true")", true));
  CHECK_FALSE(holds_for(op::eq, "1", true));
  CHECK_FALSE(holds_for(op::eq, "true", std::string("true")));
  CHECK_FALSE(holds_for(op::eq, "true", 1.0));
}

TEST_CASE("eq never matches an array or an object") {
  using op = condition_operator;
  CHECK_FALSE(holds_for(op::eq, R"(["a"])", std::string("a")));
  CHECK_FALSE(holds_for(op::eq, "[50]", 50.0));
  CHECK_FALSE(holds_for(op::eq, R"({"a":1})", std::string("a")));
  CHECK_FALSE(holds_for(op::eq, "{}", true));
}

TEST_CASE("ne holds exactly when a present value differs from the literal") {
  using op = condition_operator;
  CHECK(holds_for(op::ne, R"("international")", std::string("domestic")));
  CHECK_FALSE(holds_for(op::ne, R"("domestic")", std::string("domestic")));
  CHECK_FALSE(holds_for(op::ne, "50", std::string("50")));
  CHECK_FALSE(holds_for(op::ne, R"("50")", 50.0));
  CHECK(holds_for(op::ne, "51", 50.0));
  CHECK(holds_for(op::ne, "true", false));
  CHECK(holds_for(op::ne, R"(["a"])", std::string("a")));
  CHECK(holds_for(op::ne, R"({"a":1})", 1.0));
}

TEST_CASE("gt gte lt lte compare numbers including at the boundary") {
  using op = condition_operator;
  CHECK(holds_for(op::gt, "51", 50.0));
  CHECK_FALSE(holds_for(op::gt, "50", 50.0));
  CHECK(holds_for(op::gte, "50", 50.0));
  CHECK_FALSE(holds_for(op::gte, "49.999", 50.0));
  CHECK(holds_for(op::lt, "49.999", 50.0));
  CHECK_FALSE(holds_for(op::lt, "50", 50.0));
  CHECK(holds_for(op::lte, "50", 50.0));
  CHECK_FALSE(holds_for(op::lte, "50.001", 50.0));
  CHECK(holds_for(op::lt, "-1", 0.0));
  CHECK(holds_for(op::gt, "9223372036854775807", 1e18));
  CHECK(holds_for(op::lt, "1e-300", 1.0));
}

TEST_CASE("numeric strings count as numbers on either side of an ordering operator") {
  using op = condition_operator;
  CHECK(holds_for(op::gt, R"("75")", 50.0));
  CHECK(holds_for(op::gt, "75", std::string("50")));
  CHECK(holds_for(op::gt, R"("75")", std::string("50")));
  CHECK(holds_for(op::lte, R"("-2.5e1")", -25.0));
  CHECK_FALSE(holds_for(op::lt, R"("75")", std::string("50")));
}

TEST_CASE("ordering operators are false when either side is not numeric") {
  using op = condition_operator;
  for (auto o : {op::gt, op::gte, op::lt, op::lte}) {
    for (const char* value :
         {R"("abc")", R"("")", R"(" 50")", R"("50 ")", R"("+50")", R"("0x10")", R"("inf")",
          R"("nan")", R"("1e999")", R"("5,0")", "true", "false", "[50]", R"({"v":50})"}) {
      CHECK_FALSE_MESSAGE(holds_for(o, value, 0.0), value);
      CHECK_FALSE_MESSAGE(holds_for(o, value, 1e9), value);
    }
    CHECK_FALSE(holds_for(o, "50", std::string("abc")));
    CHECK_FALSE(holds_for(o, "50", true));
  }
}

TEST_CASE("contains is a substring test on strings") {
  using op = condition_operator;
  CHECK(holds_for(op::contains, R"("express-domestic")", std::string("domestic")));
  CHECK(holds_for(op::contains, R"("domestic")", std::string("domestic")));
  CHECK(holds_for(op::contains, R"("anything")", std::string("")));
  CHECK_FALSE(holds_for(op::contains, R"("dom")", std::string("domestic")));
  CHECK_FALSE(holds_for(op::contains, R"("DOMESTIC")", std::string("domestic")));
  // A number literal is not text: "order-50" does not contain 50.
  CHECK_FALSE(holds_for(op::contains, R"("order-50")", 50.0));
  CHECK_FALSE(holds_for(op::contains, R"("true")", true));
}

TEST_CASE("contains is element membership on arrays with eq semantics") {
  using op = condition_operator;
  CHECK(holds_for(op::contains, R"(["a","vip","b"])", std::string("vip")));
  CHECK_FALSE(holds_for(op::contains, R"(["a","vipp"])", std::string("vip")));
  CHECK(holds_for(op::contains, "[1,50,3]", 50.0));
  CHECK(holds_for(op::contains, "[1,50,3]", std::string("50")));
  CHECK(holds_for(op::contains, R"(["50"])", 50.0));
  CHECK(holds_for(op::contains, "[false,true]", true));
  CHECK_FALSE(holds_for(op::contains, "[]", std::string("a")));
  CHECK_FALSE(holds_for(op::contains, "[null]", std::string("null")));
  CHECK_FALSE(holds_for(op::contains, R"([["vip"]])", std::string("vip")));
  CHECK_FALSE(holds_for(op::contains, R"([{"vip":true}])", std::string("vip")));
}

TEST_CASE("contains is false on numbers, booleans and objects") {
  using op = condition_operator;
  CHECK_FALSE(holds_for(op::contains, "150", 50.0));
  CHECK_FALSE(holds_for(op::contains, "150", std::string("50")));
  CHECK_FALSE(holds_for(op::contains, "true", true));
  CHECK_FALSE(holds_for(op::contains, R"({"vip":1})", std::string("vip")));
}

TEST_CASE("exists holds for every present non-null value, falsy ones included") {
  for (const char* value : {"0", "false", R"("")", "[]", "{}", R"("x")", "12.5", "[null]"})
    CHECK_MESSAGE(holds_for(condition_operator::exists, value, {}), value);
}

TEST_CASE("a missing path or a JSON null makes every operator false, exists and ne included") {
  auto payload = parse(R"({"v":null,"a":{"b":null}})");
  for (auto op : all_operators) {
    condition_value literal =
        op == condition_operator::exists ? condition_value{} : condition_value{std::string("x")};
    for (const char* path : {"$.v", "$.missing", "$.a.b", "$.a.b.c", "$.v[0]", "$.a[0]"})
      CHECK_FALSE(condition_holds(make_condition(path, op, literal), &payload, {}));
    CHECK_FALSE(condition_holds(make_condition("$.v", op, 1.0), &payload, {}));
  }
}

TEST_CASE("a null payload pointer or a null root makes every operator false") {
  auto null_root = parse("null");
  for (auto op : all_operators) {
    CHECK_FALSE(condition_holds(make_condition("$.v", op, std::string("x")), nullptr, {}));
    CHECK_FALSE(condition_holds(make_condition("$", op, std::string("x")), &null_root, {}));
  }
}

TEST_CASE("a comparing operator without a literal never holds") {
  using op = condition_operator;
  for (auto o : {op::eq, op::ne, op::gt, op::gte, op::lt, op::lte, op::contains})
    CHECK_FALSE(holds_for(o, R"("x")", {}));
}

TEST_CASE("a condition on a previous destination reads its stored response, not the payload") {
  auto payload = parse(R"({"riskScore":90})");
  auto fraud = parse(R"({"riskScore":10})");
  previous_responses previous{{"fraudCheck", &fraud}};
  auto c = make_condition("$.riskScore", condition_operator::lt, 50.0, "fraudCheck");
  CHECK(condition_holds(c, &payload, previous));
  CHECK(condition_holds(c, nullptr, previous));
  auto own = make_condition("$.riskScore", condition_operator::lt, 50.0);
  CHECK_FALSE(condition_holds(own, &payload, previous));
}

TEST_CASE("a missing previous destination or a null stored response makes the condition false") {
  auto payload = parse(R"({"riskScore":10})");
  auto other = parse(R"({"riskScore":10})");
  for (auto op : all_operators) {
    auto c = make_condition("$.riskScore", op, 50.0, "fraudCheck");
    CHECK_FALSE(condition_holds(c, &payload, {}));
    CHECK_FALSE(condition_holds(c, &payload, {{"inventory", &other}}));
    CHECK_FALSE(condition_holds(c, &payload, {{"fraudCheck", nullptr}}));
  }
  auto null_response = parse("null");
  auto exists = make_condition("$", condition_operator::exists, {}, "fraudCheck");
  CHECK_FALSE(condition_holds(exists, &payload, {{"fraudCheck", &null_response}}));
}

TEST_CASE("risk 25 goes to lt 50 and risk 75 to gte 50, with 50 written as a number or a string") {
  for (condition_value fifty : {condition_value{50.0}, condition_value{std::string("50")}}) {
    auto low = make_condition("$.riskScore", condition_operator::lt, fifty, "fraudCheck");
    auto high = make_condition("$.riskScore", condition_operator::gte, fifty, "fraudCheck");
    for (const char* score : {"25", R"("25")"}) {
      auto fraud = parse(std::string(R"({"riskScore":)") + score + "}");
      CHECK(condition_holds(low, nullptr, {{"fraudCheck", &fraud}}));
      CHECK_FALSE(condition_holds(high, nullptr, {{"fraudCheck", &fraud}}));
    }
    for (const char* score : {"75", R"("75")", "50"}) {
      auto fraud = parse(std::string(R"({"riskScore":)") + score + "}");
      CHECK_FALSE(condition_holds(low, nullptr, {{"fraudCheck", &fraud}}));
      CHECK(condition_holds(high, nullptr, {{"fraudCheck", &fraud}}));
    }
  }
}

TEST_CASE("the shipped billing routes charge low risk normally and high risk as high value") {
  auto s = shipped();
  const auto& billing = shipped_destination(s, "billing");
  auto payload = parse(R"({"orderId":1,"amount":10.00,"currency":"USD"})");
  auto low = parse(R"({"riskScore":25})");
  auto high = parse(R"({"riskScore":75})");
  auto edge = parse(R"({"riskScore":"50"})");

  auto c = choose_route(billing, &payload, {{"fraudCheck", &low}});
  REQUIRE(c.what == route_choice::kind::call);
  CHECK(ends_with(c.chosen->url, "/api/billing"));
  c = choose_route(billing, &payload, {{"fraudCheck", &high}});
  REQUIRE(c.what == route_choice::kind::call);
  CHECK(ends_with(c.chosen->url, "/api/high-value-processing"));
  c = choose_route(billing, &payload, {{"fraudCheck", &edge}});
  REQUIRE(c.what == route_choice::kind::call);
  CHECK(ends_with(c.chosen->url, "/api/high-value-processing"));

  // Without a fraud answer no billing route applies; the shipped billing is required, so the
  // order fails instead of being confirmed without a charge.
  c = choose_route(billing, &payload, {});
  CHECK(c.what == route_choice::kind::fail);
  CHECK(c.chosen == nullptr);
  CHECK(c.reason.find("billing") != std::string::npos);
  CHECK(c.reason.find("fraudCheck") != std::string::npos);
}

TEST_CASE("the shipped shipping routes pick domestic or international by shipping type") {
  auto s = shipped();
  const auto& shipping = shipped_destination(s, "shipping");
  auto domestic = parse(R"({"orderId":1,"customerId":"C","shippingType":"domestic"})");
  auto international = parse(R"({"orderId":1,"customerId":"C","shippingType":"international"})");
  auto c = choose_route(shipping, &domestic, {});
  REQUIRE(c.what == route_choice::kind::call);
  CHECK(ends_with(c.chosen->url, "/api/domestic-shipping"));
  c = choose_route(shipping, &international, {});
  REQUIRE(c.what == route_choice::kind::call);
  CHECK(ends_with(c.chosen->url, "/api/international-shipping"));

  auto express = parse(R"({"shippingType":"express"})");
  c = choose_route(shipping, &express, {});
  CHECK(c.what == route_choice::kind::fail);
  CHECK(c.reason.find("shipping") != std::string::npos);
  CHECK(c.reason.find("$.shippingType eq \"domestic\"") != std::string::npos);
  CHECK(c.reason.find("$.shippingType eq \"international\"") != std::string::npos);
}

TEST_CASE("the shipped notification routes send SHIPPED, DELIVERED and any other status") {
  auto s = shipped();
  const auto& notifications = shipped_destination(s, "notifications");
  auto route_for = [&](const std::string& payload_json) {
    auto payload = parse(payload_json);
    return choose_route(notifications, &payload, {});
  };
  auto c = route_for(R"({"orderId":1,"oldStatus":"CONFIRMED","newStatus":"SHIPPED"})");
  REQUIRE(c.what == route_choice::kind::call);
  CHECK(ends_with(c.chosen->url, "/api/notifications/shipping-confirmation"));
  c = route_for(R"({"orderId":1,"oldStatus":"SHIPPED","newStatus":"DELIVERED"})");
  REQUIRE(c.what == route_choice::kind::call);
  CHECK(ends_with(c.chosen->url, "/api/notifications/review-request"));
  c = route_for(R"({"orderId":1,"newStatus":"RETURNED"})");
  REQUIRE(c.what == route_choice::kind::call);
  CHECK(ends_with(c.chosen->url, "/api/notifications/status-update"));

  for (const char* none : {R"({"orderId":1})", R"({"newStatus":null})"}) {
    c = route_for(none);
    CHECK(c.what == route_choice::kind::skip);
    CHECK(c.reason.find("notifications") != std::string::npos);
    CHECK(c.reason.find("$.newStatus exists") != std::string::npos);
  }
}

TEST_CASE("the first route whose condition holds wins, in configuration order") {
  auto d = named("shipping");
  d.routes.push_back({"http://h/first", make_condition("$.a", condition_operator::exists), {}});
  d.routes.push_back({"http://h/second", make_condition("$.a", condition_operator::eq, 1.0), {}});
  d.routes.push_back({"http://h/third", std::nullopt, {}});
  auto payload = parse(R"({"a":1})");
  auto c = choose_route(d, &payload, {});
  REQUIRE(c.what == route_choice::kind::call);
  CHECK(c.chosen == &d.routes[0]);
  CHECK(c.reason.empty());
}

TEST_CASE("a route without a condition always applies, even without a payload") {
  auto d = named("inventory");
  d.routes.push_back({"http://h/a", make_condition("$.a", condition_operator::exists), {}});
  d.routes.push_back({"http://h/default", std::nullopt, {}});
  auto empty = parse("{}");
  auto c = choose_route(d, &empty, {});
  REQUIRE(c.what == route_choice::kind::call);
  CHECK(c.chosen == &d.routes[1]);
  c = choose_route(d, nullptr, {});
  REQUIRE(c.what == route_choice::kind::call);
  CHECK(c.chosen == &d.routes[1]);
}

TEST_CASE("no matching route is a skip naming the destination and every condition") {
  auto d = named("billing");
  d.routes.push_back({"http://h/a",
                      make_condition("$.riskScore", condition_operator::lt, 50.0, "fraudCheck"),
                      {}});
  d.routes.push_back({"http://h/b", make_condition("$.flag", condition_operator::eq, true), {}});
  auto payload = parse(R"({"flag":false})");
  auto c = choose_route(d, &payload, {});
  CHECK(c.what == route_choice::kind::skip);
  CHECK(c.chosen == nullptr);
  CHECK(c.reason == "no route of billing matches: $.riskScore lt 50 (response of fraudCheck); "
                    "$.flag eq true");
}

TEST_CASE("no matching route of a required destination is a failure with the reason") {
  auto d = named("billing", true);
  d.routes.push_back({"http://h/a", make_condition("$.a", condition_operator::exists), {}});
  auto c = choose_route(d, nullptr, {});
  CHECK(c.what == route_choice::kind::fail);
  CHECK(c.chosen == nullptr);
  CHECK(c.reason.find("required") != std::string::npos);
  CHECK(c.reason.find("billing") != std::string::npos);
  CHECK(c.reason.find("$.a exists") != std::string::npos);
}

TEST_CASE("a destination without routes is skipped, or failed when required") {
  auto d = named("ghost");
  auto c = choose_route(d, nullptr, {});
  CHECK(c.what == route_choice::kind::skip);
  CHECK(c.reason.find("ghost") != std::string::npos);
  d.required = true;
  CHECK(choose_route(d, nullptr, {}).what == route_choice::kind::fail);
}

TEST_CASE("unreserved characters are kept and everything else is percent-encoded") {
  CHECK(percent_encode_segment("AZaz09-_.~") == "AZaz09-_.~");
  CHECK(percent_encode_segment("ORD-42") == "ORD-42");
  CHECK(percent_encode_segment("/../") == "%2F..%2F");
  CHECK(percent_encode_segment("../../admin") == "..%2F..%2Fadmin");
  CHECK(percent_encode_segment("a?b=1&c") == "a%3Fb%3D1%26c");
  CHECK(percent_encode_segment("x#frag") == "x%23frag");
  CHECK(percent_encode_segment("100%") == "100%25");
  CHECK(percent_encode_segment("%2e%2e") == "%252e%252e");
  CHECK(percent_encode_segment("a b") == "a%20b");
  CHECK(percent_encode_segment("\"'`") == "%22%27%60");
  CHECK(percent_encode_segment("a+b@c:d;e,f") == "a%2Bb%40c%3Ad%3Be%2Cf");
  CHECK(percent_encode_segment("\\") == "%5C");
  CHECK(percent_encode_segment("caf\xC3\xA9") == "caf%C3%A9");
  CHECK(percent_encode_segment("\xE2\x82\xAC") == "%E2%82%AC");
  CHECK(percent_encode_segment(std::string_view("a\0b\r\n", 5)) == "a%00b%0D%0A");
  CHECK(percent_encode_segment("\xFF\x80") == "%FF%80");
  CHECK(percent_encode_segment("").empty());
}

TEST_CASE("the dot segments . and .. are encoded entirely, longer runs of dots are not") {
  CHECK(percent_encode_segment(".") == "%2E");
  CHECK(percent_encode_segment("..") == "%2E%2E");
  CHECK(percent_encode_segment("...") == "...");
  CHECK(percent_encode_segment(".a") == ".a");
  CHECK(percent_encode_segment("a..") == "a..");
}

TEST_CASE("fill_url replaces every placeholder, repeated ones included, with encoded values") {
  auto url = fill_url("http://h:9000/api/{orderId}/items/{sku}/{orderId}",
                      {{"orderId", "42"}, {"sku", "A B/C"}, {"unused", "x"}});
  REQUIRE(url.ok());
  CHECK(url.value() == "http://h:9000/api/42/items/A%20B%2FC/42");
}

TEST_CASE("fill_url leaves a template without placeholders unchanged") {
  auto url = fill_url("http://127.0.0.1:9000/api/inventory/reserve", {});
  REQUIRE(url.ok());
  CHECK(url.value() == "http://127.0.0.1:9000/api/inventory/reserve");
}

TEST_CASE("fill_url keeps braces that do not form a placeholder as they are") {
  auto url = fill_url("http://h/a/{}/{not valid}/{x/{id}/{open", {{"id", "7"}});
  REQUIRE(url.ok());
  CHECK(url.value() == "http://h/a/{}/{not valid}/{x/7/{open");
}

TEST_CASE("fill_url also fills placeholders inside a segment and in a relative URL") {
  auto url = fill_url("/orders/order-{id}.json", {{"id", "a/b"}});
  REQUIRE(url.ok());
  CHECK(url.value() == "/orders/order-a%2Fb.json");
}

TEST_CASE("fill_url names the first placeholder without a value") {
  auto url = fill_url("http://h/{a}/{b}/{c}", {{"a", "1"}});
  REQUIRE_FALSE(url.ok());
  CHECK(url.err().message.find("{b}") != std::string::npos);
  CHECK(url.err().message.find("{c}") == std::string::npos);
}

TEST_CASE("fill_url refuses an empty value because it would collapse the path") {
  auto url = fill_url("http://h/orders/{orderId}/cancel", {{"orderId", ""}});
  REQUIRE_FALSE(url.ok());
  CHECK(url.err().message.find("{orderId}") != std::string::npos);
  CHECK(url.err().message.find("empty") != std::string::npos);
}

TEST_CASE("fill_url refuses a placeholder in the scheme or host, where encoding cannot help") {
  for (const char* t :
       {"http://{host}/api", "http://h:{port}/api", "{scheme}://h/api", "http://user{x}@h/api"}) {
    auto url = fill_url(t, {{"host", "h"}, {"port", "1"}, {"scheme", "http"}, {"x", "y"}});
    REQUIRE_FALSE_MESSAGE(url.ok(), t);
    CHECK(url.err().message.find("outside the path") != std::string::npos);
  }
}

TEST_CASE("no hostile value can add a segment, climb, start a query or fragment, or move host") {
  const std::string templ = "http://127.0.0.1:9000/api/orders/{orderId}/cancel";
  const std::vector<std::string> hostile = {"/../",
                                            "..",
                                            ".",
                                            "../../admin",
                                            "x?y=1#z",
                                            "%2e%2e",
                                            "a b",
                                            "\"quoted\"",
                                            "'single'",
                                            "\\..\\",
                                            "@evil.com",
                                            "evil.com:80",
                                            "\xC3\xA9\xE2\x82\xAC",
                                            "\r\nHost: x",
                                            "//evil.com",
                                            "?",
                                            "#",
                                            "%",
                                            std::string(10000, '/')};
  for (const auto& value : hostile) {
    auto url = fill_url(templ, {{"orderId", value}});
    REQUIRE(url.ok());
    const auto& u = url.value();
    CHECK(u.rfind("http://127.0.0.1:9000/api/orders/", 0) == 0);
    CHECK(ends_with(u, "/cancel"));
    auto segment = u.substr(33, u.size() - 33 - 7);
    CHECK(segment == percent_encode_segment(value));
    CHECK(segment.find_first_of("/?#\\ \"'\r\n@:") == std::string::npos);
    CHECK(segment != ".");
    CHECK(segment != "..");
  }
}

TEST_CASE("2xx answers are successes") {
  for (int status : {200, 201, 202, 204, 299})
    CHECK_MESSAGE(classify("POST", status) == attempt_outcome::success, status);
  CHECK(classify("DELETE", 204) == attempt_outcome::success);
}

TEST_CASE("404 on DELETE means already gone, on anything else it is final") {
  CHECK(classify("DELETE", 404) == attempt_outcome::success);
  CHECK(classify("delete", 404) == attempt_outcome::success);
  CHECK(classify("POST", 404) == attempt_outcome::non_retryable);
  CHECK(classify("PUT", 404) == attempt_outcome::non_retryable);
  CHECK(classify("DELETE", 410) == attempt_outcome::non_retryable);
}

TEST_CASE("408, 425, 429 and every 5xx are retryable") {
  for (int status : {408, 425, 429, 500, 501, 502, 503, 504, 599})
    CHECK_MESSAGE(classify("POST", status) == attempt_outcome::retryable, status);
  CHECK(classify("DELETE", 503) == attempt_outcome::retryable);
}

TEST_CASE("a transport error without a status is retryable") {
  CHECK(classify("POST", std::nullopt) == attempt_outcome::retryable);
  CHECK(classify("DELETE", std::nullopt) == attempt_outcome::retryable);
}

TEST_CASE("other 4xx, 3xx, 1xx and out-of-range statuses are non-retryable") {
  for (int status : {400, 401, 403, 404, 405, 409, 410, 413, 422, 426, 451, 499,
                     300, 301, 302, 304, 307, 308, 100, 199, 0,   -1,  600, 999})
    CHECK_MESSAGE(classify("POST", status) == attempt_outcome::non_retryable, status);
}

TEST_CASE("Retry-After delta-seconds parse, with surrounding blanks allowed") {
  CHECK(parse_retry_after("0", 0) == 0ms);
  CHECK(parse_retry_after("5", 0) == 5000ms);
  CHECK(parse_retry_after(" 7 ", 0) == 7000ms);
  CHECK(parse_retry_after("\t7\t", 0) == 7000ms);
  CHECK(parse_retry_after("007", 0) == 7000ms);
  CHECK(parse_retry_after("120", 123456789) == 120000ms);
}

TEST_CASE("a huge Retry-After saturates instead of overflowing") {
  CHECK(parse_retry_after("999999999", 0) == milliseconds(999999999000LL));
  auto huge = parse_retry_after("99999999999999999999999999999999999999", 0);
  REQUIRE(huge);
  CHECK(*huge > milliseconds(999999999000LL));
  CHECK(*huge <= milliseconds::max());
  CHECK(parse_retry_after("9223372036854775807", 0) == huge);
  CHECK(parse_retry_after("9223372036854776", 0) == huge);
}

TEST_CASE("negative, fractional, signed, empty and garbage Retry-After values are unparsable") {
  for (const char* bad : {"", " ", "\t", "-1", "-0", "+5", "5.5", "1e3", "5s", "5 5", "abc", "0x10",
                          "five", "5,", "∞"})
    CHECK_FALSE_MESSAGE(parse_retry_after(bad, 0).has_value(), bad);
}

TEST_CASE("a Retry-After HTTP-date in the future is the time until it") {
  constexpr std::int64_t at = 1445412480000; // Wed, 21 Oct 2015 07:28:00 GMT
  CHECK(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", at - 5000) == 5000ms);
  CHECK(parse_retry_after("  Wed, 21 Oct 2015 07:28:00 GMT ", at - 1) == 1ms);
  CHECK(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", at - 86400000) == 86400000ms);
}

TEST_CASE("a Retry-After HTTP-date now or in the past means no wait") {
  constexpr std::int64_t at = 1445412480000;
  CHECK(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", at) == 0ms);
  CHECK(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", at + 1) == 0ms);
  CHECK(parse_retry_after("Mon, 01 Jan 1900 00:00:00 GMT", at) == 0ms);
  CHECK(parse_retry_after("Thu, 01 Jan 1970 00:00:00 GMT", 0) == 0ms);
}

TEST_CASE("HTTP-dates convert exactly across epochs, leap days and centuries") {
  // Expected values are Unix seconds from an independent calendar implementation.
  struct known {
    const char* date;
    std::int64_t unix_seconds;
  };
  for (const auto& k : {known{"Thu, 01 Jan 1970 00:00:00 GMT", 0},
                        known{"Sun, 06 Nov 1994 08:49:37 GMT", 784111777},
                        known{"Tue, 29 Feb 2000 12:00:00 GMT", 951825600},
                        known{"Mon, 01 Mar 2100 00:00:00 GMT", 4107542400},
                        known{"Fri, 31 Dec 9999 23:59:59 GMT", 253402300799},
                        known{"Mon, 01 Jan 1900 00:00:00 GMT", -2208988800}}) {
    // Measured from a point far enough back that every date is in the future.
    constexpr std::int64_t origin = -3000000000000;
    auto delay = parse_retry_after(k.date, origin);
    REQUIRE_MESSAGE(delay, k.date);
    CHECK_MESSAGE(delay->count() == k.unix_seconds * 1000 - origin, k.date);
  }
  CHECK(parse_retry_after("Sat, 31 Dec 2016 23:59:60 GMT", 1483228799000) == 1000ms);
}

TEST_CASE("malformed HTTP-dates are unparsable") {
  for (const char* bad : {"Wed, 21 Oct 2015 07:28:00 UTC",     "Wed, 21 Oct 2015 07:28 GMT",
                          "Wed 21 Oct 2015 07:28:00 GMT",      "Xyz, 21 Oct 2015 07:28:00 GMT",
                          "wed, 21 oct 2015 07:28:00 gmt",     "Wed, 21 Foo 2015 07:28:00 GMT",
                          "Wed, 32 Oct 2015 07:28:00 GMT",     "Wed, 00 Oct 2015 07:28:00 GMT",
                          "Wed, 31 Nov 2015 07:28:00 GMT",     "Sun, 29 Feb 2015 07:28:00 GMT",
                          "Thu, 29 Feb 2100 00:00:00 GMT",     "Wed, 21 Oct 2015 24:00:00 GMT",
                          "Wed, 21 Oct 2015 07:60:00 GMT",     "Wed, 21 Oct 2015 07:28:61 GMT",
                          "Wed, 1 Oct 2015 07:28:00 GMT",      "Wed, 21 Oct 15 07:28:00 GMT",
                          "Wed, 2x Oct 2015 07:28:00 GMT",     "Wed, 21 Oct 2015 07:28:00 GMT x",
                          "Wed, 21 Oct 2015 07:28:00 GMTGMT",  "Wed, 21 Oct 2015 -7:28:00 GMT",
                          "Wednesday, 21-Oct-15 07:28:00 GMT", "Wed Oct 21 07:28:00 2015",
                          "Wed, 21 Oct 2015 07:28:00 +0000",   "2015-10-21T07:28:00Z"})
    CHECK_FALSE_MESSAGE(parse_retry_after(bad, 0).has_value(), bad);
}

TEST_CASE("a Retry-After date far away from an extreme clock reading does not overflow") {
  auto far =
      parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", std::numeric_limits<std::int64_t>::min());
  REQUIRE(far);
  CHECK(*far == milliseconds::max());
  CHECK(parse_retry_after("Mon, 01 Jan 1900 00:00:00 GMT",
                          std::numeric_limits<std::int64_t>::max()) == 0ms);
}

TEST_CASE("Retry-After lengthens the backoff, never shortens it, and is clamped to the maximum") {
  CHECK(retry_delay(1, 5000ms, 1000ms, 60000ms, 0.0) == 5000ms);
  // "Retry-After: 0", or a date in the past, must not spend the retries in milliseconds.
  CHECK(retry_delay(3, 0ms, 1000ms, 60000ms, 0.0) == 2000ms);
  CHECK(retry_delay(3, parse_retry_after("Thu, 01 Jan 1970 00:00:00 GMT", 1'700'000'000'000),
                    1000ms, 60000ms, 0.0) == 2000ms);
  CHECK(retry_delay(7, 0ms, 1000ms, 60000ms, 0.9) == 60000ms);
  CHECK(retry_delay(1, milliseconds(999999999000LL), 1000ms, 60000ms, 0.5) == 60000ms);
  CHECK(retry_delay(1, parse_retry_after("999999999", 0), 1000ms, 60000ms, 0.5) == 60000ms);
  CHECK(retry_delay(1, milliseconds::max(), 1000ms, 60000ms, 0.5) == 60000ms);
  CHECK(retry_delay(1, -5000ms, 1000ms, 60000ms, 0.5) == 750ms);
  CHECK(retry_delay(1, milliseconds::min(), 1000ms, 60000ms, 0.5) == 750ms);
  CHECK(retry_delay(1, 0ms, 0ms, 60000ms, 0.5) == 0ms); // no backoff configured: at once
}

TEST_CASE("the backoff doubles per retry and jitter scales it between half and all of it") {
  const milliseconds expected[] = {1000ms, 2000ms, 4000ms, 8000ms};
  for (int retry = 1; retry <= 4; ++retry) {
    auto full = expected[retry - 1];
    CHECK(retry_delay(retry, std::nullopt, 1000ms, 60000ms, 0.0) == full / 2);
    auto top = retry_delay(retry, std::nullopt, 1000ms, 60000ms, std::nextafter(1.0, 0.0));
    CHECK(top <= full);
    CHECK(top >= full - 1ms);
    for (double jitter = 0.0; jitter < 1.0; jitter += 0.05) {
      auto d = retry_delay(retry, std::nullopt, 1000ms, 60000ms, jitter);
      CHECK(d >= full / 2);
      CHECK(d <= full);
    }
    CHECK(retry_delay(retry, std::nullopt, 1000ms, 60000ms, 0.5) == full * 3 / 4);
  }
}

TEST_CASE("the backoff is clamped to the maximum") {
  CHECK(retry_delay(7, std::nullopt, 1000ms, 60000ms, 0.0) == 32000ms);
  CHECK(retry_delay(8, std::nullopt, 1000ms, 60000ms, 0.0) == 60000ms);
  CHECK(retry_delay(10, std::nullopt, 1000ms, 60000ms, 0.99) == 60000ms);
  CHECK(retry_delay(1, std::nullopt, 120000ms, 60000ms, 0.99) == 60000ms);
}

TEST_CASE("a zero base or a zero maximum gives no delay") {
  CHECK(retry_delay(1, std::nullopt, 0ms, 60000ms, 0.5) == 0ms);
  CHECK(retry_delay(50, std::nullopt, 0ms, 60000ms, 0.5) == 0ms);
  CHECK(retry_delay(3, std::nullopt, 1000ms, 0ms, 0.5) == 0ms);
  CHECK(retry_delay(3, 5000ms, 1000ms, 0ms, 0.5) == 0ms);
}

TEST_CASE("huge retry numbers do not overflow") {
  for (int retry : {63, 64, 65, 200, 1024, 5000, INT_MAX})
    CHECK_MESSAGE(retry_delay(retry, std::nullopt, 1000ms, 60000ms, 0.0) == 60000ms, retry);
  CHECK(retry_delay(200, std::nullopt, milliseconds::max(), milliseconds::max(), 0.99) ==
        milliseconds::max());
}

TEST_CASE("retry numbers below one count as the first retry") {
  CHECK(retry_delay(0, std::nullopt, 1000ms, 60000ms, 0.0) == 500ms);
  CHECK(retry_delay(INT_MIN, std::nullopt, 1000ms, 60000ms, 0.0) == 500ms);
}

TEST_CASE("jitter outside [0, 1) still gives a delay within the bounds") {
  CHECK(retry_delay(1, std::nullopt, 1000ms, 60000ms, -3.0) == 500ms);
  CHECK(retry_delay(1, std::nullopt, 1000ms, 60000ms, 7.0) == 1000ms);
  CHECK(retry_delay(1, std::nullopt, 1000ms, 60000ms, std::nan("")) == 500ms);
  CHECK(retry_delay(1, std::nullopt, 1000ms, 60000ms, std::numeric_limits<double>::infinity()) ==
        1000ms);
}

TEST_CASE(
    "claims start at the processor's share of batchSize and double while there is a backlog") {
  claim_sizing s{100, 16};
  CHECK(s.base() == 6);
  CHECK(claim_sizing{100, 200}.base() == 1); // more processors than batchSize: one each
  // Fast events (1 ms each): a full claim doubles, up to 8 x base.
  CHECK(s.next(6, 6, 6ms) == 12);
  CHECK(s.next(12, 12, 12ms) == 24);
  CHECK(s.next(24, 24, 24ms) == 48);
  CHECK(s.next(48, 48, 48ms) == 48);
  // ... and never beyond batchSize.
  CHECK(claim_sizing{100, 1}.next(100, 100, 100ms) == 100);
  // A short (or empty) claim means no backlog: back to the base.
  CHECK(s.next(48, 47, 47ms) == 6);
  CHECK(s.next(48, 0, 1ms) == 6);
}

TEST_CASE("a claim is kept to what the processor runs in about 250 ms") {
  claim_sizing s{100, 16};
  // 6 events in 510 ms (85 ms each, e.g. 4 calls to a 20 ms remote): 2 at a time.
  CHECK(s.next(6, 6, 510ms) == 2);
  // Slower than 250 ms per event: one at a time, never zero.
  CHECK(s.next(6, 6, 3s) == 1);
  CHECK(s.next(1, 1, 10s) == 1);
  // 40 ms per event: 6 fit in 250 ms, even though doubling would allow 12.
  CHECK(s.next(6, 6, 240ms) == 6);
  // A pace measured as zero does not divide by zero.
  CHECK(s.next(6, 6, 0ns) == 12);
}
