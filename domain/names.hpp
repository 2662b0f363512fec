// Enum names: one table of (value, name) pairs per enum gives both directions, so a name and its
// value cannot drift apart between the writer and the parser.
#pragma once

#include <optional>
#include <string_view>
#include <utility>

namespace outboxd::domain {

template <class Enum> using name_table_entry = std::pair<Enum, std::string_view>;

/// The name of `value` in `table`; `fallback` when the table does not list it.
template <class Enum, std::size_t N>
constexpr std::string_view name_in(const name_table_entry<Enum> (&table)[N], Enum value,
                                   std::string_view fallback = "?") {
  for (const auto& [v, name] : table)
    if (v == value)
      return name;
  return fallback;
}

/// The value named `name` in `table`; nullopt for any other text.
template <class Enum, std::size_t N>
constexpr std::optional<Enum> value_in(const name_table_entry<Enum> (&table)[N],
                                       std::string_view name) {
  for (const auto& [v, n] : table)
    if (n == name)
      return v;
  return std::nullopt;
}

} // namespace outboxd::domain
