// Process metrics in the Prometheus text format: labelled counters and histograms updated by the
// actors and the HTTP server, and gauges computed at scrape time. Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace outboxd::metrics {

using labels = std::vector<std::pair<std::string, std::string>>;

/// A counter family: one monotonically increasing value per label set.
class counter {
public:
  /// The series of a counter without labels (`unlabelled`) is there from the start at 0, so
  /// that a scrape shows it and rate() sees its first increment; one with labels has a series
  /// per label set, from its first increment.
  counter(std::string name, std::string help, bool unlabelled = false)
      : name_(std::move(name)), help_(std::move(help)) {
    if (unlabelled)
      values_[{}] = 0;
  }
  void inc(const labels& l = {}, double by = 1);
  void render(std::string& out) const;
  /// The current value for `l` (0 when never incremented); for tests.
  double value(const labels& l = {}) const;

private:
  std::string name_, help_;
  mutable std::mutex mutex_;
  std::map<labels, double> values_;
};

/// A histogram family with fixed buckets (upper bounds, in the unit of the observations).
class histogram {
public:
  histogram(std::string name, std::string help, std::vector<double> buckets)
      : name_(std::move(name)), help_(std::move(help)), bounds_(std::move(buckets)) {}
  void observe(const labels& l, double value);
  void render(std::string& out) const;

private:
  struct series {
    std::vector<std::uint64_t> buckets;
    double sum = 0;
    std::uint64_t count = 0;
  };
  std::string name_, help_;
  std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::map<labels, series> series_;
};

/// Appends one gauge family (`# HELP`, `# TYPE gauge`, one line per label set).
void render_gauge(std::string& out, std::string_view name, std::string_view help,
                  const std::vector<std::pair<labels, double>>& values);

/// The metrics every part of outboxd updates (names `outboxd_*`).
struct registry {
  counter events_claimed{"outboxd_events_claimed_total", "Outbox events claimed, by event type."};
  counter events_processed{"outboxd_events_processed_total",
                           "Outbox events completed (PROCESSED), by event type."};
  counter events_retried{"outboxd_events_retried_total",
                         "Outbox events scheduled for a retry, by event type."};
  counter events_dead_lettered{
      "outboxd_events_dead_lettered_total",
      "Outbox events moved to the dead-letter queue, by event type and reason."};
  counter leases_lost{"outboxd_leases_lost_total",
                      "Results dropped because the worker's lease had been lost.", true};
  counter retention_deleted{"outboxd_retention_deleted_total",
                            "Rows deleted by retention, by table."};
  counter audit_exported{"outboxd_audit_exported_total",
                         "Audit rows written to the export folder before retention deleted them.",
                         true};
  counter retention_failures{"outboxd_retention_failures_total",
                             "Retention runs that failed (and are tried again), by table."};
  counter lease_expiries{"outboxd_lease_expiries_total",
                         "Expired leases reclaimed by the reaper, by table."};
  counter calls{"outboxd_destination_calls_total",
                "Attempts at destinations (forward and revert), by destination and outcome; a "
                "skipped one (a read-only step's revert) made no call."};
  histogram call_seconds{"outboxd_destination_call_seconds",
                         "Duration of HTTP calls to destinations, by destination.",
                         {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};
  counter breaker_transitions{
      "outboxd_circuit_breaker_transitions_total",
      "Circuit breaker state changes, by destination and the state entered."};
  counter calls_held{"outboxd_calls_held_total",
                     "Runs held back without a call (and without spending a retry), by "
                     "destination and reason (breaker, concurrency, rate)."};
  histogram claim_seconds{
      "outboxd_claim_seconds",
      "Duration of claim statements (the database round trip), by queue (outbox, dead_letter).",
      {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120}};
  counter busy_slot_seconds{
      "outboxd_processor_busy_slot_seconds_total",
      "Slot-seconds the processors' runs held, by queue (outbox, dead_letter): its rate over the "
      "slots (outbox.poolSize x outbox.callsInFlight for outbox, outbox.poolSize for dead_letter) "
      "is how full they were. A run whose completion is being written holds none."};
  histogram intake_batch_orders{
      "outboxd_intake_batch_orders",
      "New orders per batch written together (creates that arrive together share a transaction; "
      "a batch one bad order failed is written again as batches of one).",
      {1, 2, 4, 8, 16, 32, 64}};
  counter compensations{"outboxd_compensations_total",
                        "Compensations finished, by kind (dead_letter, cancellation) and outcome."};
  counter listener_reconnects{"outboxd_listener_reconnects_total",
                              "Times the LISTEN connection was re-established.", true};
  counter http_requests{"outboxd_http_requests_total",
                        "HTTP requests served, by method, route and status."};
  counter http_connections_refused{
      "outboxd_http_connections_refused_total",
      "Connections the HTTP server refused or cut off, by reason: busy (503), client_cap (503), "
      "idle_shed and slow_shed (closed to make room), timeout (408), too_large (413/431), "
      "malformed (400), slow_reader (its answer not read within server.writeTimeout)."};

  /// Renders every family, then the gauges `scrape_gauges` adds (database depths and lag).
  std::string render(const std::function<void(std::string&)>& scrape_gauges) const;
};

/// The process-wide registry.
registry& global();

} // namespace outboxd::metrics
