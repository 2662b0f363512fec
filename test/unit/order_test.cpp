// The order aggregate: validation, state machine, engine outcomes, event payloads.
#include "domain/order.hpp"

#include <doctest/doctest.h>
#include <rapidjson/document.h>
#include <rapidjson/pointer.h>

using namespace outboxd::domain;

namespace {

rapidjson::Document parse(const char* json) {
  rapidjson::Document d;
  d.Parse(json);
  REQUIRE_FALSE(d.HasParseError());
  return d;
}

field_errors errors_of(const char* json) {
  auto d = parse(json);
  auto r = validate_new_order(d);
  REQUIRE(std::holds_alternative<field_errors>(r));
  return std::get<field_errors>(r);
}

bool names(const field_errors& errors, const std::string& field, const std::string& fragment) {
  for (const auto& e : errors)
    if (e.field == field && e.message.find(fragment) != std::string::npos)
      return true;
  return false;
}

new_order valid(const char* json) {
  auto d = parse(json);
  auto r = validate_new_order(d);
  REQUIRE(std::holds_alternative<new_order>(r));
  return std::get<new_order>(r);
}

} // namespace

TEST_CASE("a complete create request is accepted with exact cents") {
  auto o = valid(R"({"customerId":"C-1","totalAmount":99.99,"currency":"EUR",
                     "shippingType":"international","items":[{"sku":"A-1","quantity":2}]})");
  CHECK(o.customer_id == "C-1");
  CHECK(o.total_amount.cents == 9999);
  CHECK(o.currency == "EUR");
  CHECK(o.shipping == shipping_type::international);
  REQUIRE(o.items.size() == 1);
  CHECK(o.items[0].sku == "A-1");
  CHECK(o.items[0].quantity == 2);
}

TEST_CASE("currency defaults to USD and items to none") {
  auto o = valid(R"({"customerId":"C-1","totalAmount":0.1,"shippingType":"domestic"})");
  CHECK(o.currency == "USD");
  CHECK(o.total_amount.cents == 10);
  CHECK(o.items.empty());
}

TEST_CASE("the largest amount NUMERIC(12,2) holds is accepted and one cent more is not") {
  CHECK(valid(R"({"customerId":"C","totalAmount":9999999999.99,"shippingType":"domestic"})")
            .total_amount.cents == max_amount_cents);
  CHECK(
      names(errors_of(R"({"customerId":"C","totalAmount":10000000000,"shippingType":"domestic"})"),
            "totalAmount", "at most"));
}

TEST_CASE("missing required fields are each named") {
  auto e = errors_of("{}");
  CHECK(names(e, "customerId", "is required"));
  CHECK(names(e, "totalAmount", "is required"));
  CHECK(names(e, "shippingType", "is required"));
}

TEST_CASE("wrong types are refused naming the field and the type given") {
  auto e = errors_of(R"({"customerId":7,"totalAmount":"99.99","shippingType":true,"items":{}})");
  CHECK(names(e, "customerId", "must be a string, got a number"));
  CHECK(names(e, "totalAmount", "must be a number, got a string"));
  CHECK(names(e, "shippingType", "must be a string, got a boolean"));
  CHECK(names(e, "items", "must be an array, got an object"));
}

TEST_CASE("zero, negative, sub-cent and fractional-cent amounts are refused") {
  CHECK(names(errors_of(R"({"customerId":"C","totalAmount":0,"shippingType":"domestic"})"),
              "totalAmount", "greater than 0"));
  CHECK(names(errors_of(R"({"customerId":"C","totalAmount":-5,"shippingType":"domestic"})"),
              "totalAmount", "greater than 0"));
  CHECK(names(errors_of(R"({"customerId":"C","totalAmount":0.001,"shippingType":"domestic"})"),
              "totalAmount", "2 decimal places"));
  CHECK(names(errors_of(R"({"customerId":"C","totalAmount":12.345,"shippingType":"domestic"})"),
              "totalAmount", "2 decimal places"));
}

TEST_CASE("a third decimal is refused at every magnitude, and every two-decimal amount is exact") {
  for (const char* amount : {"1234567.891", "5000000.005", "9999999.999", "123456789.011",
                             "9999999999.991", "100000000.5001"}) {
    CAPTURE(amount);
    auto body =
        std::string(R"({"customerId":"C","shippingType":"domestic","totalAmount":)") + amount + "}";
    CHECK(names(errors_of(body.c_str()), "totalAmount", "2 decimal places"));
  }
  // Whole ranges of cents at small and at the largest magnitudes, as a client writes them.
  for (std::int64_t base : {std::int64_t{0}, std::int64_t{123456700}, std::int64_t{99999900000},
                            max_amount_cents - 20000}) {
    for (std::int64_t cents = base + 1; cents <= base + 20000; ++cents) {
      auto body = std::string(R"({"customerId":"C","shippingType":"domestic","totalAmount":)") +
                  std::to_string(cents / 100) + "." + (cents % 100 < 10 ? "0" : "") +
                  std::to_string(cents % 100) + "}";
      auto d = parse(body.c_str());
      auto r = validate_new_order(d);
      REQUIRE_MESSAGE(std::holds_alternative<new_order>(r), body);
      REQUIRE(std::get<new_order>(r).total_amount.cents == cents);
    }
  }
}

TEST_CASE("a field given twice is refused, at the top and in an item") {
  auto e =
      errors_of(R"({"customerId":"A","customerId":"B","totalAmount":1,"totalAmount":2,)"
                R"("shippingType":"domestic","items":[{"sku":"X","quantity":1,"quantity":9}]})");
  CHECK(names(e, "customerId", "given more than once"));
  CHECK(names(e, "totalAmount", "given more than once"));
  CHECK(names(e, "items[0].quantity", "given more than once"));
  CHECK(e.size() == 3);
}

TEST_CASE("unknown shipping types, bad currencies and unknown fields are refused") {
  auto e = errors_of(
      R"({"customerId":"C","totalAmount":1,"shippingType":"express","currency":"usd","colour":"red"})");
  CHECK(names(e, "shippingType", "\"express\""));
  CHECK(names(e, "currency", "3-letter"));
  CHECK(names(e, "colour", "not a known field"));
}

TEST_CASE("customer ids must be non-blank, at most 255 characters and free of control characters") {
  CHECK(names(errors_of(R"({"customerId":"  ","totalAmount":1,"shippingType":"domestic"})"),
              "customerId", "must not be empty"));
  std::string long_id(256, 'x');
  auto body = R"({"customerId":")" + long_id + R"(","totalAmount":1,"shippingType":"domestic"})";
  CHECK(names(errors_of(body.c_str()), "customerId", "at most 255"));
  CHECK(names(errors_of(R"({"customerId":"a\nb","totalAmount":1,"shippingType":"domestic"})"),
              "customerId", "control characters"));
  // 255 characters of three bytes each is still 255 characters.
  std::string wide;
  for (int i = 0; i < 255; ++i)
    wide += "\xE2\x82\xAC";
  auto ok = R"({"customerId":")" + wide + R"(","totalAmount":1,"shippingType":"domestic"})";
  CHECK(valid(ok.c_str()).customer_id == wide);
}

TEST_CASE("items are checked one by one with their index") {
  auto e = errors_of(R"({"customerId":"C","totalAmount":1,"shippingType":"domestic",
                         "items":[{"sku":"A","quantity":1},{"sku":"","quantity":0},5,{"qty":1}]})");
  CHECK(names(e, "items[1].sku", "must not be empty"));
  CHECK(names(e, "items[1].quantity", "between 1 and"));
  CHECK(names(e, "items[2]", "must be an object"));
  CHECK(names(e, "items[3].qty", "not a known field"));
  CHECK(names(e, "items[3].sku", "is required"));
}

TEST_CASE("a body that is not an object is refused as a whole") {
  auto d = parse("[1,2]");
  auto r = validate_new_order(d);
  REQUIRE(std::holds_alternative<field_errors>(r));
  CHECK(std::get<field_errors>(r)[0].message.find("JSON object") != std::string::npos);
}

TEST_CASE("fingerprints tell equal requests from different ones") {
  auto a = valid(R"({"customerId":"C","totalAmount":1,"shippingType":"domestic"})");
  auto b = valid(R"({"customerId":"C","totalAmount":1.00,"shippingType":"domestic"})");
  auto c = valid(R"({"customerId":"C","totalAmount":1.01,"shippingType":"domestic"})");
  CHECK(fingerprint(a) == fingerprint(b));
  CHECK(fingerprint(a) != fingerprint(c));
}

TEST_CASE("decimal text round-trips through money") {
  CHECK(parse_decimal("99.99")->cents == 9999);
  CHECK(parse_decimal("100")->cents == 10000);
  CHECK(parse_decimal("0.5")->cents == 50);
  CHECK_FALSE(parse_decimal("1.234"));
  CHECK_FALSE(parse_decimal("abc"));
  CHECK_FALSE(parse_decimal(""));
  CHECK(to_decimal({9999}) == "99.99");
  CHECK(to_decimal({5}) == "0.05");
}

TEST_CASE("status updates accept only SHIPPED and DELIVERED") {
  auto ship = parse(R"({"status":"SHIPPED"})");
  CHECK(std::get<order_command>(validate_status_update(ship)) == order_command::ship);
  auto deliver = parse(R"({"status":"DELIVERED"})");
  CHECK(std::get<order_command>(validate_status_update(deliver)) == order_command::deliver);
  for (const char* bad : {R"({"status":"CANCELLED"})", R"({"status":"shipped"})", R"({"status":1})",
                          R"({})", R"({"status":"SHIPPED","x":1})"}) {
    auto d = parse(bad);
    CHECK_MESSAGE(std::holds_alternative<field_errors>(validate_status_update(d)), bad);
  }
}

TEST_CASE("a cancel body is optional and its reason bounded") {
  CHECK(std::get<std::string>(validate_cancel(nullptr)) == "cancelled by user");
  auto given = parse(R"({"reason":"changed my mind"})");
  CHECK(std::get<std::string>(validate_cancel(&given)) == "changed my mind");
  auto bad = parse(R"({"reason":5})");
  CHECK(std::holds_alternative<field_errors>(validate_cancel(&bad)));
  std::string long_reason = R"({"reason":")" + std::string(501, 'r') + R"("})";
  auto too_long = parse(long_reason.c_str());
  CHECK(std::holds_alternative<field_errors>(validate_cancel(&too_long)));
}

TEST_CASE("every user command in every state follows the state machine") {
  using s = order_status;
  using k = decision::kind;
  struct row {
    s from;
    order_command cmd;
    k expected;
    s next;
  };
  const row table[] = {
      {s::confirmed, order_command::ship, k::apply, s::shipped},
      {s::shipped, order_command::ship, k::already_done, s::shipped},
      {s::pending, order_command::ship, k::conflict, s::pending},
      {s::delivered, order_command::ship, k::conflict, s::delivered},
      {s::cancelled, order_command::ship, k::conflict, s::cancelled},
      {s::shipped, order_command::deliver, k::apply, s::delivered},
      {s::delivered, order_command::deliver, k::already_done, s::delivered},
      {s::confirmed, order_command::deliver, k::conflict, s::confirmed},
      {s::pending, order_command::cancel, k::apply, s::cancelling},
      {s::confirmed, order_command::cancel, k::apply, s::cancelling},
      {s::cancelling, order_command::cancel, k::already_done, s::cancelling},
      {s::cancelled, order_command::cancel, k::already_done, s::cancelled},
      {s::shipped, order_command::cancel, k::conflict, s::shipped},
      {s::failed, order_command::cancel, k::conflict, s::failed},
      {s::attention, order_command::cancel, k::conflict, s::attention},
      {s::delivered, order_command::remove, k::apply, s::delivered},
      {s::failed, order_command::remove, k::apply, s::failed},
      {s::cancelled, order_command::remove, k::apply, s::cancelled},
      {s::pending, order_command::remove, k::conflict, s::pending},
      {s::confirmed, order_command::remove, k::conflict, s::confirmed},
      {s::attention, order_command::remove, k::conflict, s::attention},
      {s::cancelling, order_command::remove, k::conflict, s::cancelling},
  };
  for (const auto& r : table) {
    auto d = decide(r.from, r.cmd);
    CAPTURE(to_string(r.from));
    CAPTURE(static_cast<int>(r.cmd));
    CHECK(d.what == r.expected);
    CHECK(d.next == r.next);
    if (r.expected == k::conflict)
      CHECK(d.reason.find(std::string(to_string(r.from))) != std::string::npos);
  }
}

TEST_CASE("engine outcomes move orders through the same state machine") {
  using s = order_status;
  using o = engine_outcome;
  CHECK(apply_outcome(s::pending, o::fanout_succeeded) == s::confirmed);
  CHECK(apply_outcome(s::cancelling, o::fanout_succeeded) == s::cancelling);
  CHECK(apply_outcome(s::pending, o::fanout_compensated) == s::failed);
  CHECK(apply_outcome(s::cancelling, o::fanout_compensated) == s::cancelling);
  CHECK(apply_outcome(s::attention, o::fanout_compensated) == s::failed);
  CHECK(apply_outcome(s::cancelling, o::cancellation_compensated) == s::cancelled);
  CHECK(apply_outcome(s::attention, o::cancellation_compensated) == s::cancelled);
  CHECK(apply_outcome(s::pending, o::compensation_failed) == s::attention);
  CHECK(apply_outcome(s::cancelling, o::compensation_failed) == s::attention);
  CHECK(apply_outcome(s::delivered, o::compensation_failed) == s::delivered);
}

TEST_CASE("only an order nothing can change any more is settled: its audit may go") {
  using s = order_status;
  std::string settled;
  for (auto status : all_order_statuses)
    if (is_settled(status))
      settled += std::string(settled.empty() ? "" : ",") + std::string(to_string(status));
  CHECK(settled == "DELIVERED,FAILED,CANCELLED");
  CHECK_FALSE(is_settled(s::attention)); // an operator's redrive may still compensate it
}

TEST_CASE("OrderCreated carries one payload per destination, each with only what it needs") {
  order o;
  o.id = 42;
  o.customer_id = "C-\"7\"";
  o.total_amount = {12345};
  o.currency = "EUR";
  o.shipping = shipping_type::international;
  auto e = order_created_event(o, {{"SKU-1", 3}});
  CHECK(e.aggregate_type == "order");
  CHECK(e.aggregate_id == "42");
  CHECK(e.event_type == "OrderCreated");
  CHECK(e.idempotency_key == "order:42:OrderCreated");
  auto d = parse(e.payloads_json.c_str());
  auto at = [&](const char* p) { return rapidjson::Pointer(p).Get(d); };
  CHECK(d.MemberCount() == 5);
  CHECK(at("/inventory/payload/orderId")->GetInt64() == 42);
  CHECK(at("/inventory/payload/totalAmount")->GetDouble() == doctest::Approx(123.45));
  CHECK(std::string(at("/inventory/payload/shippingType")->GetString()) == "international");
  CHECK(std::string(at("/inventory/payload/items/0/sku")->GetString()) == "SKU-1");
  CHECK(at("/inventory/payload/items/0/quantity")->GetInt() == 3);
  CHECK(at("/inventory/payload/customerId") == nullptr);
  CHECK(std::string(at("/fraudCheck/payload/customerId")->GetString()) == "C-\"7\"");
  CHECK(at("/fraudCheck/payload/orderId")->GetInt64() == 42);
  CHECK(std::string(at("/shipping/payload/shippingType")->GetString()) == "international");
  CHECK(at("/shipping/payload/orderId")->GetInt64() == 42);
  CHECK(at("/billing/payload/amount")->GetDouble() == doctest::Approx(123.45));
  CHECK(std::string(at("/billing/payload/currency")->GetString()) == "EUR");
  CHECK(at("/billing/payload/customerId") == nullptr);
  CHECK(std::string(at("/shipping/pathParams/orderId")->GetString()) == "42");
  // Any other destination gets the whole order and the same path parameters.
  CHECK(at("/*/payload/orderId")->GetInt64() == 42);
  CHECK(std::string(at("/*/payload/customerId")->GetString()) == "C-\"7\"");
  CHECK(at("/*/payload/totalAmount")->GetDouble() == doctest::Approx(123.45));
  CHECK(std::string(at("/*/payload/currency")->GetString()) == "EUR");
  CHECK(std::string(at("/*/payload/shippingType")->GetString()) == "international");
  CHECK(at("/*/payload/items/0/quantity")->GetInt() == 3);
  CHECK(std::string(at("/*/pathParams/customerId")->GetString()) == "C-\"7\"");
}

TEST_CASE("status updates and cancellations have per-order, per-transition idempotency keys") {
  auto u = order_status_updated_event(7, order_status::confirmed, order_status::shipped);
  CHECK(u.event_type == "OrderStatusUpdated");
  CHECK(u.idempotency_key == "order:7:OrderStatusUpdated:SHIPPED");
  auto d = parse(u.payloads_json.c_str());
  CHECK(std::string(rapidjson::Pointer("/notifications/payload/oldStatus").Get(d)->GetString()) ==
        "CONFIRMED");
  CHECK(std::string(rapidjson::Pointer("/notifications/payload/newStatus").Get(d)->GetString()) ==
        "SHIPPED");
  CHECK(std::string(rapidjson::Pointer("/*/payload/newStatus").Get(d)->GetString()) == "SHIPPED");
  CHECK(std::string(rapidjson::Pointer("/*/pathParams/orderId").Get(d)->GetString()) == "7");
  auto c = order_cancellation_event(7, "changed \"my\" mind");
  CHECK(c.event_type == "!OrderCreated");
  CHECK(c.idempotency_key == "order:7:!OrderCreated");
  CHECK(c.payloads_json == R"({"reason":"changed \"my\" mind"})");
}

TEST_CASE("status names round-trip") {
  for (auto s : {order_status::pending, order_status::confirmed, order_status::shipped,
                 order_status::delivered, order_status::failed, order_status::cancelling,
                 order_status::cancelled, order_status::attention})
    CHECK(parse_order_status(to_string(s)) == s);
  CHECK_FALSE(parse_order_status("pending"));
}
