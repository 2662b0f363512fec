// Simulator routes: request validation, the call pipeline (fault decision -> Idempotency-Key ->
// latency -> failure or apply -> ledger -> late answer) and the reference's response bodies.
#include "simulator/simulator.hpp"

#include "http/auth.hpp"
#include "http/errors.hpp"
#include "http/json.hpp"
#include "simulator/faults.hpp"
#include "simulator/idempotency.hpp"
#include "simulator/ledger.hpp"
#include "log/log.hpp"

#include <charconv>
#include <cmath>
#include <condition_variable>
#include <fmt/format.h>
#include <functional>
#include <httplib.h>
#include <mutex>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace outboxd::simulator {
namespace {

using rapidjson::Value;

constexpr const char* json_type = "application/json";
constexpr std::size_t max_idempotency_key = 255;
constexpr std::int64_t day_ms = 24 * 60 * 60 * 1000;

/// How an endpoint behaves: by the knobs, or its deterministic /succeed or /fail sibling.
enum class mode { knobs, succeed, fail };

/// One incoming call, as the endpoint bodies see it.
struct call {
  const httplib::Request& req;
  mode how;
  std::string aggregate;          // X-Aggregate-Id, or X-Revert-Aggregate-Id for reverts
  std::optional<std::string> key; // Idempotency-Key
  std::string id;                 // the id in a revert's path ("" otherwise)
  std::optional<rapidjson::Document> body;
};

/// What an applied call answers, and a few words for the log.
struct applied {
  stored_response response;
  std::string note;
};

enum class field_type {
  integer,    // a JSON integer or a string of digits
  identifier, // a JSON integer or any string
  text,       // a string
  number,     // a JSON number or a numeric string
  object,     // a JSON object
  items       // an array of {"sku": string, "quantity": integer} objects
};

struct field_rule {
  const char* name;
  field_type type;
  bool required = false;
};

/// One simulated operation: its knob (also its Idempotency-Key scope), whether it reverts,
/// the body fields it reads, its /fail answer, and what applying it does.
struct endpoint {
  std::string_view knob;
  bool revert = false;
  bool needs_body = true;
  std::vector<field_rule> rules;
  int fail_status = 503;
  std::optional<int> fail_retry_after; // seconds, for the /fail sibling
  std::function<applied(call&)> apply;
};

std::string show(const Value& v) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  v.Accept(writer);
  std::string text(buffer.GetString(), buffer.GetSize());
  return text.size() > 60 ? text.substr(0, 60) + "..." : text;
}

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

/// A body field, absent when missing or JSON null (the reference treats both as "use the
/// default").
const Value* field(const call& c, const char* name) {
  if (!c.body || !c.body->IsObject())
    return nullptr;
  auto it = c.body->FindMember(name);
  return it == c.body->MemberEnd() || it->value.IsNull() ? nullptr : &it->value;
}

// The readers below run after validation, so a present field has the right type.
std::int64_t integer_or(const call& c, const char* name, std::int64_t fallback) {
  const Value* v = field(c, name);
  if (v && v->IsInt64())
    return v->GetInt64();
  if (v && v->IsString())
    return parse_int(string_of(*v)).value_or(fallback);
  return fallback;
}

std::string text_or(const call& c, const char* name, std::string_view fallback) {
  const Value* v = field(c, name);
  return std::string(v && v->IsString() ? string_of(*v) : fallback);
}

double number_or(const call& c, const char* name, double fallback) {
  const Value* v = field(c, name);
  if (v && v->IsNumber())
    return v->GetDouble();
  if (v && v->IsString())
    return parse_number(string_of(*v)).value_or(fallback);
  return fallback;
}

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

/// 400 when the body is not JSON (415 for another content type), 422 naming each wrong field.
void validate(call& c, const endpoint& ep) {
  if (!ep.needs_body)
    return;
  c.body = http::parse_json_body(c.req, true);
  if (!c.body->IsObject())
    throw http::api_error(http::error_kind::validation_failed,
                    fmt::format("request body must be a JSON object, got {}", show(*c.body)),
                    {{"", "must be a JSON object"}});
  domain::field_errors errors;
  for (const auto& rule : ep.rules) {
    if (const Value* v = field(c, rule.name))
      check_field(*v, rule, errors);
    else if (rule.required)
      errors.push_back({rule.name, "is required"});
  }
  if (!errors.empty())
    throw http::validation_error(errors);
}

std::optional<std::string> idempotency_key(const httplib::Request& req) {
  if (!req.has_header("Idempotency-Key"))
    return std::nullopt;
  auto key = req.get_header_value("Idempotency-Key");
  bool printable = !key.empty() && key.size() <= max_idempotency_key;
  for (unsigned char ch : key)
    printable = printable && ch >= 0x21 && ch <= 0x7E;
  if (!printable)
    throw http::api_error(http::error_kind::validation_failed,
                    fmt::format("Idempotency-Key must be 1 to {} printable ASCII characters "
                                "without spaces",
                                max_idempotency_key),
                    {{"Idempotency-Key", "must be 1 to 255 printable ASCII characters"}});
  return key;
}

/// What identifies "the same request" for a key: the path (which carries a revert's id) and the
/// body, whitespace aside.
std::uint64_t fingerprint(const call& c) {
  std::string text = c.req.path + '\n';
  if (c.body) {
    rapidjson::StringBuffer buffer;
    rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
    c.body->Accept(writer);
    text.append(buffer.GetString(), buffer.GetSize());
  } else {
    text += c.req.body;
  }
  return std::hash<std::string>{}(text);
}

/// 25 for an even integer aggregate id (an order id), 75 otherwise: the reference's rule, which
/// sends even orders to billing and odd ones to high-value processing.
int risk_score(const std::string& aggregate) {
  auto id = parse_int(aggregate);
  return id && *id % 2 == 0 ? 25 : 75;
}

stored_response json_response(http::json_writer& w, int status = 200) {
  return {status, w.str(), {}};
}

void write_raw_object(http::json_writer& w, const Value* v) {
  if (!v || !v->IsObject()) {
    w.start_object();
    w.end_object();
    return;
  }
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  v->Accept(writer);
  w.raw({buffer.GetString(), buffer.GetSize()}, rapidjson::kObjectType);
}

void write_retry_after_value(http::json_writer& w, const retry_after_knob& ra) {
  if (const auto* seconds = std::get_if<std::int64_t>(&ra))
    w.field("retryAfter", *seconds);
  else if (const auto* date = std::get_if<std::string>(&ra))
    w.field("retryAfter", *date);
}

/// The reference's failure body of each service; the status is the caller's.
std::string failure_body(std::string_view knob, const call& c, const retry_after_knob& ra) {
  http::json_writer w;
  w.start_object();
  if (knob == "fraudCheck.check") {
    w.field("error", "rate_limit_exceeded");
    w.field("message",
            "Fraud check API rate limit exceeded. Please retry after the specified delay.");
    write_retry_after_value(w, ra);
    w.field("aggregateId", c.aggregate);
  } else if (knob == "shipping.domestic.cancel" || knob == "shipping.international.cancel") {
    bool domestic = knob == "shipping.domestic.cancel";
    w.field("error", domestic
                         ? "Shipment cancellation service temporarily unavailable"
                         : "International shipment cancellation service temporarily unavailable");
    if (domestic && c.how == mode::knobs)
      w.field("shipmentId", c.id);
    w.field("aggregateId", c.aggregate);
    w.field("message", domestic && c.how == mode::knobs
                           ? "This is a simulated retryable error for testing DLQ retry"
                           : "Simulated retryable error for testing DLQ retry");
  } else {
    struct row {
      std::string_view knob;
      const char* error;
      const char* message;
    };
    static constexpr row rows[] = {
        {"inventory.reserve", "inventory_system_unavailable",
         "Inventory management system is temporarily unavailable"},
        {"inventory.release", "inventory_release_unavailable",
         "Inventory release service is temporarily unavailable"},
        {"shipping.domestic.create", "shipping_service_unavailable",
         "Domestic shipping service is temporarily unavailable"},
        {"shipping.international.create", "international_shipping_unavailable",
         "International shipping service is temporarily unavailable"},
        {"billing.charge", "payment_gateway_unavailable",
         "Payment gateway is temporarily unavailable"},
        {"billing.refund", "refund_service_unavailable",
         "Refund service is temporarily unavailable"},
        {"highValue.process", "high_value_processing_unavailable",
         "High-value processing service is temporarily unavailable"},
        {"highValue.cancel", "high_value_cancellation_unavailable",
         "High-value processing cancellation service is temporarily unavailable"},
        {"notifications.send", "notification_service_unavailable",
         "Notification service is temporarily unavailable"}};
    for (const auto& r : rows)
      if (r.knob == knob) {
        w.field("error", r.error);
        w.field("message", r.message);
      }
    w.field("aggregateId", c.aggregate);
    w.field("timestamp", now_ms());
  }
  w.end_object();
  return w.str();
}

stored_response failure_response(std::string_view knob, const call& c, int status,
                                 const retry_after_knob& ra) {
  stored_response r{status, failure_body(knob, c, ra), {}};
  if (const auto* seconds = std::get_if<std::int64_t>(&ra))
    r.headers.emplace_back("Retry-After", std::to_string(*seconds));
  else if (const auto* date = std::get_if<std::string>(&ra))
    r.headers.emplace_back("Retry-After", *date);
  return r;
}

void send(httplib::Response& res, const stored_response& r) {
  res.status = r.status;
  for (const auto& [name, value] : r.headers)
    res.set_header(name.c_str(), value);
  res.set_content(r.body, json_type);
}

/// Abandons an owned Idempotency-Key claim unless the call completed it, so that a failure or
/// an exception (a 404 revert, a bug) leaves the key free for a retry.
class claim_guard {
public:
  claim_guard(idempotency_store& store, std::string scope, std::string key, std::uint64_t token)
      : store_(store), scope_(std::move(scope)), key_(std::move(key)), token_(token) {}
  ~claim_guard() {
    if (!completed_)
      store_.abandon(scope_, key_, token_);
  }
  claim_guard(const claim_guard&) = delete;
  claim_guard& operator=(const claim_guard&) = delete;

  void complete(const stored_response& r) {
    store_.complete(scope_, key_, token_, r);
    completed_ = true;
  }

private:
  idempotency_store& store_;
  std::string scope_;
  std::string key_;
  std::uint64_t token_;
  bool completed_ = false;
};

/// The field a 422 detail names, taken from a knob validation message ("services.x.y must ...",
/// "unknown key services.x.z ...").
std::string field_of(const std::string& message) {
  std::string_view m(message);
  for (std::string_view prefix : {"unknown key ", "unknown service "})
    if (m.rfind(prefix, 0) == 0)
      m.remove_prefix(prefix.size());
  return std::string(m.substr(0, m.find(' ')));
}

} // namespace

struct simulator::impl {
  explicit impl(const conf::simulator_settings& settings) : faults(settings) {}

  fault_injector faults;
  idempotency_store keys;
  side_effect_ledger ledger;

  std::mutex sleep_mutex;
  std::condition_variable wake;
  bool stopping = false;

  void sleep(std::chrono::milliseconds d) {
    if (d.count() <= 0)
      return;
    std::unique_lock lock(sleep_mutex);
    wake.wait_for(lock, d, [&] { return stopping; });
  }

  void log_call(const call& c, int status, std::string_view note) {
    log::debug("simulator", "{} {} aggregate {} key {} -> {} {}", c.req.method, c.req.path,
               c.aggregate, c.key.value_or("-"), status, note);
  }

  void handle(const endpoint& ep, mode how, const httplib::Request& req, httplib::Response& res) {
    call c{req, how, {}, {}, {}, {}};
    auto aggregate = req.get_header_value(ep.revert ? "X-Revert-Aggregate-Id" : "X-Aggregate-Id");
    c.aggregate = aggregate.empty() ? "unknown" : aggregate;
    if (ep.revert && req.matches.size() > 1)
      c.id = req.matches[1].str();
    c.key = idempotency_key(req);
    validate(c, ep);

    if (how == mode::fail) {
      retry_after_knob ra;
      if (ep.fail_retry_after)
        ra = std::int64_t{*ep.fail_retry_after};
      auto r = failure_response(ep.knob, c, ep.fail_status, ra);
      send(res, r);
      log_call(c, r.status, "deterministic failure");
      return;
    }

    fault_decision d;
    if (how == mode::knobs)
      d = faults.decide(ep.knob);
    std::optional<claim_guard> guard;
    std::optional<stored_response> replay;
    if (c.key) {
      auto claim = keys.begin(std::string(ep.knob), *c.key, fingerprint(c));
      switch (claim.what) {
      case idempotency_claim::kind::conflict:
        throw http::api_error(http::error_kind::idempotency_key_reused,
                        fmt::format("Idempotency-Key '{}' was already used for a different "
                                    "{} request",
                                    *c.key, ep.knob));
      case idempotency_claim::kind::replay:
        replay = std::move(claim.response);
        break;
      case idempotency_claim::kind::owner:
        guard.emplace(keys, std::string(ep.knob), *c.key, claim.token);
        break;
      }
    }

    sleep(d.latency);
    // Transient failures (5xx, 429) happen in front of the key store, replays included; a
    // refusal (other 4xx) never contradicts a result the service already gave for the key.
    bool transient = d.status >= 500 || d.status == 429;
    if (d.fail && (!replay || transient)) {
      auto r = failure_response(ep.knob, c, d.status, d.retry_after);
      send(res, r);
      log_call(c, r.status, "injected failure");
      return;
    }
    if (replay) {
      send(res, *replay);
      res.set_header("Idempotent-Replayed", "true");
      log_call(c, replay->status, "replayed");
      return;
    }
    auto result = ep.apply(c);
    if (guard)
      guard->complete(result.response);
    if (d.late.count() > 0) {
      log_call(c, result.response.status,
               fmt::format("{}, answering {}ms late", result.note, d.late.count()));
      sleep(d.late);
    } else {
      log_call(c, result.response.status, result.note);
    }
    send(res, result.response);
  }

  // --- forward operations -------------------------------------------------------------------

  ledger_entry record(const call& c, std::string_view knob, const char* kind, const char* prefix,
                      std::optional<std::string> notification_type = std::nullopt) {
    return ledger.apply(
        {c.aggregate, std::string(knob), kind, prefix, std::move(notification_type), c.key});
  }

  applied reserve(call& c) {
    auto e = record(c, "inventory.reserve", "reservation", "RES");
    http::json_writer w;
    w.start_object();
    w.field("reservationId", e.id);
    w.field("orderId", integer_or(c, "orderId", 0));
    w.field("warehouseId", "WH-NYC-01");
    w.key("warehouse");
    w.start_object();
    w.field("id", "WH-NYC-01");
    w.field("name", "NYC Distribution Center");
    w.key("location");
    w.start_object();
    w.field("city", "New York");
    w.field("state", "NY");
    w.field("country", "US");
    w.end_object();
    w.end_object();
    w.key("items");
    w.start_array();
    if (const Value* items = field(c, "items"))
      for (const auto& item : items->GetArray()) {
        auto sku = item.FindMember("sku");
        auto quantity = item.FindMember("quantity");
        w.start_object();
        w.field("sku", sku != item.MemberEnd() && sku->value.IsString()
                           ? std::string(string_of(sku->value))
                           : std::string("UNKNOWN"));
        w.field("quantity", quantity != item.MemberEnd() && quantity->value.IsInt()
                                ? quantity->value.GetInt()
                                : 1);
        w.field("reserved", true);
        w.field("binLocation", fmt::format("A{}-{}", faults.draw(20), faults.draw(50)));
        w.end_object();
      }
    w.end_array();
    w.field("shippingType", text_or(c, "shippingType", "domestic"));
    w.field("status", "reserved");
    w.field("expiresAt", e.applied_at_ms + 900000);
    w.field("reservedAt", e.applied_at_ms);
    w.end_object();
    return {json_response(w), "applied " + e.id};
  }

  applied fraud_check(call& c) {
    int score = c.how == mode::succeed ? 25 : risk_score(c.aggregate);
    auto e = record(c, "fraudCheck.check", "fraudCheck", "FRAUD");
    bool low = score < 50;
    http::json_writer w;
    w.start_object();
    w.field("status", "success");
    w.field("checkId", e.id);
    w.field("riskScore", score);
    w.field("riskLevel", low ? "low" : "high");
    w.key("checks");
    w.start_object();
    w.field("addressVerification", "passed");
    w.field("cvvCheck", "passed");
    w.field("velocityCheck", low ? "passed" : "flagged");
    w.end_object();
    w.field("timestamp", e.applied_at_ms);
    w.end_object();
    return {json_response(w), fmt::format("applied {} (riskScore {})", e.id, score)};
  }

  applied ship(call& c, bool domestic) {
    auto e = domestic ? record(c, "shipping.domestic.create", "shipment", "SHIP-DOM")
                      : record(c, "shipping.international.create", "shipment", "SHIP-INTL");
    http::json_writer w;
    w.start_object();
    w.field("shipmentId", e.id);
    w.field("orderId", integer_or(c, "orderId", 0));
    w.field("customerId", text_or(c, "customerId", "unknown"));
    w.key("carrier");
    w.start_object();
    w.field("code", domestic ? "YAMATO" : "DHL");
    w.field("name", domestic ? "Yamato Transport" : "DHL Express");
    w.field("service", domestic ? "Express" : "International Priority");
    w.end_object();
    w.field("trackingNumber", domestic ? fmt::format("9400{}", faults.draw(100000000))
                                       : fmt::format("1Z999AA1{}", faults.draw(1000000000)));
    w.key("shippingAddress");
    write_raw_object(w, field(c, "address"));
    w.key("cost");
    w.start_object();
    w.key("amount");
    w.raw(domestic ? "12.50" : "45.00", rapidjson::kNumberType);
    w.field("currency", "USD");
    w.end_object();
    if (!domestic) {
      w.key("customs");
      w.start_object();
      w.field("declaration", true);
      w.field("reference", fmt::format("CUST-{}", e.applied_at_ms));
      w.field("incoterms", "DDP");
      w.end_object();
      w.key("insurance");
      w.start_object();
      w.field("required", true);
      w.key("value");
      w.raw("500.00", rapidjson::kNumberType);
      w.field("currency", "USD");
      w.end_object();
    }
    w.field("status", "confirmed");
    w.field("estimatedDelivery", e.applied_at_ms + (domestic ? 2 : 7) * day_ms);
    w.field("createdAt", e.applied_at_ms);
    w.end_object();
    return {json_response(w), "applied " + e.id};
  }

  applied charge(call& c) {
    auto e = record(c, "billing.charge", "charge", "TXN");
    http::json_writer w;
    w.start_object();
    w.field("status", "success");
    w.field("message", "Payment processed successfully");
    w.key("transaction");
    w.start_object();
    w.field("id", e.id);
    w.field("amount", number_or(c, "amount", 100.0));
    w.field("currency", text_or(c, "currency", "USD"));
    w.field("status", "completed");
    w.field("processedAt", e.applied_at_ms);
    w.end_object();
    w.field("aggregateId", c.aggregate);
    w.field("timestamp", e.applied_at_ms);
    w.end_object();
    return {json_response(w), "applied " + e.id};
  }

  applied process_high_value(call& c) {
    auto e = record(c, "highValue.process", "highValueProcessing", "HV");
    http::json_writer w;
    w.start_object();
    w.field("status", "success");
    w.field("message", "High-value order processing completed");
    w.field("processingId", e.id);
    w.field("amount", number_or(c, "amount", 100.0));
    w.field("currency", text_or(c, "currency", "USD"));
    w.field("additionalVerification", "completed");
    w.field("insuranceAdded", true);
    w.field("signatureRequired", true);
    w.field("timestamp", e.applied_at_ms);
    w.end_object();
    return {json_response(w), "applied " + e.id};
  }

  applied notify(call& c, const char* type) {
    auto e = record(c, "notifications.send", "notification", "NOTIF", type);
    auto order_id = integer_or(c, "orderId", 0);
    std::string_view t(type);
    http::json_writer w;
    w.start_object();
    w.field("status", t == "status_update" ? "recorded" : "sent");
    w.field("notificationId", e.id);
    if (t != "status_update")
      w.field("notificationType", type);
    w.field("orderId", order_id);
    w.field("message", t == "shipping_confirmation"
                           ? fmt::format("Shipping confirmation sent for order {}", order_id)
                       : t == "review_request"
                           ? fmt::format("Review request sent for order {}", order_id)
                           : fmt::format("Status update recorded for order {}", order_id));
    w.field("timestamp", e.applied_at_ms);
    w.end_object();
    return {json_response(w), "applied " + e.id};
  }

  // --- reverts --------------------------------------------------------------------------------

  /// Reverts the path's id (or, for a /succeed sibling, the aggregate's newest active entry) of
  /// `forward`; returns the id to answer with and a note. Unknown ids are a 404.
  std::pair<std::string, std::string> revert(const call& c, std::string_view forward,
                                             const char* prefix, const char* what) {
    if (c.how == mode::succeed) {
      auto r = ledger.revert_latest(forward, c.aggregate);
      if (r.what == revert_result::kind::not_found)
        return {fmt::format("{}-{}-TEST", prefix, c.aggregate), "nothing active to revert"};
      return {r.entry.id, "reverted " + r.entry.id};
    }
    auto r = ledger.revert(forward, c.id);
    if (r.what == revert_result::kind::not_found)
      throw http::api_error(http::error_kind::not_found,
                      fmt::format("{} '{}' not found: {} never issued it", what, c.id, forward));
    if (r.what == revert_result::kind::already_reverted)
      return {r.entry.id, fmt::format("{} was already reverted ({} revert requests)", r.entry.id,
                                      r.entry.revert_requests)};
    return {r.entry.id, "reverted " + r.entry.id};
  }

  void write_refund(http::json_writer& w, const call& c, const std::string& id, std::int64_t ms) {
    w.key("refund");
    w.start_object();
    w.field("refundId", ledger.make_id("RFD", id));
    w.field("amount", number_or(c, "amount", 0.0));
    w.field("currency", text_or(c, "currency", "USD"));
    w.field("reason", text_or(c, "reason", "unknown"));
    w.field("processedAt", ms);
    w.end_object();
  }

  applied release(call& c) {
    auto [id, note] = revert(c, "inventory.reserve", "RES", "reservation");
    http::json_writer w;
    w.start_object();
    w.field("status", "released");
    w.field("message", "Inventory reservation released");
    w.field("reservationId", id);
    w.field("aggregateId", c.aggregate);
    w.field("timestamp", now_ms());
    w.end_object();
    return {json_response(w), note};
  }

  applied cancel_shipment(call& c, bool domestic) {
    auto [id, note] = domestic
                          ? revert(c, "shipping.domestic.create", "SHIP-DOM", "shipment")
                          : revert(c, "shipping.international.create", "SHIP-INTL", "shipment");
    http::json_writer w;
    w.start_object();
    w.field("status", "cancelled");
    w.field("message",
            domestic ? "Domestic shipment cancelled"
                     : "International shipment cancelled (customs clearance will be aborted)");
    w.field("shipmentId", id);
    w.field("timestamp", now_ms());
    w.end_object();
    return {json_response(w), note};
  }

  applied refund(call& c) {
    auto [id, note] = revert(c, "billing.charge", "TXN", "transaction");
    auto ms = now_ms();
    http::json_writer w;
    w.start_object();
    w.field("status", "refunded");
    w.field("message", "Transaction refunded successfully");
    w.field("transactionId", id);
    write_refund(w, c, id, ms);
    w.field("aggregateId", c.aggregate);
    w.field("timestamp", ms);
    w.end_object();
    return {json_response(w), note};
  }

  applied cancel_high_value(call& c) {
    auto [id, note] = revert(c, "highValue.process", "HV", "high-value processing");
    auto ms = now_ms();
    http::json_writer w;
    w.start_object();
    w.field("status", "cancelled");
    w.field("message", "High-value processing cancelled successfully");
    w.field("processingId", id);
    write_refund(w, c, id, ms);
    w.field("aggregateId", c.aggregate);
    w.field("timestamp", ms);
    w.end_object();
    return {json_response(w), note};
  }

  // --- routes ---------------------------------------------------------------------------------

  using handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  handler bind(std::shared_ptr<const endpoint> ep, mode how) {
    return [this, ep, how](const httplib::Request& req, httplib::Response& res) {
      handle(*ep, how, req, res);
    };
  }

  /// POST `path` and its /succeed and /fail siblings. The literal siblings are registered first
  /// (httplib takes the first matching route).
  void add_forward(httplib::Server& s, const std::string& path, endpoint ep) {
    auto shared = std::make_shared<const endpoint>(std::move(ep));
    s.Post(path + "/succeed", bind(shared, mode::succeed));
    s.Post(path + "/fail", bind(shared, mode::fail));
    s.Post(path, bind(shared, mode::knobs));
  }

  /// `<base>/{id}/<verb>` and the literal `<base>/<verb>/succeed|fail` siblings.
  void add_revert(httplib::Server& s, bool is_delete, const std::string& base,
                  const std::string& verb, endpoint ep) {
    ep.revert = true;
    auto shared = std::make_shared<const endpoint>(std::move(ep));
    auto add = [&](const std::string& pattern, mode how) {
      if (is_delete)
        s.Delete(pattern, bind(shared, how));
      else
        s.Post(pattern, bind(shared, how));
    };
    add(base + "/" + verb + "/succeed", mode::succeed);
    add(base + "/" + verb + "/fail", mode::fail);
    add(base + "/([^/]+)/" + verb, mode::knobs);
  }

  void install(httplib::Server& s, const std::string& admin_token) {
    using ft = field_type;
    const field_rule order_id{"orderId", ft::integer};
    const field_rule customer_id{"customerId", ft::text};
    const field_rule total_amount{"totalAmount", ft::number};
    const field_rule shipping_type{"shippingType", ft::text};
    const field_rule amount{"amount", ft::number};
    const field_rule currency{"currency", ft::text};
    const field_rule reason{"reason", ft::text};

    add_forward(s, "/api/inventory/reserve",
                {"inventory.reserve",
                 false,
                 true,
                 {order_id, {"items", ft::items}, shipping_type, total_amount},
                 503,
                 4,
                 [this](call& c) { return reserve(c); }});
    add_revert(
        s, true, "/api/inventory", "release",
        {"inventory.release", true, false, {}, 503, 4, [this](call& c) { return release(c); }});

    add_forward(s, "/api/fraud/check",
                {"fraudCheck.check",
                 false,
                 true,
                 {order_id, customer_id, total_amount},
                 429,
                 10,
                 [this](call& c) { return fraud_check(c); }});

    const std::vector<field_rule> shipment_fields = {
        order_id, customer_id, {"address", ft::object}, shipping_type, total_amount};
    const std::vector<field_rule> cancel_fields = {
        reason, customer_id, {"orderId", ft::identifier}, {"shipmentId", ft::text}};
    add_forward(s, "/api/domestic-shipping",
                {"shipping.domestic.create", false, true, shipment_fields, 503, 3,
                 [this](call& c) { return ship(c, true); }});
    add_revert(s, false, "/api/domestic-shipping", "cancel",
               {"shipping.domestic.cancel", true, true, cancel_fields, 503, 2,
                [this](call& c) { return cancel_shipment(c, true); }});
    add_forward(s, "/api/international-shipping",
                {"shipping.international.create", false, true, shipment_fields, 503, 3,
                 [this](call& c) { return ship(c, false); }});
    add_revert(s, false, "/api/international-shipping", "cancel",
               {"shipping.international.cancel", true, true, cancel_fields, 503, 3,
                [this](call& c) { return cancel_shipment(c, false); }});

    add_forward(s, "/api/billing",
                {"billing.charge", false, true, {amount, currency}, 503, 5, [this](call& c) {
                   return charge(c);
                 }});
    add_revert(s, false, "/api/billing", "refund",
               {"billing.refund",
                true,
                true,
                {amount, currency, reason, {"transactionId", ft::text}},
                503,
                5,
                [this](call& c) { return refund(c); }});
    add_forward(s, "/api/high-value-processing",
                {"highValue.process", false, true, {amount, currency}, 503, 5, [this](call& c) {
                   return process_high_value(c);
                 }});
    add_revert(s, false, "/api/high-value-processing", "cancel",
               {"highValue.cancel",
                true,
                true,
                {amount, currency, reason, {"processingId", ft::text}},
                503,
                5,
                [this](call& c) { return cancel_high_value(c); }});

    const field_rule required_order{"orderId", ft::integer, true};
    const field_rule new_status{"newStatus", ft::text, true};
    add_forward(s, "/api/notifications/shipping-confirmation",
                {"notifications.send",
                 false,
                 true,
                 {required_order, new_status},
                 503,
                 std::nullopt,
                 [this](call& c) { return notify(c, "shipping_confirmation"); }});
    add_forward(s, "/api/notifications/review-request",
                {"notifications.send",
                 false,
                 true,
                 {required_order, new_status},
                 503,
                 std::nullopt,
                 [this](call& c) { return notify(c, "review_request"); }});
    add_forward(s, "/api/notifications/status-update",
                {"notifications.send",
                 false,
                 true,
                 {required_order, {"oldStatus", ft::text, true}, new_status},
                 503,
                 std::nullopt,
                 [this](call& c) { return notify(c, "status_update"); }});

    install_admin(s, admin_token);
  }

  void install_admin(httplib::Server& s, const std::string& admin_token) {
    s.Get("/api/simulator/config", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(faults.config_json(), json_type);
    });
    s.Put("/api/simulator/config",
          [this, admin_token](const httplib::Request& req, httplib::Response& res) {
            http::require_admin(req, admin_token);
            auto body = http::parse_json_body(req, true);
            auto problems = faults.apply_patch(*body);
            if (!problems.empty()) {
              domain::field_errors details;
              std::string message;
              for (const auto& p : problems) {
                details.push_back({field_of(p), p});
                message += (message.empty() ? "" : "; ") + p;
              }
              throw http::api_error(http::error_kind::validation_failed, message, details);
            }
            rapidjson::StringBuffer compact;
            rapidjson::Writer<rapidjson::StringBuffer> writer(compact);
            body->Accept(writer);
            log::info("simulator", "knobs changed: {}",
                      std::string_view(compact.GetString(), compact.GetSize()).substr(0, 1000));
            res.set_content(faults.config_json(), json_type);
          });
    s.Post("/api/simulator/reset",
           [this, admin_token](const httplib::Request& req, httplib::Response& res) {
             http::require_admin(req, admin_token);
             reset();
             http::json_writer w;
             w.start_object();
             w.field("status", "reset");
             auto started = ledger.started_at_ms();
             w.field("startedAt", iso_time(started));
             w.field("startedAtMs", started);
             w.end_object();
             res.set_content(w.str(), json_type);
           });
    s.Get("/api/simulator/ledger", [this](const httplib::Request& req, httplib::Response& res) {
      std::optional<std::string> aggregate;
      if (req.has_param("aggregateId"))
        aggregate = req.get_param_value("aggregateId");
      res.set_content(ledger.json(aggregate), json_type);
    });
  }

  void reset() {
    faults.reset();
    keys.clear();
    ledger.reset();
    log::info("simulator",
              "reset: initial knobs and seed {}, empty ledger and Idempotency-Key "
              "store",
              faults.seed());
  }
};

simulator::simulator(const conf::simulator_settings& settings)
    : impl_(std::make_unique<impl>(settings)) {}

simulator::~simulator() = default;

void simulator::install(httplib::Server& server, const std::string& admin_token) {
  impl_->install(server, admin_token);
}

std::string simulator::ledger_json(const std::optional<std::string>& aggregate_id) const {
  return impl_->ledger.json(aggregate_id);
}

ledger_snapshot simulator::ledger() const {
  return impl_->ledger.snapshot();
}

std::string simulator::config_json() const {
  return impl_->faults.config_json();
}

void simulator::reset() {
  impl_->reset();
}

void simulator::stop() {
  {
    std::lock_guard lock(impl_->sleep_mutex);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
}

} // namespace outboxd::simulator
