// Templates are tokenised once with rapidjson's SAX reader (numbers as raw text, so a decimal
// like 12.50 is written back as the reference wrote it) and replayed per response.
#include "simulator/body_template.hpp"

#include <fmt/format.h>
#include <rapidjson/reader.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <stdexcept>

namespace outboxd::simulator::embedded {
std::vector<std::pair<std::string_view, std::string_view>> files();
} // namespace outboxd::simulator::embedded

namespace outboxd::simulator {
namespace {

using token = body_templates::token;
using kind = token::kind;
using writer = rapidjson::Writer<rapidjson::StringBuffer>;

std::string json_of(std::string_view text) {
  rapidjson::StringBuffer buffer;
  writer w(buffer);
  w.String(text.data(), static_cast<rapidjson::SizeType>(text.size()));
  return {buffer.GetString(), buffer.GetSize()};
}

/// Collects the tokens of each depth-1 member of the document.
struct tokeniser : rapidjson::BaseReaderHandler<rapidjson::UTF8<>, tokeniser> {
  std::map<std::string, std::vector<token>, std::less<>>& out;
  int depth = 0;
  std::string name;

  explicit tokeniser(std::map<std::string, std::vector<token>, std::less<>>& o) : out(o) {}

  bool add(kind k, std::string text = {}) {
    if (depth < 1)
      return false; // the document must be an object of templates
    out[name].push_back({k, std::move(text)});
    return true;
  }
  bool Null() { return add(kind::null); }
  bool Bool(bool b) { return add(kind::boolean, b ? "true" : "false"); }
  bool RawNumber(const char* s, rapidjson::SizeType n, bool) { return add(kind::number, {s, n}); }
  bool String(const char* s, rapidjson::SizeType n, bool) { return add(kind::string, {s, n}); }
  bool Key(const char* s, rapidjson::SizeType n, bool) {
    if (depth == 1) {
      name.assign(s, n);
      return true;
    }
    return add(kind::key, {s, n});
  }
  bool StartObject() {
    bool ok = depth == 0 || add(kind::start_object);
    ++depth;
    return ok;
  }
  bool EndObject(rapidjson::SizeType) {
    --depth;
    return depth == 0 || add(kind::end_object);
  }
  bool StartArray() {
    bool ok = add(kind::start_array);
    ++depth;
    return ok;
  }
  bool EndArray(rapidjson::SizeType) {
    --depth;
    return add(kind::end_array);
  }
  bool Default() { return false; }
};

/// "{x}" -> "x" for a whole-string placeholder, else empty.
std::string_view placeholder(std::string_view s) {
  if (s.size() > 2 && s.front() == '{' && s.back() == '}' &&
      s.find_first_of("{}", 1) == s.size() - 1)
    return s.substr(1, s.size() - 2);
  return {};
}

std::string interpolate(std::string_view s, const body_values& values) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    auto open = s.find('{', i);
    auto close = open == std::string_view::npos ? open : s.find('}', open);
    if (close == std::string_view::npos) {
      out.append(s.substr(i));
      break;
    }
    auto name = s.substr(open + 1, close - open - 1);
    const auto* v = values.find(name);
    if (!v)
      throw std::logic_error(fmt::format("response template value '{}' is not set", name));
    out.append(s.substr(i, open - i)).append(v->text);
    i = close + 1;
  }
  return out;
}

} // namespace

void body_values::set(const std::string& name, std::string_view text) {
  values_[name] = {json_of(text), std::string(text)};
}

void body_values::set(const std::string& name, std::int64_t number) {
  auto text = std::to_string(number);
  values_[name] = {text, text};
}

void body_values::set(const std::string& name, double number) {
  rapidjson::StringBuffer buffer;
  writer w(buffer);
  w.Double(number);
  std::string text(buffer.GetString(), buffer.GetSize());
  values_[name] = {text, text};
}

void body_values::set_raw(const std::string& name, std::string json) {
  values_[name] = {json, json};
}

const body_values::value* body_values::find(std::string_view name) const {
  auto it = values_.find(name);
  return it == values_.end() ? nullptr : &it->second;
}

body_templates::body_templates(std::string_view json) {
  tokeniser handler(templates_);
  rapidjson::Reader reader;
  std::string copy(json);
  rapidjson::StringStream in(copy.c_str());
  auto result = reader.Parse<rapidjson::kParseNumbersAsStringsFlag>(in, handler);
  if (result.IsError())
    throw std::invalid_argument(fmt::format(
        "response templates are not an object of JSON templates (offset {})", result.Offset()));
}

bool body_templates::has(std::string_view name) const {
  return templates_.find(name) != templates_.end();
}

std::vector<std::string> body_templates::names() const {
  std::vector<std::string> out;
  for (const auto& [name, tokens] : templates_)
    out.push_back(name);
  return out;
}

std::string body_templates::render(std::string_view name, const body_values& values) const {
  auto it = templates_.find(name);
  if (it == templates_.end())
    throw std::logic_error(fmt::format("no response template '{}'", name));
  rapidjson::StringBuffer buffer;
  writer w(buffer);
  const std::string* pending_key = nullptr; // written with the value, so an unset one drops both
  auto flush = [&] {
    if (pending_key)
      w.Key(pending_key->data(), static_cast<rapidjson::SizeType>(pending_key->size()));
    pending_key = nullptr;
  };
  for (const auto& t : it->second) {
    if (t.what == kind::key) {
      pending_key = &t.text;
      continue;
    }
    if (t.what == kind::string) {
      if (auto var = placeholder(t.text); !var.empty()) {
        const auto* v = values.find(var);
        if (v) {
          flush();
          w.RawValue(v->json.data(), v->json.size(), rapidjson::kStringType);
        }
        pending_key = nullptr;
        continue;
      }
    }
    flush();
    switch (t.what) {
    case kind::start_object:
      w.StartObject();
      break;
    case kind::end_object:
      w.EndObject();
      break;
    case kind::start_array:
      w.StartArray();
      break;
    case kind::end_array:
      w.EndArray();
      break;
    case kind::string: {
      auto s = interpolate(t.text, values);
      w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
      break;
    }
    case kind::number:
      w.RawValue(t.text.data(), t.text.size(), rapidjson::kNumberType);
      break;
    case kind::boolean:
      w.Bool(t.text == "true");
      break;
    case kind::null:
      w.Null();
      break;
    case kind::key:
      break;
    }
  }
  return {buffer.GetString(), buffer.GetSize()};
}

const body_templates& reference_bodies() {
  static const body_templates bodies = [] {
    for (const auto& [file, text] : embedded::files())
      if (file == "responses.json")
        return body_templates(text);
    throw std::logic_error("responses.json is not compiled in");
  }();
  return bodies;
}

} // namespace outboxd::simulator
