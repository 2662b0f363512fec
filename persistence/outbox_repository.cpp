// Outbox SQL. Every update of a claimed row says `WHERE id = $1 AND lease_token = $2`: zero rows
// means another worker owns the event now, and the caller must drop its result. The token alone
// fences: only a claim sets one (with PROCESSING, from a sequence), and every change out of
// PROCESSING clears it. The updates say nothing of the status on purpose: `status = 'PROCESSING'`
// lets the planner read the partial index of leased events instead of the primary key, and with
// statistics taken while few events were in flight it does, so that each update scanned every
// event in flight (6 ms of an 8.7 ms completion with 1 280 in flight).
#include "persistence/outbox_repository.hpp"

#include "domain/delivery.hpp"
#include "persistence/claim_walk.hpp"
#include "persistence/connection_pool.hpp"
#include "persistence/rows.hpp"

#include <algorithm>
#include <fmt/format.h>

namespace outboxd::persistence {
namespace {

// A due event is claimed unless an earlier event of its aggregate is unfinished or the aggregate
// has a dead letter that is not resolved: being compensated, or FAILED and waiting for an
// operator (a cancellation queued meanwhile must not revert around the failed compensation and
// settle the order while its dead letter stays open). See claim_walk.hpp.
constexpr const char* claim_tests = R"sql(AND NOT EXISTS (SELECT 1 FROM outbox_events p
                                WHERE p.aggregate_id = e.aggregate_id
                                  AND p.aggregate_type = e.aggregate_type
                                  AND p.id < e.id AND p.status IN ('PENDING', 'PROCESSING') OFFSET 0)
                AND NOT EXISTS (SELECT 1 FROM dead_letter_events d
                                WHERE d.aggregate_id = e.aggregate_id
                                  AND d.aggregate_type = e.aggregate_type
                                  AND d.status IN ('PENDING', 'PROCESSING', 'FAILED')
                                OFFSET 0))sql";
const std::string claim_returns = fmt::format(
    R"sql(e.id, e.lease_token, e.aggregate_type, e.aggregate_id, e.event_type, e.payloads::text,
          e.attempts, EXISTS (SELECT 1 FROM aggregate_results r WHERE r.event_id = e.id OFFSET 0),
          (extract(epoch FROM now() - e.failing_since) * 1000)::bigint,
          coalesce(e.last_error LIKE '{}%', false), e.last_error)sql",
    domain::held_back_prefix);

constexpr int attempt_columns_count = 21;
constexpr const char* record_attempt_columns = R"sql(
INSERT INTO aggregate_results (event_id, aggregate_type, aggregate_id, event_type, destination,
  fanout_order,
  attempt, endpoint_url, http_method, idempotency_key, request_payload, response_status,
  response_payload, response_text, outcome, error_message, duration_ms, response_body,
  response_content_type, response_truncated, lease_token))sql";

// A claim and an attempt row commit without waiting for the WAL flush (set_config in RETURNING
// switches synchronous_commit off for the statement's own implicit transaction). The event's
// next state change commits synchronously, which flushes the WAL up to and including them; a
// database crash before that loses rows of a run whose lease then expires (the reaper records it
// as cut off, so a compensation settles the step it stood at), or the claim with them: that run
// is redone from the same step, and is invisible to a compensation if no later run reaches it.
constexpr const char* async_commit = "set_config('synchronous_commit', 'off', true)";

constexpr const char* successes_sql = R"sql(
SELECT DISTINCT ON (destination) destination, fanout_order, endpoint_url,
       request_payload::text, response_payload::text
  FROM aggregate_results
 WHERE event_id = $1 AND outcome = 'success' AND destination NOT LIKE '%.revert'
 ORDER BY destination, id DESC)sql";

// A call without an answer is "unanswered" unless its error says it never left (a definite
// "not applied", like a transient answer). Runs are named by their lease tokens; a compensation's
// re-sends by -1 (not a run: its success does not move a run on), rows from before run tokens by
// none (counted as run 0).
const std::string step_states_sql = fmt::format(R"sql(
SELECT destination,
       CASE WHEN bool_or(outcome = 'success') THEN 'succeeded'
            WHEN bool_or(outcome = 'skipped') THEN 'skipped'
            WHEN bool_or(outcome = 'non_retryable') THEN 'refused'
            WHEN bool_or(response_status IS NULL
                         AND coalesce(error_message, '') !~ '{}') THEN 'unanswered'
            ELSE 'answered' END,
       min(coalesce(lease_token, 0)) FILTER (WHERE outcome IN ('success', 'skipped')
                                               AND coalesce(lease_token, 0) >= 0),
       array_to_string(array_agg(DISTINCT lease_token) FILTER (WHERE lease_token > 0), ',')
  FROM aggregate_results
 WHERE event_id = $1
 GROUP BY destination)sql",
                                                domain::never_sent_errors);

constexpr const char* interrupted_sql =
    "SELECT array_to_string(interrupted_leases, ',') FROM outbox_events WHERE id = $1";

// A run cut off: its lease expired before it said how it ended.
constexpr const char* mark_interrupted_sql = R"sql(
UPDATE outbox_events SET interrupted_leases = array_append(interrupted_leases, lease_token)
 WHERE id = $1)sql";

constexpr const char* body_sql = R"sql(
(SELECT aggregate_type, aggregate_id, event_type, payloads::text, attempts FROM outbox_events
  WHERE id = $1)
UNION ALL
(SELECT aggregate_type, aggregate_id, event_type, payloads::text, NULL FROM dead_letter_events
  WHERE original_event_id = $1)
LIMIT 1)sql";

// Done: reverted, or skipped (a read-only step, or a step an operator settled by hand).
constexpr const char* reverted_sql = R"sql(
SELECT DISTINCT left(destination, -7) FROM aggregate_results
 WHERE event_id = $1 AND outcome IN ('success', 'skipped') AND destination LIKE '%.revert')sql";

// Both queues: an event and a dead letter held back by the same destination.
constexpr const char* held_due_sql = R"sql(
WITH events AS (UPDATE outbox_events SET next_retry_at = now()
                 WHERE status = 'PENDING' AND next_retry_at > now()
                   AND starts_with(last_error, $1) RETURNING 1),
letters AS (UPDATE dead_letter_events SET next_retry_at = now()
             WHERE status = 'PENDING' AND next_retry_at > now()
               AND starts_with(revert_error, $1) RETURNING 1)
SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM letters))sql";

constexpr const char* extend_sql = R"sql(
UPDATE outbox_events SET lease_expires_at = now() + $3::bigint * interval '1 millisecond'
 WHERE id = $1 AND lease_token = $2)sql";

// The finishing updates below are the `done` source of statements that also apply the aggregate's
// transition (see finishing()).
// The events of one completion statement come as (id, lease token) pairs; each one that still held
// its lease is returned, so each caller learns whether its own event was completed.
constexpr const char* complete_sql = R"sql(
WITH done AS (UPDATE outbox_events e
   SET status = 'PROCESSED', attempts = e.attempts + 1, processed_at = now(),
       status_changed_at = now(), lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
       next_retry_at = NULL
  FROM (VALUES {}) AS v (id, token)
 WHERE e.id = v.id AND e.lease_token = v.token
RETURNING e.id, e.aggregate_id))sql";

constexpr const char* retry_sql = R"sql(
UPDATE outbox_events
   SET status = 'PENDING', attempts = attempts + 1, last_error = $4, status_changed_at = now(),
       next_retry_at = now() + $3::bigint * interval '1 millisecond',
       failing_since = coalesce(failing_since, now()),
       lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE id = $1 AND lease_token = $2)sql";

// Held back (circuit open, a limit reached, the database refusing a statement): due again after
// $3 ms, attempts unchanged. $5: the run may have been cut off in the middle of a call (the
// database refused its row), recorded as the reaper records the runs it takes back.
constexpr const char* postpone_sql = R"sql(
UPDATE outbox_events
   SET status = 'PENDING', last_error = $4, status_changed_at = now(),
       interrupted_leases = CASE WHEN $5::boolean
                                 THEN array_append(interrupted_leases, lease_token)
                                 ELSE interrupted_leases END,
       next_retry_at = now() + $3::bigint * interval '1 millisecond',
       failing_since = coalesce(failing_since, now()),
       lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE id = $1 AND lease_token = $2)sql";

// $3 error, $4 reason, $5 status of the dead letter, $6 runs to count (0 for a run that made no
// call: it must not look like a run whose rows were lost). A dead letter written FAILED is a
// compensation (a cancellation) that could not be done: its error is the revert's, and an
// operator is looking for it in revert_error as in any failed compensation's.
constexpr const char* dead_letter_sql = R"sql(
WITH done AS (UPDATE outbox_events
   SET status = 'DEAD', attempts = attempts + $6::int, last_error = $3, status_changed_at = now(),
       lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, next_retry_at = NULL
 WHERE id = $1 AND lease_token = $2
RETURNING id, aggregate_type, aggregate_id, event_type, payloads),
letter AS (INSERT INTO dead_letter_events (original_event_id, aggregate_type, aggregate_id,
  event_type, payloads, reason, last_error, status, resolved_at, failed_step, revert_error)
SELECT id, aggregate_type, aggregate_id, event_type, payloads, $4::text, $3::text, $5::text,
       CASE WHEN $5::text = 'PROCESSED' THEN now() END, nullif($7::text, ''),
       CASE WHEN $5::text = 'FAILED' THEN $3::text END
  FROM done
RETURNING id))sql";

constexpr const char* release_sql = R"sql(
UPDATE outbox_events
   SET status = 'PENDING', next_retry_at = NULL, status_changed_at = now(),
       lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE id = $1 AND lease_token = $2)sql";

constexpr const char* expired_sql = R"sql(
SELECT id, lease_token, aggregate_type, aggregate_id, event_type, payloads::text, attempts, false,
       (extract(epoch FROM now() - failing_since) * 1000)::bigint, coalesce(lease_owner, '?')
  FROM outbox_events WHERE status = 'PROCESSING' AND lease_expires_at < now()
 ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED)sql";

constexpr const char* reap_back_sql = R"sql(
UPDATE outbox_events
   SET status = 'PENDING', attempts = attempts + 1, last_error = $2, next_retry_at = NULL,
       failing_since = coalesce(failing_since, now()), status_changed_at = now(), lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE id = $1)sql";

constexpr const char* retention_sql = R"sql(
DELETE FROM outbox_events WHERE id IN (
  SELECT id FROM outbox_events
   WHERE status = 'PROCESSED' AND processed_at < now() - $1::bigint * interval '1 millisecond'
   ORDER BY processed_at LIMIT $2))sql";

constexpr const char* next_due_sql = R"sql(
SELECT ceil(extract(epoch FROM min(next_retry_at) - now()) * 1000)::bigint
  FROM outbox_events WHERE status = 'PENDING' AND next_retry_at > now())sql";

const std::string latest_event = "SELECT " + latest_event_sql("$1", "$2", "$3");

/// The attempt rows' INSERT with `rows` rows of attempt_columns_count values each, bound to
/// parameters $first, $first+1, ... row after row.
std::string insert_attempt_sql(int first, std::size_t rows = 1) {
  std::string sql = record_attempt_columns;
  sql += " VALUES ";
  int param = first;
  for (std::size_t r = 0; r < rows; ++r) {
    sql += r ? ", (" : "(";
    for (int i = 0; i < attempt_columns_count; ++i)
      sql += (i ? ", $" : "$") + std::to_string(param++);
    sql += ")";
  }
  return sql;
}

/// Bytes as a bytea parameter in text form (PostgreSQL's hex input format): a text parameter
/// keeps the statements' parameter lists uniform and nullable.
std::optional<std::string> bytea_param(const std::optional<std::string>& bytes) {
  if (!bytes)
    return std::nullopt;
  static constexpr char digits[] = "0123456789abcdef";
  std::string out = "\\x";
  out.reserve(2 + bytes->size() * 2);
  for (unsigned char c : *bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

template <class T> param to_param(const std::optional<T>& v) {
  return v ? param(pqxx::to_string(*v)) : std::nullopt;
}
template <class T> param to_param(const T& v) {
  return pqxx::to_string(v);
}

/// Appends the parameters of attempt row `a`, in the order of record_attempt_columns.
void add_attempt_params(std::vector<param>& out, const attempt_row& a) {
  out.push_back(to_param(a.event_id));
  out.push_back(a.aggregate_type);
  out.push_back(a.aggregate_id);
  out.push_back(a.event_type);
  out.push_back(a.destination);
  out.push_back(to_param(a.fanout_order));
  out.push_back(to_param(a.attempt));
  out.push_back(a.endpoint_url);
  out.push_back(a.http_method);
  out.push_back(a.idempotency_key);
  out.push_back(a.request_payload_json);
  out.push_back(to_param(a.response_status));
  out.push_back(a.response_payload_json);
  out.push_back(a.response_text);
  out.push_back(std::string(domain::to_string(a.outcome)));
  out.push_back(a.error_message);
  out.push_back(to_param(a.duration_ms));
  out.push_back(bytea_param(a.response_body));
  out.push_back(a.response_content_type);
  out.push_back(to_param(a.response_truncated));
  out.push_back(a.run ? to_param(a.run) : std::nullopt);
}

bool is_cancellation(const std::string& event_type) {
  return event_type.rfind('!', 0) == 0;
}

claimed_event to_claimed(const pqxx::row& r) {
  return {r[0].as<std::int64_t>(),
          r[1].as<std::int64_t>(),
          r[2].as<std::string>(),
          r[3].as<std::string>(),
          r[4].as<std::string>(),
          r[5].as<std::string>(),
          r[6].as<int>(),
          r[7].as<bool>(),
          std::chrono::milliseconds(r[8].is_null() ? 0 : std::max(0LL, r[8].as<long long>()))};
}

} // namespace

outbox_repository::outbox_repository(pqxx::connection& conn, hooks_by_type hooks)
    : conn_(conn), hooks_(std::move(hooks)),
      claim_("outbox_claim",
             fmt::format("{}, {}", claim_walk_sql("outbox_events", 'e', claim_tests, claim_returns),
                         async_commit)) {
  conn_.prepare("outbox_successes", successes_sql);
  conn_.prepare("outbox_reverted", reverted_sql);
  conn_.prepare("outbox_latest_event", latest_event);
  conn_.prepare("outbox_extend", extend_sql);
  conn_.prepare("outbox_retry", retry_sql);
  conn_.prepare("outbox_postpone", postpone_sql);
  conn_.prepare("outbox_held_due", held_due_sql);
  conn_.prepare("outbox_step_states", step_states_sql);
  conn_.prepare("outbox_interrupted", interrupted_sql);
  conn_.prepare("outbox_mark_interrupted", mark_interrupted_sql);
  conn_.prepare("outbox_body", body_sql);
  conn_.prepare("outbox_release", release_sql);
  conn_.prepare("outbox_expired", expired_sql);
  conn_.prepare("outbox_reap_back", reap_back_sql);
  conn_.prepare("outbox_retention", retention_sql);
  conn_.prepare("outbox_next_due", next_due_sql);
}

// Each state change below is one statement, so it runs as an implicit transaction in a single
// round trip (pqxx::nontransaction), committed synchronously unless it says async_commit.

std::vector<claimed_event> outbox_repository::claim(const std::string& owner, int limit,
                                                    std::chrono::milliseconds lease) {
  // The lease runs from the database's clock at the claim, which is after this: a run that counted
  // it from the claim's return would think it had the time the statement took (a second waiting
  // for a lock, a starved backend) more than it has, skip a renewal its call needed, and lose the
  // event to the reaper while still calling.
  const auto now = std::chrono::steady_clock::now();
  pqxx::nontransaction tx(conn_);
  auto rows = claim_.run(tx, limit, owner, lease);
  std::vector<claimed_event> out;
  for (const auto& r : rows) {
    out.push_back(to_claimed(r));
    out.back().claimed_at = now;
    out.back().held_before = r[9].as<bool>();
    if (!r[10].is_null())
      out.back().last_error = r[10].as<std::string>();
  }
  std::sort(out.begin(), out.end(),
            [](const claimed_event& a, const claimed_event& b) { return a.id < b.id; });
  return out;
}

void outbox_repository::record_attempt(const attempt_row& row) {
  record_attempts({&row});
}

void outbox_repository::record_attempts(const std::vector<const attempt_row*>& rows) {
  for (std::size_t first = 0; first < rows.size(); first += max_rows_per_insert) {
    const auto count = std::min(max_rows_per_insert, rows.size() - first);
    auto s =
        outbox_statements::attempts({rows.begin() + static_cast<std::ptrdiff_t>(first),
                                     rows.begin() + static_cast<std::ptrdiff_t>(first + count)});
    pqxx::nontransaction tx(conn_);
    tx.exec_prepared(prepared(s), pqxx::prepare::make_dynamic_params(s.params));
  }
}

std::vector<stored_success> outbox_repository::successes(std::int64_t event_id) {
  pqxx::read_transaction tx(conn_);
  std::vector<stored_success> out;
  for (const auto& r : tx.exec_prepared("outbox_successes", event_id))
    out.push_back({r[0].as<std::string>(), r[1].as<int>(), r[2].as<std::string>(),
                   optional_field<std::string>(r[3]), optional_field<std::string>(r[4])});
  std::sort(out.begin(), out.end(), [](const stored_success& a, const stored_success& b) {
    return a.fanout_order < b.fanout_order;
  });
  return out;
}

namespace {

/// The numbers of "1,2,3" (NULL: none).
std::vector<std::int64_t> numbers_of(const pqxx::field& f) {
  std::vector<std::int64_t> out;
  if (f.is_null())
    return out;
  std::string_view text = f.c_str();
  while (!text.empty()) {
    auto comma = std::min(text.find(','), text.size());
    out.push_back(std::stoll(std::string(text.substr(0, comma))));
    text.remove_prefix(std::min(comma + 1, text.size()));
  }
  return out;
}

} // namespace

std::map<std::string, domain::step_history> outbox_repository::step_states(std::int64_t event_id) {
  pqxx::read_transaction tx(conn_);
  std::map<std::string, domain::step_history> out;
  for (const auto& r : tx.exec_prepared("outbox_step_states", event_id)) {
    auto state = r[1].as<std::string>();
    out[r[0].as<std::string>()] = {state == "succeeded"    ? domain::step_state::succeeded
                                   : state == "skipped"    ? domain::step_state::skipped
                                   : state == "refused"    ? domain::step_state::refused
                                   : state == "unanswered" ? domain::step_state::unanswered
                                                           : domain::step_state::answered,
                                   optional_field<std::int64_t>(r[2]), numbers_of(r[3])};
  }
  return out;
}

std::vector<std::int64_t> outbox_repository::interrupted_runs(std::int64_t event_id) {
  pqxx::read_transaction tx(conn_);
  auto r = tx.exec_prepared("outbox_interrupted", event_id);
  return r.empty() ? std::vector<std::int64_t>{} : numbers_of(r[0][0]);
}

std::optional<event_body> outbox_repository::body_of(std::int64_t event_id) {
  pqxx::read_transaction tx(conn_);
  auto r = tx.exec_prepared("outbox_body", event_id);
  if (r.empty())
    return std::nullopt;
  return event_body{r[0][0].as<std::string>(), r[0][1].as<std::string>(), r[0][2].as<std::string>(),
                    r[0][3].as<std::string>(), optional_field<int>(r[0][4])};
}

std::vector<std::string> outbox_repository::reverted_destinations(std::int64_t event_id) {
  pqxx::read_transaction tx(conn_);
  std::vector<std::string> out;
  for (const auto& r : tx.exec_prepared("outbox_reverted", event_id))
    out.push_back(r[0].as<std::string>());
  return out;
}

std::optional<std::int64_t> outbox_repository::latest_event_id(const std::string& aggregate_type,
                                                               const std::string& aggregate_id,
                                                               const std::string& event_type) {
  pqxx::read_transaction tx(conn_);
  auto r = tx.exec_prepared1("outbox_latest_event", aggregate_type, aggregate_id, event_type);
  return optional_field<std::int64_t>(r[0]);
}

bool outbox_repository::extend_lease(const claimed_event& e, std::chrono::milliseconds lease) {
  pqxx::nontransaction tx(conn_);
  auto r =
      tx.exec_prepared("outbox_extend", e.id, e.lease_token, static_cast<long long>(lease.count()));
  return r.affected_rows() == 1;
}

namespace {

/// The statement outbox_repository::finishing() names and prepares.
bound_statement finishing_statement(const hooks_by_type& hooks, const std::string& kind,
                                    const std::string& done_sql, const std::string& aggregate_type,
                                    std::optional<domain::engine_outcome> outcome, int reason_param,
                                    int attempt_param, std::size_t attempt_rows,
                                    const char* answer) {
  bound_statement out;
  out.name =
      fmt::format("outbox_{}:{}:{}:{}", kind, aggregate_type,
                  outcome ? static_cast<int>(*outcome) : -1, attempt_param ? attempt_rows : 0);
  out.sql =
      done_sql + transition_ctes(hooks_of(hooks, aggregate_type), outcome, "done", reason_param);
  if (attempt_param && attempt_rows)
    out.sql += ", attempt AS (" + insert_attempt_sql(attempt_param, attempt_rows) + ")";
  out.sql = fmt::format("{} SELECT {} FROM done", out.sql, answer);
  return out;
}

} // namespace

const std::string& outbox_repository::finishing(const std::string& kind,
                                                const std::string& done_sql,
                                                const std::string& aggregate_type,
                                                std::optional<domain::engine_outcome> outcome,
                                                int reason_param, int attempt_param,
                                                std::size_t attempt_rows, const char* answer) {
  return prepared(finishing_statement(hooks_, kind, done_sql, aggregate_type, outcome, reason_param,
                                      attempt_param, attempt_rows, answer));
}

const std::string& outbox_repository::prepared(const bound_statement& s) {
  auto [it, added] = prepared_.insert(s.name);
  if (added)
    conn_.prepare(s.name, s.sql);
  return *it;
}

bool outbox_repository::complete(const claimed_event& e,
                                 std::optional<domain::engine_outcome> outcome,
                                 const std::string& reason, const attempt_row* last_attempt) {
  return complete_all(e.aggregate_type, outcome, reason, {{&e, last_attempt}}).front();
}

std::vector<bool> outbox_repository::complete_all(const std::string& aggregate_type,
                                                  std::optional<domain::engine_outcome> outcome,
                                                  const std::string& reason,
                                                  const std::vector<completion>& events,
                                                  const std::vector<const attempt_row*>& riders) {
  std::vector<bool> out;
  out.reserve(events.size());
  for (std::size_t first = 0; first < events.size(); first += max_rows_per_insert) {
    const auto count = std::min(max_rows_per_insert, events.size() - first);
    const std::vector<completion> part(events.begin() + static_cast<std::ptrdiff_t>(first),
                                       events.begin() + static_cast<std::ptrdiff_t>(first + count));
    auto s =
        outbox_statements::completions(hooks_, aggregate_type, outcome, reason, part,
                                       first == 0 ? riders : std::vector<const attempt_row*>{});
    pqxx::nontransaction tx(conn_);
    std::vector<std::int64_t> ids;
    for (const auto& r :
         tx.exec_prepared(prepared(s), pqxx::prepare::make_dynamic_params(s.params)))
      ids.push_back(r[0].as<std::int64_t>());
    auto done = outbox_statements::completed(ids, part);
    out.insert(out.end(), done.begin(), done.end());
  }
  return out;
}

bool outbox_repository::retry(const claimed_event& e, std::chrono::milliseconds delay,
                              const std::string& error) {
  pqxx::nontransaction tx(conn_);
  auto r = tx.exec_prepared("outbox_retry", e.id, e.lease_token,
                            static_cast<long long>(delay.count()), error);
  return r.affected_rows() == 1;
}

bool outbox_repository::postpone(const claimed_event& e, std::chrono::milliseconds delay,
                                 const std::string& why, bool cut_off) {
  pqxx::nontransaction tx(conn_);
  return tx.exec_prepared("outbox_postpone", e.id, e.lease_token,
                          static_cast<long long>(delay.count()), why, cut_off)
             .affected_rows() == 1;
}

long long outbox_repository::make_held_due(const std::string& held_prefix) {
  pqxx::nontransaction tx(conn_);
  return tx.exec_prepared1("outbox_held_due", held_prefix)[0].as<long long>();
}

std::optional<std::int64_t>
outbox_repository::dead_letter(const claimed_event& e, const std::string& reason,
                               const std::string& error, const std::string& dlq_status,
                               std::optional<domain::engine_outcome> outcome, bool counts_run,
                               const std::string& failed_step) {
  pqxx::nontransaction tx(conn_);
  return dead_letter_in(tx, e, reason, error, dlq_status, outcome, counts_run, failed_step);
}

std::optional<std::int64_t>
outbox_repository::dead_letter_in(pqxx::transaction_base& tx, const claimed_event& e,
                                  const std::string& reason, const std::string& error,
                                  const std::string& dlq_status,
                                  std::optional<domain::engine_outcome> outcome, bool counts_run,
                                  const std::string& failed_step) {
  const auto& statement = finishing("dead_letter", dead_letter_sql, e.aggregate_type, outcome, 3, 0,
                                    0, "count(*), (SELECT max(id) FROM letter)");
  auto r = tx.exec_prepared1(statement, e.id, e.lease_token, error, reason, dlq_status,
                             counts_run ? 1 : 0, failed_step);
  return optional_field<std::int64_t>(r[1]);
}

bool outbox_repository::release(const claimed_event& e) {
  pqxx::nontransaction tx(conn_);
  return tx.exec_prepared("outbox_release", e.id, e.lease_token).affected_rows() == 1;
}

bool may_reap_in(pqxx::transaction_base& tx, const reap_guard& may_reap) {
  if (!may_reap)
    return true;
  auto micros = tx.exec1("SELECT (extract(epoch FROM now()) * 1000000)::bigint")[0].as<long long>();
  return may_reap(std::chrono::system_clock::time_point(std::chrono::microseconds(micros)));
}

bool in_savepoint(pqxx::transaction_base& tx, const std::function<void()>& f, std::string& why) {
  tx.exec0("SAVEPOINT reap_row");
  try {
    f();
    tx.exec0("RELEASE SAVEPOINT reap_row");
    return true;
  } catch (const pqxx::failure& e) {
    if (is_connection_loss(e))
      throw;
    std::string_view what = e.what();
    why = std::string(what.substr(0, what.find('\n')));
  }
  tx.exec0("ROLLBACK TO SAVEPOINT reap_row");
  return false;
}

reaped outbox_repository::reap_expired(int max_retries, const reap_guard& may_reap) {
  reaped out;
  pqxx::work tx(conn_);
  if (!may_reap_in(tx, may_reap))
    return out;
  for (const auto& r : tx.exec_prepared("outbox_expired")) {
    auto e = to_claimed(r);
    auto error = "lease of " + r[9].as<std::string>() + " expired";
    std::string why;
    if (e.attempts + 1 > max_retries) {
      bool cancellation = is_cancellation(e.event_type);
      if (!in_savepoint(
              tx,
              [&] {
                tx.exec_prepared0("outbox_mark_interrupted", e.id);
                dead_letter_in(tx, e, cancellation ? "CANCELLATION_FAILED" : "MAX_RETRIES_EXCEEDED",
                               error, cancellation ? "FAILED" : "PENDING",
                               cancellation
                                   ? std::optional(domain::engine_outcome::compensation_failed)
                                   : std::nullopt);
              },
              why)) {
        out.refused.push_back(
            fmt::format("event {} ({} {}): {}", e.id, e.aggregate_type, e.aggregate_id, why));
        continue;
      }
      out.dead_lettered.push_back(e.id);
      if (cancellation)
        out.attention.push_back(
            fmt::format("cancellation event {} ({} {})", e.id, e.aggregate_type, e.aggregate_id));
    } else if (in_savepoint(
                   tx,
                   [&] {
                     tx.exec_prepared0("outbox_mark_interrupted", e.id);
                     tx.exec_prepared("outbox_reap_back", e.id, error);
                   },
                   why)) {
      out.returned.push_back(e.id);
    } else {
      out.refused.push_back(
          fmt::format("event {} ({} {}): {}", e.id, e.aggregate_type, e.aggregate_id, why));
    }
  }
  tx.commit();
  return out;
}

int outbox_repository::delete_processed(std::chrono::milliseconds age, int batch) {
  pqxx::work tx(conn_);
  auto r = tx.exec_prepared("outbox_retention", static_cast<long long>(age.count()), batch);
  tx.commit();
  return static_cast<int>(r.affected_rows());
}

std::optional<std::chrono::milliseconds> outbox_repository::next_due_in() {
  pqxx::read_transaction tx(conn_);
  auto r = tx.exec_prepared1("outbox_next_due");
  if (r[0].is_null())
    return std::nullopt;
  return std::chrono::milliseconds(std::max<long long>(0, r[0].as<long long>()));
}

bound_statement outbox_statements::attempts(const std::vector<const attempt_row*>& rows) {
  bound_statement s;
  s.name = fmt::format("outbox_record_attempts:{}", rows.size());
  s.sql = fmt::format("{} RETURNING {}", insert_attempt_sql(1, rows.size()), async_commit);
  s.params.reserve(rows.size() * attempt_columns_count);
  for (const auto* row : rows)
    add_attempt_params(s.params, *row);
  return s;
}

bound_statement
outbox_statements::completions(const hooks_by_type& hooks, const std::string& aggregate_type,
                               std::optional<domain::engine_outcome> outcome,
                               const std::string& reason,
                               const std::vector<outbox_repository::completion>& events,
                               const std::vector<const attempt_row*>& riders) {
  // $1 is the reason, then (id, token) per event, then the attempt rows.
  std::vector<param> params{reason};
  std::string pairs;
  for (const auto& c : events) {
    pairs += fmt::format("{}(${}::bigint, ${}::bigint)", pairs.empty() ? "" : ", ",
                         params.size() + 1, params.size() + 2);
    params.push_back(to_param(c.event->id));
    params.push_back(to_param(c.event->lease_token));
  }
  const int first_row = static_cast<int>(params.size()) + 1;
  std::size_t rows = 0;
  for (const auto& c : events)
    if (c.last_attempt) {
      add_attempt_params(params, *c.last_attempt);
      ++rows;
    }
  for (const auto* row : riders) {
    add_attempt_params(params, *row);
    ++rows;
  }
  auto s = finishing_statement(hooks, fmt::format("complete{}", events.size()),
                               fmt::format(complete_sql, pairs), aggregate_type, outcome, 1,
                               rows ? first_row : 0, rows, "id");
  s.params = std::move(params);
  return s;
}

std::vector<bool>
outbox_statements::completed(const std::vector<std::int64_t>& ids,
                             const std::vector<outbox_repository::completion>& events) {
  std::vector<bool> out;
  out.reserve(events.size());
  for (const auto& c : events)
    out.push_back(std::find(ids.begin(), ids.end(), c.event->id) != ids.end());
  return out;
}

bound_statement outbox_statements::claim(const std::string& owner, int limit,
                                         std::chrono::milliseconds lease) {
  return {"outbox_claim_lane",
          fmt::format("{}, {}", claim_walk_sql("outbox_events", 'e', claim_tests, claim_returns),
                      async_commit),
          {std::to_string(limit), owner, std::to_string(lease.count())}};
}

std::vector<claimed_event> outbox_statements::claimed(const text_rows& rows,
                                                      std::chrono::steady_clock::time_point sent) {
  std::vector<claimed_event> out;
  for (const auto& r : rows) {
    claimed_event e;
    e.id = std::stoll(*r[0]);
    e.lease_token = std::stoll(*r[1]);
    e.aggregate_type = *r[2];
    e.aggregate_id = *r[3];
    e.event_type = *r[4];
    e.payloads_json = *r[5];
    e.attempts = std::stoi(*r[6]);
    e.has_results = *r[7] == "t";
    e.failing_for = std::chrono::milliseconds(r[8] ? std::max(0LL, std::stoll(*r[8])) : 0);
    e.claimed_at = sent;
    e.held_before = *r[9] == "t";
    e.last_error = r[10];
    out.push_back(std::move(e));
  }
  std::sort(out.begin(), out.end(),
            [](const claimed_event& a, const claimed_event& b) { return a.id < b.id; });
  return out;
}

const char* const outbox_statements::lane_setup =
    "SET enable_seqscan = off; SET enable_sort = off; SET enable_hashjoin = off; "
    "SET enable_mergejoin = off; SET enable_bitmapscan = off; SET jit = off; "
    "SET plan_cache_mode = force_generic_plan";

} // namespace outboxd::persistence
