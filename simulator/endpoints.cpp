// The endpoint table and the few values a response computes from its call. Everything literal
// in a response lives in simulator/responses.json.
#include "simulator/endpoints.hpp"

#include <charconv>
#include <cmath>
#include <fmt/format.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace outboxd::simulator {
namespace {

using rapidjson::Value;

constexpr std::int64_t day_ms = 24 * 60 * 60 * 1000;
constexpr std::int64_t reservation_hold_ms = 15 * 60 * 1000;

std::optional<std::int64_t> parse_int(std::string_view s) {
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size())
    return std::nullopt;
  return v;
}

std::optional<double> parse_number(std::string_view s) {
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v))
    return std::nullopt;
  return v;
}

std::string_view string_of(const Value& v) {
  return {v.GetString(), v.GetStringLength()};
}

std::string compact(const Value& v) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  v.Accept(writer);
  return {buffer.GetString(), buffer.GetSize()};
}

std::int64_t now_of(const body_values& v) {
  return parse_int(v.find("now")->text).value_or(0);
}

} // namespace

std::string show(const Value& v) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  v.Accept(writer);
  std::string text(buffer.GetString(), buffer.GetSize());
  return text.size() > 60 ? text.substr(0, 60) + "..." : text;
}

namespace {

void check_field(const Value& v, const field_rule& rule, domain::field_errors& errors) {
  std::string name = rule.name;
  auto wrong = [&](const char* expected) {
    errors.push_back({name, fmt::format("must be {}, got {}", expected, show(v))});
  };
  switch (rule.type) {
  case field_type::integer:
    if (!v.IsInt64() && !(v.IsString() && parse_int(string_of(v))))
      wrong("an integer");
    break;
  case field_type::identifier:
    if (!v.IsInt64() && !v.IsString())
      wrong("a string or an integer");
    break;
  case field_type::text:
    if (!v.IsString())
      wrong("a string");
    break;
  case field_type::number:
    if (!v.IsNumber() && !(v.IsString() && parse_number(string_of(v))))
      wrong("a number");
    break;
  case field_type::object:
    if (!v.IsObject())
      wrong("an object");
    break;
  case field_type::items:
    if (!v.IsArray()) {
      wrong("an array of {\"sku\", \"quantity\"} objects");
      break;
    }
    for (rapidjson::SizeType i = 0; i < v.Size(); ++i) {
      auto item = fmt::format("{}[{}]", name, i);
      const Value& e = v[i];
      if (!e.IsObject()) {
        errors.push_back({item, fmt::format("must be an object, got {}", show(e))});
        continue;
      }
      auto sku = e.FindMember("sku");
      if (sku != e.MemberEnd() && !sku->value.IsNull() && !sku->value.IsString())
        errors.push_back(
            {item + ".sku", fmt::format("must be a string, got {}", show(sku->value))});
      auto quantity = e.FindMember("quantity");
      if (quantity != e.MemberEnd() && !quantity->value.IsNull() && !quantity->value.IsInt())
        errors.push_back(
            {item + ".quantity", fmt::format("must be an integer, got {}", show(quantity->value))});
    }
    break;
  }
}

// --- body values, one function per response that computes something --------------------------

std::string reserve(const call_view& c, body_values& v, call_services& s) {
  v.set("orderId", c.integer_or("orderId", 0));
  v.set("shippingType", c.text_or("shippingType", "domestic"));
  v.set("expiresAt", now_of(v) + reservation_hold_ms);
  // The reserved items echo the request's, each with a drawn bin location.
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartArray();
  if (const Value* items = c.field("items"))
    for (const auto& item : items->GetArray()) {
      auto sku = item.FindMember("sku");
      auto quantity = item.FindMember("quantity");
      std::string sku_text = sku != item.MemberEnd() && sku->value.IsString()
                                 ? std::string(string_of(sku->value))
                                 : std::string("UNKNOWN");
      w.StartObject();
      w.Key("sku");
      w.String(sku_text.data(), static_cast<rapidjson::SizeType>(sku_text.size()));
      w.Key("quantity");
      w.Int(quantity != item.MemberEnd() && quantity->value.IsInt() ? quantity->value.GetInt() : 1);
      w.Key("reserved");
      w.Bool(true);
      auto bin = fmt::format("A{}-{}", s.draw(20), s.draw(50));
      w.Key("binLocation");
      w.String(bin.data(), static_cast<rapidjson::SizeType>(bin.size()));
      w.EndObject();
    }
  w.EndArray();
  v.set_raw("items", {buffer.GetString(), buffer.GetSize()});
  return {};
}

std::string fraud_check(const call_view& c, body_values& v, call_services&) {
  int score = c.how == mode::succeed ? 25 : risk_score(c.aggregate);
  bool low = score < 50;
  v.set("riskScore", score);
  v.set("riskLevel", low ? "low" : "high");
  v.set("velocityCheck", low ? "passed" : "flagged");
  return fmt::format(" (riskScore {})", score);
}

std::string shipment(const call_view& c, body_values& v, std::uint64_t tracking, int days) {
  v.set("orderId", c.integer_or("orderId", 0));
  v.set("customerId", c.text_or("customerId", "unknown"));
  v.set("tracking", std::to_string(tracking));
  const Value* address = c.field("address");
  v.set_raw("address", address && address->IsObject() ? compact(*address) : "{}");
  v.set("estimatedDelivery", now_of(v) + days * day_ms);
  return {};
}

std::string ship_domestic(const call_view& c, body_values& v, call_services& s) {
  return shipment(c, v, s.draw(100000000), 2);
}

std::string ship_international(const call_view& c, body_values& v, call_services& s) {
  return shipment(c, v, s.draw(1000000000), 7);
}

std::string payment(const call_view& c, body_values& v, call_services&) {
  v.set("amount", c.number_or("amount", 100.0));
  v.set("currency", c.text_or("currency", "USD"));
  return {};
}

std::string refund(const call_view& c, body_values& v, call_services& s) {
  v.set("refundId", s.make_id("RFD", v.find("id")->text));
  v.set("amount", c.number_or("amount", 0.0));
  v.set("currency", c.text_or("currency", "USD"));
  v.set("reason", c.text_or("reason", "unknown"));
  return {};
}

std::string notification(const call_view& c, body_values& v, call_services&) {
  v.set("orderId", c.integer_or("orderId", 0));
  return {};
}

// --- the table --------------------------------------------------------------------------------

std::vector<endpoint> make_endpoints() {
  using ft = field_type;
  const field_rule order_id{"orderId", ft::integer};
  const field_rule customer_id{"customerId", ft::text};
  const field_rule total_amount{"totalAmount", ft::number};
  const field_rule shipping_type{"shippingType", ft::text};
  const field_rule amount{"amount", ft::number};
  const field_rule currency{"currency", ft::text};
  const field_rule reason{"reason", ft::text};
  const field_rule required_order{"orderId", ft::integer, true};
  const field_rule new_status{"newStatus", ft::text, true};
  const std::vector<field_rule> shipment_fields = {
      order_id, customer_id, {"address", ft::object}, shipping_type, total_amount};
  const std::vector<field_rule> cancel_fields = {
      reason, customer_id, {"orderId", ft::identifier}, {"shipmentId", ft::text}};

  return {
      {.knob = "inventory.reserve",
       .path = "/api/inventory/reserve",
       .fields = {order_id, {"items", ft::items}, shipping_type, total_amount},
       .fail_retry_after = 4,
       .applies = forward_effect{.kind = "reservation", .id_prefix = "RES"},
       .body = "inventory.reserve",
       .fill = reserve},
      {.knob = "inventory.release",
       .method = http_method::del,
       .path = "/api/inventory",
       .revert_verb = "release",
       .needs_body = false,
       .fail_retry_after = 4,
       .reverts =
           revert_effect{.forward = "inventory.reserve", .id_prefix = "RES", .what = "reservation"},
       .body = "inventory.release"},
      {.knob = "fraudCheck.check",
       .path = "/api/fraud/check",
       .fields = {order_id, customer_id, total_amount},
       .fail_status = 429,
       .fail_retry_after = 10,
       .applies = forward_effect{.kind = "fraudCheck", .id_prefix = "FRAUD"},
       .body = "fraudCheck.check",
       .fill = fraud_check},
      {.knob = "shipping.domestic.create",
       .path = "/api/domestic-shipping",
       .fields = shipment_fields,
       .fail_retry_after = 3,
       .applies = forward_effect{.kind = "shipment", .id_prefix = "SHIP-DOM"},
       .body = "shipping.domestic.create",
       .fill = ship_domestic},
      {.knob = "shipping.domestic.cancel",
       .path = "/api/domestic-shipping",
       .revert_verb = "cancel",
       .fields = cancel_fields,
       .fail_retry_after = 2,
       .reverts = revert_effect{.forward = "shipping.domestic.create",
                                .id_prefix = "SHIP-DOM",
                                .what = "shipment"},
       .body = "shipping.domestic.cancel"},
      {.knob = "shipping.international.create",
       .path = "/api/international-shipping",
       .fields = shipment_fields,
       .fail_retry_after = 3,
       .applies = forward_effect{.kind = "shipment", .id_prefix = "SHIP-INTL"},
       .body = "shipping.international.create",
       .fill = ship_international},
      {.knob = "shipping.international.cancel",
       .path = "/api/international-shipping",
       .revert_verb = "cancel",
       .fields = cancel_fields,
       .fail_retry_after = 3,
       .reverts = revert_effect{.forward = "shipping.international.create",
                                .id_prefix = "SHIP-INTL",
                                .what = "shipment"},
       .body = "shipping.international.cancel"},
      {.knob = "billing.charge",
       .path = "/api/billing",
       .fields = {amount, currency},
       .fail_retry_after = 5,
       .applies = forward_effect{.kind = "charge", .id_prefix = "TXN"},
       .body = "billing.charge",
       .fill = payment},
      {.knob = "billing.refund",
       .path = "/api/billing",
       .revert_verb = "refund",
       .fields = {amount, currency, reason, {"transactionId", ft::text}},
       .fail_retry_after = 5,
       .reverts =
           revert_effect{.forward = "billing.charge", .id_prefix = "TXN", .what = "transaction"},
       .body = "billing.refund",
       .fill = refund},
      {.knob = "highValue.process",
       .path = "/api/high-value-processing",
       .fields = {amount, currency},
       .fail_retry_after = 5,
       .applies = forward_effect{.kind = "highValueProcessing", .id_prefix = "HV"},
       .body = "highValue.process",
       .fill = payment},
      {.knob = "highValue.cancel",
       .path = "/api/high-value-processing",
       .revert_verb = "cancel",
       .fields = {amount, currency, reason, {"processingId", ft::text}},
       .fail_retry_after = 5,
       .reverts = revert_effect{.forward = "highValue.process",
                                .id_prefix = "HV",
                                .what = "high-value processing"},
       .body = "highValue.cancel",
       .fill = refund},
      {.knob = "notifications.send",
       .path = "/api/notifications/shipping-confirmation",
       .fields = {required_order, new_status},
       .applies = forward_effect{.kind = "notification",
                                 .id_prefix = "NOTIF",
                                 .notification_type = "shipping_confirmation"},
       .body = "notifications.shipping_confirmation",
       .fill = notification},
      {.knob = "notifications.send",
       .path = "/api/notifications/review-request",
       .fields = {required_order, new_status},
       .applies = forward_effect{.kind = "notification",
                                 .id_prefix = "NOTIF",
                                 .notification_type = "review_request"},
       .body = "notifications.review_request",
       .fill = notification},
      {.knob = "notifications.send",
       .path = "/api/notifications/status-update",
       .fields = {required_order, {"oldStatus", ft::text, true}, new_status},
       .applies = forward_effect{.kind = "notification",
                                 .id_prefix = "NOTIF",
                                 .notification_type = "status_update"},
       .body = "notifications.status_update",
       .fill = notification},
  };
}

} // namespace

const Value* call_view::field(const char* name) const {
  if (!body || !body->IsObject())
    return nullptr;
  auto it = body->FindMember(name);
  return it == body->MemberEnd() || it->value.IsNull() ? nullptr : &it->value;
}

// The readers below run after validation, so a present field has the right type.
std::int64_t call_view::integer_or(const char* name, std::int64_t fallback) const {
  const Value* v = field(name);
  if (v && v->IsInt64())
    return v->GetInt64();
  if (v && v->IsString())
    return parse_int(string_of(*v)).value_or(fallback);
  return fallback;
}

std::string call_view::text_or(const char* name, std::string_view fallback) const {
  const Value* v = field(name);
  return std::string(v && v->IsString() ? string_of(*v) : fallback);
}

double call_view::number_or(const char* name, double fallback) const {
  const Value* v = field(name);
  if (v && v->IsNumber())
    return v->GetDouble();
  if (v && v->IsString())
    return parse_number(string_of(*v)).value_or(fallback);
  return fallback;
}

domain::field_errors check_fields(const call_view& c, const std::vector<field_rule>& rules) {
  domain::field_errors errors;
  for (const auto& rule : rules) {
    if (const Value* v = c.field(rule.name))
      check_field(*v, rule, errors);
    else if (rule.required)
      errors.push_back({rule.name, "is required"});
  }
  return errors;
}

const std::vector<endpoint>& endpoints() {
  static const std::vector<endpoint> table = make_endpoints();
  return table;
}

std::string failure_template(std::string_view knob, mode how) {
  // The reference's /fail sibling of the domestic cancel words its answer differently.
  if (how == mode::fail && reference_bodies().has(fmt::format("{} failed on /fail", knob)))
    return fmt::format("{} failed on /fail", knob);
  return fmt::format("{} failed", knob);
}

int risk_score(const std::string& aggregate) {
  auto id = parse_int(aggregate);
  return id && *id % 2 == 0 ? 25 : 75;
}

} // namespace outboxd::simulator
