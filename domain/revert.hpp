// Compensation planning: which route a stored call went through, and the revert call built from
// its revert template and the stored request/response. Pure functions.
#pragma once

#include "domain/expected.hpp"
#include "domain/routing.hpp"

#include <optional>
#include <rapidjson/document.h>
#include <string>
#include <string_view>

namespace outboxd::domain {

/// The route of `d` whose URL template produced `called_url` (the endpoint stored in the result
/// row): `{name}` placeholders match one non-empty path segment. nullptr when none matches.
const route* route_for_url(const destination& d, std::string_view called_url);

/// A revert call ready to send.
struct revert_call {
  std::string url;
  std::string method;
  std::string body_json; // empty: no body
};

/// Builds the revert of a successful call from `t` and the stored bodies (either may be null).
/// Each `extract` entry reads `request` or `response` by JSONPath. URL placeholders become
/// percent-encoded path segments (percent_encode_segment), so no value can change the host or
/// add a path. Payload placeholders are substituted inside the string values of the parsed
/// template (never into the JSON text), so quotes in a value cannot inject fields; a string
/// that is exactly "{name}" takes the extracted value with its JSON type (a number stays a
/// number, an object stays an object). Scalars substituted into a longer string use their JSON
/// text without quotes for strings. An error names the placeholder whose value is missing or
/// null, or a URL placeholder whose value is not a scalar: the revert cannot be built and must
/// not be counted as done.
expected<revert_call> build_revert(const revert_template& t, const rapidjson::Value* request,
                                   const rapidjson::Value* response);

} // namespace outboxd::domain
