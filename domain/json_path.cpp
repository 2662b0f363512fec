// JSONPath subset: parsing into steps and walking a RapidJSON value.
#include "domain/json_path.hpp"

#include <cctype>
#include <fmt/format.h>

namespace outboxd::domain {

expected<json_path> json_path::parse(std::string_view text) {
  json_path p;
  p.text_ = std::string(text);
  if (text.empty() || text[0] != '$')
    return error{fmt::format("jsonPath '{}' must start with '$'", text)};
  std::size_t i = 1;
  auto fail = [&](std::string_view why) {
    return error{fmt::format("jsonPath '{}' is not supported at offset {}: {}", text, i, why)};
  };
  while (i < text.size()) {
    if (text[i] == '.') {
      std::size_t start = ++i;
      while (i < text.size() && text[i] != '.' && text[i] != '[')
        ++i;
      if (i == start)
        return fail("empty name after '.'");
      p.steps_.push_back({std::string(text.substr(start, i - start))});
    } else if (text[i] == '[') {
      ++i;
      if (i < text.size() && (text[i] == '\'' || text[i] == '"')) {
        char quote = text[i];
        std::size_t start = ++i;
        while (i < text.size() && text[i] != quote)
          ++i;
        if (i + 1 >= text.size() || text[i + 1] != ']')
          return fail("unterminated quoted name");
        p.steps_.push_back({std::string(text.substr(start, i - start))});
        i += 2;
      } else {
        std::size_t start = i;
        while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])))
          ++i;
        if (i == start || i >= text.size() || text[i] != ']' || i - start > 9)
          return fail("expected a non-negative array index and ']'");
        p.steps_.push_back({{}, std::stol(std::string(text.substr(start, i - start)))});
        ++i;
      }
    } else {
      return fail("expected '.' or '['");
    }
  }
  return p;
}

const rapidjson::Value* json_path::find(const rapidjson::Value& root) const {
  const rapidjson::Value* v = &root;
  for (const auto& s : steps_) {
    if (s.index >= 0) {
      if (!v->IsArray() || static_cast<std::size_t>(s.index) >= v->Size())
        return nullptr;
      v = &(*v)[static_cast<rapidjson::SizeType>(s.index)];
    } else {
      if (!v->IsObject())
        return nullptr;
      // A Value key: the StringRef overload would fall back to strlen and ignore the length.
      rapidjson::Value key(rapidjson::StringRef(s.key.data(), s.key.size()));
      auto it = v->FindMember(key);
      if (it == v->MemberEnd())
        return nullptr;
      v = &it->value;
    }
  }
  return v;
}

} // namespace outboxd::domain
