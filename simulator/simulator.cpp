// Simulator routes: request validation and the call pipeline (fault decision -> Idempotency-Key
// -> latency -> failure or apply -> ledger -> late answer) over the endpoint table. A call's waits
// (its latency, a late answer, a key in flight) hold no thread on the plain-HTTP listener: the
// answer is deferred and the request run again from where it stopped.
#include "simulator/simulator.hpp"

#include "http/connection_gate.hpp"
#include "http/errors.hpp"
#include "http/json.hpp"
#include "http/listener.hpp"
#include "log/log.hpp"
#include "simulator/body_template.hpp"
#include "simulator/endpoints.hpp"
#include "simulator/faults.hpp"
#include "simulator/idempotency.hpp"
#include "simulator/ledger.hpp"

#include <cerrno>
#include <fmt/format.h>
#include <functional>
#include <httplib.h>
#include <poll.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace outboxd::simulator {
namespace {

using rapidjson::Value;

constexpr const char* json_type = "application/json";
/// How soon a call whose Idempotency-Key is in flight with the same request asks again.
constexpr std::chrono::milliseconds key_recheck{5};

/// One incoming call: the request, and what validation made of it.
struct call {
  const httplib::Request& req;
  call_view view;
  std::optional<std::string> key; // Idempotency-Key
  std::optional<rapidjson::Document> body;
};

/// What an applied call answers, and a few words for the log.
struct applied {
  stored_response response;
  std::string note;
};

/// 400 when the body is not JSON (415 for another content type), 422 naming each wrong field.
void validate(call& c, const endpoint& ep) {
  if (!ep.needs_body)
    return;
  c.body = http::parse_json_body(c.req, true);
  if (!c.body->IsObject())
    throw http::api_error(http::error_kind::validation_failed,
                          fmt::format("request body must be a JSON object, got {}", show(*c.body)),
                          {{"", "must be a JSON object"}});
  c.view.body = &*c.body;
  auto errors = check_fields(c.view, ep.fields);
  if (!errors.empty())
    throw http::validation_error(errors);
}

/// What identifies "the same request" for a key: the path (which carries a revert's id) and the
/// body, whitespace aside.
std::uint64_t fingerprint(const call& c) {
  std::string text = c.req.path + '\n';
  if (c.body) {
    rapidjson::StringBuffer buffer;
    rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
    c.body->Accept(writer);
    text.append(buffer.GetString(), buffer.GetSize());
  } else {
    text += c.req.body;
  }
  return std::hash<std::string>{}(text);
}

/// The failure body of `ep` for this call; the status is the caller's.
stored_response failure_response(const endpoint& ep, const call& c, int status,
                                 const retry_after_knob& ra) {
  body_values values;
  values.set("aggregate", c.view.aggregate);
  values.set("now", now_ms());
  if (c.view.how == mode::knobs && ep.is_revert())
    values.set("pathId", c.view.id);
  stored_response r{status, {}, {}};
  if (const auto* seconds = std::get_if<std::int64_t>(&ra)) {
    values.set("retryAfter", *seconds);
    r.headers.emplace_back("Retry-After", std::to_string(*seconds));
  } else if (const auto* date = std::get_if<std::string>(&ra)) {
    values.set("retryAfter", *date);
    r.headers.emplace_back("Retry-After", *date);
  }
  // A partner's "temporarily unavailable" reads as a reason to retry: a status that is not one
  // (a 4xx other than 408 and 429) says it refused the request instead.
  const bool transient = status >= 500 || status == 408 || status == 429;
  values.set("operation", ep.knob);
  values.set("status", status);
  r.body = reference_bodies().render(
      transient ? failure_template(ep.knob, c.view.how) : std::string("refused"), values);
  return r;
}

void send(httplib::Response& res, const stored_response& r) {
  res.status = r.status;
  for (const auto& [name, value] : r.headers)
    res.set_header(name.c_str(), value);
  res.set_content(r.body, json_type);
}

/// Abandons an owned Idempotency-Key claim unless the call completed it, so that a failure or
/// an exception (a 404 revert, a bug) leaves the key free for a retry.
class claim_guard {
public:
  claim_guard(idempotency_store& store, std::string scope, std::string key, std::uint64_t token)
      : store_(store), scope_(std::move(scope)), key_(std::move(key)), token_(token) {}
  ~claim_guard() {
    if (!completed_)
      store_.abandon(scope_, key_, token_);
  }
  claim_guard(const claim_guard&) = delete;
  claim_guard& operator=(const claim_guard&) = delete;

  void complete(const stored_response& r) {
    store_.complete(scope_, key_, token_, r);
    completed_ = true;
  }

private:
  idempotency_store& store_;
  std::string scope_;
  std::string key_;
  std::uint64_t token_;
  bool completed_ = false;
};

/// The field a 422 detail names, taken from a knob validation message ("services.x.y must ...",
/// "unknown key services.x.z ...").
std::string field_of(const std::string& message) {
  std::string_view m(message);
  for (std::string_view prefix : {"unknown key ", "unknown service "})
    if (m.rfind(prefix, 0) == 0)
      m.remove_prefix(prefix.size());
  return std::string(m.substr(0, m.find(' ')));
}

} // namespace

struct simulator::impl {
  explicit impl(const conf::simulator_settings& settings) : faults(settings) {}

  fault_injector faults;
  idempotency_store keys;
  side_effect_ledger ledger;
  partner_callers callers = partner_callers::anyone;

  ~impl() {
    if (stop_fd >= 0)
      ::close(stop_fd);
  }

  /// Readable once stop() was called: every sleeping call wakes at once. A call sleeps only where
  /// its answer cannot be deferred (HTTPS, a stopping listener), in ppoll on it, so a thousand
  /// calls asleep share no lock (with a shared mutex and condition variable each call's wake-up
  /// queued for the one mutex).
  int stop_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

  void sleep(std::chrono::milliseconds d) {
    using clock = std::chrono::steady_clock;
    auto until = clock::now() + d;
    for (;;) {
      auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(until - clock::now()).count();
      if (ns <= 0)
        return;
      timespec left{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
      pollfd stop{stop_fd, POLLIN, 0};
      int n = ::ppoll(&stop, 1, &left, nullptr);
      if (n > 0 || (n < 0 && errno != EINTR))
        return; // stopping (or no way to wait: answer now)
    }
  }

  void log_call(const call& c, int status, std::string_view note) {
    if (!log::enabled(log::level::debug))
      return;
    log::debug("simulator", "{} {} aggregate {} key {} -> {} {}", c.req.method,
               http::loggable(c.req.path), c.view.aggregate, c.key.value_or("-"), status, note);
  }

  /// What a call carries from one run of its request to the next while its answer waits (the
  /// listener runs the request again when the wait is over): how far it got, its fault decision
  /// (drawn once), its Idempotency-Key claim and, once applied, its answer.
  struct pending {
    enum class stage { key, latency, late } at = stage::key;
    fault_decision d;
    std::optional<claim_guard> guard;
    std::optional<stored_response> replay;
    stored_response answer;
  };

  /// Lets `d` pass before the call goes on. True when the listener runs the request again after
  /// it (the handler returns at once, holding no thread meanwhile); otherwise (an HTTPS
  /// listener, or one stopping) the wait is spent asleep on this thread, and false.
  bool wait(std::chrono::milliseconds d, const std::shared_ptr<pending>& p) {
    if (d.count() <= 0)
      return false;
    if (http::defer_answer(d, p))
      return true;
    sleep(d);
    return false;
  }

  /// Claims the call's Idempotency-Key into `p`. False when the same request is in flight and
  /// the call asks again a moment later without holding its thread (the handler returns).
  bool claim_key(const endpoint& ep, const call& c, const std::shared_ptr<pending>& p) {
    auto scope = std::string(ep.knob);
    auto claim = keys.begin(scope, *c.key, fingerprint(c), false);
    if (claim.what == idempotency_claim::kind::in_flight) {
      if (http::defer_answer(key_recheck, p))
        return false;
      claim = keys.begin(scope, *c.key, fingerprint(c)); // waits for it here
    }
    switch (claim.what) {
    case idempotency_claim::kind::conflict:
      throw http::api_error(http::error_kind::idempotency_key_reused,
                            fmt::format("Idempotency-Key '{}' was already used for a different "
                                        "{} request",
                                        *c.key, ep.knob));
    case idempotency_claim::kind::replay:
      p->replay = std::move(claim.response);
      break;
    case idempotency_claim::kind::owner:
      p->guard.emplace(keys, scope, *c.key, claim.token);
      break;
    case idempotency_claim::kind::in_flight:
      break; // (not after a waiting claim)
    }
    return true;
  }

  void handle(const endpoint& ep, mode how, const httplib::Request& req, httplib::Response& res) {
    // A proxy on this machine forwards other machines' requests from a loopback address; the
    // headers it adds say so (outboxd's own calls carry none of them).
    if (callers == partner_callers::this_machine &&
        (!is_loopback_peer(req.remote_addr) || req.has_header("Forwarded") ||
         req.has_header("X-Forwarded-For") || req.has_header("X-Real-IP")))
      throw http::api_error(http::error_kind::forbidden,
                            "the simulated services inside outboxd answer only calls from this "
                            "machine (outboxd's own, not forwarded by a proxy); run `outboxd "
                            "simulator` for a simulator other machines may call");
    call c{req, {}, {}, {}};
    c.view.how = how;
    const auto* aggregate_header = ep.is_revert() ? "X-Revert-Aggregate-Id" : "X-Aggregate-Id";
    auto aggregate = req.get_header_value(aggregate_header);
    if (aggregate.size() > max_aggregate_id_bytes)
      throw http::api_error(
          http::error_kind::validation_failed,
          fmt::format("{} is longer than {} bytes", aggregate_header, max_aggregate_id_bytes),
          {{aggregate_header, "too long"}});
    c.view.aggregate = aggregate.empty() ? "unknown" : aggregate;
    if (ep.is_revert() && req.matches.size() > 1)
      c.view.id = req.matches[1].str();
    c.key = http::idempotency_key(req);
    validate(c, ep);

    auto p = std::static_pointer_cast<pending>(http::resumed_state());
    if (!p) {
      if (how == mode::fail) {
        retry_after_knob ra;
        if (ep.fail_retry_after)
          ra = std::int64_t{*ep.fail_retry_after};
        auto r = failure_response(ep, c, ep.fail_status, ra);
        send(res, r);
        log_call(c, r.status, "deterministic failure");
        return;
      }
      p = std::make_shared<pending>();
      if (how == mode::knobs)
        p->d = faults.decide(ep.knob);
    }
    const auto& d = p->d;
    if (p->at == pending::stage::key) {
      if (c.key && !claim_key(ep, c, p))
        return;
      p->at = pending::stage::latency;
      if (wait(d.latency, p))
        return;
    }
    if (p->at == pending::stage::latency) {
      // Transient failures (5xx, 429) happen in front of the key store, replays included; a
      // refusal (other 4xx) never contradicts a result the service already gave for the key.
      bool transient = d.status >= 500 || d.status == 429;
      if (d.fail && (!p->replay || transient)) {
        auto r = failure_response(ep, c, d.status, d.retry_after);
        send(res, r);
        log_call(c, r.status, "injected failure");
        return;
      }
      if (p->replay) {
        send(res, *p->replay);
        res.set_header("Idempotent-Replayed", "true");
        log_call(c, p->replay->status, "replayed");
        return;
      }
      auto result = apply(ep, c);
      if (p->guard)
        p->guard->complete(result.response);
      p->answer = std::move(result.response);
      p->at = pending::stage::late;
      if (d.late.count() > 0) {
        log_call(c, p->answer.status,
                 fmt::format("{}, answering {}ms late", result.note, d.late.count()));
        if (wait(d.late, p))
          return;
      } else {
        log_call(c, p->answer.status, result.note);
      }
    }
    send(res, p->answer);
  }

  // --- applying a call ------------------------------------------------------------------------

  /// Records the side effect of a forward call, or reverts the path's id of a revert call, then
  /// renders the endpoint's reference body.
  applied apply(const endpoint& ep, const call& c) {
    body_values values;
    values.set("aggregate", c.view.aggregate);
    std::string note;
    if (ep.applies) {
      const auto& a = *ep.applies;
      std::optional<std::string> type;
      if (a.notification_type)
        type = std::string(*a.notification_type);
      auto e = ledger.apply({c.view.aggregate, std::string(ep.knob), std::string(a.kind),
                             std::string(a.id_prefix), std::move(type), c.key});
      values.set("id", e.id);
      values.set("now", e.applied_at_ms);
      note = "applied " + e.id;
    } else {
      auto [id, revert_note] = revert(c.view, *ep.reverts);
      values.set("id", id);
      values.set("now", now_ms());
      note = std::move(revert_note);
    }
    if (ep.fill) {
      call_services services{[this](std::uint64_t bound) { return faults.draw(bound); },
                             [this](std::string_view prefix, std::string_view middle) {
                               return ledger.make_id(prefix, middle);
                             }};
      note += ep.fill(c.view, values, services);
    }
    return {{200, reference_bodies().render(ep.body, values), {}}, std::move(note)};
  }

  /// Reverts the path's id (or, for a /succeed sibling, the aggregate's newest active entry) of
  /// the forward operation; returns the id to answer with and a note. Unknown ids are a 404.
  std::pair<std::string, std::string> revert(const call_view& c, const revert_effect& r) {
    if (c.how == mode::succeed) {
      auto latest = ledger.revert_latest(r.forward, c.aggregate);
      if (latest.what == revert_result::kind::not_found)
        return {fmt::format("{}-{}-TEST", r.id_prefix, c.aggregate), "nothing active to revert"};
      return {latest.entry.id, "reverted " + latest.entry.id};
    }
    auto result = ledger.revert(r.forward, c.id);
    if (result.what == revert_result::kind::not_found)
      throw http::api_error(
          http::error_kind::not_found,
          fmt::format("{} '{}' not found: {} never issued it", r.what, c.id, r.forward));
    if (result.what == revert_result::kind::already_reverted)
      return {result.entry.id, fmt::format("{} was already reverted ({} revert requests)",
                                           result.entry.id, result.entry.revert_requests)};
    return {result.entry.id, "reverted " + result.entry.id};
  }

  // --- routes ---------------------------------------------------------------------------------

  using handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  handler bind(const endpoint* ep, mode how) {
    return [this, ep, how](const httplib::Request& req, httplib::Response& res) {
      handle(*ep, how, req, res);
    };
  }

  /// POST `path` and its /succeed and /fail siblings. The literal siblings are registered first
  /// (the first matching route wins).
  void add_forward(http::listener& routes, const endpoint& ep) {
    std::string path(ep.path);
    constexpr auto kind = http::route_kind::simulated_service;
    constexpr auto open = http::access::open; // a partner's endpoints are not outboxd's to guard
    routes.route("POST", path + "/succeed", kind, open, bind(&ep, mode::succeed));
    routes.route("POST", path + "/fail", kind, open, bind(&ep, mode::fail));
    routes.route("POST", path, kind, open, bind(&ep, mode::knobs));
  }

  /// `<base>/{id}/<verb>` and the literal `<base>/<verb>/succeed|fail` siblings.
  void add_revert(http::listener& routes, const endpoint& ep) {
    std::string base(ep.path);
    std::string verb(ep.revert_verb);
    auto add = [&](std::string path, mode how) {
      routes.route(ep.method == http_method::del ? "DELETE" : "POST", std::move(path),
                   http::route_kind::simulated_service, http::access::open, bind(&ep, how));
    };
    add(base + "/" + verb + "/succeed", mode::succeed);
    add(base + "/" + verb + "/fail", mode::fail);
    add(base + "/{id}/" + verb, mode::knobs);
  }

  void install(http::listener& routes) {
    for (const auto& ep : endpoints()) {
      if (ep.is_revert())
        add_revert(routes, ep);
      else
        add_forward(routes, ep);
    }
    install_admin(routes);
  }

  /// The simulator's own control routes: part of outboxd's documented API.
  void install_admin(http::listener& routes) {
    constexpr auto api = http::route_kind::api;
    routes.route("GET", "/api/simulator/config", api, http::access::read,
                 [this](const httplib::Request&, httplib::Response& res) {
                   res.set_content(faults.config_json(), json_type);
                 });
    routes.route("PUT", "/api/simulator/config", api, http::access::admin,
                 [this](const httplib::Request& req, httplib::Response& res) {
                   auto body = http::parse_json_body(req, true);
                   auto problems = faults.apply_patch(*body);
                   if (!problems.empty()) {
                     domain::field_errors details;
                     std::string message;
                     for (const auto& p : problems) {
                       details.push_back({field_of(p), p});
                       message += (message.empty() ? "" : "; ") + p;
                     }
                     throw http::api_error(http::error_kind::validation_failed, message, details);
                   }
                   rapidjson::StringBuffer compact;
                   rapidjson::Writer<rapidjson::StringBuffer> writer(compact);
                   body->Accept(writer);
                   log::info(
                       "simulator", "knobs changed: {}",
                       std::string_view(compact.GetString(), compact.GetSize()).substr(0, 1000));
                   res.set_content(faults.config_json(), json_type);
                 });
    routes.route("POST", "/api/simulator/reset", api, http::access::admin,
                 [this](const httplib::Request&, httplib::Response& res) {
                   reset();
                   http::json_writer w;
                   w.start_object();
                   w.field("status", "reset");
                   auto started = ledger.started_at_ms();
                   w.field("startedAt", iso_time(started));
                   w.field("startedAtMs", started);
                   w.end_object();
                   res.set_content(w.str(), json_type);
                 });
    routes.route("GET", "/api/simulator/ledger", api, http::access::read,
                 [this](const httplib::Request& req, httplib::Response& res) {
                   std::optional<std::string> aggregate;
                   if (req.has_param("aggregateId"))
                     aggregate = req.get_param_value("aggregateId");
                   res.set_content(ledger.json(aggregate), json_type);
                 });
  }

  void reset() {
    faults.reset();
    keys.clear();
    ledger.reset();
    log::info("simulator",
              "reset: initial knobs and seed {}, empty ledger and Idempotency-Key "
              "store",
              faults.seed());
  }
};

simulator::simulator(const conf::simulator_settings& settings)
    : impl_(std::make_unique<impl>(settings)) {}

simulator::~simulator() = default;

bool is_loopback_peer(std::string_view address) {
  if (address.rfind("::ffff:", 0) == 0) // an IPv4 peer on an IPv6 socket
    address.remove_prefix(7);
  return address.rfind("127.", 0) == 0 || address == "::1";
}

void simulator::install(http::listener& routes, partner_callers callers) {
  impl_->callers = callers;
  impl_->install(routes);
}

std::string simulator::ledger_json(const std::optional<std::string>& aggregate_id) const {
  return impl_->ledger.json(aggregate_id);
}

ledger_snapshot simulator::ledger() const {
  return impl_->ledger.snapshot();
}

std::string simulator::config_json() const {
  return impl_->faults.config_json();
}

void simulator::reset() {
  impl_->reset();
}

void simulator::stop() {
  std::uint64_t one = 1;
  if (impl_->stop_fd >= 0)
    (void)::write(impl_->stop_fd, &one, sizeof one);
}

} // namespace outboxd::simulator
