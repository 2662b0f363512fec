// The simulated operations as a table: one row per endpoint, each naming its route, knob, body
// fields, deterministic failure, side effect or revert, and response body. Pure.
#pragma once

#include "domain/order.hpp"
#include "simulator/body_template.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <rapidjson/document.h>
#include <string>
#include <string_view>
#include <vector>

namespace outboxd::simulator {

/// How an endpoint behaves: by the knobs, or its deterministic /succeed or /fail sibling.
enum class mode { knobs, succeed, fail };

enum class field_type {
  integer,    // a JSON integer or a string of digits
  identifier, // a JSON integer or any string
  text,       // a string
  number,     // a JSON number or a numeric string
  object,     // a JSON object
  items       // an array of {"sku": string, "quantity": integer} objects
};

/// A body field an endpoint reads, and its type.
struct field_rule {
  const char* name;
  field_type type;
  bool required = false;
};

/// What a forward call records in the ledger.
struct forward_effect {
  std::string_view kind;      // reservation, fraudCheck, shipment, ...
  std::string_view id_prefix; // the id is <prefix>-<aggregate>-<ms>-<serial>
  std::optional<std::string_view> notification_type = {};
};

/// What a revert call undoes.
struct revert_effect {
  std::string_view forward;   // the knob of the operation it reverts
  std::string_view id_prefix; // for the `<prefix>-<aggregate>-TEST` answer of /succeed
  std::string_view what;      // "reservation", for the 404 message
};

/// One call as the body-value functions see it (after validation).
struct call_view {
  mode how = mode::knobs;
  std::string aggregate;                  // X-Aggregate-Id, or X-Revert-Aggregate-Id for reverts
  std::string id;                         // the id in a revert's path ("" otherwise)
  const rapidjson::Value* body = nullptr; // the JSON object, or nullptr without a body

  /// A body field, nullptr when missing or JSON null (both mean "use the default").
  const rapidjson::Value* field(const char* name) const;
  std::int64_t integer_or(const char* name, std::int64_t fallback) const;
  std::string text_or(const char* name, std::string_view fallback) const;
  double number_or(const char* name, double fallback) const;
};

/// What the body-value functions may use besides the call.
struct call_services {
  std::function<std::uint64_t(std::uint64_t)> draw; // uniform in [0, bound), the seeded generator
  std::function<std::string(std::string_view, std::string_view)> make_id; // refund ids
};

/// Fills the endpoint's own body values (the pipeline sets id, aggregate and now) and returns
/// words to append to the log note ("" mostly).
using body_filler = std::string (*)(const call_view& call, body_values& values,
                                    call_services& services);

enum class http_method { post, del };

/// One endpoint; rows are written with designated initialisers, in this member order.
struct endpoint {
  std::string_view knob; // fault knob, and the Idempotency-Key scope
  http_method method = http_method::post;
  std::string_view path; // forward: the route; revert: the collection before /{id}/<verb>
  std::string_view revert_verb =
      {}; // release, cancel or refund for a revert; "" for a forward call
  std::vector<field_rule> fields = {};
  bool needs_body = true;
  int fail_status = 503;                      // of the deterministic /fail sibling
  std::optional<int> fail_retry_after = {};   // seconds, of the /fail sibling
  std::optional<forward_effect> applies = {}; // forward calls
  std::optional<revert_effect> reverts = {};  // revert calls
  std::string_view body = {};                 // the response template
  body_filler fill = nullptr;

  bool is_revert() const { return reverts.has_value(); }
};

/// The problems of the call's body against `rules`: a wrong type names the field and shows the
/// value; a missing required field "is required".
domain::field_errors check_fields(const call_view& call, const std::vector<field_rule>& rules);

/// `v` as compact JSON, cut to 60 characters plus "..." (for messages).
std::string show(const rapidjson::Value& v);

/// Every simulated endpoint, in the order the routes are registered.
const std::vector<endpoint>& endpoints();

/// The failure body template of `knob` for a call in `how` mode.
std::string failure_template(std::string_view knob, mode how);

/// 25 for an even integer aggregate id (an order id), 75 otherwise: the reference's rule, which
/// sends even orders to billing and odd ones to high-value processing.
int risk_score(const std::string& aggregate);

} // namespace outboxd::simulator
