// Order rules: validation, the state machine and event payloads. Pure functions only.
#include "domain/order.hpp"

#include "domain/names.hpp"
#include "domain/routing.hpp"

#include <array>
#include <cmath>
#include <fmt/format.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace outboxd::domain {
namespace {

constexpr name_table_entry<order_status> status_names[] = {
    {order_status::pending, "PENDING"},     {order_status::confirmed, "CONFIRMED"},
    {order_status::shipped, "SHIPPED"},     {order_status::delivered, "DELIVERED"},
    {order_status::failed, "FAILED"},       {order_status::cancelling, "CANCELLING"},
    {order_status::cancelled, "CANCELLED"}, {order_status::attention, "ATTENTION"}};

constexpr std::size_t max_customer_id_chars = 255;
constexpr std::size_t max_items = 100;
constexpr std::size_t max_sku_chars = 64;
constexpr int max_quantity = 10000;
constexpr std::size_t max_reason_chars = 500;

std::size_t utf8_length(std::string_view s) {
  std::size_t n = 0;
  for (unsigned char c : s)
    n += (c & 0xC0) != 0x80;
  return n;
}

bool has_control_characters(std::string_view s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7F)
      return true;
  return false;
}

bool blank(std::string_view s) {
  return s.find_first_not_of(" \t") == std::string_view::npos;
}

std::string_view json_type_name(const rapidjson::Value& v) {
  if (v.IsNull())
    return "null";
  if (v.IsBool())
    return "a boolean";
  if (v.IsNumber())
    return "a number";
  if (v.IsString())
    return "a string";
  if (v.IsArray())
    return "an array";
  return "an object";
}

std::string_view view(const rapidjson::Value& v) {
  return {v.GetString(), v.GetStringLength()};
}

/// Checks a required-or-optional text field; returns the text when valid.
std::optional<std::string> text_field(const rapidjson::Value& obj, const char* name,
                                      std::string field, std::size_t max_chars, bool required,
                                      field_errors& errors) {
  auto it = obj.FindMember(name);
  if (it == obj.MemberEnd()) {
    if (required)
      errors.push_back({field, "is required"});
    return std::nullopt;
  }
  if (!it->value.IsString()) {
    errors.push_back({field, fmt::format("must be a string, got {}", json_type_name(it->value))});
    return std::nullopt;
  }
  auto s = view(it->value);
  if (blank(s)) {
    errors.push_back({field, "must not be empty"});
    return std::nullopt;
  }
  if (utf8_length(s) > max_chars) {
    errors.push_back(
        {field, fmt::format("must be at most {} characters, got {}", max_chars, utf8_length(s))});
    return std::nullopt;
  }
  if (has_control_characters(s)) {
    errors.push_back({field, "must not contain control characters"});
    return std::nullopt;
  }
  return std::string(s);
}

/// Unknown fields, and known ones given twice: JSON leaves a repeated name to the reader (the
/// parser here keeps the first, many keep the last), so a proxy that checked one value could let
/// through a request that means another.
void refuse_unknown_fields(const rapidjson::Value& obj,
                           std::initializer_list<std::string_view> known, std::string_view prefix,
                           field_errors& errors) {
  std::array<int, 8> seen{}; // per known name, at most 8 of them
  for (const auto& m : obj.GetObject()) {
    auto name = view(m.name);
    std::size_t at = 0;
    while (at < known.size() && known.begin()[at] != name)
      ++at;
    if (at == known.size())
      errors.push_back({fmt::format("{}{}", prefix, name), "is not a known field"});
    else if (++seen.at(at) == 2)
      errors.push_back({fmt::format("{}{}", prefix, name), "is given more than once"});
  }
}

void validate_items(const rapidjson::Value& items, new_order& out, field_errors& errors) {
  if (!items.IsArray()) {
    errors.push_back({"items", fmt::format("must be an array, got {}", json_type_name(items))});
    return;
  }
  if (items.Size() > max_items) {
    errors.push_back(
        {"items", fmt::format("must have at most {} entries, got {}", max_items, items.Size())});
    return;
  }
  for (rapidjson::SizeType i = 0; i < items.Size(); ++i) {
    const auto& item = items[i];
    auto prefix = fmt::format("items[{}]", i);
    if (!item.IsObject()) {
      errors.push_back({prefix, fmt::format("must be an object, got {}", json_type_name(item))});
      continue;
    }
    refuse_unknown_fields(item, {"sku", "quantity"}, prefix + ".", errors);
    order_item parsed;
    if (auto sku = text_field(item, "sku", prefix + ".sku", max_sku_chars, true, errors))
      parsed.sku = *sku;
    auto q = item.FindMember("quantity");
    if (q == item.MemberEnd()) {
      errors.push_back({prefix + ".quantity", "is required"});
    } else if (!q->value.IsInt64()) {
      errors.push_back({prefix + ".quantity",
                        fmt::format("must be an integer, got {}", json_type_name(q->value))});
    } else if (q->value.GetInt64() < 1 || q->value.GetInt64() > max_quantity) {
      errors.push_back({prefix + ".quantity", fmt::format("must be between 1 and {}, got {}",
                                                          max_quantity, q->value.GetInt64())});
    } else {
      parsed.quantity = static_cast<int>(q->value.GetInt64());
    }
    out.items.push_back(std::move(parsed));
  }
}

void validate_amount(const rapidjson::Value& body, new_order& out, field_errors& errors) {
  auto it = body.FindMember("totalAmount");
  if (it == body.MemberEnd()) {
    errors.push_back({"totalAmount", "is required"});
    return;
  }
  const auto& v = it->value;
  if (!v.IsNumber()) {
    errors.push_back({"totalAmount", fmt::format("must be a number, got {}", json_type_name(v))});
    return;
  }
  double amount = v.GetDouble();
  if (!(amount > 0)) {
    errors.push_back({"totalAmount", fmt::format("must be greater than 0, got {}", amount)});
    return;
  }
  double scaled = amount * 100.0;
  if (scaled > static_cast<double>(max_amount_cents) + 0.5) {
    errors.push_back({"totalAmount", fmt::format("must be at most {}, got {}",
                                                 to_decimal({max_amount_cents}), amount)});
    return;
  }
  double rounded = std::round(scaled);
  // Doubles cannot hold 0.1 exactly: a literal of at most two decimals parses to the double
  // nearest to it, which is rounded / 100 give or take the parser's last bits. A tolerance in
  // units of the amount's last place, unlike one in cents, keeps 1234567.891 from passing.
  double ulp = std::nextafter(amount, HUGE_VAL) - amount;
  if (std::fabs(amount - rounded / 100.0) > 4 * ulp) {
    errors.push_back(
        {"totalAmount", fmt::format("must have at most 2 decimal places, got {}", amount)});
    return;
  }
  if (rounded < 1) {
    errors.push_back({"totalAmount", fmt::format("must be at least 0.01, got {}", amount)});
    return;
  }
  out.total_amount = money{static_cast<std::int64_t>(rounded)};
}

using writer = rapidjson::Writer<rapidjson::StringBuffer>;

void key(writer& w, std::string_view k) {
  w.Key(k.data(), static_cast<rapidjson::SizeType>(k.size()));
}
void str(writer& w, std::string_view s) {
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}
void amount(writer& w, money m) {
  auto text = to_decimal(m);
  w.RawValue(text.data(), text.size(), rapidjson::kNumberType);
}

void items_array(writer& w, const std::vector<order_item>& items) {
  w.StartArray();
  for (const auto& i : items) {
    w.StartObject();
    key(w, "sku");
    str(w, i.sku);
    key(w, "quantity");
    w.Int(i.quantity);
    w.EndObject();
  }
  w.EndArray();
}

/// Writes `"<name>": {"payload": {...}, "pathParams": {...}}` with `body` filling the payload.
template <class Body>
void payload_entry(writer& w, std::string_view name, const order& o, Body&& body) {
  key(w, name);
  w.StartObject();
  key(w, "payload");
  w.StartObject();
  body();
  w.EndObject();
  key(w, "pathParams");
  w.StartObject();
  key(w, "orderId");
  str(w, std::to_string(o.id));
  key(w, "customerId");
  str(w, o.customer_id);
  w.EndObject();
  w.EndObject();
}

} // namespace

std::string_view to_string(order_status s) {
  return name_in(status_names, s, "PENDING");
}

std::optional<order_status> parse_order_status(std::string_view name) {
  return value_in(status_names, name);
}

std::string_view to_string(shipping_type t) {
  return t == shipping_type::domestic ? "domestic" : "international";
}

std::optional<shipping_type> parse_shipping_type(std::string_view name) {
  if (name == "domestic")
    return shipping_type::domestic;
  if (name == "international")
    return shipping_type::international;
  return std::nullopt;
}

std::string to_decimal(money m) {
  auto sign = m.cents < 0 ? "-" : "";
  auto abs = m.cents < 0 ? -m.cents : m.cents;
  return fmt::format("{}{}.{:02d}", sign, abs / 100, abs % 100);
}

std::optional<money> parse_decimal(std::string_view text) {
  bool negative = !text.empty() && text[0] == '-';
  if (negative)
    text.remove_prefix(1);
  auto dot = text.find('.');
  auto whole = text.substr(0, dot);
  auto frac = dot == std::string_view::npos ? std::string_view{} : text.substr(dot + 1);
  if (whole.empty() || whole.size() > 15 || frac.size() > 2)
    return std::nullopt;
  std::int64_t cents = 0;
  for (char c : whole) {
    if (c < '0' || c > '9')
      return std::nullopt;
    cents = cents * 10 + (c - '0');
  }
  cents *= 100;
  int scale = 10;
  for (char c : frac) {
    if (c < '0' || c > '9')
      return std::nullopt;
    cents += (c - '0') * scale;
    scale /= 10;
  }
  return money{negative ? -cents : cents};
}

std::variant<new_order, field_errors> validate_new_order(const rapidjson::Value& body) {
  field_errors errors;
  if (!body.IsObject())
    return field_errors{
        {"", fmt::format("request body must be a JSON object, got {}", json_type_name(body))}};
  refuse_unknown_fields(body, {"customerId", "totalAmount", "currency", "shippingType", "items"},
                        "", errors);
  new_order out;
  if (auto c = text_field(body, "customerId", "customerId", max_customer_id_chars, true, errors))
    out.customer_id = *c;
  validate_amount(body, out, errors);
  if (auto it = body.FindMember("currency"); it != body.MemberEnd()) {
    const auto& v = it->value;
    bool ok = v.IsString() && v.GetStringLength() == 3;
    for (rapidjson::SizeType i = 0; ok && i < 3; ++i)
      ok = v.GetString()[i] >= 'A' && v.GetString()[i] <= 'Z';
    if (ok)
      out.currency = std::string(view(v));
    else
      errors.push_back({"currency", "must be a 3-letter upper-case ISO 4217 code such as \"USD\""});
  }
  if (auto s = text_field(body, "shippingType", "shippingType", 20, true, errors)) {
    if (auto t = parse_shipping_type(*s))
      out.shipping = *t;
    else
      errors.push_back({"shippingType",
                        fmt::format("must be \"domestic\" or \"international\", got \"{}\"", *s)});
  }
  if (auto it = body.FindMember("items"); it != body.MemberEnd())
    validate_items(it->value, out, errors);
  if (!errors.empty())
    return errors;
  return out;
}

std::int64_t fingerprint(const new_order& o) {
  // FNV-1a over a canonical rendering: deterministic across processes and versions.
  std::string canonical = fmt::format("{}\x1f{}\x1f{}\x1f{}", o.customer_id, o.total_amount.cents,
                                      o.currency, to_string(o.shipping));
  for (const auto& i : o.items)
    canonical += fmt::format("\x1e{}\x1f{}", i.sku, i.quantity);
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : canonical) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return static_cast<std::int64_t>(h);
}

std::variant<order_command, field_errors> validate_status_update(const rapidjson::Value& body) {
  if (!body.IsObject())
    return field_errors{
        {"", fmt::format("request body must be a JSON object, got {}", json_type_name(body))}};
  field_errors errors;
  refuse_unknown_fields(body, {"status"}, "", errors);
  auto it = body.FindMember("status");
  if (it == body.MemberEnd()) {
    errors.push_back({"status", "is required"});
  } else if (!it->value.IsString()) {
    errors.push_back(
        {"status", fmt::format("must be a string, got {}", json_type_name(it->value))});
  } else if (view(it->value) == "SHIPPED" || view(it->value) == "DELIVERED") {
    if (errors.empty())
      return view(it->value) == "SHIPPED" ? order_command::ship : order_command::deliver;
  } else {
    errors.push_back({"status", fmt::format("must be \"SHIPPED\" or \"DELIVERED\", got \"{}\"",
                                            view(it->value))});
  }
  return errors;
}

std::variant<std::string, field_errors> validate_cancel(const rapidjson::Value* body) {
  std::string reason = "cancelled by user";
  if (body == nullptr)
    return reason;
  if (!body->IsObject())
    return field_errors{
        {"", fmt::format("request body must be a JSON object, got {}", json_type_name(*body))}};
  field_errors errors;
  refuse_unknown_fields(*body, {"reason"}, "", errors);
  if (auto r = text_field(*body, "reason", "reason", max_reason_chars, false, errors))
    reason = *r;
  if (!errors.empty())
    return errors;
  return reason;
}

std::variant<std::string, field_errors> validate_resolution(const rapidjson::Value* body) {
  if (body == nullptr || !body->IsObject())
    return field_errors{{"reason", "is required: say what was done by hand"}};
  field_errors errors;
  refuse_unknown_fields(*body, {"reason"}, "", errors);
  auto reason = text_field(*body, "reason", "reason", max_reason_chars, true, errors);
  if (reason && reason->empty())
    errors.push_back({"reason", "must not be empty: say what was done by hand"});
  if (!errors.empty())
    return errors;
  return "resolved by an operator: " + *reason;
}

field_errors validate_redrive(const rapidjson::Value* body) {
  if (body == nullptr)
    return {};
  if (!body->IsObject())
    return {{"", fmt::format("request body must be a JSON object, got {}", json_type_name(*body))}};
  field_errors errors;
  refuse_unknown_fields(*body, {}, "", errors);
  return errors;
}

decision decide(order_status current, order_command command) {
  using s = order_status;
  auto conflict = [&](std::string_view what) {
    return decision{decision::kind::conflict, current,
                    fmt::format("order is {}; {}", to_string(current), what)};
  };
  auto apply = [&](s next) { return decision{decision::kind::apply, next, {}}; };
  auto already = [&] { return decision{decision::kind::already_done, current, {}}; };
  switch (command) {
  case order_command::ship:
    if (current == s::confirmed)
      return apply(s::shipped);
    if (current == s::shipped)
      return already();
    return conflict("only a CONFIRMED order can be shipped");
  case order_command::deliver:
    if (current == s::shipped)
      return apply(s::delivered);
    if (current == s::delivered)
      return already();
    return conflict("only a SHIPPED order can be delivered");
  case order_command::cancel:
    if (current == s::pending || current == s::confirmed)
      return apply(s::cancelling);
    if (current == s::cancelling || current == s::cancelled)
      return already();
    return conflict("only a PENDING or CONFIRMED order can be cancelled");
  case order_command::remove:
    if (current == s::delivered || current == s::failed || current == s::cancelled)
      return apply(current);
    return conflict("only a DELIVERED, FAILED or CANCELLED order can be removed");
  }
  return conflict("unknown command");
}

order_status apply_outcome(order_status current, engine_outcome outcome) {
  using s = order_status;
  switch (outcome) {
  case engine_outcome::fanout_succeeded:
    return current == s::pending ? s::confirmed : current;
  case engine_outcome::fanout_compensated:
    return current == s::pending || current == s::attention ? s::failed : current;
  case engine_outcome::cancellation_compensated:
    return current == s::cancelling || current == s::attention ? s::cancelled : current;
  case engine_outcome::compensation_failed:
    return current == s::pending || current == s::cancelling ? s::attention : current;
  }
  return current;
}

bool is_settled(order_status s) {
  for (auto command : {order_command::ship, order_command::deliver, order_command::cancel})
    if (decide(s, command).what == decision::kind::apply)
      return false;
  for (auto outcome :
       {engine_outcome::fanout_succeeded, engine_outcome::fanout_compensated,
        engine_outcome::cancellation_compensated, engine_outcome::compensation_failed})
    if (apply_outcome(s, outcome) != s)
      return false;
  return true;
}

event_draft order_created_event(const order& o, const std::vector<order_item>& items) {
  rapidjson::StringBuffer sb;
  writer w(sb);
  auto id = [&] {
    key(w, "orderId");
    w.Int64(o.id);
  };
  w.StartObject();
  payload_entry(w, "inventory", o, [&] {
    id();
    key(w, "totalAmount");
    amount(w, o.total_amount);
    key(w, "shippingType");
    str(w, to_string(o.shipping));
    key(w, "items");
    items_array(w, items);
  });
  payload_entry(w, "fraudCheck", o, [&] {
    id();
    key(w, "customerId");
    str(w, o.customer_id);
    key(w, "totalAmount");
    amount(w, o.total_amount);
  });
  payload_entry(w, "shipping", o, [&] {
    id();
    key(w, "customerId");
    str(w, o.customer_id);
    key(w, "shippingType");
    str(w, to_string(o.shipping));
    key(w, "totalAmount");
    amount(w, o.total_amount);
  });
  payload_entry(w, "billing", o, [&] {
    id();
    key(w, "amount");
    amount(w, o.total_amount);
    key(w, "currency");
    str(w, o.currency);
  });
  // Every other destination (a user's own) gets the whole order.
  payload_entry(w, any_destination, o, [&] {
    id();
    key(w, "customerId");
    str(w, o.customer_id);
    key(w, "totalAmount");
    amount(w, o.total_amount);
    key(w, "currency");
    str(w, o.currency);
    key(w, "shippingType");
    str(w, to_string(o.shipping));
    key(w, "items");
    items_array(w, items);
  });
  w.EndObject();
  return {std::string(order_aggregate), std::to_string(o.id), std::string(order_created),
          sb.GetString(), fmt::format("order:{}:{}", o.id, order_created)};
}

event_draft order_status_updated_event(std::int64_t order_id, order_status from, order_status to) {
  rapidjson::StringBuffer sb;
  writer w(sb);
  w.StartObject();
  // The notifications, and any other destination, get the same.
  for (std::string_view name : {std::string_view("notifications"), any_destination}) {
    key(w, name);
    w.StartObject();
    key(w, "payload");
    w.StartObject();
    key(w, "orderId");
    w.Int64(order_id);
    key(w, "oldStatus");
    str(w, to_string(from));
    key(w, "newStatus");
    str(w, to_string(to));
    w.EndObject();
    key(w, "pathParams");
    w.StartObject();
    key(w, "orderId");
    str(w, std::to_string(order_id));
    w.EndObject();
    w.EndObject();
  }
  w.EndObject();
  return {std::string(order_aggregate), std::to_string(order_id), std::string(order_status_updated),
          sb.GetString(),
          fmt::format("order:{}:{}:{}", order_id, order_status_updated, to_string(to))};
}

event_draft order_cancellation_event(std::int64_t order_id, const std::string& reason) {
  rapidjson::StringBuffer out;
  writer w(out);
  w.StartObject();
  w.Key("reason");
  w.String(reason.data(), static_cast<rapidjson::SizeType>(reason.size()));
  w.EndObject();
  return {std::string(order_aggregate), std::to_string(order_id), std::string(order_cancellation),
          out.GetString(), fmt::format("order:{}:{}", order_id, order_cancellation)};
}

} // namespace outboxd::domain
