// The per-event pipeline. Every call is recorded before the event's state moves on; every
// state change presents the lease token, and a lost lease drops the result.
#include "actors/event_runner.hpp"

#include "domain/delivery.hpp"
#include "domain/response_body.hpp"
#include "domain/revert.hpp"
#include "domain/secrets.hpp"
#include "log/log.hpp"
#include "metrics/metrics.hpp"
#include "persistence/connection_pool.hpp"

#include <algorithm>
#include <list>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <set>

namespace outboxd::actors {
namespace {

using std::chrono::milliseconds;
constexpr std::size_t max_error_body = 200;
constexpr std::size_t max_failure_cause = 1000;

/// A call's answer as its log line gives it: "200 in 4ms", or "no answer after 5002ms (why)".
std::string answer_text(const client::call_result& r) {
  return r.status ? fmt::format("{} in {}ms", *r.status, r.duration.count())
                  : fmt::format("no answer after {}ms ({})", r.duration.count(), r.error);
}

std::string to_json(const rapidjson::Value& v) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  v.Accept(w);
  return {sb.GetString(), sb.GetSize()};
}

/// Owns parsed documents so that pointers into them stay valid for a whole event.
class documents {
public:
  const rapidjson::Value* parse(const std::optional<std::string>& text) {
    if (!text || text->empty())
      return nullptr;
    auto& d = docs_.emplace_back();
    d.Parse(text->data(), text->size());
    return d.HasParseError() ? nullptr : &d;
  }

private:
  std::list<rapidjson::Document> docs_;
};

bool sends_body(const std::string& method) {
  return method == "POST" || method == "PUT" || method == "PATCH";
}

metrics::registry& m() {
  return metrics::global();
}

/// Counts one recorded attempt, and its latency when a call was made.
void observe_call(const persistence::attempt_row& row) {
  m().calls.inc(
      {{"destination", row.destination}, {"outcome", std::string(domain::to_string(row.outcome))}});
  if (row.duration_ms)
    m().call_seconds.observe({{"destination", row.destination}}, *row.duration_ms / 1000.0);
}

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// Fills the response columns of `row` from `r`, and the error for a non-success. Whatever the
/// destination sent, the row can be inserted: the body goes to the one column that holds it
/// unchanged, and every text column gets well-formed UTF-8 without NUL.
/// Credentials of the destination (`secrets`) that its answer echoes are stored as "***".
void fill_response(persistence::attempt_row& row, const client::call_result& r,
                   domain::attempt_outcome outcome, const std::vector<std::string>& secrets) {
  auto body = domain::mask_secrets(r.body, secrets);
  row.response_status = r.status;
  row.duration_ms = static_cast<int>(r.duration.count());
  if (r.status) {
    if (!r.content_type.empty())
      row.response_content_type = domain::readable_text(r.content_type, max_error_body);
    row.response_truncated = r.truncated;
  }
  domain::store_body(row, body);
  row.outcome = outcome;
  if (outcome != domain::attempt_outcome::success)
    row.error_message = r.status ? fmt::format("HTTP {}: {}", *r.status,
                                               domain::readable_text(body, max_error_body))
                                 : domain::readable_text(r.error);
}

} // namespace

event_runner::event_runner(const engine_context& ctx, std::string actor_name, call_driver& driver,
                           int own_connections)
    : ctx_(ctx), name_(std::move(actor_name)), driver_(driver),
      lane_(own_connections > 0
                ? std::make_unique<database_lane>(driver, ctx_.conninfo(name_ + "-own"),
                                                  ctx_.db->setup() + "; " +
                                                      persistence::outbox_statements::lane_setup,
                                                  own_connections)
                : nullptr),
      rows_(*ctx_.db, name_, driver, lane_.get()),
      completions_(*ctx_.db, name_, driver, &rows_, lane_.get(), ctx_.hooks),
      rng_(std::random_device{}()) {}

domain::retry_budget event_runner::budget(domain::run_kind run,
                                          const std::string& destination) const {
  const auto& s = ctx_.settings;
  const bool dead_letter = run == domain::run_kind::compensation;
  const auto& backoff = dead_letter ? s.dlq.backoff : s.outbox.backoff;
  domain::retry_budget out{dead_letter ? s.dlq.max_retries : s.outbox.max_retries, backoff.base,
                           backoff.max, dead_letter ? s.dlq.retry_for : s.outbox.retry_for};
  if (auto d = s.http.destinations.find(destination); d != s.http.destinations.end()) {
    out.max_retries = d->second.max_retries.value_or(out.max_retries);
    out.retry_for = d->second.retry_for.value_or(out.retry_for);
  }
  return out;
}

domain::next_step event_runner::decide(domain::run_kind run, domain::attempt_outcome outcome,
                                       int attempt, milliseconds failing_for,
                                       const std::string& destination,
                                       const std::optional<milliseconds>& retry_after) {
  std::uniform_real_distribution<double> jitter(0.0, 1.0);
  return domain::decide_after_failure(run, outcome, attempt, failing_for, budget(run, destination),
                                      retry_after, jitter(rng_));
}

event_runner::hold_decision event_runner::after_hold(domain::run_kind run,
                                                     const std::string& destination,
                                                     milliseconds failing_for,
                                                     const destination_gates::hold& hold) {
  auto b = budget(run, destination);
  if (domain::out_of_time(failing_for, b))
    return {{}, domain::give_up_for_time(run)};
  // Spread the runs held together so that they do not all come back in the same instant, and
  // come back no later than the end of the retry budget, to give up then.
  std::uniform_real_distribution<double> spread(1.0, 1.25);
  auto delay = milliseconds(static_cast<std::int64_t>(hold.delay.count() * spread(rng_)));
  return {std::min(delay, b.retry_for - failing_for), {}};
}

lease_keeper renewing_lease(milliseconds lease, std::chrono::steady_clock::time_point claimed_at,
                            std::function<bool()> renew) {
  return [lease, renewed = claimed_at, renew = std::move(renew)](milliseconds needed) mutable {
    auto now = std::chrono::steady_clock::now();
    if (lease - (now - renewed) >= needed + lease / 4)
      return true;
    if (!renew())
      return false;
    renewed = now;
    return true;
  };
}

lease_keeper event_runner::outbox_lease(const persistence::claimed_event& e) {
  const auto lease = ctx_.settings.outbox.lease_timeout;
  return renewing_lease(lease, e.claimed_at,
                        [this, &e, lease] { return repo()->extend_lease(e, lease); });
}

compensation_result compensation_result::stopped(const not_called& why, std::string destination,
                                                 std::string step) {
  compensation_result out;
  out.what = why.held ? kind::held : kind::lease_lost;
  if (why.held)
    out.hold = *why.held;
  out.destination = std::move(destination);
  out.step = std::move(step);
  return out;
}

task<std::variant<client::call_result, not_called>>
event_runner::call_through_gate(const std::string& destination, const client::call_request& req,
                                const lease_keeper& keep_lease,
                                std::optional<destination_gates::hold>& reopened) {
  // No free slot: ask again shortly, for up to max_limit_wait, without blocking the thread (the
  // other runs of this processor go on meanwhile).
  const auto give_up_at = destination_gates::clock::now() + destination_gates::max_limit_wait;
  for (;;) {
    auto pass = ctx_.gates->try_enter(destination, name_, give_up_at);
    if (auto* again = std::get_if<destination_gates::retry>(&pass)) {
      co_await driver_.sleep_until(again->at);
      continue;
    }
    if (auto* held = std::get_if<destination_gates::hold>(&pass))
      co_return not_called{std::move(*held)};
    auto permit = std::move(std::get<destination_gates::permit>(pass));
    if (auto at = permit.not_before())
      co_await driver_.sleep_until(*at); // the rate token promised to this call
    if (!keep_lease(req.timeout))
      co_return not_called{}; // the permit is dropped unused
    auto result = co_await driver_.call(req);
    const auto outcome = domain::classify(req.method, result.status);
    const bool probe = permit.probe();
    std::optional<milliseconds> retry_after;
    if (outcome == domain::attempt_outcome::retryable)
      retry_after = domain::parse_retry_after(result.retry_after, now_unix_ms());
    if (permit.report(outcome, retry_after)) {
      // The probe closed the circuit: what it held back need not wait out its delay.
      auto woken = repo()->make_held_due(held_prefix(destination));
      log::info(name_, "destination {}: its probe closed the circuit; {} held run(s) due now",
                destination, woken);
    } else if (probe && outcome == domain::attempt_outcome::retryable) {
      auto again = ctx_.gates->try_enter(destination, name_, destination_gates::clock::now());
      if (auto* held = std::get_if<destination_gates::hold>(&again))
        reopened = std::move(*held);
    }
    co_return result;
  }
}

task<void> event_runner::record(const persistence::attempt_row& row) {
  co_await rows_.record(row);
  observe_call(row);
}

std::string event_runner::failure_cause(const pqxx::failure& error) {
  // PostgreSQL's message without its severity prefix and CONTEXT / DETAIL lines.
  std::string_view what = error.what();
  what = what.substr(0, what.find('\n'));
  if (what.rfind("ERROR:", 0) == 0)
    what.remove_prefix(6);
  while (!what.empty() && what.front() == ' ')
    what.remove_prefix(1);
  return "recording failed: " + domain::readable_text(what, max_failure_cause);
}

task<void> event_runner::run(const persistence::claimed_event& e) {
  try {
    if (e.event_type.rfind('!', 0) == 0)
      co_await run_cancellation(e);
    else
      co_await run_fanout(e);
  } catch (const pqxx::failure& error) {
    // A lost connection is the claim loop's business (drop the batch, back off). Any other
    // database error belongs to this event alone: it fails the run instead of the worker, so
    // that one event the database refuses cannot crash-loop a processor. (Other exceptions are
    // bugs: they still crash the worker, and the supervisor restarts it.)
    if (persistence::is_connection_loss(error))
      throw;
    hold_for_database(e, failure_cause(error));
  }
}

void event_runner::hold_for_database(const persistence::claimed_event& e,
                                     const std::string& cause) {
  const auto delay = domain::database_hold_delay(
      e.failing_for, budget(is_cancellation(e.event_type) ? domain::run_kind::cancellation
                                                          : domain::run_kind::fanout,
                            ""));
  log::error(name_,
             "event {} {} {} {} attempt {}: {}; held back, due again in {}ms (no retry "
             "spent: the database, not a partner, failed)",
             e.id, e.event_type, e.aggregate_type, e.aggregate_id, e.attempts + 1, cause,
             delay.count());
  try {
    // Its call may have been applied and its row refused: the run counts as cut off.
    if (!repo()->postpone(e, delay, held_error(cause), true))
      lease_lost(e, "hold");
  } catch (const pqxx::failure& again) {
    if (persistence::is_connection_loss(again))
      throw;
    // Still not the worker's end: the lease expires and the reaper hands the event on.
    log::error(name_,
               "event {}: its failure could not be recorded either ({}); it waits for its "
               "lease to expire",
               e.id, again.what());
  }
}

void event_runner::carry_out(const persistence::claimed_event& e, const domain::next_step& next,
                             const std::string& error, bool retry_after_given, bool made_call,
                             const std::string& failed_step) {
  const int attempt = e.attempts + 1;
  const bool cancellation = is_cancellation(e.event_type);
  if (next.what == domain::next_step::kind::retry) {
    if (!repo()->retry(e, next.delay, error))
      return lease_lost(e, "retry");
    m().events_retried.inc({{"event_type", e.event_type}});
    log::warn(name_, "event {} {} {} {}: retry {} in {}ms ({}{})", e.id, e.event_type,
              e.aggregate_type, e.aggregate_id, attempt, next.delay.count(), error,
              retry_after_given ? ", Retry-After" : "");
    return;
  }
  const std::string reason(domain::to_string(next.reason));
  if (next.out_of_time)
    log::warn(name_, "event {} {} {} {}: retryFor spent after {}s of failures, giving up", e.id,
              e.event_type, e.aggregate_type, e.aggregate_id, e.failing_for.count() / 1000);
  // A cancellation is dead-lettered as FAILED: it is never compensated again, it waits for an
  // operator.
  auto letter =
      cancellation
          ? repo()->dead_letter(e, reason, error, "FAILED",
                                domain::engine_outcome::compensation_failed, made_call, failed_step)
          : repo()->dead_letter(e, reason, error, "PENDING", std::nullopt, made_call);
  if (!letter)
    return lease_lost(e, "dead letter");
  m().events_dead_lettered.inc({{"event_type", e.event_type}, {"reason", reason}});
  if (cancellation) {
    m().compensations.inc({{"kind", "cancellation"}, {"outcome", "failed"}});
    log::error(name_,
               "order needs attention: event {} {} {} {} failed: {}; dead letter {} ({}) waits "
               "for an operator to redrive or resolve it",
               e.id, e.event_type, e.aggregate_type, e.aggregate_id, error, *letter, reason);
  } else {
    log::warn(name_, "event {} {} {} {} dead-lettered as dead letter {} ({}): {}", e.id,
              e.event_type, e.aggregate_type, e.aggregate_id, *letter, reason, error);
  }
}

void event_runner::hold_back(const persistence::claimed_event& e, domain::run_kind run,
                             const std::string& destination, const destination_gates::hold& hold,
                             const std::string& step) {
  auto decision = after_hold(run, destination, e.failing_for, hold);
  if (decision.give_up)
    return carry_out(e, *decision.give_up, with_last_answer(hold.reason, e.last_error), false,
                     false, step);
  if (!repo()->postpone(e, decision.delay, held_error(hold.reason, e.last_error)))
    return lease_lost(e, "hold");
  // A run's first hold is news; the holds that follow it (every few seconds while a circuit
  // stays open) are at debug.
  log::write(e.held_before ? log::level::debug : log::level::info, name_,
             fmt::format("event {} {} {} {}: held back ({}), due again in {}ms; no retry spent",
                         e.id, e.event_type, e.aggregate_type, e.aggregate_id, hold.reason,
                         decision.delay.count()));
}

task<void> event_runner::run_fanout(const persistence::claimed_event& e) {
  const auto& s = ctx_.settings;
  const int attempt = e.attempts + 1;
  auto fanout = s.http.fanout.find(e.event_type);
  if (fanout == s.http.fanout.end()) {
    log::warn(name_,
              "event {} ({} of {} {}): no fan-out configured for this type; nothing to deliver",
              e.id, e.event_type, e.aggregate_type, e.aggregate_id);
    if (!co_await completions_.complete(e, domain::engine_outcome::fanout_succeeded, {}, nullptr))
      lease_lost(e, "result");
    co_return;
  }
  documents docs;
  rapidjson::Document payloads;
  payloads.Parse(e.payloads_json.data(), e.payloads_json.size());
  if (payloads.HasParseError() || !payloads.IsObject()) {
    repo()->dead_letter(
        e, std::string(domain::to_string(domain::dead_letter_reason::non_retryable_error)),
        "payloads are not a JSON object");
    co_return;
  }

  // Resume: destinations that already succeeded for this event are not called again; their
  // stored responses feed previousDestination conditions. (A first run has nothing to read.)
  domain::previous_responses previous;
  if (e.has_results)
    for (const auto& done : repo()->successes(e.id))
      previous[done.destination] = docs.parse(done.response_json);

  // An event that waited in its processor's batch may have used up much of its lease already.
  auto keep_lease = outbox_lease(e);
  // Each call's row is recorded before the next call; the last one's goes with the completion.
  std::optional<persistence::attempt_row> last_row;
  std::optional<step_result> failed;
  std::string failed_destination;
  const auto& names = fanout->second;
  for (std::size_t i = 0; i < names.size() && !failed; ++i) {
    const auto& name = names[i];
    if (previous.count(name)) {
      log::debug(name_, "event {} {}: {} already succeeded, resuming after it", e.id, e.event_type,
                 name);
      continue;
    }
    if (ctx_.stopping) {
      repo()->release(e);
      log::info(name_, "event {} {} handed back for shutdown before {}", e.id, e.event_type, name);
      co_return;
    }
    auto step = co_await call_step(e, i, name, payloads, previous, attempt, keep_lease);
    if (step.not_made && step.not_made->held) { // the steps before are recorded: it resumes there
      hold_back(e, domain::run_kind::fanout, name, *step.not_made->held);
      co_return;
    }
    if (step.not_made) { // nothing was called under the lost lease: nothing to drop
      lease_lost_before(e, name);
      co_return;
    }
    if (domain::is_done(step.outcome) && i + 1 == names.size()) {
      last_row = std::move(step.row); // commits with the completion
      continue;
    }
    co_await record(step.row);
    if (domain::is_done(step.outcome)) {
      if (step.outcome == domain::attempt_outcome::success)
        previous[name] = docs.parse(step.response_json);
      continue;
    }
    failed = std::move(step);
    failed_destination = name;
  }

  const metrics::labels type{{"event_type", e.event_type}};
  if (!failed) {
    bool completed = co_await completions_.complete(e, domain::engine_outcome::fanout_succeeded, {},
                                                    last_row ? &*last_row : nullptr);
    if (last_row)
      observe_call(*last_row);
    if (completed) {
      m().events_processed.inc(type);
      log::info(name_, "event {} {} {} {} processed after {} attempt(s)", e.id, e.event_type,
                e.aggregate_type, e.aggregate_id, attempt);
    } else {
      lease_lost(e, "result");
    }
    co_return;
  }
  if (failed->reopened) { // a probe answered like the calls before it: the circuit is open again
    hold_back(e, domain::run_kind::fanout, failed_destination, *failed->reopened);
    co_return;
  }
  auto error = failed_destination + ": " + failed->error;
  carry_out(e,
            decide(domain::run_kind::fanout, failed->outcome, attempt, e.failing_for,
                   failed_destination, failed->retry_after),
            error, failed->retry_after.has_value());
}

task<event_runner::step_result> event_runner::call_step(const persistence::claimed_event& e,
                                                        std::size_t index, const std::string& name,
                                                        const rapidjson::Value& payloads,
                                                        const domain::previous_responses& previous,
                                                        int attempt,
                                                        const lease_keeper& keep_lease) {
  const auto& dest = ctx_.settings.http.destinations.at(name);
  const rapidjson::Value* entry = nullptr;
  if (auto it = payloads.FindMember(name.c_str()); it != payloads.MemberEnd())
    entry = &it->value;
  else if (auto any = payloads.FindMember(rapidjson::StringRef(domain::any_destination.data(),
                                                               domain::any_destination.size()));
           any != payloads.MemberEnd())
    entry = &any->value;
  const rapidjson::Value* payload = nullptr;
  std::map<std::string, std::string> path_params;
  if (entry && entry->IsObject()) {
    if (auto p = entry->FindMember("payload"); p != entry->MemberEnd())
      payload = &p->value;
    if (auto pp = entry->FindMember("pathParams"); pp != entry->MemberEnd() && pp->value.IsObject())
      for (const auto& m : pp->value.GetObject())
        if (m.value.IsString())
          path_params[m.name.GetString()] = m.value.GetString();
  }

  persistence::attempt_row row;
  row.event_id = e.id;
  row.aggregate_type = e.aggregate_type;
  row.aggregate_id = e.aggregate_id;
  row.event_type = e.event_type;
  row.destination = name;
  row.fanout_order = static_cast<int>(index);
  row.attempt = attempt;
  row.run = e.lease_token;
  row.http_method = dest.method;

  auto choice = domain::choose_route(dest, payload, previous);
  if (choice.what != domain::route_choice::kind::call) {
    bool skip = choice.what == domain::route_choice::kind::skip;
    row.outcome = skip ? domain::attempt_outcome::skipped : domain::attempt_outcome::non_retryable;
    row.error_message = choice.reason;
    log::info(name_, "event {} {} {} {}: {} {}", e.id, e.event_type, e.aggregate_type,
              e.aggregate_id, skip ? "skipped" : "failed", choice.reason);
    if (skip)
      co_return step_result{row.outcome, {}, {}, {}, std::move(row), {}, {}};
    co_return step_result{row.outcome, choice.reason, {}, {}, std::move(row), {}, {}};
  }
  auto url = domain::fill_url(choice.chosen->url, path_params);
  if (!url) {
    row.endpoint_url = domain::mask_url_credentials(choice.chosen->url);
    row.outcome = domain::attempt_outcome::non_retryable;
    row.error_message = url.err().message;
    co_return step_result{row.outcome, url.err().message, {}, {}, std::move(row), {}, {}};
  }
  // The audit and the log get the URL without its credentials; the call, the URL itself.
  row.endpoint_url = domain::mask_url_credentials(url.value());
  client::call_request req;
  req.method = dest.method;
  req.url = url.value();
  req.connect_timeout = dest.connect_timeout;
  req.timeout = dest.timeout;
  req.max_response_bytes = dest.max_response_bytes;
  req.tls = dest.tls;
  row.idempotency_key = fmt::format("{}:{}", e.id, name);
  req.headers = {{"Idempotency-Key", *row.idempotency_key},
                 {"X-Event-Id", std::to_string(e.id)},
                 {"X-Event-Type", e.event_type},
                 {"X-Aggregate-Id", e.aggregate_id},
                 {"X-Destination", name}};
  req.headers.insert(req.headers.end(), dest.headers.begin(), dest.headers.end());
  if (sends_body(dest.method)) {
    req.body = payload ? to_json(*payload) : "{}";
    row.request_payload_json = req.body;
  }
  std::optional<destination_gates::hold> reopened;
  auto call = co_await call_through_gate(name, req, keep_lease, reopened);
  if (auto* why = std::get_if<not_called>(&call)) {
    step_result out;
    out.not_made = std::move(*why);
    co_return out;
  }
  const auto& result = std::get<client::call_result>(call);
  auto outcome = domain::classify(dest.method, result.status);
  // 409 is how APIs with Idempotency-Keys say "a request with this key is still being
  // processed": after a call of this step that got no answer (or a run cut off at it), it is not
  // a refusal (the step may well be applied), so it is retried (and a compensation settles it
  // later) instead.
  const bool key_in_use =
      outcome == domain::attempt_outcome::non_retryable && result.status == 409 &&
      uncertain_step_of(e.id, ctx_.settings.http.fanout.at(e.event_type)) == name;
  if (key_in_use)
    outcome = domain::attempt_outcome::retryable;
  fill_response(row, result, outcome, domain::credential_values(dest.headers));
  if (key_in_use)
    row.error_message = "HTTP 409 after an unanswered call with the same Idempotency-Key (the "
                        "partner may still be processing it): " +
                        *row.error_message;
  log::info(name_, "event {} {} {} {} → {} {} {} {}, attempt {}", e.id, e.event_type,
            e.aggregate_type, e.aggregate_id, name, dest.method, row.endpoint_url,
            answer_text(result), attempt);
  if (outcome == domain::attempt_outcome::success) {
    auto response = row.response_payload_json;
    co_return step_result{outcome, {}, {}, std::move(response), std::move(row), {}, {}};
  }
  auto error = *row.error_message;
  co_return step_result{outcome,
                        std::move(error),
                        domain::parse_retry_after(result.retry_after, now_unix_ms()),
                        {},
                        std::move(row),
                        {},
                        std::move(reopened)};
}

std::optional<std::string> event_runner::uncertain_step_of(std::int64_t event_id,
                                                           const std::vector<std::string>& fanout) {
  // One borrow of the connection per statement: two in one expression would wait for each other.
  auto states = repo()->step_states(event_id);
  auto interrupted = repo()->interrupted_runs(event_id);
  return domain::uncertain_step(fanout, states, interrupted);
}

void event_runner::lease_lost_before(const persistence::claimed_event& e,
                                     const std::string& destination) {
  m().leases_lost.inc();
  log::warn(name_, "event {} {}: lease lost before calling {}; another worker owns it now", e.id,
            e.event_type, destination);
}

void event_runner::lease_lost(const persistence::claimed_event& e, const char* what) {
  m().leases_lost.inc();
  log::warn(name_, "event {} {}: lease lost; {} dropped (another worker owns it now)", e.id,
            e.event_type, what);
}

task<void> event_runner::run_cancellation(const persistence::claimed_event& e) {
  const int attempt = e.attempts + 1;
  const metrics::labels type{{"event_type", e.event_type}};
  auto original_type = e.event_type.substr(1);
  auto original = repo()->latest_event_id(e.aggregate_type, e.aggregate_id, original_type);
  if (original)
    log::info(name_, "event {} {} {} {}: cancelling, reverting what event {} applied, attempt {}",
              e.id, e.event_type, e.aggregate_type, e.aggregate_id, *original, attempt);
  compensation_result result;
  if (original) {
    auto keep_lease = outbox_lease(e);
    result = co_await compensate(*original, e.aggregate_type, e.aggregate_id, e.event_type, attempt,
                                 keep_lease);
  }
  switch (result.what) {
  case compensation_result::kind::interrupted:
    repo()->release(e);
    co_return;
  case compensation_result::kind::lease_lost: {
    lease_lost_before(e, result.destination);
    co_return;
  }
  case compensation_result::kind::held: {
    hold_back(e, domain::run_kind::cancellation, result.destination, result.hold, result.step);
    co_return;
  }
  default:
    break;
  }
  if (result.what == compensation_result::kind::done) {
    if (!co_await completions_.complete(e, domain::engine_outcome::cancellation_compensated, {},
                                        nullptr)) {
      lease_lost(e, "cancellation result");
      co_return;
    }
    m().events_processed.inc(type);
    m().compensations.inc({{"kind", "cancellation"}, {"outcome", "reverted"}});
    log::info(name_, "event {} {} {} {}: cancellation complete, {} step(s) reverted in this run",
              e.id, e.event_type, e.aggregate_type, e.aggregate_id, result.reverted);
    co_return;
  }
  carry_out(e,
            decide(domain::run_kind::cancellation, result.failure, attempt, e.failing_for,
                   result.destination, result.retry_after),
            result.error, result.retry_after.has_value(), true, result.step);
}

task<std::optional<compensation_result>>
event_runner::settle_uncertain_step(std::int64_t original_event_id, int attempt,
                                    const lease_keeper& keep_lease) {
  const auto& s = ctx_.settings;
  auto body = repo()->body_of(original_event_id);
  if (!body)
    co_return std::nullopt;
  auto fanout = s.http.fanout.find(body->event_type);
  if (fanout == s.http.fanout.end())
    co_return std::nullopt;
  auto name = uncertain_step_of(original_event_id, fanout->second);
  const int runs = body->attempts.value_or(0);
  if (!name)
    co_return std::nullopt;
  const auto& dest = s.http.destinations.at(*name);
  if (std::none_of(dest.routes.begin(), dest.routes.end(),
                   [](const domain::route& r) { return r.revert.has_value(); }))
    co_return std::nullopt; // nothing of it could be undone anyway
  rapidjson::Document payloads;
  payloads.Parse(body->payloads_json.data(), body->payloads_json.size());
  if (payloads.HasParseError() || !payloads.IsObject())
    co_return std::nullopt;
  documents docs;
  domain::previous_responses previous;
  for (const auto& done : repo()->successes(original_event_id))
    previous[done.destination] = docs.parse(done.response_json);
  auto index = static_cast<std::size_t>(
      std::find(fanout->second.begin(), fanout->second.end(), *name) - fanout->second.begin());
  log::info(name_,
            "event {} {} {}: {} may have been applied (no definite answer); re-sending it with "
            "its Idempotency-Key before reverting",
            original_event_id, body->aggregate_type, body->aggregate_id, *name);
  persistence::claimed_event e{
      original_event_id,   0, body->aggregate_type, body->aggregate_id, body->event_type,
      body->payloads_json, 0};
  // Numbered after the event's own attempts, and of no run of it: an answer to this re-send is not
  // the answer the interrupted run never got, so a transient one leaves the step uncertain, and a
  // success does not move any run on to the next step.
  auto step = co_await call_step(e, index, *name, payloads, previous, runs + attempt, keep_lease);
  step.row.run = domain::compensation_run;
  if (step.not_made)
    co_return compensation_result::stopped(*step.not_made, *name, *name);
  co_await record(step.row);
  if (step.reopened) // a failed probe: held back with the others, as for any call
    co_return compensation_result::stopped(not_called{std::move(step.reopened)}, *name, *name);
  if (step.outcome != domain::attempt_outcome::retryable)
    co_return std::nullopt; // applied (now reverted with the rest) or refused for good
  compensation_result out;
  out.destination = *name;
  out.step = *name;
  out.what = compensation_result::kind::failed;
  out.failure = domain::attempt_outcome::retryable;
  out.error = *name + " (re-sent to settle an unanswered call): " + step.error;
  out.retry_after = step.retry_after;
  co_return out;
}

task<compensation_result> event_runner::compensate(std::int64_t original_event_id,
                                                   const std::string& aggregate_type,
                                                   const std::string& aggregate_id,
                                                   const std::string& row_event_type, int attempt,
                                                   const lease_keeper& keep_lease) {
  const auto& s = ctx_.settings;
  auto unsettled = co_await settle_uncertain_step(original_event_id, attempt, keep_lease);
  if (unsettled)
    co_return *unsettled;
  documents docs;
  auto steps = repo()->successes(original_event_id);
  auto reverted_list = repo()->reverted_destinations(original_event_id);
  std::set<std::string> reverted(reverted_list.begin(), reverted_list.end());
  compensation_result out;
  // LIFO: the step applied last is undone first.
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const auto& step = *it;
    if (ctx_.stopping) {
      out.what = compensation_result::kind::interrupted;
      co_return out;
    }
    persistence::attempt_row row;
    row.event_id = original_event_id;
    row.aggregate_type = aggregate_type;
    row.aggregate_id = aggregate_id;
    row.event_type = row_event_type;
    row.destination = domain::revert_step(step.destination);
    row.fanout_order = step.fanout_order;
    row.attempt = attempt;
    out.destination = step.destination;
    auto fail = [&](domain::attempt_outcome outcome, const std::string& why) {
      out.what = compensation_result::kind::failed;
      out.step = row.destination;
      out.failure = outcome;
      out.error = row.destination + ": " + why;
      return out;
    };
    if (reverted.count(step.destination)) {
      log::info(name_, "event {} {} {}: {} already reverted or settled, skipping",
                original_event_id, aggregate_type, aggregate_id, step.destination);
      continue;
    }
    auto dest = s.http.destinations.find(step.destination);
    const domain::route* route = dest == s.http.destinations.end()
                                     ? nullptr
                                     : domain::route_to_revert(dest->second, step.endpoint_url);
    if (!route) {
      row.endpoint_url = step.endpoint_url;
      row.http_method = "-";
      row.outcome = domain::attempt_outcome::non_retryable;
      row.error_message = dest == s.http.destinations.end()
                              ? "cannot tell which configured route called " + step.endpoint_url
                              : domain::route_miss(dest->second, step.endpoint_url);
      co_await record(row);
      co_return fail(row.outcome, *row.error_message);
    }
    if (!route->revert) {
      row.endpoint_url = step.endpoint_url;
      row.http_method = "-";
      row.outcome = domain::attempt_outcome::skipped;
      row.error_message = "read-only step: no revert configured";
      co_await record(row);
      log::info(name_, "event {} {} {}: {} is read-only, nothing to revert", original_event_id,
                aggregate_type, aggregate_id, step.destination);
      continue;
    }
    auto call = domain::build_revert(*route->revert, docs.parse(step.request_json),
                                     docs.parse(step.response_json));
    row.http_method = route->revert->method;
    if (!call) {
      row.endpoint_url = domain::mask_url_credentials(route->revert->url);
      row.outcome = domain::attempt_outcome::non_retryable;
      row.error_message = "revert cannot be built: " + call.err().message;
      co_await record(row);
      co_return fail(row.outcome, *row.error_message);
    }
    row.endpoint_url = domain::mask_url_credentials(call.value().url);
    row.idempotency_key = fmt::format("{}:{}:revert", original_event_id, step.destination);
    client::call_request req;
    req.method = call.value().method;
    req.url = call.value().url;
    req.body = call.value().body_json;
    req.connect_timeout = dest->second.connect_timeout;
    req.timeout = dest->second.timeout;
    req.max_response_bytes = dest->second.max_response_bytes;
    req.tls = dest->second.tls;
    req.headers = {{"Idempotency-Key", *row.idempotency_key},
                   {"X-Event-Id", std::to_string(original_event_id)},
                   {"X-Aggregate-Id", aggregate_id},
                   {"X-Revert-Aggregate-Id", aggregate_id},
                   {"X-Revert-Event-Type", row_event_type},
                   {"X-Revert-Destination", step.destination}};
    req.headers.insert(req.headers.end(), dest->second.headers.begin(), dest->second.headers.end());
    if (!req.body.empty())
      row.request_payload_json = req.body;
    std::optional<destination_gates::hold> reopened;
    auto sent = co_await call_through_gate(step.destination, req, keep_lease, reopened);
    if (auto* why = std::get_if<not_called>(&sent))
      co_return compensation_result::stopped(*why, step.destination, row.destination);
    const auto& result = std::get<client::call_result>(sent);
    auto outcome = domain::classify(req.method, result.status);
    fill_response(row, result, outcome, domain::credential_values(dest->second.headers));
    co_await record(row);
    log::info(name_, "event {} {} {} ({}): revert {} {} {} → {}, attempt {}", original_event_id,
              aggregate_type, aggregate_id, row_event_type, step.destination, req.method,
              row.endpoint_url, answer_text(result), attempt);
    if (reopened) // as for a forward call: held back with the others, no retry spent
      co_return compensation_result::stopped(not_called{std::move(reopened)}, step.destination,
                                             row.destination);
    if (outcome != domain::attempt_outcome::success) {
      (void)fail(outcome, *row.error_message);
      out.retry_after = domain::parse_retry_after(result.retry_after, now_unix_ms());
      co_return out;
    }
    ++out.reverted;
  }
  co_return out;
}

} // namespace outboxd::actors
