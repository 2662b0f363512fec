// Operator names and template placeholder scanning for the routing configuration.
#include "domain/routing.hpp"

#include "domain/url.hpp"

namespace outboxd::domain {

std::optional<condition_operator> parse_condition_operator(std::string_view name) {
  return value_in(condition_operator_names, name);
}

std::vector<std::string> template_placeholders(std::string_view text) {
  std::vector<std::string> out;
  for_each_placeholder(text, [&](const placeholder& ph) { out.emplace_back(ph.name); });
  return out;
}

} // namespace outboxd::domain
