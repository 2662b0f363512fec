// Prometheus text exposition (version 0.0.4) of the registry.
#include "metrics/metrics.hpp"

#include <fmt/format.h>

namespace outboxd::metrics {
namespace {

std::string escape(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"')
      out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string label_text(const labels& l, std::string_view extra_name = {},
                       std::string_view extra_value = {}) {
  if (l.empty() && extra_name.empty())
    return "";
  std::string out = "{";
  for (const auto& [k, v] : l) {
    if (out.size() > 1)
      out += ',';
    out += fmt::format("{}=\"{}\"", k, escape(v));
  }
  if (!extra_name.empty()) {
    if (out.size() > 1)
      out += ',';
    out += fmt::format("{}=\"{}\"", extra_name, extra_value);
  }
  return out + "}";
}

void header(std::string& out, std::string_view name, std::string_view help, std::string_view type) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

} // namespace

void counter::inc(const labels& l, double by) {
  std::lock_guard lock(mutex_);
  values_[l] += by;
}

double counter::value(const labels& l) const {
  std::lock_guard lock(mutex_);
  auto it = values_.find(l);
  return it == values_.end() ? 0 : it->second;
}

void counter::render(std::string& out) const {
  header(out, name_, help_, "counter");
  std::lock_guard lock(mutex_);
  for (const auto& [l, v] : values_)
    out += fmt::format("{}{} {}\n", name_, label_text(l), v);
}

void histogram::observe(const labels& l, double value) {
  std::lock_guard lock(mutex_);
  auto& s = series_[l];
  if (s.buckets.empty())
    s.buckets.assign(bounds_.size(), 0);
  for (std::size_t i = 0; i < bounds_.size(); ++i)
    if (value <= bounds_[i])
      ++s.buckets[i];
  s.sum += value;
  ++s.count;
}

void histogram::render(std::string& out) const {
  header(out, name_, help_, "histogram");
  std::lock_guard lock(mutex_);
  for (const auto& [l, s] : series_) {
    for (std::size_t i = 0; i < bounds_.size(); ++i)
      out += fmt::format("{}_bucket{} {}\n", name_,
                         label_text(l, "le", fmt::format("{}", bounds_[i])), s.buckets[i]);
    out += fmt::format("{}_bucket{} {}\n", name_, label_text(l, "le", "+Inf"), s.count);
    out += fmt::format("{}_sum{} {}\n", name_, label_text(l), s.sum);
    out += fmt::format("{}_count{} {}\n", name_, label_text(l), s.count);
  }
}

void render_gauge(std::string& out, std::string_view name, std::string_view help,
                  const std::vector<std::pair<labels, double>>& values) {
  header(out, name, help, "gauge");
  for (const auto& [l, v] : values)
    out += fmt::format("{}{} {}\n", name, label_text(l), v);
}

std::string registry::render(const std::function<void(std::string&)>& scrape_gauges) const {
  std::string out;
  for (const auto* c :
       {&events_claimed, &events_processed, &events_retried, &events_dead_lettered, &leases_lost,
        &retention_deleted, &audit_exported, &retention_failures, &lease_expiries, &calls,
        &breaker_transitions, &calls_held, &compensations, &listener_reconnects, &http_requests,
        &http_connections_refused, &busy_slot_seconds})
    c->render(out);
  call_seconds.render(out);
  claim_seconds.render(out);
  intake_batch_orders.render(out);
  if (scrape_gauges)
    scrape_gauges(out);
  return out;
}

registry& global() {
  static registry r;
  return r;
}

} // namespace outboxd::metrics
