// Unit tests of the configuration loader: defaults, files, environment and --set overrides,
// ${simulator.baseUrl} resolution, every validation rule, durations and secret masking.
#include "conf/loader.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <doctest/doctest.h>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <string>
#include <vector>

namespace {

using namespace outboxd::conf;
using namespace std::chrono_literals;
using env_map = std::map<std::string, std::string>;

// A unique directory under /tmp for configuration files, removed with its contents afterwards.
class temp_dir {
public:
  temp_dir() {
    std::string pattern = "/tmp/outboxd_conf_test.XXXXXX";
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~temp_dir() {
    std::error_code ignored; // a leftover directory in /tmp must not fail the test
    std::filesystem::remove_all(path_, ignored);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  std::string write(const std::string& name, const std::string& text) const {
    auto file = path_ / name;
    std::ofstream(file) << text;
    return file.string();
  }
  std::string path(const std::string& name) const { return (path_ / name).string(); }

private:
  std::filesystem::path path_;
};

load_result load_with(std::vector<std::string> sets, env_map environment = {}) {
  load_options options;
  options.set_overrides = std::move(sets);
  options.environment = std::move(environment);
  return load(options);
}

load_result load_file(const std::string& json, std::vector<std::string> sets = {},
                      env_map environment = {}) {
  temp_dir dir;
  load_options options;
  options.config_path = dir.write("outboxd.json", json);
  options.set_overrides = std::move(sets);
  options.environment = std::move(environment);
  return load(options);
}

std::string all_errors(const load_result& r) {
  std::string out;
  for (const auto& e : r.errors)
    out += e + "\n";
  return out;
}

bool has_error(const load_result& r, const std::string& needle) {
  for (const auto& e : r.errors)
    if (e.find(needle) != std::string::npos)
      return true;
  return false;
}

const settings& loaded(const load_result& r) {
  INFO(all_errors(r));
  REQUIRE(r.errors.empty());
  REQUIRE(r.value.has_value());
  return *r.value;
}

} // namespace

// Checks that loading failed with an error containing `needle`, and shows every error otherwise.
#define CHECK_ERROR(result, needle)                                                                \
  do {                                                                                             \
    const auto& r_ = (result);                                                                     \
    INFO("errors:\n" << all_errors(r_));                                                           \
    CHECK_FALSE(r_.value.has_value());                                                             \
    CHECK_MESSAGE(has_error(r_, needle), "expected an error containing: " << (needle));            \
  } while (false)

#define CHECK_SET_ERROR(set, needle) CHECK_ERROR(load_with({set}), needle)

TEST_CASE("the shipped configuration loads with no errors") {
  auto r = load_with({});
  const auto& s = loaded(r);
  CHECK(s.server.host == "127.0.0.1");
  CHECK(s.server.port == 9000);
  CHECK(s.server.threads == 32);
  CHECK(s.server.max_body_bytes == 1048576);
  CHECK(s.server.read_timeout == 5s);
  CHECK(s.database.url.empty());
  CHECK(s.database.pool_size == 8);
  CHECK(s.database.startup_timeout == 60s);
  CHECK(s.outbox.pool_size == 3);
  CHECK(s.outbox.connections == 13);
  CHECK(s.outbox.batch_size == 100);
  CHECK(s.outbox.poll_interval == 2s);
  CHECK(s.outbox.use_listen_notify);
  CHECK(s.outbox.backoff.base == 1s);
  CHECK(s.outbox.backoff.max == 60s);
  CHECK(s.outbox.retention == std::chrono::hours(24 * 7));
  CHECK(s.outbox.max_retries == 30);
  CHECK(s.outbox.retry_for == std::chrono::hours(1));
  CHECK(s.dlq.max_retries == 30);
  CHECK(s.dlq.retry_for == std::chrono::hours(1));
  CHECK(s.dlq.retention == std::chrono::hours(24 * 30));
  CHECK(s.audit.retention == std::chrono::hours(24 * 30));
  CHECK(s.audit.export_dir.empty());
  CHECK(s.orders.retention == std::chrono::hours(24 * 30));
  const auto& billing = s.http.destinations.at("billing");
  CHECK(billing.breaker.enabled);
  CHECK(billing.breaker.failure_threshold == 5);
  CHECK(billing.breaker.open_for == 2s);
  CHECK(billing.breaker.max_open_for == 10s);
  CHECK(billing.max_concurrency == 0);
  CHECK(billing.rate_per_second == 0);
  CHECK_FALSE(billing.max_retries.has_value());
  CHECK_FALSE(billing.retry_for.has_value());
  CHECK(s.simulator.enabled);
  CHECK(s.simulator.seed == 42);
  CHECK(s.simulator.base_url == "http://127.0.0.1:9000");
  CHECK(s.admin.token.empty());
  CHECK(s.log.level == log_level::info);
  CHECK(s.log.format == log_format::text);
  CHECK_FALSE(r.effective_json.empty());
}

TEST_CASE("the shipped routes reproduce the reference fan-out") {
  auto r = load_with({});
  const auto& http = loaded(r).http;
  REQUIRE(http.destinations.size() == 5);

  const auto& inventory = http.destinations.at("inventory");
  CHECK(inventory.name == "inventory");
  CHECK(inventory.method == "POST");
  CHECK(inventory.timeout == 5s);
  CHECK(inventory.connect_timeout == 2s);
  CHECK_FALSE(inventory.required);
  REQUIRE(inventory.routes.size() == 1);
  CHECK(inventory.routes[0].url == "http://127.0.0.1:9000/api/inventory/reserve");
  CHECK_FALSE(inventory.routes[0].when.has_value());
  REQUIRE(inventory.routes[0].revert.has_value());
  const auto& release = *inventory.routes[0].revert;
  CHECK(release.url == "http://127.0.0.1:9000/api/inventory/{reservationId}/release");
  CHECK(release.method == "DELETE");
  CHECK(release.payload_json.empty());
  REQUIRE(release.extract.count("reservationId") == 1);
  CHECK(release.extract.at("reservationId").from == outboxd::domain::extraction::source::response);
  CHECK(release.extract.at("reservationId").path.text() == "$.reservationId");

  CHECK_FALSE(http.destinations.at("fraudCheck").routes.at(0).revert.has_value());

  const auto& shipping = http.destinations.at("shipping");
  REQUIRE(shipping.routes.size() == 2);
  REQUIRE(shipping.routes[0].when.has_value());
  CHECK(shipping.routes[0].when->path.text() == "$.shippingType");
  CHECK(shipping.routes[0].when->op == outboxd::domain::condition_operator::eq);
  CHECK(std::get<std::string>(shipping.routes[0].when->value) == "domestic");
  CHECK_FALSE(shipping.routes[0].when->previous_destination.has_value());
  const auto& cancel = *shipping.routes[0].revert;
  CHECK(cancel.method == "POST");
  CHECK(cancel.extract.at("orderId").from == outboxd::domain::extraction::source::request);
  CHECK(cancel.payload_json.find("\"reason\":\"payment_failed\"") != std::string::npos);
  CHECK(cancel.payload_json.find(' ') == std::string::npos);

  const auto& billing = http.destinations.at("billing");
  REQUIRE(billing.routes.size() == 2);
  for (const auto& route : billing.routes) {
    REQUIRE(route.when.has_value());
    CHECK(route.when->previous_destination == std::optional<std::string>("fraudCheck"));
    CHECK(std::get<double>(route.when->value) == 50.0);
  }
  CHECK(billing.routes[0].when->op == outboxd::domain::condition_operator::lt);
  CHECK(billing.routes[1].when->op == outboxd::domain::condition_operator::gte);
  CHECK(billing.routes[0].url == "http://127.0.0.1:9000/api/billing");

  const auto& notifications = http.destinations.at("notifications");
  REQUIRE(notifications.routes.size() == 3);
  CHECK(notifications.routes[2].when->op == outboxd::domain::condition_operator::exists);
  CHECK(std::holds_alternative<std::monostate>(notifications.routes[2].when->value));

  CHECK(http.fanout.at("OrderCreated") ==
        std::vector<std::string>{"inventory", "fraudCheck", "shipping", "billing"});
  CHECK(http.fanout.at("OrderStatusUpdated") == std::vector<std::string>{"notifications"});
}

TEST_CASE("all twelve simulator knobs are present with the shipped values") {
  auto r = load_with({});
  const auto& services = loaded(r).simulator.services;
  CHECK(services.size() == 12);
  for (const char* name :
       {"inventory.reserve", "inventory.release", "fraudCheck.check", "shipping.domestic.create",
        "shipping.domestic.cancel", "shipping.international.create",
        "shipping.international.cancel", "billing.charge", "billing.refund", "highValue.process",
        "highValue.cancel", "notifications.send"})
    CHECK_MESSAGE(services.count(name) == 1, name);
  const auto& charge = services.at("billing.charge");
  CHECK(charge.failure_rate == doctest::Approx(0.3));
  CHECK(charge.failure_status == 503);
  CHECK(std::get<std::int64_t>(charge.retry_after) == 5);
  CHECK(services.at("fraudCheck.check").failure_status == 429);
  CHECK(std::holds_alternative<std::monostate>(services.at("notifications.send").retry_after));
}

TEST_CASE("default_config_text is the embedded application.json") {
  auto text = default_config_text();
  CHECK(text.find("\"simulator\"") != std::string_view::npos);
  CHECK(text.find("${simulator.baseUrl}/api/inventory/reserve") != std::string_view::npos);
}

TEST_CASE("changing the port through the environment moves every route to the new port") {
  auto r = load_with({}, {{"OUTBOXD_SERVER_PORT", "9123"}});
  const auto& s = loaded(r);
  CHECK(s.server.port == 9123);
  CHECK(s.simulator.base_url == "http://127.0.0.1:9123");
  CHECK(s.http.destinations.at("inventory").routes[0].url ==
        "http://127.0.0.1:9123/api/inventory/reserve");
  CHECK(s.http.destinations.at("billing").routes[1].revert->url ==
        "http://127.0.0.1:9123/api/high-value-processing/{processingId}/cancel");
  CHECK(r.effective_json.find("http://127.0.0.1:9123/api/fraud/check") != std::string::npos);
}

TEST_CASE("a wildcard bind address makes the routes use loopback") {
  for (const char* host : {"0.0.0.0", "::"}) {
    auto r = load_with({std::string("server.host=") + host, "auth.allowAnonymous=true"});
    CHECK(loaded(r).simulator.base_url == "http://127.0.0.1:9000");
  }
  auto r = load_with({"server.host=10.1.2.3", "server.port=8080", "auth.allowAnonymous=true"});
  CHECK(loaded(r).simulator.base_url == "http://10.1.2.3:8080");
  auto v6 = load_with({"server.host=::1"});
  CHECK(loaded(v6).simulator.base_url == "http://[::1]:9000");
}

TEST_CASE("an explicit simulator.baseUrl is used, with one trailing slash removed") {
  auto r = load_with({"simulator.baseUrl=http://sim:7000/"}, {{"OUTBOXD_SERVER_PORT", "9123"}});
  const auto& s = loaded(r);
  CHECK(s.simulator.base_url == "http://sim:7000");
  CHECK(s.http.destinations.at("fraudCheck").routes[0].url == "http://sim:7000/api/fraud/check");
}

TEST_CASE("${simulator.baseUrl} is replaced in header values") {
  auto r = load_with({"http.routes.inventory.headers.X-Origin=${simulator.baseUrl}/x"});
  const auto& headers = loaded(r).http.destinations.at("inventory").headers;
  REQUIRE(headers.size() == 1);
  CHECK(headers[0] == std::pair<std::string, std::string>("X-Origin", "http://127.0.0.1:9000/x"));
}

TEST_CASE("an invalid simulator.baseUrl is reported") {
  CHECK_SET_ERROR("simulator.baseUrl=ftp://sim",
                  "simulator.baseUrl must be an http:// or https://");
  CHECK_ERROR(load_file(R"({"simulator": {"baseUrl": 5}})"),
              "simulator.baseUrl must be a URL string, got 5");
}

TEST_CASE("a misspelt substitution in a route url is reported") {
  CHECK_SET_ERROR("http.routes.fraudCheck.url=${simulator.baseURL}/api/fraud/check",
                  "http.routes.fraudCheck.url must be an http:// or https:// URL (only "
                  "${simulator.baseUrl} is substituted)");
}

TEST_CASE("an invalid server.port is reported once, not again for every route") {
  auto r = load_with({"server.port=0"});
  CHECK_ERROR(r, "server.port must be > 0, got 0");
  CHECK(r.errors.size() == 1);
}

TEST_CASE("environment variables override nested, camelCase and dotted keys") {
  auto r = load_with({}, {{"OUTBOXD_OUTBOX_POOLSIZE", "8"},
                          {"OUTBOXD_OUTBOX_BACKOFF_MAX", "90s"},
                          {"OUTBOXD_SIMULATOR_SERVICES_BILLING_CHARGE_FAILURERATE", "0.75"},
                          {"OUTBOXD_ADMIN_TOKEN", "s3cret"},
                          {"OUTBOXD_OUTBOX_USELISTENNOTIFY", "No"},
                          {"OUTBOXD_LOG_LEVEL", "debug"},
                          {"UNRELATED", "ignored"}});
  const auto& s = loaded(r);
  CHECK(s.outbox.pool_size == 8);
  CHECK(s.outbox.backoff.max == 90s);
  CHECK(s.simulator.services.at("billing.charge").failure_rate == doctest::Approx(0.75));
  CHECK(s.admin.token == "s3cret");
  CHECK_FALSE(s.outbox.use_listen_notify);
  CHECK(s.log.level == log_level::debug);
}

TEST_CASE("environment variables can address array elements by index") {
  auto r = load_with({}, {{"OUTBOXD_HTTP_ROUTES_SHIPPING_ROUTES_1_URL", "http://intl:1/ship"}});
  CHECK(loaded(r).http.destinations.at("shipping").routes[1].url == "http://intl:1/ship");
}

TEST_CASE("an environment variable that names no key is an error") {
  CHECK_ERROR(load_with({}, {{"OUTBOXD_SERVER_PROT", "1"}}),
              "environment variable OUTBOXD_SERVER_PROT does not name a configuration key");
  CHECK_ERROR(load_with({}, {{"OUTBOXD_SERVER_PORT_EXTRA", "1"}}),
              "environment variable OUTBOXD_SERVER_PORT_EXTRA does not name a configuration key");
  CHECK_ERROR(load_with({}, {{"OUTBOXD_", "1"}}),
              "environment variable OUTBOXD_ does not name a configuration key");
}

TEST_CASE("--set reaches dotted service names and camelCase keys") {
  auto r = load_with({"simulator.services.billing.charge.failureRate=0.5", "outbox.poolsize=7",
                      "simulator.services.notifications.send.latencyMs=[10, 20]"});
  const auto& s = loaded(r);
  CHECK(s.simulator.services.at("billing.charge").failure_rate == doctest::Approx(0.5));
  CHECK(s.outbox.pool_size == 7);
  CHECK(s.simulator.services.at("notifications.send").latency_min_ms == 10);
  CHECK(s.simulator.services.at("notifications.send").latency_max_ms == 20);
}

TEST_CASE("--set creates keys that do not exist yet, such as a header") {
  auto r = load_with({"http.routes.inventory.headers.X-Api-Key=abc",
                      "http.routes.inventory.headers.Accept=application/json"});
  const auto& headers = loaded(r).http.destinations.at("inventory").headers;
  REQUIRE(headers.size() == 2);
  CHECK(headers[0] == std::pair<std::string, std::string>("X-Api-Key", "abc"));
  CHECK(headers[1] == std::pair<std::string, std::string>("Accept", "application/json"));
}

TEST_CASE("--set can add a whole destination") {
  auto r = load_with({R"(http.routes.audit={"url": "http://audit:1/log", "required": true})",
                      R"(http.fanout.OrderCreated=["inventory", "audit"])"});
  const auto& http = loaded(r).http;
  CHECK(http.destinations.at("audit").required);
  CHECK(http.destinations.at("audit").routes[0].url == "http://audit:1/log");
  CHECK(http.fanout.at("OrderCreated") == std::vector<std::string>{"inventory", "audit"});
}

TEST_CASE("override values are typed after the value they replace") {
  auto r =
      load_with({"server.maxBodyBytes=4096", "simulator.services.inventory.reserve.failureRate=1",
                 "outbox.useListenNotify=FALSE", "log.format=json", "admin.token=12345",
                 "simulator.services.inventory.reserve.retryAfter=Wed, 21 Oct 2015 07:28:00 GMT"},
                {{"OUTBOXD_SIMULATOR_ENABLED", "0"}, {"OUTBOXD_DATABASE_POOLSIZE", "12"}});
  // retryAfter was a number, so an HTTP-date there is refused (it must come from a file)
  CHECK_ERROR(r, "simulator.services.inventory.reserve.retryAfter must be a number, got \"Wed, 21 "
                 "Oct 2015 07:28:00 GMT\" (from --set ");

  auto ok =
      load_with({"server.maxBodyBytes=4096", "simulator.services.inventory.reserve.failureRate=1",
                 "outbox.useListenNotify=FALSE", "log.format=json", "admin.token=12345"},
                {{"OUTBOXD_SIMULATOR_ENABLED", "0"},
                 {"OUTBOXD_DATABASE_POOLSIZE", "12"},
                 {"OUTBOXD_OUTBOX_ENABLED", "false"}});
  const auto& s = loaded(ok);
  CHECK_FALSE(s.outbox.enabled);
  CHECK(s.server.max_body_bytes == 4096);
  CHECK(s.simulator.services.at("inventory.reserve").failure_rate == 1.0);
  CHECK_FALSE(s.outbox.use_listen_notify);
  CHECK(s.log.format == log_format::json);
  CHECK(s.admin.token == "12345"); // a string stays a string, even when it looks like a number
  CHECK_FALSE(s.simulator.enabled);
  CHECK(s.database.pool_size == 12);
}

TEST_CASE("an override of an object or array is parsed as JSON, falling back to a string") {
  auto r = load_with({R"(http.fanout.OrderStatusUpdated=["notifications", "inventory"])",
                      R"(dlq.backoff={"base": "2s", "max": "4s"})"});
  const auto& s = loaded(r);
  CHECK(s.http.fanout.at("OrderStatusUpdated") ==
        std::vector<std::string>{"notifications", "inventory"});
  CHECK(s.dlq.backoff.base == 2s);
  CHECK(s.dlq.backoff.max == 4s);
  CHECK_SET_ERROR("dlq.backoff=fast", "dlq.backoff must be an object, got \"fast\"");
}

TEST_CASE("an override value of the wrong type names the key, the value and its source") {
  CHECK_ERROR(load_with({}, {{"OUTBOXD_SERVER_PORT", "abc"}}),
              "server.port must be a number, got \"abc\" (from OUTBOXD_SERVER_PORT)");
  CHECK_SET_ERROR("outbox.useListenNotify=maybe",
                  "outbox.useListenNotify must be true or false, got \"maybe\" (from --set "
                  "outbox.useListenNotify=maybe)");
  CHECK_SET_ERROR("outbox.batchSize=", "outbox.batchSize must be a number, got \"\"");
}

TEST_CASE("a --set without '=' or with an empty key segment is an error") {
  CHECK_SET_ERROR("outbox.poolSize", "--set outbox.poolSize must be key=value");
  CHECK_SET_ERROR("outbox..poolSize=3",
                  "--set outbox..poolSize=3: 'outbox..poolSize' is not a key path");
  CHECK_SET_ERROR("=3", "--set =3: '' is not a key path");
}

TEST_CASE("a --set below a scalar is an error") {
  CHECK_SET_ERROR(
      "server.port.number=1",
      "--set server.port.number=1: server.port is not an object, so it has no key 'number'");
}

TEST_CASE("a --set of a key that does not exist is reported as an unknown key") {
  CHECK_SET_ERROR("outbox.polInterval=2s",
                  "unknown key outbox.polInterval (did you mean pollInterval?)");
}

TEST_CASE("precedence is defaults < file < DATABASE_URL < OUTBOXD_* < --set") {
  const std::string file = R"({"database": {"url": "postgresql://file/db", "poolSize": 5},
                                 "outbox": {"poolSize": 5, "batchSize": 5}})";
  auto from_file = load_file(file);
  CHECK(loaded(from_file).database.url == "postgresql://file/db");
  CHECK(loaded(from_file).database.pool_size == 5);

  auto database_url = load_file(file, {}, {{"DATABASE_URL", "postgresql://env/db"}});
  CHECK(loaded(database_url).database.url == "postgresql://env/db");

  auto empty_database_url = load_file(file, {}, {{"DATABASE_URL", ""}});
  CHECK(loaded(empty_database_url).database.url == "postgresql://file/db");

  env_map environment{{"DATABASE_URL", "postgresql://env/db"},
                      {"OUTBOXD_DATABASE_URL", "postgresql://outboxd/db"},
                      {"OUTBOXD_OUTBOX_POOLSIZE", "6"},
                      {"OUTBOXD_OUTBOX_BATCHSIZE", "6"}};
  auto env = load_file(file, {}, environment);
  CHECK(loaded(env).database.url == "postgresql://outboxd/db");
  CHECK(loaded(env).outbox.pool_size == 6);

  auto set =
      load_file(file, {"database.url=postgresql://set/db", "outbox.poolSize=7"}, environment);
  const auto& s = loaded(set);
  CHECK(s.database.url == "postgresql://set/db");
  CHECK(s.outbox.pool_size == 7);
  CHECK(s.outbox.batch_size == 6);
  CHECK(s.database.pool_size == 5);
}

TEST_CASE("later --set options win over earlier ones") {
  auto r = load_with({"outbox.poolSize=4", "outbox.poolSize=5"});
  CHECK(loaded(r).outbox.pool_size == 5);
}

TEST_CASE("a configuration file is merged over the defaults key by key") {
  auto r = load_file(R"({"server": {"port": 9500}, "outbox": {"backoff": {"max": "2m"}},
                           "simulator": {"services": {"billing.charge": {"failureRate": 0.9}}}})");
  const auto& s = loaded(r);
  CHECK(s.server.port == 9500);
  CHECK(s.server.host == "127.0.0.1");
  CHECK(s.outbox.backoff.max == 2min);
  CHECK(s.outbox.backoff.base == 1s);
  CHECK(s.simulator.services.at("billing.charge").failure_rate == doctest::Approx(0.9));
  CHECK(s.simulator.services.at("billing.charge").failure_status == 503);
  CHECK(s.simulator.base_url == "http://127.0.0.1:9500");
}

TEST_CASE("a destination a file says where to call replaces the built-in one, revert included") {
  auto r = load_file(R"({"http": {"routes": {
                           "inventory": {"url": "http://mine:1/reserve"},
                           "shipping": {"url": "http://mine:1/ship", "timeout": "2s"},
                           "billing": {"timeout": "3s"}}}})");
  const auto& http = loaded(r).http;
  const auto& inventory = http.destinations.at("inventory");
  REQUIRE(inventory.routes.size() == 1);
  CHECK(inventory.routes[0].url == "http://mine:1/reserve");
  CHECK_FALSE(inventory.routes[0].revert.has_value()); // the demo's release is not inherited
  CHECK(inventory.method == "POST");
  // The built-in shipping's two conditional routes and "required" are gone with it.
  const auto& shipping = http.destinations.at("shipping");
  REQUIRE(shipping.routes.size() == 1);
  CHECK_FALSE(shipping.routes[0].when.has_value());
  CHECK_FALSE(shipping.required);
  CHECK(shipping.timeout == 2s);
  // Only tuned: the built-in billing keeps its routes and reverts.
  const auto& billing = http.destinations.at("billing");
  CHECK(billing.timeout == 3s);
  REQUIRE(billing.routes.size() == 2);
  CHECK(billing.routes[0].revert.has_value());
}

TEST_CASE("destination names fit in headers and cannot pass for a revert") {
  auto named = [](const std::string& name) {
    return load_file(fmt::format(R"({{"http": {{"routes": {{"{0}": {{"url": "http://p:1/x"}}}},
                                    "fanout": {{"OrderCreated": ["{0}"]}}}}}})",
                                 name));
  };
  CHECK(loaded(named("pay.v2_eu-1")).http.destinations.count("pay.v2_eu-1") == 1);
  CHECK_ERROR(named("pay.revert"), "http.routes.pay.revert: a destination name must not end in "
                                   "'.revert'");
  CHECK_ERROR(named("\u00c9tape6"), "a destination name must be 1 to 100 letters, digits");
  CHECK_ERROR(named("a b"), "a destination name must be 1 to 100 letters, digits");
  CHECK_ERROR(named(std::string(101, 'a')), "a destination name must be 1 to 100 letters");
}

TEST_CASE("routes of one destination that can call one URL must revert alike") {
  auto r = load_file(R"({"http": {"routes": {"pay": {"routes": [
      {"url": "http://p:1/pay", "condition": {"jsonPath": "$.c", "operator": "eq", "value": "USD"},
       "revert": {"url": "http://p:1/pay/{tx}/refund-usd", "extract": {"tx": "response:$.id"}}},
      {"url": "http://p:1/pay", "condition": {"jsonPath": "$.c", "operator": "eq", "value": "EUR"},
       "revert": {"url": "http://p:1/pay/{tx}/refund-eur", "extract": {"tx": "response:$.id"}}},
      {"url": "http://p:1/ship/{orderId}"},
      {"url": "http://p:1/ship/express",
       "revert": {"url": "http://p:1/express/{id}/cancel", "extract": {"id": "response:$.id"}}}]}},
    "fanout": {"OrderCreated": ["pay"]}}})");
  CHECK_ERROR(r, "http.routes.pay.routes[0] and http.routes.pay.routes[1] can call the same URL "
                 "but revert differently");
  CHECK_ERROR(r, "http.routes.pay.routes[2] and http.routes.pay.routes[3] can call the same URL");
  CHECK(r.errors.size() == 2);
}

TEST_CASE("arrays in a configuration file replace the default array") {
  auto r = load_file(R"({"http": {"fanout": {"OrderCreated": ["inventory"]},
                                    "routes": {"notifications": {"routes": [
                                      {"url": "http://n:1/x"}]}}}})");
  const auto& http = loaded(r).http;
  CHECK(http.fanout.at("OrderCreated") == std::vector<std::string>{"inventory"});
  CHECK(http.fanout.at("OrderStatusUpdated") == std::vector<std::string>{"notifications"});
  REQUIRE(http.destinations.at("notifications").routes.size() == 1);
  CHECK_FALSE(http.destinations.at("notifications").routes[0].when.has_value());
}

TEST_CASE("comments and trailing commas are accepted in a configuration file") {
  auto r = load_file("// outboxd for tests\n{\n  /* block */ \"outbox\": {\"poolSize\": 4,},\n"
                     "  \"log\": {\"format\": \"json\", }, // trailing\n}\n");
  CHECK(loaded(r).outbox.pool_size == 4);
  CHECK(loaded(r).log.format == log_format::json);
}

TEST_CASE("a JSON syntax error reports the file, line and column") {
  temp_dir dir;
  load_options options;
  options.config_path = dir.write("broken.json", "{\n  \"outbox\": {\n    \"poolSize\": 4\n"
                                                 "    \"batchSize\": 5\n  }\n}\n");
  auto r = load(options);
  CHECK_ERROR(r, *options.config_path + ":4:5: Missing a comma");
  CHECK(r.effective_json.empty());
}

TEST_CASE("invalid UTF-8 in a configuration file is a parse error") {
  CHECK_ERROR(load_file("{\"admin\": {\"token\": \"\xff\"}}"), "Invalid encoding");
}

TEST_CASE("a missing configuration file is an error naming the path") {
  temp_dir dir;
  load_options options;
  options.config_path = dir.path("absent.json");
  auto r = load(options);
  CHECK_ERROR(r, "cannot read configuration file " + dir.path("absent.json"));
  CHECK(r.effective_json.empty());
}

TEST_CASE("a configuration file that never ends or is too large is refused unread") {
  load_options options;
  options.config_path = "/dev/zero";
  CHECK_ERROR(load(options), "cannot read configuration file /dev/zero: larger than 16 MiB");
}

TEST_CASE("a configuration nested deeper than 1000 levels is refused, not walked") {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  CHECK_ERROR(load_file("{\"outbox\": " + deep + "}"), ":1:1011: nested deeper than 1000 levels");
  CHECK_SET_ERROR("outbox.poolSize=" + deep, "outbox.poolSize must be a number");
  // 1000 levels are still JSON (here of the wrong type for the key)
  const std::string thousand = std::string(999, '[') + std::string(999, ']');
  auto r = load_file("{\"outbox\": " + thousand + "}");
  CHECK_ERROR(r, "outbox must be an object");
  CHECK_FALSE(has_error(r, "nested"));
}

TEST_CASE("a configuration file that is not a JSON object is refused") {
  CHECK_ERROR(load_file("[1, 2]"), "the configuration must be a JSON object, got [1,2]");
}

TEST_CASE("unknown keys are reported with their full path") {
  CHECK_ERROR(load_file(R"({"outbox": {"polInterval": "2s"}})"), "unknown key outbox.polInterval");
  CHECK_ERROR(load_file(R"({"metrics": {}})"), "unknown key metrics");
  CHECK_ERROR(load_file(R"({"outbox": {"backoff": {"min": "1s"}}})"),
              "unknown key outbox.backoff.min");
  CHECK_SET_ERROR("http.routes.inventory.retries=3", "unknown key http.routes.inventory.retries");
  CHECK_SET_ERROR("http.routes.shipping.routes.0.condition.negate=true",
                  "unknown key http.routes.shipping.routes[0].condition.negate");
  CHECK_SET_ERROR("http.routes.shipping.routes.0.name=x",
                  "unknown key http.routes.shipping.routes[0].name");
  CHECK_SET_ERROR("http.routes.inventory.revert.headers={}",
                  "unknown key http.routes.inventory.revert.headers");
  CHECK_SET_ERROR("http.retries=1", "unknown key http.retries");
  CHECK_SET_ERROR("simulator.services.billing.charge.failureCode=500",
                  "unknown key simulator.services.billing.charge.failureCode");
  CHECK_SET_ERROR("log.colour=true", "unknown key log.colour");
}

TEST_CASE("destination, event, header and extract names are free-form") {
  auto r = load_file(R"({"http": {"routes": {"my-Thing_2": {"url": "http://x:1/{id}",
                             "headers": {"X Any.Thing": "1"},
                             "revert": {"url": "http://x:1/{id}", "extract": {"id": "$.id"}}}},
                           "fanout": {"Some.Event!": ["my-Thing_2"]}}})");
  const auto& http = loaded(r).http;
  CHECK(http.destinations.at("my-Thing_2").headers.at(0).first == "X Any.Thing");
  CHECK(http.destinations.at("my-Thing_2").routes.at(0).revert->extract.count("id") == 1);
  CHECK(http.fanout.at("Some.Event!") == std::vector<std::string>{"my-Thing_2"});
}

TEST_CASE("a section of the wrong JSON type is reported") {
  CHECK_ERROR(load_file(R"({"outbox": 5})"), "outbox must be an object, got 5");
  CHECK_ERROR(load_file(R"({"http": []})"), "http must be an object, got []");
  CHECK_ERROR(load_file(R"({"http": {"routes": []}})"),
              "http.routes must be an object of destinations, got []");
  CHECK_ERROR(load_file(R"({"outbox": {"backoff": "1s"}})"),
              "outbox.backoff must be an object, got \"1s\"");
}

TEST_CASE("server settings are range checked") {
  CHECK_ERROR(load_file(R"({"server": {"host": ""}})"),
              "server.host must be a non-empty string, got \"\"");
  CHECK_ERROR(load_file(R"({"server": {"host": 5}})"),
              "server.host must be a non-empty string, got 5");
  CHECK_ERROR(load_file(R"({"server": {"port": "abc"}})"),
              "server.port must be an integer, got \"abc\"");
  CHECK_ERROR(load_file(R"({"server": {"port": 80.5}})"),
              "server.port must be an integer, got 80.5");
  CHECK_SET_ERROR("server.port=0", "server.port must be > 0, got 0");
  CHECK_SET_ERROR("server.port=65536", "server.port must be between 1 and 65535, got 65536");
  CHECK_SET_ERROR("server.threads=0", "server.threads must be > 0, got 0");
  CHECK_SET_ERROR("server.threads=1025", "server.threads must be between 1 and 1024, got 1025");
  CHECK_SET_ERROR("server.maxBodyBytes=1023",
                  "server.maxBodyBytes must be between 1024 and 1073741824, got 1023");
  CHECK_SET_ERROR("server.maxBodyBytes=1073741825", "server.maxBodyBytes must be between");
  CHECK_SET_ERROR("server.readTimeout=0s", "server.readTimeout must be > 0, got \"0s\"");
  CHECK_SET_ERROR("server.writeTimeout=soon", "server.writeTimeout must be a duration like \"2s\"");
  CHECK_SET_ERROR("server.keepAliveTimeout=0", "server.keepAliveTimeout must be > 0, got \"0\"");
}

TEST_CASE("a port given as 9000.0 is accepted as an integer") {
  auto r = load_file(R"({"server": {"port": 9001.0}})");
  CHECK(loaded(r).server.port == 9001);
}

TEST_CASE("database settings are checked") {
  CHECK_ERROR(load_file(R"({"database": {"url": 5}})"), "database.url must be a string, got 5");
  CHECK_SET_ERROR("database.poolSize=0", "database.poolSize must be > 0, got 0");
  CHECK_SET_ERROR("database.poolSize=1001",
                  "database.poolSize must be between 1 and 1000, got 1001");
  CHECK_SET_ERROR("database.connectTimeout=0ms", "database.connectTimeout must be > 0");
  CHECK_SET_ERROR("database.startupTimeout=-1s", "database.startupTimeout must be a duration like");
  auto zero = load_with({"database.startupTimeout=0"});
  CHECK(loaded(zero).database.startup_timeout == 0ms);
  CHECK_SET_ERROR("database.statementTimeout=soon",
                  "database.statementTimeout must be a duration like");
  CHECK_SET_ERROR("database.lockTimeout=-5s", "database.lockTimeout must be a duration like");
  // PostgreSQL's timeouts are 32-bit milliseconds: a longer one would be refused by every session.
  for (const char* key : {"database.statementTimeout", "database.lockTimeout",
                          "database.migrationLockTimeout", "database.connectTimeout"}) {
    CAPTURE(key);
    CHECK_SET_ERROR(std::string(key) + "=25d",
                    std::string(key) + " must be at most 2147483647ms (PostgreSQL's limit");
    CHECK(load_with({std::string(key) + "=24d"}).value);
  }
  // Any duration: a clock's now() plus it must not overflow.
  CHECK_SET_ERROR("outbox.shutdownTimeout=106751991167d",
                  "outbox.shutdownTimeout must be at most 3153600000000ms (100 years)");
  CHECK(load_with({"outbox.retention=3650d"}).value);
  auto bounds = load_with({"database.statementTimeout=0", "database.lockTimeout=250ms"});
  CHECK(loaded(bounds).database.statement_timeout == 0ms);
  CHECK(loaded(bounds).database.lock_timeout == 250ms);
  auto defaults = load_with({});
  CHECK(loaded(defaults).database.statement_timeout == 30s);
  CHECK(loaded(defaults).database.lock_timeout == 10s);
  CHECK(loaded(defaults).database.migration_lock_timeout == 3s);
  CHECK_SET_ERROR("database.migrationLockTimeout=0", "database.migrationLockTimeout must be > 0");
}

TEST_CASE("a database URL libpq cannot read is a configuration error, its password masked") {
  auto url_error = [](const std::string& url) {
    auto r = load_with({}, {{"DATABASE_URL", url}});
    INFO(all_errors(r));
    CHECK_FALSE(r.value.has_value());
    return all_errors(r);
  };
  auto typo = url_error("postgresq://x@@:/");
  CHECK(typo.find("database.url (or DATABASE_URL) is not a connection string libpq accepts: "
                  "missing \"=\" after \"postgresq://x@@:/\"") != std::string::npos);
  auto quoted = url_error("postgresq://app:S3cr3t@db/outboxd");
  CHECK(quoted.find("app:***@db") != std::string::npos);
  CHECK(quoted.find("S3cr3t") == std::string::npos);
  auto short_one = url_error("postgresq://app:a@db/outboxd");
  CHECK(short_one.find("missing \"=\" after \"postgresq://app:***@db/outboxd\" in connection") !=
        std::string::npos); // the rest of the message is left as libpq wrote it
  auto pairs = url_error("host=db password=S3cr3t dbname");
  CHECK(pairs.find("missing \"=\" after \"dbname\"") != std::string::npos);
  CHECK(pairs.find("S3cr3t") == std::string::npos);
  CHECK(url_error("postgresql://u@db/outboxd?nosuch=1").find("invalid URI query parameter") !=
        std::string::npos);
  CHECK(url_error("postgresql://u@db/outboxd?sslmode=bogus")
            .find("libpq accepts: invalid sslmode value \"bogus\" (one of disable, allow, prefer, "
                  "require, verify-ca, verify-full)") != std::string::npos);
  CHECK(url_error("host=db target_session_attrs=writable")
            .find("invalid target_session_attrs value \"writable\"") != std::string::npos);
  for (const char* good : {"postgresql://u:p@db:5432/outboxd?sslmode=require",
                           "postgresql://db/outboxd?sslmode=verify-full&channel_binding=require",
                           "host=/tmp port=5432 dbname=outboxd", ""})
    CHECK(load_with({}, {{"DATABASE_URL", good}}).value.has_value());
}

TEST_CASE("outbox settings are checked") {
  CHECK_SET_ERROR("outbox.poolSize=0", "outbox.poolSize must be > 0, got 0");
  CHECK_SET_ERROR("outbox.poolSize=257", "outbox.poolSize must be between 1 and 256, got 257");
  CHECK_SET_ERROR("outbox.connections=0", "outbox.connections must be > 0, got 0");
  CHECK_SET_ERROR("outbox.batchSize=0", "outbox.batchSize must be > 0, got 0");
  CHECK_SET_ERROR("outbox.batchSize=10001", "outbox.batchSize must be between 1 and 10000");
  CHECK_SET_ERROR("outbox.pollInterval=0s", "outbox.pollInterval must be > 0");
  CHECK_ERROR(load_file(R"({"outbox": {"pollInterval": 2}})"),
              "outbox.pollInterval must be a duration like \"2s\", got 2");
  CHECK_ERROR(load_file(R"({"outbox": {"useListenNotify": "yes"}})"),
              "outbox.useListenNotify must be true or false, got \"yes\"");
  CHECK_SET_ERROR("outbox.maxRetries=-1", "outbox.maxRetries must be between 0 and 1000, got -1");
  CHECK_SET_ERROR("outbox.maxRetries=1001",
                  "outbox.maxRetries must be between 0 and 1000, got 1001");
  CHECK_SET_ERROR("outbox.leaseTimeout=0", "outbox.leaseTimeout must be > 0");
  CHECK_SET_ERROR("outbox.reaperInterval=0m", "outbox.reaperInterval must be > 0");
  CHECK_SET_ERROR("outbox.retention=1w", "outbox.retention must be a duration like");
  CHECK_SET_ERROR("dlq.retention=-1d", "dlq.retention must be a duration like");
  CHECK_SET_ERROR("audit.retention=-30d", "audit.retention must be a duration like");
  CHECK_SET_ERROR("audit.retention=forever", "audit.retention must be a duration like");
  CHECK_SET_ERROR("orders.retention=30", "orders.retention must be a duration like");
  CHECK_ERROR(load_file(R"({"audit": {"exportDir": 7}})"), "audit.exportDir must be a string");
  CHECK_SET_ERROR("audit.exportDir=/proc/outboxd-audit", "audit.exportDir cannot be written: ");
  CHECK_SET_ERROR("audit.exportDir=/etc/hostname", "audit.exportDir cannot be written: ");
  CHECK_SET_ERROR("outbox.shutdownTimeout=1.5s", "outbox.shutdownTimeout must be a duration like");
  auto r = load_with({"outbox.retention=0", "outbox.shutdownTimeout=0s", "outbox.maxRetries=0"});
  CHECK(loaded(r).outbox.retention == 0ms);
  CHECK(loaded(r).outbox.shutdown_timeout == 0ms);
}

TEST_CASE("backoff max must be positive and not below base") {
  CHECK_SET_ERROR("outbox.backoff.base=x", "outbox.backoff.base must be a duration like");
  CHECK_SET_ERROR("outbox.backoff.max=0s", "outbox.backoff.max must be > 0, got \"0s\"");
  CHECK_SET_ERROR("outbox.backoff.max=500ms",
                  "outbox.backoff.max must be >= outbox.backoff.base (1000ms), got 500ms");
  CHECK_SET_ERROR("dlq.backoff.base=2m",
                  "dlq.backoff.max must be >= dlq.backoff.base (120000ms), got 60000ms");
  CHECK_SET_ERROR("dlq.maxRetries=1001", "dlq.maxRetries must be between 0 and 1000, got 1001");
  CHECK_SET_ERROR("dlq.backoff.max=1", "dlq.backoff.max must be a duration like \"2s\"");
  auto r = load_with({"outbox.backoff.base=0", "outbox.backoff.max=1ms"});
  CHECK(loaded(r).outbox.backoff.base == 0ms);
}

TEST_CASE("a destination needs exactly one of url and routes") {
  CHECK_SET_ERROR(R"(http.routes.audit={"method": "POST"})",
                  "http.routes.audit must have a url or a routes list");
  CHECK_SET_ERROR("http.routes.inventory.routes=[{\"url\": \"http://x:1/\"}]",
                  "http.routes.inventory must have either url or routes, not both");
  CHECK_SET_ERROR("http.routes.shipping.routes=[]",
                  "http.routes.shipping.routes must be a non-empty array of routes, got []");
  CHECK_SET_ERROR("http.routes.shipping.routes={}",
                  "http.routes.shipping.routes must be a non-empty array of routes, got {}");
  CHECK_SET_ERROR("http.routes.shipping.revert={\"url\": \"http://x:1/\"}",
                  "http.routes.shipping.revert is allowed only next to url");
  CHECK_SET_ERROR("http.routes.audit=5", "http.routes.audit must be an object, got 5");
  CHECK_SET_ERROR("http.routes.shipping.routes=[5]",
                  "http.routes.shipping.routes[0] must be an object, got 5");
  CHECK_SET_ERROR(
      R"(http.routes.shipping.routes=[{"condition": {"jsonPath": "$.a", "operator": "exists"}}])",
      "http.routes.shipping.routes[0].url is required");
}

TEST_CASE("destination method, timeouts, headers and required are checked") {
  CHECK_SET_ERROR(
      "http.routes.inventory.method=post",
      "http.routes.inventory.method must be one of GET POST PUT PATCH DELETE HEAD, got \"post\"");
  CHECK_SET_ERROR("http.routes.inventory.timeout=0s", "http.routes.inventory.timeout must be > 0");
  CHECK_SET_ERROR("http.routes.inventory.connectTimeout=5",
                  "http.routes.inventory.connectTimeout must be a duration like \"2s\", got 5");
  CHECK_SET_ERROR("http.routes.inventory.headers.X-Count=5",
                  "http.routes.inventory.headers.X-Count must be a string, got 5");
  CHECK_SET_ERROR("http.routes.inventory.headers=[]",
                  "http.routes.inventory.headers must be an object, got []");
  CHECK_SET_ERROR("http.routes.inventory.required=\"yes\"",
                  "http.routes.inventory.required must be true or false, got \"yes\"");
  auto r =
      load_with({"http.routes.inventory.method=PUT", "http.routes.inventory.connectTimeout=750ms",
                 "http.routes.inventory.required=true"});
  const auto& d = loaded(r).http.destinations.at("inventory");
  CHECK(d.method == "PUT");
  CHECK(d.connect_timeout == 750ms);
  CHECK(d.required);
}

TEST_CASE("route and revert URLs are checked") {
  CHECK_SET_ERROR(
      "http.routes.fraudCheck.url=ftp://x/check",
      "http.routes.fraudCheck.url must be an http:// or https:// URL (it must start with "
      "http:// or https://), got \"ftp://x/check\"");
  CHECK_SET_ERROR(
      "http.routes.fraudCheck.url=http:///check",
      "http.routes.fraudCheck.url must be an http:// or https:// URL (the host is empty)");
  CHECK_SET_ERROR("http.routes.fraudCheck.url=http://x:0/check", "(the port must be 1..65535)");
  CHECK_SET_ERROR("http.routes.fraudCheck.url=http://x:70000/check", "(the port must be 1..65535)");
  CHECK_SET_ERROR("http.routes.fraudCheck.url=http://x:ab/check", "(the port must be 1..65535)");
  CHECK_SET_ERROR(
      "http.routes.fraudCheck.url=http://x/a b",
      "http.routes.fraudCheck.url must be an http:// or https:// URL (it contains whitespace)");
  CHECK_SET_ERROR("http.routes.fraudCheck.url=http://x/a#b", "(it contains '#')");
  CHECK_SET_ERROR(
      "http.routes.fraudCheck.url=http://{host}/check",
      "http.routes.fraudCheck.url must be an http:// or https:// URL ({placeholders} are "
      "allowed only in the path)");
  CHECK_SET_ERROR("http.routes.fraudCheck.url=http://x:{port}/check",
                  "{placeholders} are allowed only in the path");
  CHECK_ERROR(load_file(R"({"http": {"routes": {"fraudCheck": {"url": 5}}}})"),
              "http.routes.fraudCheck.url must be a URL string, got 5");
  CHECK_SET_ERROR("http.routes.shipping.routes.0.url=localhost/ship",
                  "http.routes.shipping.routes[0].url must be an http:// or https:// URL");
  CHECK_SET_ERROR("http.routes.inventory.revert.url=//x/release",
                  "http.routes.inventory.revert.url must be an http:// or https:// URL");
  CHECK_SET_ERROR("http.routes.billing.routes.0.revert.url=http://{transactionId}/refund",
                  "http.routes.billing.routes[0].revert.url must be an http:// or https:// URL "
                  "({placeholders}");

  auto r =
      load_with({"http.routes.fraudCheck.url=https://user@[::1]:8443/api/{orderId}/check?x={y}"});
  CHECK(loaded(r).http.destinations.at("fraudCheck").routes[0].url ==
        "https://user@[::1]:8443/api/{orderId}/check?x={y}");
}

TEST_CASE("route conditions are checked") {
  const std::string route = "http.routes.shipping.routes.1.condition.";
  const std::string condition = "http.routes.shipping.routes.1.condition=";
  CHECK_SET_ERROR(route + "operator=equals",
                  "http.routes.shipping.routes[1].condition.operator: unknown operator 'equals' "
                  "(expected eq ne gt gte lt lte contains exists)");
  CHECK_SET_ERROR("http.routes.shipping.routes.1.condition={\"jsonPath\": \"$.a\", \"value\": 1}",
                  "http.routes.shipping.routes[1].condition.operator is required");
  CHECK_SET_ERROR(condition + R"({"jsonPath": "$.a", "operator": 5, "value": 1})",
                  "http.routes.shipping.routes[1].condition.operator must be a string, got 5");
  CHECK_SET_ERROR("http.routes.shipping.routes.1.condition={\"operator\": \"exists\"}",
                  "http.routes.shipping.routes[1].condition.jsonPath is required");
  CHECK_SET_ERROR(route + "jsonPath=shippingType",
                  "http.routes.shipping.routes[1].condition.jsonPath: jsonPath 'shippingType' must "
                  "start with '$'");
  CHECK_SET_ERROR(route + "jsonPath=$.items[*].sku",
                  "http.routes.shipping.routes[1].condition.jsonPath: jsonPath '$.items[*].sku' is "
                  "not supported");
  CHECK_SET_ERROR(
      condition + R"({"jsonPath": [1], "operator": "exists"})",
      "http.routes.shipping.routes[1].condition.jsonPath must be a string like \"$.a.b\", got [1]");
  CHECK_SET_ERROR(
      "http.routes.shipping.routes.1.condition={\"jsonPath\": \"$.a\", \"operator\": \"ne\"}",
      "http.routes.shipping.routes[1].condition.value is required for operator 'ne'");
  CHECK_SET_ERROR(condition + R"({"jsonPath": "$.a", "operator": "eq", "value": [1]})",
                  "http.routes.shipping.routes[1].condition.value must be a string, number or "
                  "boolean, got [1]");
  CHECK_SET_ERROR(condition + R"({"jsonPath": "$.a", "operator": "contains", "value": null})",
                  "http.routes.shipping.routes[1].condition.value must be a string, number or "
                  "boolean, got null");
  CHECK_SET_ERROR(condition + R"({"jsonPath": "$.a", "operator": "lt", "value": "high"})",
                  "http.routes.shipping.routes[1].condition.value must be a number (or a numeric "
                  "string) for operator 'lt', got \"high\"");
  CHECK_SET_ERROR(condition + R"({"jsonPath": "$.a", "operator": "gte", "value": true})",
                  "http.routes.shipping.routes[1].condition.value must be a number");
  CHECK_SET_ERROR(
      "http.routes.billing.routes.0.condition.previousDestination=fraud",
      "http.routes.billing.routes[0].condition.previousDestination: unknown route 'fraud' "
      "(known: billing, fraudCheck, inventory, notifications, shipping)");
  CHECK_SET_ERROR(
      condition + R"({"jsonPath": "$.a", "operator": "exists", "previousDestination": 1})",
      "http.routes.shipping.routes[1].condition.previousDestination must be a string, got 1");
  CHECK_SET_ERROR("http.routes.billing.routes.0.condition=[]",
                  "http.routes.billing.routes[0].condition must be an object, got []");
}

TEST_CASE("condition values keep their JSON type and ordering values are numbers") {
  auto r = load_with(
      {R"(http.routes.shipping.routes.0.condition={"jsonPath": "$.a", "operator": "eq", "value": true})",
       R"(http.routes.shipping.routes.1.condition={"jsonPath": "$.a", "operator": "ne", "value": 7.5})",
       R"(http.routes.billing.routes.0.condition={"jsonPath": "$.a", "operator": "lt", "value": "49"})",
       "http.routes.notifications.routes.2.condition.value=ignored"});
  const auto& http = loaded(r).http;
  CHECK(std::get<bool>(http.destinations.at("shipping").routes[0].when->value));
  CHECK(std::get<double>(http.destinations.at("shipping").routes[1].when->value) == 7.5);
  CHECK(std::get<double>(http.destinations.at("billing").routes[0].when->value) == 49.0);
  CHECK(std::holds_alternative<std::monostate>(
      http.destinations.at("notifications").routes[2].when->value));
}

TEST_CASE("reverts are checked") {
  CHECK_SET_ERROR("http.routes.inventory.revert={\"method\": \"DELETE\"}",
                  "http.routes.inventory.revert.url is required");
  CHECK_SET_ERROR("http.routes.inventory.revert=\"undo\"",
                  "http.routes.inventory.revert must be an object, got \"undo\"");
  CHECK_SET_ERROR("http.routes.inventory.revert.method=REMOVE",
                  "http.routes.inventory.revert.method must be one of GET POST PUT PATCH DELETE "
                  "HEAD, got \"REMOVE\"");
  CHECK_SET_ERROR("http.routes.inventory.revert.extract=[]",
                  "http.routes.inventory.revert.extract must be an object, got []");
  CHECK_SET_ERROR(R"(http.routes.inventory.revert.extract={"reservationId": 5})",
                  "http.routes.inventory.revert.extract.reservationId must be a string like "
                  "\"response:$.id\", got 5");
  CHECK_SET_ERROR("http.routes.inventory.revert.extract.reservationId=body:$.id",
                  "http.routes.inventory.revert.extract.reservationId must be \"request:$...\", "
                  "\"response:$...\" or \"$...\", got \"body:$.id\"");
  CHECK_SET_ERROR(
      "http.routes.inventory.revert.extract.reservationId=response:id",
      "http.routes.inventory.revert.extract.reservationId: jsonPath 'id' must start with '$'");
  CHECK_SET_ERROR("http.routes.inventory.revert.payload=[1]",
                  "http.routes.inventory.revert.payload must be a JSON object, got [1]");
  CHECK_SET_ERROR("http.routes.inventory.revert.payload=\"x\"",
                  "http.routes.inventory.revert.payload must be a JSON object");
}

TEST_CASE("every revert placeholder needs an extract entry") {
  auto r = load_with(
      {R"(http.routes.billing.routes.0.revert.extract={"amount": "request:$.amount", "currency": "request:$.currency"})"});
  CHECK_ERROR(r, "http.routes.billing.routes[0].revert.url uses {transactionId} but revert.extract "
                 "has no 'transactionId'");
  CHECK_ERROR(r, "http.routes.billing.routes[0].revert.payload.transactionId uses {transactionId} "
                 "but revert.extract has no 'transactionId'");
  CHECK_SET_ERROR(
      R"(http.routes.inventory.revert.payload={"items": [{"note": "release {reservationId} of {orderId}"}]})",
      "http.routes.inventory.revert.payload.items[0].note uses {orderId} but revert.extract has no "
      "'orderId'");
}

TEST_CASE("revert defaults and extract sources are read") {
  auto r = load_with(
      {R"(http.routes.fraudCheck.revert={"url": "http://x:1/undo/{id}", "extract": {"id": "$.id", "o": "request:$.order.id"}, "payload": {"a": [1, "{o}"]}})"});
  const auto& revert = *loaded(r).http.destinations.at("fraudCheck").routes[0].revert;
  CHECK(revert.method == "DELETE");
  CHECK(revert.extract.at("id").from == outboxd::domain::extraction::source::response);
  CHECK(revert.extract.at("id").path.text() == "$.id");
  CHECK(revert.extract.at("o").from == outboxd::domain::extraction::source::request);
  CHECK(revert.extract.at("o").path.text() == "$.order.id");
  CHECK(revert.payload_json == R"({"a":[1,"{o}"]})");
}

TEST_CASE("the fan-out must name known routes, each once") {
  CHECK_SET_ERROR(
      R"(http.fanout.OrderCreated=["inventory", "fraudCheck", "shiping", "billing"])",
      "http.fanout.OrderCreated[2]: unknown route 'shiping' (known: billing, fraudCheck, "
      "inventory, notifications, shipping)");
  CHECK_SET_ERROR(R"(http.fanout.OrderCreated=["inventory", "inventory"])",
                  "http.fanout.OrderCreated[1]: route 'inventory' is listed twice");
  CHECK_SET_ERROR(
      "http.fanout.OrderCreated=inventory",
      "http.fanout.OrderCreated must be an array of route names ([] delivers nothing), got "
      "\"inventory\"");
  CHECK_SET_ERROR("http.fanout.OrderCreated=[\"inventory\", 3]",
                  "http.fanout.OrderCreated[1] must be a route name, got 3");
  CHECK_SET_ERROR("http.fanout=[]", "http.fanout must be an object, got []");
}

TEST_CASE("an empty fan-out delivers nothing; a cancellation or a nameless type has none") {
  auto quiet = load_file(R"({"http": {"fanout": {"OrderStatusUpdated": []}}})");
  CHECK(loaded(quiet).http.fanout.at("OrderStatusUpdated").empty());
  CHECK_ERROR(load_file(R"({"http": {"fanout": {"!OrderCreated": ["inventory"]}}})"),
              "http.fanout.!OrderCreated: an event type is a name that does not start with '!'");
  CHECK_ERROR(load_file(R"({"http": {"fanout": {"": ["inventory"]}}})"),
              "an event type is a name that does not start with '!'");
}

TEST_CASE("a statement timeout over half the lease is a warning") {
  CHECK(start_up_warnings(loaded(load_with({"database.statementTimeout=30s"}))).empty());
  auto long_statements = start_up_warnings(loaded(load_with({"database.statementTimeout=45s"})));
  REQUIRE(long_statements.size() == 1);
  CHECK(long_statements[0].rfind("database.statementTimeout (45000ms) is more than half of "
                                 "outbox.leaseTimeout (60000ms)",
                                 0) == 0);
  auto unbounded = start_up_warnings(loaded(load_with({"database.statementTimeout=0"})));
  REQUIRE(unbounded.size() == 1);
  CHECK(unbounded[0].rfind("database.statementTimeout (0: no bound) is not within half", 0) == 0);
}

TEST_CASE("a fan-out of a type the order API never makes is a warning, with the likely name") {
  CHECK(start_up_warnings(loaded(load_with({}))).empty());
  auto typo = start_up_warnings(
      loaded(load_file(R"({"http": {"fanout": {"OrderCreatd": ["inventory"]}}})")));
  REQUIRE(typo.size() == 1);
  CHECK(typo[0] == "http.fanout.OrderCreatd: the order API makes no OrderCreatd events (it makes "
                   "OrderCreated and OrderStatusUpdated); only events your application inserts "
                   "itself use this fan-out (did you mean OrderCreated?)");
  auto own = start_up_warnings(
      loaded(load_file(R"({"http": {"fanout": {"InvoiceIssued": ["inventory"]}}})")));
  REQUIRE(own.size() == 1);
  CHECK(own[0].find("(did you mean") == std::string::npos);
}

TEST_CASE("a condition on a previous destination needs it earlier in the fan-out") {
  auto r =
      load_with({R"(http.fanout.OrderCreated=["inventory", "billing", "fraudCheck", "shipping"])"});
  CHECK_ERROR(
      r, "http.fanout.OrderCreated[1]: 'billing' must come after 'fraudCheck' in this list, "
         "because http.routes.billing.routes[0].condition.previousDestination reads its response");
  CHECK(r.errors.size() == 1); // both billing routes name fraudCheck: one error is enough
  CHECK_SET_ERROR(R"(http.fanout.Refund=["billing"])",
                  "http.fanout.Refund[0]: 'billing' must come after 'fraudCheck'");
}

TEST_CASE("simulator settings are checked") {
  CHECK_ERROR(load_file(R"({"simulator": {"enabled": "yes"}})"),
              "simulator.enabled must be true or false, got \"yes\"");
  CHECK_SET_ERROR("simulator.seed=-1",
                  "simulator.seed must be an integer between 0 and 18446744073709551615, got -1");
  CHECK_SET_ERROR("simulator.seed=1.5", "simulator.seed must be an integer between 0 and");
  CHECK_SET_ERROR("simulator.seed=1e30", "simulator.seed must be an integer between 0 and");
  CHECK_SET_ERROR("simulator.seed=18446744073709551616", "simulator.seed must be an integer");
  CHECK(loaded(load_with({"simulator.seed=1e3"})).simulator.seed == 1000);
  CHECK_SET_ERROR("simulator.services=[]", "simulator.services must be an object, got []");
  CHECK_SET_ERROR("simulator.services.billing.chrage={}", "unknown key simulator.services.billing");
  CHECK_ERROR(load_file(R"({"simulator": {"services": {"billing.chrage": {}}}})"),
              "unknown key simulator.services.billing.chrage (known services: inventory.reserve,");
  CHECK_SET_ERROR("simulator.services.billing.charge=0.5",
                  "simulator.services.billing.charge must be an object, got 0.5");
  auto r = load_with({"simulator.seed=18446744073709551615"});
  CHECK(loaded(r).simulator.seed == 18446744073709551615ULL);
}

TEST_CASE("simulator knobs are range checked") {
  const std::string knob = "simulator.services.billing.charge.";
  CHECK_SET_ERROR(knob + "failureRate=1.5",
                  "simulator.services.billing.charge.failureRate must be between 0 and 1, got 1.5");
  CHECK_SET_ERROR(knob + "failureRate=-0.1",
                  "simulator.services.billing.charge.failureRate must be between 0 and 1");
  CHECK_SET_ERROR(
      knob + "failureStatus=200",
      "simulator.services.billing.charge.failureStatus must be between 400 and 599, got 200");
  CHECK_SET_ERROR(knob + "failureStatus=503.5",
                  "simulator.services.billing.charge.failureStatus must be an integer, got 503.5");
  CHECK_SET_ERROR(knob + "retryAfter=-1",
                  "simulator.services.billing.charge.retryAfter must be null, a non-negative "
                  "number of seconds or an HTTP-date string such as \"Wed, 21 Oct 2015 "
                  "07:28:00 GMT\", got -1");
  CHECK_ERROR(load_file(R"({"simulator": {"services": {"billing.charge": {"retryAfter": ""}}}})"),
              "simulator.services.billing.charge.retryAfter must be null");
  CHECK_SET_ERROR(knob + "latencyMs=[5, 1]",
                  "simulator.services.billing.charge.latencyMs must be a number of milliseconds or "
                  "[min, max] with 0 <= min <= max <= 60000, got [5,1]");
  CHECK_SET_ERROR(knob + "latencyMs=[1, 2, 3]",
                  "simulator.services.billing.charge.latencyMs must be");
  CHECK_SET_ERROR(knob + "latencyMs=[-1, 2]",
                  "simulator.services.billing.charge.latencyMs must be");
  CHECK_SET_ERROR(knob + "latencyMs=60001", "simulator.services.billing.charge.latencyMs must be");
  CHECK_SET_ERROR(knob + "latencyMs=fast", "simulator.services.billing.charge.latencyMs must be");
  CHECK_SET_ERROR(knob + "lateRate=2",
                  "simulator.services.billing.charge.lateRate must be between 0 and 1, got 2");
  CHECK_SET_ERROR(knob + "lateRate=\"0.5\"",
                  "simulator.services.billing.charge.lateRate must be a number, got \"0.5\"");
  CHECK_SET_ERROR(
      knob + "lateMs=600001",
      "simulator.services.billing.charge.lateMs must be between 0 and 600000, got 600001");
  CHECK_SET_ERROR(
      knob + "failNext=-1",
      "simulator.services.billing.charge.failNext must be between 0 and 2147483647, got -1");
}

TEST_CASE("simulator knobs accept every documented form") {
  auto r = load_file(R"({"simulator": {"services": {
        "billing.charge": {"retryAfter": null, "latencyMs": 250, "lateRate": 0.5, "lateMs": 3000, "failNext": 2},
        "billing.refund": {"retryAfter": "Wed, 21 Oct 2015 07:28:00 GMT", "latencyMs": [10, 60000]}}}})");
  const auto& services = loaded(r).simulator.services;
  const auto& charge = services.at("billing.charge");
  CHECK(std::holds_alternative<std::monostate>(charge.retry_after));
  CHECK(charge.latency_min_ms == 250);
  CHECK(charge.latency_max_ms == 250);
  CHECK(charge.late_rate == 0.5);
  CHECK(charge.late_ms == 3000);
  CHECK(charge.fail_next == 2);
  const auto& refund = services.at("billing.refund");
  CHECK(std::get<std::string>(refund.retry_after) == "Wed, 21 Oct 2015 07:28:00 GMT");
  CHECK(refund.latency_min_ms == 10);
  CHECK(refund.latency_max_ms == 60000);
}

TEST_CASE("knobs missing from the configuration get default values") {
  auto r = load_with({R"(simulator.services={"billing.charge": {"failureRate": 0.25}})"});
  const auto& services = loaded(r).simulator.services;
  CHECK(services.size() == 12);
  CHECK(services.at("billing.charge").failure_rate == 0.25);
  CHECK(services.at("inventory.reserve").failure_rate == 0.0);
  CHECK(services.at("inventory.reserve").failure_status == 503);
}

TEST_CASE("admin and log settings are checked") {
  CHECK_ERROR(load_file(R"({"admin": {"token": 5}})"), "admin.token must be a string, got 5");
  CHECK_SET_ERROR("log.level=verbose",
                  "log.level must be one of debug info warn error, got \"verbose\"");
  CHECK_SET_ERROR("log.format=xml", "log.format must be one of text json, got \"xml\"");
  auto r = load_with({"log.level=warn"});
  CHECK(loaded(r).log.level == log_level::warn);
}

TEST_CASE("several errors are reported at once") {
  auto r = load_with({"outbox.poolSize=0", "log.level=loud",
                      "http.routes.shipping.routes.1.condition.operator=equals",
                      R"(http.fanout.OrderCreated=["shiping"])"},
                     {{"OUTBOXD_SERVER_PROT", "1"}});
  CHECK_ERROR(r, "outbox.poolSize must be > 0, got 0");
  CHECK_ERROR(r, "log.level must be one of");
  CHECK_ERROR(r, "unknown operator 'equals'");
  CHECK_ERROR(r, "unknown route 'shiping'");
  CHECK_ERROR(r, "OUTBOXD_SERVER_PROT does not name a configuration key");
  CHECK(r.errors.size() == 5);
}

TEST_CASE("the effective configuration is produced even when validation fails") {
  auto r = load_with({"outbox.poolSize=0"});
  CHECK_FALSE(r.value.has_value());
  CHECK(r.effective_json.find("\"poolSize\": 0") != std::string::npos);
  CHECK(r.effective_json.find("\n  \"server\": {\n    \"host\"") != std::string::npos);
}

TEST_CASE("parse_duration accepts whole amounts with a unit, and zero") {
  CHECK(parse_duration("250ms") == 250ms);
  CHECK(parse_duration("2s") == 2s);
  CHECK(parse_duration("5m") == 5min);
  CHECK(parse_duration("1h") == 1h);
  CHECK(parse_duration("7d") == std::chrono::hours(168));
  CHECK(parse_duration("0") == 0ms);
  CHECK(parse_duration("0s") == 0ms);
  CHECK(parse_duration("007s") == 7s);
}

TEST_CASE("parse_duration rejects malformed, negative, fractional and overflowing values") {
  for (const char* bad :
       {"", "5", "-1s", "+1s", "1.5s", "2 s", " 2s", "2s ", "2S", "2sec", "1w", "ms", "s",
        "9223372036854775808ms", "9223372036854775807s", "107000000000000d"})
    CHECK_MESSAGE(!parse_duration(bad).has_value(), "accepted: '" << bad << "'");
  CHECK(parse_duration("9223372036854775807ms") == milliseconds(9223372036854775807LL));
}

TEST_CASE("mask_database_url hides passwords in URLs and key=value strings") {
  CHECK(mask_database_url("postgresql://user:secret@host/db") == "postgresql://user:***@host/db");
  CHECK(mask_database_url("postgres://user:p@ss:w@host:5432/db") ==
        "postgres://user:***@host:5432/db");
  CHECK(mask_database_url("postgresql://user@host/db") == "postgresql://user@host/db");
  CHECK(mask_database_url("postgresql://host:5432/db") == "postgresql://host:5432/db");
  CHECK(mask_database_url("postgresql://u@h/db?sslmode=require&password=secret") ==
        "postgresql://u@h/db?sslmode=require&password=***");
  CHECK(mask_database_url("host=x password=secret user=u") == "host=x password=*** user=u");
  CHECK(mask_database_url("password = 'se cret' host=x") == "password = *** host=x");
  CHECK(mask_database_url("host=x user=u") == "host=x user=u");
  // the client key's password, and a parameter name written with escapes (libpq decodes it)
  CHECK(mask_database_url("postgresql://u@h/db?sslpassword=k3y&sslmode=verify-full") ==
        "postgresql://u@h/db?sslpassword=***&sslmode=verify-full");
  CHECK(mask_database_url("postgresql://u@h/db?pass%77ord=s3cret&x=%zz") ==
        "postgresql://u@h/db?pass%77ord=***&x=%zz");
  CHECK(mask_database_url("postgresql://u@h/db?mypassword=x&password") ==
        "postgresql://u@h/db?mypassword=x&password");
  CHECK(mask_database_url("host=/tmp sslpassword=k3y") == "host=/tmp sslpassword=***");
  CHECK(mask_database_url("") == "");
}

TEST_CASE("the effective configuration masks the database password, token and auth headers") {
  auto r = load_with({"admin.token=t0ken", "http.routes.inventory.headers.Authorization=Bearer abc",
                      "http.routes.inventory.headers.X-Api-Key=k3y",
                      "http.routes.inventory.headers.X-Request-Source=outboxd"},
                     {{"DATABASE_URL", "postgresql://outboxd:pa55@db:5432/outboxd"}});
  const auto& s = loaded(r);
  CHECK(s.database.url == "postgresql://outboxd:pa55@db:5432/outboxd");
  CHECK(s.admin.token == "t0ken");
  const auto& json = r.effective_json;
  CHECK(json.find("postgresql://outboxd:***@db:5432/outboxd") != std::string::npos);
  CHECK(json.find("\"token\": \"***\"") != std::string::npos);
  CHECK(json.find("\"Authorization\": \"***\"") != std::string::npos);
  CHECK(json.find("\"X-Api-Key\": \"***\"") != std::string::npos);
  CHECK(json.find("\"X-Request-Source\": \"outboxd\"") != std::string::npos);
  for (const char* secret : {"pa55", "t0ken", "Bearer abc", "k3y"})
    CHECK_MESSAGE(json.find(secret) == std::string::npos, secret);
}

TEST_CASE("the effective configuration masks the credentials of route and revert URLs") {
  auto r = load_with(
      {"http.routes.crm.url=http://user:S3cretPass@127.0.0.1:1/crm?api_key=TOPSECRET",
       "http.routes.crm.revert.url=http://user:Undo9Pass@127.0.0.1:1/crm/{id}",
       "http.routes.crm.revert.method=DELETE", "http.routes.crm.revert.extract.id=response:$.id",
       R"(http.fanout.OrderCreated=["crm"])"});
  const auto& text = r.effective_json;
  CHECK(loaded(r).http.destinations.at("crm").routes.at(0).url.find("S3cretPass") !=
        std::string::npos);
  CHECK(text.find("http://user:***@127.0.0.1:1/crm?api_key=***") != std::string::npos);
  CHECK(text.find("http://user:***@127.0.0.1:1/crm/{id}") != std::string::npos);
  for (const char* secret : {"S3cretPass", "TOPSECRET", "Undo9Pass"})
    CHECK_MESSAGE(text.find(secret) == std::string::npos, secret);
}

TEST_CASE("an empty admin token stays visible as empty in the effective configuration") {
  auto r = load_with({"database.url=host=db password=hunter2"});
  CHECK(r.effective_json.find("\"token\": \"\"") != std::string::npos);
  CHECK(r.effective_json.find("host=db password=***") != std::string::npos);
}

TEST_CASE("process_environment reads the process environment") {
  REQUIRE(::setenv("OUTBOXD_CONF_TEST_VARIABLE", "a=b", 1) == 0);
  auto environment = process_environment();
  ::unsetenv("OUTBOXD_CONF_TEST_VARIABLE");
  CHECK(environment.at("OUTBOXD_CONF_TEST_VARIABLE") == "a=b");
}

TEST_CASE("maxResponseBytes defaults to 1 MiB and must be a positive integer") {
  auto defaults = load_with({});
  CHECK(loaded(defaults).http.destinations.at("inventory").max_response_bytes == 1048576);
  auto r = load_with({"http.routes.inventory.maxResponseBytes=4096"});
  CHECK(loaded(r).http.destinations.at("inventory").max_response_bytes == 4096);
  CHECK_ERROR(load_file(R"({"http": {"routes": {"inventory": {"maxResponseBytes": -1}}}})"),
              "http.routes.inventory.maxResponseBytes must be > 0, got -1");
  CHECK_ERROR(load_file(R"({"http": {"routes": {"inventory": {"maxResponseBytes": 0}}}})"),
              "http.routes.inventory.maxResponseBytes must be > 0, got 0");
  CHECK_ERROR(load_file(R"({"http": {"routes": {"inventory": {"maxResponseBytes": "1MB"}}}})"),
              "http.routes.inventory.maxResponseBytes must be an integer, got \"1MB\"");
}

TEST_CASE("tls: files are checked at load time, certFile and keyFile come together") {
  temp_dir dir;
  auto pem = dir.write("ok.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
  auto not_pem = dir.write("not.pem", "hello");
  auto tls = [](const std::string& body) {
    return R"({"http": {"routes": {"inventory": {"tls": )" + body + "}}}}";
  };

  auto r = load_file(tls(R"({"caFile": ")" + pem + R"(", "certFile": ")" + pem +
                         R"(", "keyFile": ")" + pem +
                         R"(", "serverName": "inventory.internal", "insecureSkipVerify": false})"));
  const auto& t = loaded(r).http.destinations.at("inventory").tls;
  CHECK(t.ca_file == pem);
  CHECK(t.cert_file == pem);
  CHECK(t.key_file == pem);
  CHECK(t.server_name == "inventory.internal");
  CHECK_FALSE(t.insecure_skip_verify);

  auto missing = dir.path("missing.pem");
  CHECK_ERROR(load_file(tls(R"({"caFile": ")" + missing + R"("})")),
              "http.routes.inventory.tls.caFile: cannot use " + missing +
                  ": No such file or directory");
  CHECK_ERROR(load_file(tls(R"({"caFile": "/tmp"})")),
              "http.routes.inventory.tls.caFile: cannot use /tmp: Is a directory");
  CHECK_ERROR(load_file(tls(R"({"keyFile": ")" + not_pem + R"(", "certFile": ")" + pem + R"("})")),
              "http.routes.inventory.tls.keyFile: cannot use " + not_pem + ": not a PEM file");
  CHECK_ERROR(load_file(tls(R"({"certFile": ")" + missing + R"(", "keyFile": ")" + pem + R"("})")),
              "http.routes.inventory.tls.certFile: cannot use " + missing);
  CHECK_ERROR(load_file(tls(R"({"certFile": ")" + pem + R"("})")),
              "http.routes.inventory.tls.keyFile is required with "
              "http.routes.inventory.tls.certFile");
  CHECK_ERROR(load_file(tls(R"({"keyFile": ")" + pem + R"("})")),
              "http.routes.inventory.tls.certFile is required with "
              "http.routes.inventory.tls.keyFile");
  CHECK_ERROR(load_file(tls(R"({"serverName": ""})")),
              "http.routes.inventory.tls.serverName must be a non-empty string");
  CHECK_ERROR(load_file(tls(R"({"insecureSkipVerify": "yes"})")),
              "http.routes.inventory.tls.insecureSkipVerify must be true or false");
  CHECK_ERROR(load_file(tls(R"({"caFiles": "x"})")),
              "unknown key http.routes.inventory.tls.caFiles (did you mean caFile?)");
  CHECK_ERROR(load_file(tls("true")), "http.routes.inventory.tls must be an object, got true");
}

TEST_CASE("a call timeout of zero is refused") {
  CHECK_ERROR(load_file(R"({"http": {"routes": {"inventory": {"timeout": "0s"}}}})"),
              "http.routes.inventory.timeout must be > 0, got \"0s\"");
}

TEST_CASE("start-up warnings: insecureSkipVerify") {
  auto shipped = start_up_warnings(loaded(load_with({})));
  CHECK(shipped.empty());

  auto insecure = start_up_warnings(loaded(
      load_file(R"({"http": {"routes": {"inventory": {"tls": {"insecureSkipVerify": true}}}}})")));
  REQUIRE(insecure.size() == 1);
  CHECK(insecure[0].rfind("http.routes.inventory.tls.insecureSkipVerify is true", 0) == 0);
}

TEST_CASE("a key given twice in one object of a configuration file is an error naming it") {
  CHECK_ERROR(load_file(R"({"outbox": {"poolSize": 2, "batchSize": 10, "poolSize": 8}})"),
              "outbox.poolSize is given more than once");
  CHECK_ERROR(load_file(R"({"http": {"routes": {"shipping": {"routes": [{"url": "http://a/x", )"
                        R"("url": "http://b/x"}]}}}})"),
              "http.routes.shipping.routes[0].url is given more than once");
  // The same key in two objects is two keys.
  auto r = load_file(R"({"outbox": {"poolSize": 2}, "dlq": {"maxRetries": 2},
                         "server": {"port": 8080}})");
  CHECK(r.errors.empty());
}

TEST_CASE("server.host is an address or a host name") {
  for (const char* good : {"0.0.0.0", "127.0.0.1", "::", "[::1]", "localhost", "outboxd-0.outboxd",
                           "api.example.com", "10.1.2.3"}) {
    CAPTURE(good);
    auto r = load_with({std::string("server.host=") + good, "auth.allowAnonymous=true"});
    CHECK(r.errors.empty());
  }
  CHECK_SET_ERROR("server.host=256.1.1.1",
                  "server.host must be an IPv4 or IPv6 address or a host name, got \"256.1.1.1\"");
  for (const char* bad : {"not a host", "-x.example", "x..y", "1.2.3", "exa_mple.com", "a.b."}) {
    CAPTURE(bad);
    auto r = load_with({std::string("server.host=") + bad});
    REQUIRE_FALSE(r.errors.empty());
    CHECK(r.errors[0].find("server.host must be an IPv4 or IPv6 address") != std::string::npos);
    CHECK(all_errors(r).find("reached from other machines") == std::string::npos);
  }
}

TEST_CASE("start-up warnings: a call timeout a stop would not wait for") {
  CHECK(start_up_warnings(loaded(load_with({"http.routes.inventory.timeout=5s"}))).empty());
  auto slow = start_up_warnings(loaded(load_with({"http.routes.inventory.timeout=25s"})));
  REQUIRE(slow.size() == 1);
  CHECK(slow[0].rfind("http.routes.inventory.timeout (25000ms) is longer than a stop waits for a "
                      "call in flight",
                      0) == 0);
  CHECK(slow[0].find("set outbox.shutdownTimeout to at least twice the timeout") !=
        std::string::npos);
  CHECK(slow[0].find("three quarters for a delivery: 5000ms for a revert here)") !=
        std::string::npos); // what a stop waits, not outbox.shutdownTimeout itself
  CHECK(start_up_warnings(
            loaded(load_with({"http.routes.inventory.timeout=25s", "outbox.shutdownTimeout=50s"})))
            .empty());
  // A destination without a revert is only ever delivered to: a stop waits three quarters.
  auto delivery = start_up_warnings(
      loaded(load_with({"http.routes.fraudCheck.timeout=20s", "outbox.shutdownTimeout=20s"})));
  REQUIRE(delivery.size() == 1);
  CHECK(delivery[0].find("15000ms for a delivery, it has no revert here)") != std::string::npos);
  CHECK(delivery[0].find("set outbox.shutdownTimeout to at least 4/3 of the timeout") !=
        std::string::npos);
  CHECK(start_up_warnings(
            loaded(load_with({"http.routes.fraudCheck.timeout=14s", "outbox.shutdownTimeout=20s"})))
            .empty());
}

TEST_CASE("a call timeout must be shorter than the lease of its event") {
  CHECK_SET_ERROR("outbox.leaseTimeout=5s",
                  "http.routes.inventory.timeout (5000ms) must be shorter than outbox.leaseTimeout "
                  "(5000ms)");
  CHECK_SET_ERROR(
      "http.routes.billing.timeout=2m",
      "http.routes.billing.timeout (120000ms) must be shorter than outbox.leaseTimeout");
  auto r = load_with({"outbox.leaseTimeout=3s", "http.routes.inventory.timeout=2s",
                      "http.routes.fraudCheck.timeout=2s", "http.routes.shipping.timeout=2s",
                      "http.routes.billing.timeout=2s", "http.routes.notifications.timeout=2s"});
  CHECK(r.errors.empty());
}

TEST_CASE("circuit breaker, limits and retry budget per destination") {
  auto r = load_with(
      {"http.routes.billing.circuitBreaker.failureThreshold=2",
       "http.routes.billing.circuitBreaker.openFor=1s",
       "http.routes.billing.circuitBreaker.maxOpenFor=45s", "http.routes.billing.maxConcurrency=4",
       "http.routes.billing.ratePerSecond=2.5", "http.routes.billing.maxRetries=100",
       "http.routes.billing.retryFor=2h", "http.routes.shipping.circuitBreaker.enabled=false"});
  const auto& s = loaded(r);
  const auto& billing = s.http.destinations.at("billing");
  CHECK(billing.breaker.failure_threshold == 2);
  CHECK(billing.breaker.open_for == 1s);
  CHECK(billing.breaker.max_open_for == 45s);
  CHECK(billing.max_concurrency == 4);
  CHECK(billing.rate_per_second == 2.5);
  CHECK(billing.max_retries == 100);
  CHECK(billing.retry_for == std::chrono::hours(2));
  CHECK_FALSE(s.http.destinations.at("shipping").breaker.enabled);

  CHECK_SET_ERROR("http.routes.billing.circuitBreaker.failureThreshold=0",
                  "http.routes.billing.circuitBreaker.failureThreshold must be > 0, got 0");
  CHECK_SET_ERROR("http.routes.billing.circuitBreaker.openFor=0s",
                  "http.routes.billing.circuitBreaker.openFor must be > 0");
  CHECK_SET_ERROR("http.routes.billing.circuitBreaker.maxOpenFor=1s",
                  "http.routes.billing.circuitBreaker.maxOpenFor must be >= "
                  "http.routes.billing.circuitBreaker.openFor (2000ms), got 1000ms");
  CHECK_SET_ERROR("http.routes.billing.circuitBreaker.tripAfter=3",
                  "unknown key http.routes.billing.circuitBreaker.tripAfter");
  CHECK_SET_ERROR("http.routes.billing.maxConcurrency=-1",
                  "http.routes.billing.maxConcurrency must be between 0 and 100000, got -1");
  CHECK_SET_ERROR("http.routes.billing.ratePerSecond=-0.5",
                  "http.routes.billing.ratePerSecond must be between 0 and 1000000, got -0.5");
  CHECK_SET_ERROR("http.routes.billing.ratePerSecond=\"fast\"",
                  "http.routes.billing.ratePerSecond must be a number");
  CHECK_SET_ERROR("http.routes.billing.maxRetries=-1",
                  "http.routes.billing.maxRetries must be between 0 and 1000, got -1");
}

TEST_CASE("a retry budget in time must allow at least one backoff") {
  CHECK_SET_ERROR("outbox.retryFor=500ms", "outbox.retryFor (500ms) must be at least "
                                           "outbox.backoff.base (1000ms)");
  CHECK_SET_ERROR("dlq.retryFor=0s", "dlq.retryFor must be > 0");
  CHECK_SET_ERROR("http.routes.billing.retryFor=10ms",
                  "http.routes.billing.retryFor (10ms) must be at least outbox.backoff.base");
  CHECK_SET_ERROR("outbox.retryFor=forever", "outbox.retryFor must be a duration");
  CHECK(load_with({"outbox.retryFor=1s", "dlq.retryFor=10m"}).errors.empty());
}

TEST_CASE("auth.tokens load with their roles, from the file or OUTBOXD_AUTH_TOKENS") {
  const std::string tokens = R"([{"name":"dash","role":"read","sha256":")" + std::string(64, 'a') +
                             R"("},{"name":"ops","role":"admin","sha256":")" +
                             std::string(64, 'B') + R"("}])";
  auto r = load_with({}, {{"OUTBOXD_AUTH_TOKENS", tokens}});
  const auto& s = loaded(r);
  REQUIRE(s.auth.tokens.size() == 2);
  CHECK(s.auth.tokens[0].name == "dash");
  CHECK(s.auth.tokens[0].granted == role::read);
  CHECK(s.auth.tokens[0].sha256[0] == 0xaa);
  CHECK(s.auth.tokens[1].granted == role::admin);
  CHECK(s.auth.tokens[1].sha256[31] == 0xbb);
  CHECK_FALSE(s.auth.allow_anonymous);
  CHECK(s.auth.metrics_role == role::read);
  // The effective configuration shows which hash, never all of it.
  CHECK(r.effective_json.find(std::string(64, 'a')) == std::string::npos);
  CHECK(r.effective_json.find("aaaaaaaa...") != std::string::npos);

  // Compose passes unset variables through empty: an empty value leaves a non-string key alone.
  auto empty = load_with({}, {{"OUTBOXD_AUTH_TOKENS", ""},
                              {"OUTBOXD_AUTH_ALLOWANONYMOUS", ""},
                              {"OUTBOXD_OUTBOX_POOLSIZE", ""}});
  CHECK(loaded(empty).auth.tokens.empty());
  CHECK(loaded(empty).outbox.pool_size == 3);

  auto none = load_with({"auth.metricsRole=none", "auth.anonymousRole=write"});
  CHECK_FALSE(loaded(none).auth.metrics_role.has_value());
  CHECK(loaded(none).auth.anonymous_role == role::write);
}

TEST_CASE("bad auth settings are refused naming the key, without repeating a token") {
  auto with_tokens = [](const std::string& json) {
    return load_with({}, {{"OUTBOXD_AUTH_TOKENS", json}});
  };
  const std::string hash(64, 'c');
  CHECK_ERROR(with_tokens(R"([{"name":"x","role":"root","sha256":")" + hash + R"("}])"),
              "auth.tokens[0].role must be one of read write admin");
  CHECK_ERROR(with_tokens(R"([{"name":"x","sha256":")" + hash + R"("}])"),
              "auth.tokens[0].role is missing");
  CHECK_ERROR(with_tokens(R"([{"name":"x","role":"read","sha256":"abc"}])"),
              "auth.tokens[0].sha256 must be 64 hex digits");
  CHECK_ERROR(
      with_tokens(R"([{"name":"x","role":"read","sha256":")" + std::string(64, 'g') + R"("}])"),
      "auth.tokens[0].sha256 must be 64 hex digits");
  CHECK_ERROR(with_tokens(R"([{"role":"read","sha256":")" + hash + R"("}])"),
              "auth.tokens[0].name is missing");
  CHECK_ERROR(with_tokens(R"([{"name":"a","role":"read","sha256":")" + hash +
                          R"("},{"name":"b","role":"admin","sha256":")" + hash + R"("}])"),
              "auth.tokens[1] has the same sha256 as the token named \"a\"");
  CHECK_ERROR(with_tokens(R"([{"name":"a","role":"read","sha256":")" + hash + R"(","secret":1}])"),
              "unknown key auth.tokens[0].secret");
  // A token pasted where the list belongs: refused, and the error does not repeat it.
  auto pasted = with_tokens("my-plain-secret-token");
  CHECK_ERROR(pasted, "auth.tokens must be an array");
  for (const auto& e : pasted.errors)
    CHECK(e.find("my-plain-secret-token") == std::string::npos);
  CHECK(pasted.effective_json.find("my-plain-secret-token") == std::string::npos);
  CHECK_SET_ERROR("auth.metricsRole=everyone", "auth.metricsRole must be one of none read");
  CHECK_SET_ERROR("auth.anonymousRole=none", "auth.anonymousRole must be one of read write admin");
  CHECK_SET_ERROR("auth.allowAnonymous=maybe", "auth.allowAnonymous must be true or false");
}

TEST_CASE("a reachable address without tokens is refused unless anonymous access is explicit") {
  for (const char* host :
       {"0.0.0.0", "::", "10.1.2.3", "example.com", "127.internal.example", "127.0.0.1.nip.io"}) {
    CAPTURE(host);
    CHECK_ERROR(load_with({std::string("server.host=") + host}),
                "can be reached from other machines and no token is configured");
    CHECK(load_with({std::string("server.host=") + host, "auth.allowAnonymous=true"}).value);
    CHECK(load_with({std::string("server.host=") + host, "admin.token=t"}).value);
    CHECK(load_with({std::string("server.host=") + host},
                    {{"OUTBOXD_AUTH_TOKENS", R"([{"name":"a","role":"read","sha256":")" +
                                                 std::string(64, 'd') + R"("}])"}})
              .value);
  }
  for (const char* host : {"127.0.0.1", "127.0.0.2", "::1", "localhost"}) {
    CAPTURE(host);
    CHECK(load_with({std::string("server.host=") + host}).value);
  }
  auto anonymous = load_with({"server.host=0.0.0.0", "auth.allowAnonymous=true"});
  auto warnings = start_up_warnings(loaded(anonymous));
  CHECK(std::any_of(warnings.begin(), warnings.end(), [](const std::string& w) {
    return w.find("is served to anyone without a token") != std::string::npos;
  }));
}

TEST_CASE("server.allowedHosts takes host names, from the file, --set or the environment") {
  CHECK(loaded(load_with({})).server.allowed_hosts.empty());
  auto set = load_with({R"(server.allowedHosts=["outboxd","Ops.Example.COM","order_api"])"});
  CHECK(loaded(set).server.allowed_hosts ==
        std::vector<std::string>{"outboxd", "ops.example.com", "order_api"});
  auto env = load_with({}, {{"OUTBOXD_SERVER_ALLOWEDHOSTS", R"(["outboxd-simulator"])"}});
  CHECK(loaded(env).server.allowed_hosts == std::vector<std::string>{"outboxd-simulator"});
  auto file = load_file(R"({"server": {"allowedHosts": ["simulator"]}})");
  CHECK(loaded(file).server.allowed_hosts == std::vector<std::string>{"simulator"});
  // An empty environment variable means "not set", as for the other keys.
  CHECK(loaded(load_with({}, {{"OUTBOXD_SERVER_ALLOWEDHOSTS", ""}})).server.allowed_hosts.empty());

  for (const char* bad : {"5", R"("outboxd")", R"({"host":"outboxd"})"}) {
    CAPTURE(bad);
    CHECK_SET_ERROR(std::string("server.allowedHosts=") + bad,
                    "server.allowedHosts must be an array of host names");
  }
  CHECK_ERROR(load_with({}, {{"OUTBOXD_SERVER_ALLOWEDHOSTS", "outboxd,simulator"}}),
              "server.allowedHosts must be an array of host names");
  for (const char* bad :
       {R"("")", R"("http://outboxd")", R"("outboxd:9000")", R"("*.example.com")",
        R"("outboxd/api")", R"("outboxd.")", R"(" outboxd")", R"("[::1]:80")", "5", "null"}) {
    CAPTURE(bad);
    CHECK_SET_ERROR(std::string("server.allowedHosts=[\"ok\",") + bad + "]",
                    "server.allowedHosts[1] must be a host name");
  }
}

TEST_CASE("server.allowedOrigins and server.tls are checked at start") {
  auto ok =
      load_with({R"(server.allowedOrigins=["https://ops.example.com","http://LOCALHOST:3000"])"});
  CHECK(loaded(ok).server.allowed_origins ==
        std::vector<std::string>{"https://ops.example.com", "http://localhost:3000"});
  for (const char* bad : {"*", "https://ops.example.com/", "ftp://x", "https://", "null"}) {
    CAPTURE(bad);
    CHECK_ERROR(load_with({std::string(R"(server.allowedOrigins=[")") + bad + "\"]"}),
                "server.allowedOrigins[0] must be an origin");
  }
  CHECK_SET_ERROR("server.allowedOrigins=5", "server.allowedOrigins must be an array");
  CHECK_SET_ERROR("server.tls.certFile=/nonexistent/cert.pem",
                  "server.tls.certFile cannot be used");
  CHECK_ERROR(load_with({"server.tls.certFile=/etc/hostname"}), "not a PEM file");
  temp_dir dir;
  auto pem = dir.write("c.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
  CHECK_ERROR(load_with({"server.tls.certFile=" + pem}),
              "server.tls.certFile and server.tls.keyFile must be set together");
  CHECK_ERROR(load_with({"server.tls.clientCaFile=" + pem}),
              "server.tls.clientCaFile needs server.tls.certFile");
}
