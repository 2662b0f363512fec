// The API server's route table and its handlers. Handlers throw api_error (or let
// store_unavailable through); the listener's exception handler renders every error, so no handler
// writes an error body itself.
#include "http/api_server.hpp"

#include "domain/response_body.hpp"
#include "http/connection_gate.hpp"
#include "http/errors.hpp"
#include "http/json.hpp"
#include "log/log.hpp"
#include "metrics/metrics.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <fmt/format.h>
#include <httplib.h>
#include <limits>
#include <optional>

namespace outboxd::http {
namespace {

constexpr const char* json_type = "application/json";
constexpr int default_page = 50;
constexpr int max_page = 500;

// Each request runs start to finish on one pool thread, so per-request context lives here.
thread_local std::chrono::steady_clock::time_point request_started;

// The method as a metric label: a client can send any token as a method, each one would be a
// series of its own.
std::string_view method_label(const std::string& method) {
  for (std::string_view known : {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
    if (method == known)
      return known;
  return "other";
}

void add_gauges(std::string& out, const domain::outbox_stats& g) {
  auto by = [](const char* label, const std::map<std::string, long long>& m) {
    std::vector<std::pair<metrics::labels, double>> v;
    for (const auto& [k, n] : m)
      v.push_back({{{label, k}}, static_cast<double>(n)});
    return v;
  };
  metrics::render_gauge(
      out, "outboxd_outbox_events",
      "Outbox events not processed (PENDING, PROCESSING) or given up (DEAD), by status.",
      by("status", g.events));
  metrics::render_gauge(out, "outboxd_dead_letters", "Dead letters, by status.",
                        by("status", g.dead_letters_by_status));
  metrics::render_gauge(out, "outboxd_dead_letters_by_reason",
                        "Unresolved dead letters, by reason.",
                        by("reason", g.dead_letters_by_reason));
  auto attention = g.orders.count("ATTENTION") ? g.orders.at("ATTENTION") : 0;
  metrics::render_gauge(out, "outboxd_orders_attention",
                        "Orders whose compensation failed and that wait for an operator.",
                        {{{}, static_cast<double>(attention)}});
  metrics::render_gauge(out, "outboxd_oldest_due_event_age_seconds",
                        "Age of the oldest event that is due and not claimed (lag).",
                        {{{}, g.oldest_due_age_seconds.value_or(0)}});
  metrics::render_gauge(out, "outboxd_oldest_pending_event_age_seconds",
                        "Age of the oldest event not yet delivered, since it was written (due, "
                        "waiting for a retry, or held back by an open circuit).",
                        {{{}, g.oldest_pending_age_seconds.value_or(0)}});
}

/// The circuit of each destination as a state set (1 for the current state), and its calls in
/// flight.
void add_destination_gauges(std::string& out,
                            const std::vector<domain::destination_health>& destinations) {
  std::vector<std::pair<metrics::labels, double>> states, in_flight;
  for (const auto& d : destinations) {
    for (auto state : {domain::breaker_state::closed, domain::breaker_state::open,
                       domain::breaker_state::half_open})
      states.push_back({{{"destination", d.name}, {"state", std::string(domain::to_string(state))}},
                        d.state == state ? 1.0 : 0.0});
    in_flight.push_back({{{"destination", d.name}}, static_cast<double>(d.in_flight)});
  }
  metrics::render_gauge(out, "outboxd_circuit_breaker_state",
                        "Circuit breaker of each destination: 1 for its current state.", states);
  metrics::render_gauge(out, "outboxd_destination_calls_in_flight",
                        "Calls in flight to each destination from this process.", in_flight);
}

/// `text` as a whole decimal integer in [min, max]; nothing for anything else (a sign, spaces, a
/// fraction, trailing characters, an overflow).
std::optional<std::int64_t>
whole_number(std::string_view text, std::int64_t min,
             std::int64_t max = std::numeric_limits<std::int64_t>::max()) {
  std::int64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < min || n > max)
    return std::nullopt;
  return n;
}

/// A positive int64 path segment, or a 404 naming what was asked for.
std::int64_t parse_id(const std::string& text, std::string_view what) {
  auto id = whole_number(text, 1);
  if (!id)
    throw api_error(error_kind::not_found,
                    fmt::format("{} '{}' not found: ids are positive integers", what, text));
  return *id;
}

void reply(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, json_type);
}

/// Listing parameters: `status` (checked by `valid_status`), `limit` (1..500) and `cursor`
/// (an id from nextCursor).
struct page_request {
  std::optional<std::string> status;
  std::optional<std::int64_t> before;
  int limit = default_page;
};

template <class IsStatus>
page_request parse_page(const httplib::Request& req, IsStatus valid_status) {
  page_request p;
  domain::field_errors errors;
  if (req.has_param("status")) {
    auto s = req.get_param_value("status");
    if (valid_status(s))
      p.status = s;
    else
      errors.push_back({"status", fmt::format("is not a known status, got '{}'", s)});
  }
  if (req.has_param("limit")) {
    auto s = req.get_param_value("limit");
    if (auto n = whole_number(s, 1, max_page))
      p.limit = static_cast<int>(*n);
    else
      errors.push_back(
          {"limit", fmt::format("must be an integer between 1 and {}, got '{}'", max_page, s)});
  }
  if (req.has_param("cursor")) {
    auto s = req.get_param_value("cursor");
    if (auto n = whole_number(s, 1))
      p.before = n;
    else
      errors.push_back({"cursor", fmt::format("must be a value from nextCursor, got '{}'", s)});
  }
  if (!errors.empty())
    throw validation_error(errors);
  return p;
}

/// `{"<key>": [rows...], "nextCursor": "<id>" | null}`.
template <class Row, class Write>
std::string page_json(std::string_view key, const std::vector<Row>& rows,
                      std::optional<std::int64_t> next_cursor, Write write) {
  json_writer w;
  w.start_object();
  w.key(key);
  w.start_array();
  for (const auto& r : rows)
    write(w, r);
  w.end_array();
  w.key("nextCursor");
  if (next_cursor)
    w.value(std::to_string(*next_cursor));
  else
    w.null();
  w.end_object();
  return w.str();
}

/// The cursor of a page of a plain listing: its last id when the page is full.
template <class Row>
std::optional<std::int64_t> full_page_cursor(const std::vector<Row>& rows, int limit) {
  if (rows.empty() || static_cast<int>(rows.size()) < limit)
    return std::nullopt;
  return rows.back().id;
}

/// A status check for parse_page: the status is one of `known`.
auto one_of(std::initializer_list<std::string_view> known) {
  return [known](const std::string& s) {
    return std::find(known.begin(), known.end(), s) != known.end();
  };
}

/// Answers 200 with `to_json(*found)`, or 404 "<what> <id> not found".
template <class Found, class ToJson>
void reply_found(httplib::Response& res, const std::optional<Found>& found, std::string_view what,
                 std::int64_t id, ToJson to_json) {
  if (!found)
    throw api_error(error_kind::not_found, fmt::format("{} {} not found", what, id));
  reply(res, 200, to_json(*found));
}

template <class T> T value_or_422(std::variant<T, domain::field_errors> v) {
  if (auto* errors = std::get_if<domain::field_errors>(&v))
    throw validation_error(*errors);
  return std::get<T>(std::move(v));
}

/// What a handler reads: the stores and the configured fan-out.
struct api_context {
  const api_dependencies& deps;
  const domain::routing_table& routing;
};

// Runs a user command on an order; not found and refused transitions become API errors.
domain::command_outcome run_command(const api_context& c, std::int64_t id,
                                    domain::order_command cmd, const std::string& reason) {
  auto outcome = c.deps.orders.execute(id, cmd, reason);
  using kind = domain::command_outcome::kind;
  if (outcome.what == kind::not_found)
    throw api_error(error_kind::not_found, fmt::format("order {} not found", id));
  if (outcome.what == kind::conflict)
    throw api_error(error_kind::invalid_transition,
                    fmt::format("order {}: {}", id, outcome.reason));
  return outcome;
}

void get_health(const api_context&, const httplib::Request&, httplib::Response& res) {
  reply(res, 200, R"({"status":"ok"})");
}

void get_readiness(const api_context& c, const httplib::Request&, httplib::Response& res) {
  auto report = c.deps.readiness();
  json_writer w;
  w.start_object();
  w.field("status", report.ready() ? "ready" : "not_ready");
  w.key("checks");
  w.start_object();
  for (const auto& [name, state] : report.checks)
    w.field(name, state);
  w.end_object();
  w.end_object();
  reply(res, report.ready() ? 200 : 503, w.str());
}

void create_order(const api_context& c, const httplib::Request& req, httplib::Response& res) {
  auto key = idempotency_key(req);
  auto body = parse_json_body(req, true);
  auto request = value_or_422(domain::validate_new_order(*body));
  auto outcome = c.deps.orders.create(request, key);
  using kind = domain::create_outcome::kind;
  if (outcome.what == kind::key_reused)
    throw api_error(error_kind::idempotency_key_reused,
                    fmt::format("Idempotency-Key '{}' was already used for order {} with a "
                                "different request",
                                *key, outcome.value.id));
  if (outcome.what == kind::key_removed)
    throw api_error(error_kind::idempotency_key_reused,
                    fmt::format("Idempotency-Key '{}' was used for order {}, which has since been "
                                "removed",
                                *key, outcome.value.id));
  if (outcome.what == kind::created)
    log::info("http", "order {} created: {} {} {} ({}), event OrderCreated queued",
              outcome.value.id, domain::to_decimal(outcome.value.total_amount),
              outcome.value.currency, outcome.value.customer_id,
              domain::to_string(outcome.value.shipping));
  else
    res.set_header("Idempotent-Replayed", "true");
  res.set_header("Location", fmt::format("/api/orders/{}", outcome.value.id));
  reply(res, 201, order_json(outcome.value));
}

void list_orders(const api_context& c, const httplib::Request& req, httplib::Response& res) {
  auto page = parse_page(
      req, [](const std::string& s) { return domain::parse_order_status(s).has_value(); });
  std::optional<domain::order_status> status;
  if (page.status)
    status = domain::parse_order_status(*page.status);
  auto orders = c.deps.orders.list(status, page.before, page.limit);
  reply(res, 200, page_json("orders", orders, full_page_cursor(orders, page.limit), write_order));
}

/// `afterAttempt`: list only the attempt rows with larger ids (0 when absent).
std::int64_t parse_after_attempt(const httplib::Request& req) {
  if (!req.has_param("afterAttempt"))
    return 0;
  auto s = req.get_param_value("afterAttempt");
  auto n = whole_number(s, 0);
  if (!n)
    throw validation_error(
        {{"afterAttempt",
          fmt::format("must be an attempt id (an integer, 0 or more), got '{}'", s)}});
  return *n;
}

void get_order(const api_context& c, const httplib::Request& req, httplib::Response& res) {
  auto id = parse_id(req.matches[1], "order");
  auto after = parse_after_attempt(req);
  reply_found(res, c.deps.orders.timeline(id, after), "order", id, timeline_json);
}

void update_status(const api_context& c, const httplib::Request& req, httplib::Response& res) {
  auto id = parse_id(req.matches[1], "order");
  auto body = parse_json_body(req, true);
  auto cmd = value_or_422(domain::validate_status_update(*body));
  auto outcome = run_command(c, id, cmd, {});
  if (outcome.what == domain::command_outcome::kind::applied)
    log::info("http", "order {} is now {}, event OrderStatusUpdated queued", id,
              domain::to_string(outcome.value->status));
  reply(res, 200, order_json(*outcome.value));
}

void cancel_order(const api_context& c, const httplib::Request& req, httplib::Response& res) {
  auto id = parse_id(req.matches[1], "order");
  auto body = parse_json_body(req, false);
  auto reason = value_or_422(domain::validate_cancel(body ? &*body : nullptr));
  auto outcome = run_command(c, id, domain::order_command::cancel, reason);
  if (outcome.what == domain::command_outcome::kind::applied)
    log::info("http", "order {} is CANCELLING ({}), event !OrderCreated queued", id, reason);
  reply(res, 202, order_json(*outcome.value));
}

void remove_order(const api_context& c, const httplib::Request& req, httplib::Response& res) {
  auto id = parse_id(req.matches[1], "order");
  run_command(c, id, domain::order_command::remove, {});
  log::info("http", "order {} removed", id);
  res.status = 204;
}

void get_metrics(const api_context& c, const httplib::Request&, httplib::Response& res) {
  // Database gauges are best effort: a scrape during an outage still returns the counters.
  auto text = metrics::global().render([&c](std::string& out) {
    add_destination_gauges(out, c.deps.destinations());
    bool read = false;
    try {
      add_gauges(out, c.deps.outbox.gauges());
      read = true;
    } catch (const domain::store_unavailable& e) {
      log::warn("http", "metrics without database gauges: {}", e.what());
    }
    metrics::render_gauge(out, "outboxd_database_gauges_up",
                          "1 when this scrape read the database gauges, 0 when the database did "
                          "not answer (an outage, or a lock held for over a second).",
                          {{{}, read ? 1.0 : 0.0}});
  });
  res.set_content(text, "text/plain; version=0.0.4");
}

void get_stats(const api_context& c, const httplib::Request&, httplib::Response& res) {
  auto stats = c.deps.outbox.stats();
  json_writer w;
  auto counts = [&w](std::string_view name, const std::map<std::string, long long>& m) {
    w.key(name);
    w.start_object();
    for (const auto& [k, v] : m)
      w.field(k, static_cast<std::int64_t>(v));
    w.end_object();
  };
  w.start_object();
  counts("outbox", stats.events);
  w.key("deadLetters");
  w.start_object();
  counts("byStatus", stats.dead_letters_by_status);
  counts("byReason", stats.dead_letters_by_reason);
  w.end_object();
  counts("orders", stats.orders);
  w.field("oldestDueAgeSeconds", stats.oldest_due_age_seconds);
  w.field("oldestPendingAgeSeconds", stats.oldest_pending_age_seconds);
  w.key("estimated");
  w.start_array();
  for (const auto& name : stats.estimated)
    w.value(name);
  w.end_array();
  w.key("destinations");
  w.start_object();
  for (const auto& d : c.deps.destinations()) {
    w.key(d.name);
    std::optional<double> opens_in;
    if (d.opens_again_in)
      opens_in = d.opens_again_in->count() / 1000.0;
    w.object("circuit", domain::to_string(d.state), "failuresInARow", d.failures_in_a_row,
             "opensAgainInSeconds", opens_in, "inFlight", d.in_flight, "maxConcurrency",
             d.max_concurrency, "ratePerSecond", d.rate_per_second, "held",
             static_cast<std::int64_t>(d.held));
  }
  w.end_object();
  w.end_object();
  reply(res, 200, w.str());
}

void get_fanout(const api_context& c, const httplib::Request&, httplib::Response& res) {
  reply(res, 200, fanout_json(c.routing));
}

void list_events(const api_context& c, const httplib::Request& req, httplib::Response& res) {
  auto page = parse_page(req, one_of({"PENDING", "PROCESSING", "PROCESSED", "DEAD"}));
  domain::event_filter f;
  f.status = page.status;
  f.before_id = page.before;
  f.limit = page.limit;
  domain::field_errors errors;
  // Text filters compared as given: a NUL byte would end the value where the database reads it
  // ("1%00zzz" would find aggregate 1), and bytes that are not UTF-8 it refuses outright.
  auto text = [&](const char* name) -> std::optional<std::string> {
    if (!req.has_param(name))
      return std::nullopt;
    auto v = req.get_param_value(name);
    if (!domain::is_storable_text(v))
      errors.push_back({name, "must be UTF-8 text without NUL bytes"});
    return v;
  };
  f.aggregate_id = text("aggregateId");
  if (auto type = text("aggregateType")) {
    if (!f.aggregate_id)
      errors.push_back({"aggregateType", "names the type of aggregateId, which is missing"});
    f.aggregate_type = *type;
  }
  f.event_type = text("eventType");
  if (!errors.empty())
    throw validation_error(errors);
  auto found = c.deps.outbox.events(f);
  reply(res, 200, page_json("events", found.rows, found.next_cursor, write_event));
}

void get_event(const api_context& c, const httplib::Request& req, httplib::Response& res) {
  auto id = parse_id(req.matches[1], "event");
  reply_found(res, c.deps.outbox.event(id), "event", id,
              [](const auto& found) { return event_detail_json(found.first, found.second); });
}

void list_dead_letters(const api_context& c, const httplib::Request& req, httplib::Response& res) {
  auto page = parse_page(req, one_of({"PENDING", "PROCESSING", "PROCESSED", "FAILED"}));
  auto rows = c.deps.dead_letters.list(page.status, page.before, page.limit);
  reply(res, 200,
        page_json("deadLetters", rows, full_page_cursor(rows, page.limit), write_dead_letter));
}

void get_dead_letter(const api_context& c, const httplib::Request& req, httplib::Response& res) {
  auto id = parse_id(req.matches[1], "dead letter");
  reply_found(res, c.deps.dead_letters.find(id), "dead letter", id,
              [](const auto& found) { return dead_letter_detail_json(found.first, found.second); });
}

void retry_dead_letter(const api_context& c, const httplib::Request& req, httplib::Response& res) {
  auto id = parse_id(req.matches[1], "dead letter");
  auto body = parse_json_body(req, false);
  if (auto errors = domain::validate_redrive(body ? &*body : nullptr); !errors.empty())
    throw validation_error(errors);
  auto outcome = c.deps.dead_letters.redrive(id);
  using kind = domain::redrive_outcome::kind;
  if (outcome.what == kind::not_found)
    throw api_error(error_kind::not_found, fmt::format("dead letter {} not found", id));
  if (outcome.what == kind::not_failed)
    throw api_error(error_kind::invalid_transition,
                    fmt::format("dead letter {} is {}; only a FAILED dead letter can be retried",
                                id, outcome.value->status));
  log::info("http", "dead letter {} ({} {} {}) redriven by an operator", id,
            outcome.value->event_type, outcome.value->aggregate_type, outcome.value->aggregate_id);
  json_writer w;
  write_dead_letter(w, *outcome.value);
  reply(res, 202, w.str());
}

void resolve_dead_letter(const api_context& c, const httplib::Request& req,
                         httplib::Response& res) {
  auto id = parse_id(req.matches[1], "dead letter");
  auto body = parse_json_body(req, false);
  auto reason = value_or_422(domain::validate_resolution(body ? &*body : nullptr));
  auto outcome = c.deps.dead_letters.resolve(id, reason);
  using kind = domain::redrive_outcome::kind;
  if (outcome.what == kind::not_found)
    throw api_error(error_kind::not_found, fmt::format("dead letter {} not found", id));
  if (outcome.what == kind::not_failed)
    throw api_error(error_kind::invalid_transition,
                    fmt::format("dead letter {} is {}; only a FAILED dead letter can be resolved "
                                "by hand",
                                id, outcome.value->status));
  log::warn("http", "dead letter {} ({} {} {}) {}", id, outcome.value->event_type,
            outcome.value->aggregate_type, outcome.value->aggregate_id, reason);
  json_writer w;
  write_dead_letter(w, *outcome.value);
  reply(res, 200, w.str());
}

using handler = void (*)(const api_context&, const httplib::Request&, httplib::Response&);

struct route {
  const char* method;
  const char* path; // as documented; `{name}` stands for one path segment
  handler handle;
  access needs;
};

// Every route of the API server. httplib tries a method's routes in this order and the first
// whose pattern matches the whole path wins.
const route route_table[] = {
    {"GET", "/healthz", get_health, access::open},
    {"GET", "/readyz", get_readiness, access::open},
    {"GET", "/metrics", get_metrics, access::metrics},
    {"POST", "/api/orders", create_order, access::write},
    {"GET", "/api/orders", list_orders, access::read},
    {"GET", "/api/orders/{id}", get_order, access::read},
    {"PUT", "/api/orders/{id}/status", update_status, access::write},
    {"POST", "/api/orders/{id}/cancel", cancel_order, access::write},
    {"DELETE", "/api/orders/{id}", remove_order, access::admin},
    {"GET", "/api/outbox/stats", get_stats, access::read},
    {"GET", "/api/outbox/fanout", get_fanout, access::read},
    {"GET", "/api/outbox/events", list_events, access::read},
    {"GET", "/api/outbox/events/{id}", get_event, access::read},
    {"GET", "/api/dlq", list_dead_letters, access::read},
    {"GET", "/api/dlq/{id}", get_dead_letter, access::read},
    {"POST", "/api/dlq/{id}/retry", retry_dead_letter, access::admin},
    {"POST", "/api/dlq/{id}/resolve", resolve_dead_letter, access::admin},
};

} // namespace

bool readiness_report::ready() const {
  for (const auto& [name, state] : checks)
    if (state != "ok")
      return false;
  return true;
}

api_server::api_server(const conf::server_settings& settings, access_policy policy,
                       api_dependencies deps, domain::routing_table routing)
    : settings_(settings), deps_(std::move(deps)), routing_(std::move(routing)),
      listener_(settings, "http", std::move(policy)) {
  listener_.on_request([](const httplib::Request&, httplib::Response&) {
    request_started = deferred_since().value_or(std::chrono::steady_clock::now());
  });
  listener_.native().set_logger([](const httplib::Request& req, const httplib::Response& res) {
    auto route = take_matched_route();
    // A request the library refused before reading it whole (400, 413, 431) never started.
    auto started = std::exchange(request_started, {});
    if (answer_deferred()) // logged when it is answered
      return;
    metrics::global().http_requests.inc({{"method", std::string(method_label(req.method))},
                                         {"route", route.path.empty() ? "unmatched" : route.path},
                                         {"status", std::to_string(res.status)}});
    // A simulated partner's calls are the engine's own calls, logged (errors too) by the
    // processor that made them. Reads change nothing; a read's 503 (the database unavailable, a
    // failed readiness probe) was said at WARN when the state began, and the probes and pages
    // that repeat it are not news.
    const bool read = req.method == "GET" && (res.status < 500 || res.status == 503);
    auto level =
        read || route.kind == route_kind::simulated_service ? log::level::debug : log::level::info;
    if (!log::enabled(level))
      return;
    auto took = started == std::chrono::steady_clock::time_point{}
                    ? std::string("-")
                    : fmt::format("{:.1f}ms", std::chrono::duration<double, std::milli>(
                                                  std::chrono::steady_clock::now() - started)
                                                  .count());
    // A refusal says why (its start: a message quotes what the client sent), so that the
    // operator need not ask the client.
    auto why =
        route.problem.empty() ? std::string() : ": " + domain::readable_text(route.problem, 300);
    log::write(level, "http",
               fmt::format("{} {} {} {}{}", loggable(req.method), loggable(req.path), res.status,
                           took, why));
  });
  install_routes();
}

api_server::~api_server() {
  stop();
}

int api_server::bind() {
  return listener_.bind(settings_.port);
}

void api_server::start() {
  listener_.start();
}

void api_server::stop() {
  listener_.stop();
}

std::vector<route_info> api_server::routes() {
  std::vector<route_info> out;
  for (const auto& r : route_table)
    out.push_back({r.method, r.path, r.needs, route_kind::api});
  return out;
}

void api_server::install_routes() {
  for (const auto& r : route_table)
    listener_.route(r.method, r.path, route_kind::api, r.needs,
                    [this, &r](const httplib::Request& req, httplib::Response& res) {
                      r.handle(api_context{deps_, routing_}, req, res);
                    });
  listener_.run_on_gate("GET", "/healthz"); // the liveness probe answers a constant
}

} // namespace outboxd::http
