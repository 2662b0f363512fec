// Compensation planning: which route a stored call went through, and the revert call built from
// its revert template and the stored request/response. Pure functions.
#pragma once

#include "domain/expected.hpp"
#include "domain/outbox.hpp"
#include "domain/routing.hpp"

#include <map>
#include <optional>
#include <rapidjson/document.h>
#include <string>
#include <string_view>
#include <vector>

namespace outboxd::domain {

/// The route of `d` whose URL template produced `called_url` (the endpoint stored in the result
/// row): `{name}` placeholders match one non-empty path segment. nullptr when none matches, or
/// when routes that revert differently match (the row cannot tell which one was called; see
/// route_miss for why).
const route* route_for_url(const destination& d, std::string_view called_url);

/// The route whose revert undoes the call of `d` to `called_url`: route_for_url's, or, when no
/// route has that URL any more (the destination's configuration changed since the call) but all
/// of them revert alike, the first. nullptr when it cannot tell (see route_miss).
const route* route_to_revert(const destination& d, std::string_view called_url);

/// Why route_to_revert found no route for `called_url`.
std::string route_miss(const destination& d, std::string_view called_url);

/// Whether two routes undo a call alike (both read-only, or the same revert template).
bool same_revert(const route& a, const route& b);

/// Whether two URL templates can produce one URL, as far as a template read as a URL tells (the
/// other's placeholders taken as text): such routes must revert alike.
bool urls_overlap(std::string_view a, std::string_view b);

/// A revert call ready to send.
struct revert_call {
  std::string url;
  std::string method;
  std::string body_json; // empty: no body
};

/// The longest value a URL placeholder takes (before percent-encoding).
inline constexpr std::size_t max_url_value_bytes = 2048;

/// How the audit names a destination's revert: "<destination>.revert".
inline constexpr std::string_view revert_suffix = ".revert";
inline std::string revert_step(std::string_view destination) {
  return std::string(destination) + std::string(revert_suffix);
}
inline bool is_revert_step(std::string_view step) {
  return step.size() > revert_suffix.size() && step.ends_with(revert_suffix);
}
/// The destination a step of the audit calls: "billing" for "billing.revert" and for "billing".
inline std::string_view destination_of_step(std::string_view step) {
  return is_revert_step(step) ? step.substr(0, step.size() - revert_suffix.size()) : step;
}

/// Builds the revert of a successful call from `t` and the stored bodies (either may be null).
/// Each `extract` entry reads `request` or `response` by JSONPath. URL placeholders become
/// percent-encoded path segments (percent_encode_segment), so no value can change the host or
/// add a path. Payload placeholders are substituted inside the string values of the parsed
/// template (never into the JSON text), so quotes in a value cannot inject fields; a string
/// that is exactly "{name}" takes the extracted value with its JSON type (a number stays a
/// number, an object stays an object). Scalars substituted into a longer string use their JSON
/// text without quotes for strings. An error names the placeholder whose value is missing or
/// null, a whole number too large for a double to hold exactly, or a URL placeholder whose
/// value is not a scalar or is longer than max_url_value_bytes: the revert cannot be built and
/// must not be counted as done.
expected<revert_call> build_revert(const revert_template& t, const rapidjson::Value* request,
                                   const rapidjson::Value* response);

/// The step a compensation must settle before it reverts, if any: the first destination of
/// `fanout` that neither succeeded nor was skipped, when the remote may have applied it without
/// outboxd knowing: one of its calls got no answer, or one of the `interrupted` runs (those whose
/// lease expired: the process died or lost the database) may have been calling it. An interrupted
/// run was at the first step with no success from it or an earlier run; it was calling it unless
/// it left a row of it (then it had its answer). Re-sending the step with its Idempotency-Key
/// tells: a remote that applied it answers with the stored result (which is then reverted); one
/// that did not applies it now (and it is reverted). A step that was refused, answered with
/// transient errors only, or never sent (every run that reached it was held back by an open
/// circuit or a limit, and ended saying so) is left alone. nullopt too once `steps` holds any
/// "<destination>.revert": settling comes before the first revert, so it is done.
std::optional<std::string> uncertain_step(const std::vector<std::string>& fanout,
                                          const std::map<std::string, step_history>& steps,
                                          const std::vector<std::int64_t>& interrupted);

} // namespace outboxd::domain
