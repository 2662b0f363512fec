// Operator names and template placeholder scanning for the routing configuration.
#include "domain/routing.hpp"

#include "domain/url.hpp"

namespace outboxd::domain {

std::optional<condition_operator> parse_condition_operator(std::string_view name) {
  static const std::pair<std::string_view, condition_operator> names[] = {
      {"eq", condition_operator::eq},
      {"ne", condition_operator::ne},
      {"gt", condition_operator::gt},
      {"gte", condition_operator::gte},
      {"lt", condition_operator::lt},
      {"lte", condition_operator::lte},
      {"contains", condition_operator::contains},
      {"exists", condition_operator::exists}};
  for (const auto& [n, op] : names)
    if (n == name)
      return op;
  return std::nullopt;
}

std::vector<std::string> template_placeholders(std::string_view text) {
  std::vector<std::string> out;
  for_each_placeholder(text, [&](const placeholder& ph) { out.emplace_back(ph.name); });
  return out;
}

} // namespace outboxd::domain
