// Knob validation. The messages are the loader's (same wording for a file, an environment
// variable or the HTTP API), so the small JSON helpers below mirror loader.cpp's.
#include "conf/knobs.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fmt/format.h>
#include <limits>
#include <optional>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace outboxd::conf {
namespace {

using rapidjson::Value;

constexpr std::int64_t latency_limit_ms = 60000;
constexpr std::int64_t late_limit_ms = 600000;
constexpr std::int64_t int_max = std::numeric_limits<int>::max();

std::string_view string_of(const Value& v) {
  return {v.GetString(), v.GetStringLength()};
}

// A value as it appears in messages: JSON text, cut short so one bad value cannot flood a log.
std::string show(const Value& v) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  v.Accept(writer);
  std::string text(buffer.GetString(), buffer.GetSize());
  constexpr std::size_t limit = 80;
  if (text.size() > limit)
    text = text.substr(0, limit) + "...";
  return text;
}

// JSON integers and integral doubles (3.0, 1e3); huge values are clamped so the range check
// rejects them with the original text in the message.
std::optional<std::int64_t> integer_of(const Value& v) {
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

std::string suggestion(std::string_view wrong) {
  std::string_view best;
  std::size_t best_distance = 3;
  for (auto field : knob_fields) {
    auto d = edit_distance(lowercase(wrong), lowercase(field));
    if (d < best_distance) {
      best = field;
      best_distance = d;
    }
  }
  return best.empty() ? std::string() : fmt::format(" (did you mean {}?)", best);
}

class knob_reader {
public:
  knob_reader(const Value& patch, const std::string& path, std::vector<std::string>& errors)
      : patch_(patch), path_(path), errors_(errors) {}

  const Value* get(std::string_view field) const {
    auto it = patch_.FindMember(Value(rapidjson::StringRef(field.data(), field.size())));
    return it == patch_.MemberEnd() ? nullptr : &it->value;
  }
  std::string path(std::string_view field) const { return fmt::format("{}.{}", path_, field); }
  void fail(std::string message) { errors_.push_back(std::move(message)); }

  void fraction(std::string_view field, double& out) {
    const Value* v = get(field);
    if (!v)
      return;
    if (!v->IsNumber())
      fail(fmt::format("{} must be a number, got {}", path(field), show(*v)));
    else if (v->GetDouble() < 0.0 || v->GetDouble() > 1.0)
      fail(fmt::format("{} must be between 0 and 1, got {}", path(field), show(*v)));
    else
      out = v->GetDouble();
  }

  void integer(std::string_view field, int& out, std::int64_t lo, std::int64_t hi) {
    const Value* v = get(field);
    if (!v)
      return;
    auto i = integer_of(*v);
    if (!i) {
      fail(fmt::format("{} must be an integer, got {}", path(field), show(*v)));
      return;
    }
    if (*i < lo || *i > hi) {
      auto rule = hi == int_max ? fmt::format("must be >= {}", lo)
                                : fmt::format("must be between {} and {}", lo, hi);
      fail(fmt::format("{} {}, got {}", path(field), rule, show(*v)));
      return;
    }
    out = static_cast<int>(*i);
  }

  void report_unknown() {
    for (const auto& m : patch_.GetObject()) {
      auto name = string_of(m.name);
      if (std::find(knob_fields.begin(), knob_fields.end(), name) == knob_fields.end())
        fail(fmt::format("unknown key {}{}", path(name), suggestion(name)));
    }
  }

private:
  const Value& patch_;
  const std::string& path_;
  std::vector<std::string>& errors_;
};

} // namespace

bool is_knob_name(std::string_view name) {
  return std::find(knob_names.begin(), knob_names.end(), name) != knob_names.end();
}

std::string known_knob_names() {
  std::string out;
  for (auto name : knob_names)
    out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

std::vector<std::string> apply_knob_patch(const rapidjson::Value& patch, simulator_knobs& knobs,
                                          const std::string& key_path) {
  std::vector<std::string> errors;
  if (!patch.IsObject()) {
    errors.push_back(fmt::format("{} must be an object, got {}", key_path, show(patch)));
    return errors;
  }
  knob_reader r(patch, key_path, errors);
  r.fraction("failureRate", knobs.failure_rate);
  r.integer("failureStatus", knobs.failure_status, 400, 599);
  if (const Value* v = r.get("retryAfter")) {
    auto i = integer_of(*v);
    if (v->IsNull())
      knobs.retry_after = std::monostate{};
    else if (i && *i >= 0)
      knobs.retry_after = *i;
    else if (v->IsString() && v->GetStringLength() > 0)
      knobs.retry_after = std::string(string_of(*v));
    else
      r.fail(fmt::format("{} must be null, a non-negative number of seconds or an HTTP-date "
                         "string, got {}",
                         r.path("retryAfter"), show(*v)));
  }
  if (const Value* v = r.get("latencyMs")) {
    std::optional<std::int64_t> lo, hi;
    if (v->IsArray() && v->Size() == 2) {
      lo = integer_of((*v)[0]);
      hi = integer_of((*v)[1]);
    } else if (!v->IsArray()) {
      lo = hi = integer_of(*v);
    }
    if (lo && hi && *lo >= 0 && *lo <= *hi && *hi <= latency_limit_ms) {
      knobs.latency_min_ms = static_cast<int>(*lo);
      knobs.latency_max_ms = static_cast<int>(*hi);
    } else {
      r.fail(fmt::format("{} must be a number of milliseconds or [min, max] with 0 <= min <= max "
                         "<= {}, got {}",
                         r.path("latencyMs"), latency_limit_ms, show(*v)));
    }
  }
  r.fraction("lateRate", knobs.late_rate);
  r.integer("lateMs", knobs.late_ms, 0, late_limit_ms);
  r.integer("failNext", knobs.fail_next, 0, int_max);
  r.report_unknown();
  return errors;
}

} // namespace outboxd::conf
