// Compensation planning: matching a stored endpoint to its route and building the revert call
// from the route's template, without letting stored values change the host, path or body shape.
#include "domain/revert.hpp"

#include "domain/delivery.hpp"
#include "domain/secrets.hpp"
#include "domain/url.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <map>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <vector>

namespace outboxd::domain {
namespace {

using allocator = rapidjson::Document::AllocatorType;

std::string_view view(const rapidjson::Value& v) {
  return {v.GetString(), v.GetStringLength()};
}

bool is_delimiter(char c) {
  return c == '/' || c == '?' || c == '#';
}

/// `text` cut at every '/', '?' and '#'; the delimiters are kept as pieces of their own so that
/// two URLs only match when they have the same structure.
std::vector<std::string_view> pieces(std::string_view text) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i)
    if (is_delimiter(text[i])) {
      out.push_back(text.substr(start, i - start));
      out.push_back(text.substr(i, 1));
      start = i + 1;
    }
  out.push_back(text.substr(start));
  return out;
}

constexpr int any_one = -1;
constexpr int any_run = -2;

/// Whether `s` matches a template piece in which each placeholder stands for one or more
/// characters. A piece holds no delimiter, so a placeholder cannot reach into the next segment.
/// Classic wildcard matching: linear for the usual one placeholder, O(n*m) at worst.
bool piece_matches(std::string_view templ, std::string_view s) {
  std::vector<int> p;
  std::size_t pos = 0;
  while (auto ph = next_placeholder(templ, pos)) {
    for (std::size_t i = pos; i < ph->begin; ++i)
      p.push_back(static_cast<unsigned char>(templ[i]));
    p.push_back(any_one);
    p.push_back(any_run);
    pos = ph->end;
  }
  for (std::size_t i = pos; i < templ.size(); ++i)
    p.push_back(static_cast<unsigned char>(templ[i]));

  std::size_t i = 0, j = 0, star = std::string_view::npos, mark = 0;
  while (j < s.size()) {
    if (i < p.size() && (p[i] == any_one || p[i] == static_cast<unsigned char>(s[j]))) {
      ++i;
      ++j;
    } else if (i < p.size() && p[i] == any_run) {
      star = i++;
      mark = j;
    } else if (star != std::string_view::npos) {
      i = star + 1;
      j = ++mark;
    } else {
      return false;
    }
  }
  while (i < p.size() && p[i] == any_run)
    ++i;
  return i == p.size();
}

bool url_matches(std::string_view templ, std::string_view url) {
  auto t = pieces(templ);
  auto u = pieces(url);
  if (t.size() != u.size())
    return false;
  for (std::size_t k = 0; k < t.size(); ++k)
    if (!piece_matches(t[k], u[k]))
      return false;
  return true;
}

std::string json_text(const rapidjson::Value& v) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  v.Accept(w);
  return {sb.GetString(), sb.GetSize()};
}

using validating_writer =
    rapidjson::Writer<rapidjson::StringBuffer, rapidjson::UTF8<>, rapidjson::UTF8<>,
                      rapidjson::CrtAllocator, rapidjson::kWriteValidateEncodingFlag>;

/// Stored bodies may hold bytes that are not UTF-8 (a receiver would refuse such a JSON body).
bool valid_utf8(const rapidjson::Value& v) {
  rapidjson::StringBuffer sb;
  validating_writer w(sb);
  return v.Accept(w);
}

/// A value as text inside a longer string: strings without their quotes, anything else as JSON.
std::string plain_text(const rapidjson::Value& v) {
  return v.IsString() ? std::string(view(v)) : json_text(v);
}

/// Finds placeholder values in the stored bodies, naming the placeholder in every error.
class resolver {
public:
  resolver(const revert_template& t, const rapidjson::Value* request,
           const rapidjson::Value* response)
      : t_(t), request_(request), response_(response) {}

  expected<const rapidjson::Value*> find(std::string_view name) const {
    auto it = t_.extract.find(std::string(name));
    if (it == t_.extract.end())
      return error{fmt::format("revert placeholder {{{}}} has no extract entry", name)};
    const auto& x = it->second;
    bool from_request = x.from == extraction::source::request;
    auto where = fmt::format("{}:{}", from_request ? "request" : "response", x.path.text());
    const rapidjson::Value* body = from_request ? request_ : response_;
    if (body == nullptr)
      return error{fmt::format("revert placeholder {{{}}} reads {} but the stored {} is missing",
                               name, where, from_request ? "request" : "response")};
    const rapidjson::Value* v = x.path.find(*body);
    if (v == nullptr)
      return error{
          fmt::format("revert placeholder {{{}}} has no value: {} is missing", name, where)};
    if (v->IsNull())
      return error{fmt::format("revert placeholder {{{}}} has no value: {} is null", name, where)};
    // A whole number beyond 2^53 that is not a 64-bit integer was read as a double: copied, it
    // would be another number (12345678901234567890123 becomes 1.2345678901234568e22), and the
    // revert would release something else, or nothing, and count as done.
    if (v->IsDouble() && std::abs(v->GetDouble()) >= 0x1p53 &&
        v->GetDouble() == std::trunc(v->GetDouble()))
      return error{fmt::format("revert placeholder {{{}}}: {} is a number too large to copy "
                               "exactly ({})",
                               name, where, json_text(*v))};
    return v;
  }

  /// `find` for a payload placeholder, whose value also has to be valid in a JSON body.
  expected<const rapidjson::Value*> find_for_body(std::string_view name) const {
    auto found = find(name);
    if (found && !valid_utf8(*found.value()))
      return error{
          fmt::format("revert placeholder {{{}}} has a value that is not valid UTF-8", name)};
    return found;
  }

private:
  const revert_template& t_;
  const rapidjson::Value* request_;
  const rapidjson::Value* response_;
};

/// Fills placeholders inside the string values of `v` (never its keys). Substituted values are
/// not scanned again, so a value that looks like "{other}" stays as it is.
std::optional<error> substitute(rapidjson::Value& v, allocator& alloc, const resolver& values) {
  if (v.IsObject()) {
    for (auto& m : v.GetObject())
      if (auto e = substitute(m.value, alloc, values))
        return e;
  } else if (v.IsArray()) {
    for (auto& element : v.GetArray())
      if (auto e = substitute(element, alloc, values))
        return e;
  } else if (v.IsString()) {
    auto text = view(v);
    auto first = next_placeholder(text, 0);
    if (!first)
      return std::nullopt;
    if (first->begin == 0 && first->end == text.size()) {
      auto found = values.find_for_body(first->name);
      if (!found)
        return found.err();
      v.CopyFrom(*found.value(), alloc); // serialised before the stored bodies go away
      return std::nullopt;
    }
    std::string out;
    std::size_t pos = 0;
    for (auto ph = first; ph; ph = next_placeholder(text, pos)) {
      auto found = values.find_for_body(ph->name);
      if (!found)
        return found.err();
      out.append(text.substr(pos, ph->begin - pos));
      out += plain_text(*found.value());
      pos = ph->end;
    }
    out.append(text.substr(pos));
    v.SetString(out, alloc);
  }
  return std::nullopt;
}

} // namespace

bool same_revert(const route& a, const route& b) {
  if (!a.revert || !b.revert)
    return !a.revert && !b.revert;
  const auto& x = *a.revert;
  const auto& y = *b.revert;
  auto same_extraction = [](const auto& p, const auto& q) {
    return p.first == q.first && p.second.from == q.second.from &&
           p.second.path.text() == q.second.path.text();
  };
  return x.url == y.url && x.method == y.method && x.payload_json == y.payload_json &&
         std::equal(x.extract.begin(), x.extract.end(), y.extract.begin(), y.extract.end(),
                    same_extraction);
}

bool urls_overlap(std::string_view a, std::string_view b) {
  return a == b || url_matches(a, b) || url_matches(b, a);
}

namespace {
/// Whether the call to `called_url` went by route URL `templ`: the audit holds the URL with its
/// credentials masked (rows written before that, as called).
bool called_by(const std::string& templ, std::string_view called_url) {
  return url_matches(templ, called_url) || url_matches(mask_url_credentials(templ), called_url);
}
} // namespace

const route* route_for_url(const destination& d, std::string_view called_url) {
  const route* found = nullptr;
  for (const auto& r : d.routes)
    if (called_by(r.url, called_url)) {
      if (found && !same_revert(*found, r))
        return nullptr;
      if (!found)
        found = &r;
    }
  return found;
}

const route* route_to_revert(const destination& d, std::string_view called_url) {
  if (const route* found = route_for_url(d, called_url))
    return found;
  if (d.routes.empty())
    return nullptr;
  for (const auto& r : d.routes)
    if (!same_revert(r, d.routes.front()))
      return nullptr;
  return &d.routes.front();
}

std::string route_miss(const destination& d, std::string_view called_url) {
  std::vector<std::size_t> matching;
  for (std::size_t i = 0; i < d.routes.size(); ++i)
    if (called_by(d.routes[i].url, called_url))
      matching.push_back(i);
  if (matching.empty() && !d.routes.empty())
    return fmt::format("cannot tell which configured route called {}: no route of {} has that URL "
                       "now (changed since the call?) and its routes revert differently",
                       called_url, d.name);
  if (matching.size() < 2)
    return fmt::format("cannot tell which configured route called {}", called_url);
  return fmt::format("cannot tell which configured route called {}: routes {} of {} match it and "
                     "revert differently",
                     called_url, fmt::join(matching, ", "), d.name);
}

expected<revert_call> build_revert(const revert_template& t, const rapidjson::Value* request,
                                   const rapidjson::Value* response) {
  resolver values(t, request, response);

  std::map<std::string, std::string> params;
  for (const auto& name : template_placeholders(t.url)) {
    auto found = values.find(name);
    if (!found)
      return found.err();
    const auto& v = *found.value();
    if (v.IsObject() || v.IsArray())
      return error{fmt::format("revert url placeholder {{{}}} must be a string, number or "
                               "boolean, got {}",
                               name, v.IsObject() ? "an object" : "an array")};
    auto text = plain_text(v);
    // A partner must not set the size of a revert's URL (and of its log line) with a
    // megabyte-long id.
    if (text.size() > max_url_value_bytes)
      return error{fmt::format("revert url placeholder {{{}}} is {} bytes long, over the {} a URL "
                               "takes",
                               name, text.size(), max_url_value_bytes)};
    params.insert_or_assign(name, std::move(text));
  }
  auto url = fill_url(t.url, params);
  if (!url)
    return url.err();

  revert_call call{std::move(url.value()), t.method, {}};
  if (t.payload_json.empty())
    return call;
  rapidjson::Document body;
  body.Parse(t.payload_json.data(), t.payload_json.size());
  if (body.HasParseError())
    return error{fmt::format("revert payload template is not valid JSON: {}", t.payload_json)};
  if (auto e = substitute(body, body.GetAllocator(), values))
    return *e;
  rapidjson::StringBuffer sb;
  validating_writer w(sb);
  if (!body.Accept(w)) // the template itself was validated when the configuration was loaded
    return error{"revert payload template is not valid UTF-8"};
  call.body_json.assign(sb.GetString(), sb.GetSize());
  return call;
}

std::optional<std::string> uncertain_step(const std::vector<std::string>& fanout,
                                          const std::map<std::string, step_history>& steps,
                                          const std::vector<std::int64_t>& interrupted) {
  for (const auto& [name, step] : steps)
    if (is_revert_step(name))
      return std::nullopt;
  auto history = [&](const std::string& name) -> const step_history* {
    auto it = steps.find(name);
    return it == steps.end() ? nullptr : &it->second;
  };
  // Where run `r` stood: the first step that neither it nor a run before it got done.
  auto position = [&](std::int64_t r) {
    return std::find_if(fanout.begin(), fanout.end(), [&](const std::string& name) {
      const auto* h = history(name);
      return !h || !h->done_in || *h->done_in > r;
    });
  };
  // The first step not done at all (a compensation's own successful re-send counts here, not
  // for where a run stood).
  auto first_open = std::find_if(fanout.begin(), fanout.end(), [&](const std::string& name) {
    const auto* h = history(name);
    return !h || (h->state != step_state::succeeded && h->state != step_state::skipped);
  });
  if (first_open == fanout.end())
    return std::nullopt;
  const auto* step = history(*first_open);
  if (step && step->state == step_state::refused)
    return std::nullopt;
  if (step && step->state == step_state::unanswered)
    return *first_open;
  for (auto r : interrupted)
    if (position(r) == first_open &&
        (!step || std::find(step->runs.begin(), step->runs.end(), r) == step->runs.end()))
      return *first_open; // cut off there, perhaps in the middle of its call
  return std::nullopt;
}

} // namespace outboxd::domain
