// Fan-out configuration as the engine sees it: destinations, their routes, conditions and reverts.
#pragma once

#include "domain/json_path.hpp"
#include "domain/names.hpp"

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace outboxd::domain {

enum class condition_operator { eq, ne, gt, gte, lt, lte, contains, exists };

/// The operators' names, as a configuration writes them.
inline constexpr name_table_entry<condition_operator> condition_operator_names[] = {
    {condition_operator::eq, "eq"},
    {condition_operator::ne, "ne"},
    {condition_operator::gt, "gt"},
    {condition_operator::gte, "gte"},
    {condition_operator::lt, "lt"},
    {condition_operator::lte, "lte"},
    {condition_operator::contains, "contains"},
    {condition_operator::exists, "exists"}};

/// Parses an operator name (`eq ne gt gte lt lte contains exists`).
std::optional<condition_operator> parse_condition_operator(std::string_view name);

/// The literal a condition compares with: absent (for `exists`), a boolean, a number or a string.
using condition_value = std::variant<std::monostate, bool, double, std::string>;

/// `{jsonPath, operator, value, previousDestination}`: reads this destination's own payload, or
/// with `previous_destination` the stored response of that earlier destination of the same event.
struct condition {
  json_path path;
  condition_operator op = condition_operator::eq;
  condition_value value;
  std::optional<std::string> previous_destination;
};

/// Where a revert placeholder's value comes from: the stored request or response body.
struct extraction {
  enum class source { request, response };
  source from = source::response;
  json_path path;
};

/// How to undo a successful call: URL and payload templates with `{name}` placeholders filled
/// from `extract`. `payload_json` is the template as JSON text (empty: no body).
struct revert_template {
  std::string url;
  std::string method = "DELETE";
  std::map<std::string, extraction> extract;
  std::string payload_json;
};

/// One way to reach a destination: the first route whose condition holds wins (no condition =
/// always).
struct route {
  std::string url;
  std::optional<condition> when;
  std::optional<revert_template> revert;
};

/// How calls to an https:// destination check the server and prove who we are. Empty strings
/// mean "not set"; the loader checks that the files are readable.
struct tls_options {
  std::string ca_file;     // PEM bundle the server certificate must chain to; empty: system store
  std::string cert_file;   // client certificate (PEM), always together with key_file
  std::string key_file;    // its private key (PEM)
  std::string server_name; // the name the certificate must carry (and SNI); empty: the URL's host
  bool insecure_skip_verify = false; // no verification at all; only ever set explicitly
};

/// When a destination's circuit opens and how long it stays open (see domain/breaker.hpp).
struct breaker_settings {
  bool enabled = true;
  int failure_threshold = 5;                     // failed calls in a row that open the circuit
  std::chrono::milliseconds open_for{2000};      // the first cool-down before a probe
  std::chrono::milliseconds max_open_for{10000}; // each failed probe doubles it, up to this
};

/// A named destination of the fan-out (e.g. `billing`).
struct destination {
  std::string name;
  std::string method = "POST";
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds timeout{
      5000}; // the whole call: connect, send, every byte of the answer
  std::size_t max_response_bytes = 1 << 20; // a longer answer is cut here and marked truncated
  tls_options tls;
  std::vector<std::pair<std::string, std::string>> headers;
  bool required = false; // no matching route is a non-retryable failure instead of a skip
  std::vector<route> routes;
  breaker_settings breaker;
  int max_concurrency = 0;    // calls in flight across the process; 0: no limit
  double rate_per_second = 0; // calls started per second (token bucket); 0: no limit
  /// Overrides of the retry budget (outbox.* for its calls, dlq.* for its reverts) when it fails.
  std::optional<int> max_retries;
  std::optional<std::chrono::milliseconds> retry_for;
};

/// The entry of an event's payloads that a destination without an entry of its own gets
/// (`{"*": {"payload": ..., "pathParams": ...}}`), so that a destination a user adds to a fan-out
/// is sent the event's data and can fill its URL's placeholders.
inline constexpr std::string_view any_destination = "*";

/// Destinations by name plus, per event type, the ordered list of destination names to call.
struct routing_table {
  std::map<std::string, destination> destinations;
  std::map<std::string, std::vector<std::string>> fanout;
};

/// The `{name}` placeholders of a URL or string template, in order of appearance.
std::vector<std::string> template_placeholders(std::string_view text);

} // namespace outboxd::domain
