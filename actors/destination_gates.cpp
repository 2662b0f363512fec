// One gate per configured destination, each behind its own mutex: workers calling different
// destinations never wait for each other.
#include "actors/destination_gates.hpp"

#include "log/log.hpp"
#include "metrics/metrics.hpp"

#include <algorithm>

namespace outboxd::actors {
namespace {

using std::chrono::milliseconds;
using clock = destination_gates::clock;

milliseconds until(clock::time_point at, clock::time_point now) {
  return std::max(milliseconds{1}, std::chrono::ceil<milliseconds>(at - now));
}

std::string duration_text(milliseconds d) {
  return d.count() % 1000 == 0 ? fmt::format("{}s", d.count() / 1000)
                               : fmt::format("{}ms", d.count());
}

} // namespace

struct destination_gates::gate {
  gate(const domain::destination& d, clock::time_point now)
      : name(d.name), max_concurrency(d.max_concurrency), rate_per_second(d.rate_per_second),
        threshold(d.breaker.failure_threshold), breaker(d.breaker) {
    if (rate_per_second > 0)
      bucket.emplace(rate_per_second, now);
  }

  const std::string name;
  const int max_concurrency;
  const double rate_per_second;
  const int threshold;
  mutable std::mutex mutex;
  domain::circuit_breaker breaker;
  std::optional<domain::token_bucket> bucket;
  int in_flight = 0;
  long long held = 0;
};

destination_gates::destination_gates(const domain::routing_table& routing) {
  auto now = clock::now();
  for (const auto& [name, d] : routing.destinations)
    gates_.emplace(name, std::make_unique<gate>(d, now));
}

destination_gates::~destination_gates() = default;

destination_gates::permit::permit(permit&& other) noexcept
    : owner_(other.owner_), gate_(other.gate_), probe_(other.probe_),
      not_before_(other.not_before_), reported_(other.reported_) {
  other.gate_ = nullptr;
}

destination_gates::permit::~permit() {
  if (gate_ && !reported_)
    owner_->finish(*gate_, probe_, std::nullopt);
}

bool destination_gates::permit::report(domain::attempt_outcome outcome,
                                       std::optional<milliseconds> retry_after) {
  if (!gate_ || reported_)
    return false;
  reported_ = true;
  return owner_->finish(*gate_, probe_, outcome, retry_after) == domain::breaker_state::closed;
}

std::variant<destination_gates::permit, destination_gates::hold, destination_gates::retry>
destination_gates::try_enter(const std::string& name, const std::string& who,
                             clock::time_point give_up_at) {
  auto found = gates_.find(name);
  if (found == gates_.end())
    return permit(this, nullptr, false); // not a configured destination: nothing to guard
  gate& g = *found->second;
  auto& held_total = metrics::global().calls_held;
  std::unique_lock lock(g.mutex);
  const auto now = clock::now();
  auto held = [&](const char* kind, milliseconds delay, std::string reason) {
    ++g.held;
    held_total.inc({{"destination", g.name}, {"reason", kind}});
    return hold{delay, std::move(reason)};
  };

  auto admission = g.breaker.admit(now);
  if (!admission.allowed)
    return held("breaker", until(admission.retry_at, now),
                fmt::format("{}: circuit {}", g.name,
                            g.breaker.state() == domain::breaker_state::half_open
                                ? "half-open, its probe in flight"
                                : domain::to_string(g.breaker.state())));
  // A probe that cannot go now gives its turn back: the next ask may probe again.
  auto not_now = [&] {
    if (admission.probe)
      g.breaker.abandon_probe();
  };
  if (g.max_concurrency > 0 && g.in_flight >= g.max_concurrency) {
    not_now();
    if (now >= give_up_at)
      return held("concurrency", max_limit_wait,
                  fmt::format("{}: maxConcurrency {} calls in flight", g.name, g.max_concurrency));
    return retry{std::min(now + slot_poll, give_up_at)};
  }
  std::optional<clock::time_point> start_at;
  if (g.bucket) {
    start_at = g.bucket->take(now, max_limit_wait);
    if (!start_at) {
      not_now();
      return held("rate", until(g.bucket->next_token(now), now),
                  fmt::format("{}: ratePerSecond {} reached", g.name, g.rate_per_second));
    }
    if (*start_at <= now)
      start_at.reset();
  }
  ++g.in_flight;
  lock.unlock();
  if (admission.probe) {
    metrics::global().breaker_transitions.inc({{"destination", g.name}, {"state", "half_open"}});
    log::info(who, "destination {}: circuit half-open, this call probes it", g.name);
  }
  return permit(this, &g, admission.probe, start_at);
}

std::optional<domain::breaker_state>
destination_gates::finish(gate& g, bool probe, std::optional<domain::attempt_outcome> outcome,
                          std::optional<milliseconds> retry_after) {
  std::unique_lock lock(g.mutex);
  --g.in_flight;
  if (!outcome) {
    if (probe)
      g.breaker.abandon_probe();
    return std::nullopt;
  }
  auto now = clock::now();
  bool failed = *outcome == domain::attempt_outcome::retryable;
  auto changed = g.breaker.report(failed, probe, now, retry_after);
  if (!changed)
    return std::nullopt;
  auto to = std::string(domain::to_string(*changed));
  auto open_for = until(g.breaker.open_until(), now);
  // Longer than the cool-down: the partner's Retry-After asked for it.
  auto asked = open_for > g.breaker.cool_down() ? " (as the partner's Retry-After asked)" : "";
  lock.unlock();
  metrics::global().breaker_transitions.inc({{"destination", g.name}, {"state", to}});
  if (*changed == domain::breaker_state::closed)
    log::info("breaker", "destination {}: circuit closed, the probe was answered; calls resume",
              g.name);
  else if (probe)
    log::warn("breaker", "destination {}: circuit open again for {}{}, the probe failed", g.name,
              duration_text(open_for), asked);
  else
    log::warn("breaker",
              "destination {}: circuit open for {}{} after {} failed calls in a row; its events "
              "wait without spending retries",
              g.name, duration_text(open_for), asked, g.threshold);
  return changed;
}

std::vector<domain::destination_health> destination_gates::health() const {
  std::vector<domain::destination_health> out;
  auto now = clock::now();
  for (const auto& [name, g] : gates_) {
    std::lock_guard lock(g->mutex);
    domain::destination_health h;
    h.name = name;
    h.state = g->breaker.state();
    h.failures_in_a_row = g->breaker.failures_in_a_row();
    if (h.state == domain::breaker_state::open)
      h.opens_again_in =
          std::max(milliseconds{0}, std::chrono::ceil<milliseconds>(g->breaker.open_until() - now));
    h.in_flight = g->in_flight;
    h.max_concurrency = g->max_concurrency;
    h.rate_per_second = g->rate_per_second;
    h.held = g->held;
    out.push_back(std::move(h));
  }
  return out;
}

} // namespace outboxd::actors
