// Fault decisions and the knob configuration API's state.
#include "simulator/faults.hpp"

#include "http/json.hpp"
#include "simulator/knobs.hpp"

#include <fmt/format.h>
#include <stdexcept>

namespace outboxd::simulator {
namespace {

std::string show(const rapidjson::Value& v) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  v.Accept(writer);
  std::string text(buffer.GetString(), buffer.GetSize());
  return text.size() > 80 ? text.substr(0, 80) + "..." : text;
}

void write_knobs(http::json_writer& w, const service_knobs& k) {
  w.start_object();
  w.field("failureRate", k.failure_rate);
  w.field("failureStatus", k.failure_status);
  w.key("retryAfter");
  if (const auto* seconds = std::get_if<std::int64_t>(&k.retry_after))
    w.value(*seconds);
  else if (const auto* date = std::get_if<std::string>(&k.retry_after))
    w.value(*date);
  else
    w.null();
  w.key("latencyMs");
  w.start_array();
  w.value(k.latency_min_ms);
  w.value(k.latency_max_ms);
  w.end_array();
  w.field("lateRate", k.late_rate);
  w.field("lateMs", k.late_ms);
  w.field("failNext", k.fail_next);
  w.end_object();
}

} // namespace

fault_injector::fault_injector(const conf::simulator_settings& settings)
    : initial_seed_(settings.seed), seed_(settings.seed), rng_(settings.seed) {
  for (auto name : knob_names) {
    auto it = settings.services.find(std::string(name));
    initial_.emplace(std::string(name),
                     it == settings.services.end() ? service_knobs{} : it->second);
  }
  knobs_ = initial_;
}

double fault_injector::uniform() {
  // 53 random bits give every double in [0, 1) with a step of 2^-53: rate 1.0 always fails,
  // rate 0.0 never does.
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

fault_decision fault_injector::decide(std::string_view knob) {
  std::lock_guard lock(mutex_);
  auto it = knobs_.find(knob);
  if (it == knobs_.end())
    throw std::logic_error(fmt::format("simulator knob '{}' does not exist", knob));
  auto& k = it->second;
  fault_decision d;
  d.status = k.failure_status;
  d.retry_after = k.retry_after;
  // The same number of draws whatever the outcome, so that one knob's settings do not shift
  // the sequence another knob sees for a given seed.
  double fail_draw = uniform();
  double late_draw = uniform();
  std::uint64_t latency_draw = rng_();
  if (k.fail_next > 0) {
    --k.fail_next;
    d.fail = true;
  } else {
    d.fail = fail_draw < k.failure_rate;
  }
  auto span = static_cast<std::uint64_t>(k.latency_max_ms - k.latency_min_ms) + 1;
  d.latency =
      std::chrono::milliseconds(k.latency_min_ms + static_cast<std::int64_t>(latency_draw % span));
  if (!d.fail && late_draw < k.late_rate)
    d.late = std::chrono::milliseconds(k.late_ms);
  return d;
}

std::uint64_t fault_injector::draw(std::uint64_t bound) {
  std::lock_guard lock(mutex_);
  return bound == 0 ? 0 : rng_() % bound;
}

std::vector<std::string> fault_injector::apply_patch(const rapidjson::Value& body) {
  std::vector<std::string> errors;
  if (!body.IsObject()) {
    errors.push_back("the body must be a JSON object like {\"services\": {\"billing.charge\": "
                     "{\"failureRate\": 1.0}}}");
    return errors;
  }
  std::optional<std::uint64_t> new_seed;
  std::lock_guard lock(mutex_);
  auto patched = knobs_;
  for (const auto& m : body.GetObject()) {
    std::string_view name(m.name.GetString(), m.name.GetStringLength());
    if (name == "seed") {
      if (m.value.IsUint64())
        new_seed = m.value.GetUint64();
      else
        errors.push_back(fmt::format("seed must be a non-negative integer, got {}", show(m.value)));
    } else if (name == "services") {
      if (!m.value.IsObject()) {
        errors.push_back(
            fmt::format("services must be an object of knobs by name, got {}", show(m.value)));
        continue;
      }
      for (const auto& s : m.value.GetObject()) {
        std::string knob(s.name.GetString(), s.name.GetStringLength());
        auto it = patched.find(knob);
        if (it == patched.end()) {
          errors.push_back(
              fmt::format("unknown service services.{} (known: {})", knob, known_knob_names()));
          continue;
        }
        for (auto& e : apply_knob_patch(s.value, it->second, "services." + knob))
          errors.push_back(std::move(e));
      }
    } else {
      errors.push_back(fmt::format("unknown key {} (expected seed or services)", name));
    }
  }
  if (!errors.empty())
    return errors;
  knobs_ = std::move(patched);
  if (new_seed) {
    seed_ = *new_seed;
    rng_.seed(seed_);
  }
  return errors;
}

void fault_injector::reset() {
  std::lock_guard lock(mutex_);
  knobs_ = initial_;
  seed_ = initial_seed_;
  rng_.seed(seed_);
}

std::string fault_injector::config_json() const {
  std::lock_guard lock(mutex_);
  http::json_writer w;
  w.start_object();
  w.key("seed");
  w.raw(std::to_string(seed_), rapidjson::kNumberType);
  w.key("services");
  w.start_object();
  for (auto name : knob_names) {
    w.key(name);
    write_knobs(w, knobs_.find(name)->second);
  }
  w.end_object();
  w.end_object();
  return w.str();
}

service_knobs fault_injector::knobs(std::string_view knob) const {
  std::lock_guard lock(mutex_);
  auto it = knobs_.find(knob);
  if (it == knobs_.end())
    throw std::logic_error(fmt::format("simulator knob '{}' does not exist", knob));
  return it->second;
}

std::uint64_t fault_injector::seed() const {
  std::lock_guard lock(mutex_);
  return seed_;
}

} // namespace outboxd::simulator
