// Operator names and template placeholder scanning for the routing configuration.
#include "domain/routing.hpp"

#include <cctype>

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
  std::size_t pos = 0;
  while ((pos = text.find('{', pos)) != std::string_view::npos) {
    auto end = text.find('}', pos + 1);
    if (end == std::string_view::npos)
      break;
    auto name = text.substr(pos + 1, end - pos - 1);
    bool ident = !name.empty();
    for (char c : name)
      ident = ident && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (ident)
      out.emplace_back(name);
    pos = ident ? end + 1 : pos + 1;
  }
  return out;
}

} // namespace outboxd::domain
