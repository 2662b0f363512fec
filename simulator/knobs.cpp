// Knob validation. The messages read like the loader's (same wording for a file, an environment
// variable or the HTTP API) because both use conf/json_values.
#include "simulator/knobs.hpp"

#include "conf/json_values.hpp"
#include "domain/delivery.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <limits>
#include <optional>

namespace outboxd::simulator {
namespace {

using conf::integer_of;
using conf::show;
using rapidjson::Value;

constexpr std::int64_t latency_limit_ms = 60000;
constexpr std::int64_t late_limit_ms = 600000;
constexpr std::int64_t int_max = std::numeric_limits<int>::max();

std::string_view string_of(const Value& v) {
  return {v.GetString(), v.GetStringLength()};
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
      fail(fmt::format("{} must be between {} and {}, got {}", path(field), lo, hi, show(*v)));
      return;
    }
    out = static_cast<int>(*i);
  }

  void report_unknown() {
    for (const auto& m : patch_.GetObject()) {
      auto name = string_of(m.name);
      if (std::find(knob_fields.begin(), knob_fields.end(), name) == knob_fields.end())
        fail(fmt::format("unknown key {}{}", path(name),
                         conf::suggestion(name, {knob_fields.begin(), knob_fields.end()})));
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

std::vector<std::string> apply_knob_patch(const rapidjson::Value& patch, service_knobs& knobs,
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
    // as the engine reads a Retry-After: what it cannot read would not be sent
    else if (v->IsString() && domain::parse_retry_after(string_of(*v), 0))
      knobs.retry_after = std::string(string_of(*v));
    else
      r.fail(fmt::format("{} must be null, a non-negative number of seconds or an HTTP-date "
                         "string such as \"Wed, 21 Oct 2015 07:28:00 GMT\", got {}",
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

} // namespace outboxd::simulator
