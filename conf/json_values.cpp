// The one copy of the value helpers behind configuration messages.
#include "conf/json_values.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fmt/format.h>
#include <limits>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace outboxd::conf {
namespace {

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

} // namespace

std::string show(const rapidjson::Value& v) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  v.Accept(writer);
  std::string text(buffer.GetString(), buffer.GetSize());
  constexpr std::size_t limit = 80;
  if (text.size() > limit)
    text = text.substr(0, limit) + "...";
  return text;
}

std::optional<std::int64_t> integer_of(const rapidjson::Value& v) {
  if (v.IsInt64())
    return v.GetInt64();
  if (v.IsUint64())
    return std::numeric_limits<std::int64_t>::max();
  if (v.IsDouble()) {
    double d = v.GetDouble();
    if (!std::isfinite(d) || d != std::trunc(d))
      return std::nullopt;
    if (d >= 9.2e18)
      return std::numeric_limits<std::int64_t>::max();
    if (d <= -9.2e18)
      return std::numeric_limits<std::int64_t>::min();
    return static_cast<std::int64_t>(d);
  }
  return std::nullopt;
}

std::string suggestion(std::string_view wrong, const std::vector<std::string_view>& candidates) {
  std::string_view best;
  std::size_t best_distance = 3;
  for (auto c : candidates) {
    auto d = edit_distance(lowercase(wrong), lowercase(c));
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best.empty() ? std::string() : fmt::format(" (did you mean {}?)", best);
}

} // namespace outboxd::conf
