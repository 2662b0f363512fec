// Dead-letter SQL, fenced by lease tokens like the outbox (the token alone, as there: see
// outbox_repository.cpp).
#include "persistence/dlq_repository.hpp"

#include "domain/delivery.hpp"
#include "persistence/claim_walk.hpp"
#include "persistence/rows.hpp"

#include <algorithm>
#include <fmt/format.h>

namespace outboxd::persistence {
namespace {

// A dead letter is compensated only after every earlier event of its aggregate has finished
// (see claim_walk.hpp).
constexpr const char* claim_tests = R"sql(AND NOT EXISTS (SELECT 1 FROM outbox_events p
                                WHERE p.aggregate_id = d.aggregate_id
                                  AND p.aggregate_type = d.aggregate_type
                                  AND p.id < d.original_event_id
                                  AND p.status IN ('PENDING', 'PROCESSING') OFFSET 0))sql";
const std::string claim_returns = fmt::format(
    R"sql(d.id, d.lease_token, d.original_event_id, d.aggregate_type, d.aggregate_id,
          d.event_type, d.reason, coalesce(d.last_error, ''), d.attempts,
          (extract(epoch FROM now() - d.failing_since) * 1000)::bigint,
          coalesce(d.revert_error LIKE '{}%', false))sql",
    domain::held_back_prefix);

constexpr const char* resolve_sql = R"sql(
UPDATE dead_letter_events
   SET status = 'PROCESSED', attempts = attempts + 1, resolved_at = now(), status_changed_at = now(),
       revert_error = NULL, next_retry_at = NULL,
       lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE id = $1 AND lease_token = $2
RETURNING payloads->>'reason')sql";

constexpr const char* retry_sql = R"sql(
UPDATE dead_letter_events
   SET status = 'PENDING', attempts = attempts + 1, revert_error = $4, status_changed_at = now(),
       next_retry_at = now() + $3::bigint * interval '1 millisecond',
       failing_since = coalesce(failing_since, now()),
       lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE id = $1 AND lease_token = $2)sql";

// Held back (circuit open, a limit reached): due again after $3 ms, attempts unchanged.
constexpr const char* postpone_sql = R"sql(
UPDATE dead_letter_events
   SET status = 'PENDING', revert_error = $4, status_changed_at = now(),
       next_retry_at = now() + $3::bigint * interval '1 millisecond',
       failing_since = coalesce(failing_since, now()),
       lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE id = $1 AND lease_token = $2)sql";

constexpr const char* extend_sql = R"sql(
UPDATE dead_letter_events SET lease_expires_at = now() + $3::bigint * interval '1 millisecond'
 WHERE id = $1 AND lease_token = $2)sql";

constexpr const char* fail_sql = R"sql(
UPDATE dead_letter_events
   SET status = 'FAILED', attempts = attempts + 1, revert_error = $3, status_changed_at = now(),
       failed_step = nullif($4::text, ''),
       next_retry_at = NULL, lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE id = $1 AND lease_token = $2)sql";

constexpr const char* release_sql = R"sql(
UPDATE dead_letter_events
   SET status = 'PENDING', next_retry_at = NULL, status_changed_at = now(),
       lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE id = $1 AND lease_token = $2)sql";

constexpr const char* expired_sql = R"sql(
SELECT id, aggregate_type, aggregate_id, attempts, coalesce(lease_owner, '?')
  FROM dead_letter_events WHERE status = 'PROCESSING' AND lease_expires_at < now()
 ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED)sql";

constexpr const char* reap_sql = R"sql(
UPDATE dead_letter_events
   SET status = $2, attempts = attempts + 1, revert_error = $3, next_retry_at = NULL,
       failed_step = NULL,
       failing_since = coalesce(failing_since, now()), status_changed_at = now(), lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE id = $1)sql";

constexpr const char* retention_sql = R"sql(
DELETE FROM dead_letter_events WHERE id IN (
  SELECT id FROM dead_letter_events
   WHERE status = 'PROCESSED' AND resolved_at < now() - $1::bigint * interval '1 millisecond'
   ORDER BY resolved_at LIMIT $2))sql";

constexpr const char* next_due_sql = R"sql(
SELECT ceil(extract(epoch FROM min(next_retry_at) - now()) * 1000)::bigint
  FROM dead_letter_events WHERE status = 'PENDING' AND next_retry_at > now())sql";

} // namespace

dlq_repository::dlq_repository(pqxx::connection& conn, hooks_by_type hooks)
    : conn_(conn), hooks_(std::move(hooks)),
      claim_("dlq_claim", claim_walk_sql("dead_letter_events", 'd', claim_tests, claim_returns)) {
  conn_.prepare("dlq_resolve", resolve_sql);
  conn_.prepare("dlq_retry", retry_sql);
  conn_.prepare("dlq_postpone", postpone_sql);
  conn_.prepare("dlq_extend", extend_sql);
  conn_.prepare("dlq_fail", fail_sql);
  conn_.prepare("dlq_release", release_sql);
  conn_.prepare("dlq_expired", expired_sql);
  conn_.prepare("dlq_reap", reap_sql);
  conn_.prepare("dlq_next_due", next_due_sql);
  conn_.prepare("dlq_retention", retention_sql);
}

std::vector<claimed_dead_letter> dlq_repository::claim(const std::string& owner, int limit,
                                                       std::chrono::milliseconds lease) {
  // The lease runs from the database's clock at the claim, which is after this (see
  // outbox_repository::claim).
  const auto now = std::chrono::steady_clock::now();
  pqxx::work tx(conn_);
  auto rows = claim_.run(tx, limit, owner, lease);
  tx.commit();
  std::vector<claimed_dead_letter> out;
  for (const auto& r : rows)
    out.push_back(
        {r[0].as<std::int64_t>(), r[1].as<std::int64_t>(), r[2].as<std::int64_t>(),
         r[3].as<std::string>(), r[4].as<std::string>(), r[5].as<std::string>(),
         r[6].as<std::string>(), r[7].as<std::string>(), r[8].as<int>(),
         std::chrono::milliseconds(r[9].is_null() ? 0 : std::max(0LL, r[9].as<long long>())), now,
         r[10].as<bool>()});
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

bool dlq_repository::resolve(const claimed_dead_letter& d, domain::engine_outcome outcome,
                             const std::string& reason) {
  pqxx::work tx(conn_);
  auto r = tx.exec_prepared("dlq_resolve", d.id, d.lease_token);
  if (r.affected_rows() != 1)
    return false;
  // A cancellation done at last: the order is given its reason again, which the error that put it
  // in ATTENTION had replaced (a cancellation queued by an older version carries none).
  auto why = reason;
  if (outcome == domain::engine_outcome::cancellation_compensated && !r[0][0].is_null())
    why = r[0][0].as<std::string>();
  apply_transition(tx, hooks_of(hooks_, d.aggregate_type), d.aggregate_id, outcome, why);
  tx.commit();
  return true;
}

bool dlq_repository::retry(const claimed_dead_letter& d, std::chrono::milliseconds delay,
                           const std::string& revert_error) {
  pqxx::work tx(conn_);
  auto r = tx.exec_prepared("dlq_retry", d.id, d.lease_token, static_cast<long long>(delay.count()),
                            revert_error);
  tx.commit();
  return r.affected_rows() == 1;
}

bool dlq_repository::postpone(const claimed_dead_letter& d, std::chrono::milliseconds delay,
                              const std::string& why) {
  pqxx::work tx(conn_);
  auto r = tx.exec_prepared("dlq_postpone", d.id, d.lease_token,
                            static_cast<long long>(delay.count()), why);
  tx.commit();
  return r.affected_rows() == 1;
}

bool dlq_repository::extend_lease(const claimed_dead_letter& d, std::chrono::milliseconds lease) {
  pqxx::work tx(conn_);
  auto r =
      tx.exec_prepared("dlq_extend", d.id, d.lease_token, static_cast<long long>(lease.count()));
  tx.commit();
  return r.affected_rows() == 1;
}

bool dlq_repository::fail(const claimed_dead_letter& d, const std::string& revert_error,
                          const std::string& failed_step) {
  pqxx::work tx(conn_);
  if (tx.exec_prepared("dlq_fail", d.id, d.lease_token, revert_error, failed_step)
          .affected_rows() != 1)
    return false;
  apply_transition(tx, hooks_of(hooks_, d.aggregate_type), d.aggregate_id,
                   domain::engine_outcome::compensation_failed, revert_error);
  tx.commit();
  return true;
}

bool dlq_repository::release(const claimed_dead_letter& d) {
  pqxx::work tx(conn_);
  auto r = tx.exec_prepared("dlq_release", d.id, d.lease_token);
  tx.commit();
  return r.affected_rows() == 1;
}

reaped dlq_repository::reap_expired(int max_retries, const reap_guard& may_reap) {
  reaped out;
  pqxx::work tx(conn_);
  if (!may_reap_in(tx, may_reap))
    return out;
  for (const auto& r : tx.exec_prepared("dlq_expired")) {
    const auto id = r[0].as<std::int64_t>();
    const auto type = r[1].as<std::string>();
    const auto aggregate = r[2].as<std::string>();
    auto error = "lease of " + r[4].as<std::string>() + " expired";
    bool exhausted = r[3].as<int>() + 1 > max_retries;
    const std::string status = exhausted ? "FAILED" : "PENDING";
    auto reap = [&] { tx.exec_prepared("dlq_reap", id, status, error); };
    std::string why;
    if (!exhausted) {
      if (in_savepoint(tx, reap, why))
        out.returned.push_back(id);
      else
        out.refused.push_back(fmt::format("dead letter {} ({} {}): {}", id, type, aggregate, why));
      continue;
    }
    const auto described = fmt::format("dead letter {} ({} {})", id, type, aggregate);
    if (!in_savepoint(
            tx,
            [&] {
              reap();
              apply_transition(tx, hooks_of(hooks_, type), aggregate,
                               domain::engine_outcome::compensation_failed, error);
            },
            why)) {
      // The order's move to ATTENTION was refused: the dead letter is FAILED all the same, so
      // that the FAILED dead-letter gauge (what the alert watches) counts it.
      out.refused.push_back(
          fmt::format("{}: its order could not be put in ATTENTION: {}", described, why));
      if (!in_savepoint(tx, reap, why)) {
        out.refused.push_back(fmt::format("{}: {}", described, why));
        continue;
      }
    }
    out.dead_lettered.push_back(id);
    out.attention.push_back(described);
  }
  tx.commit();
  return out;
}

int dlq_repository::delete_resolved(std::chrono::milliseconds age, int batch) {
  pqxx::work tx(conn_);
  auto r = tx.exec_prepared("dlq_retention", static_cast<long long>(age.count()), batch);
  tx.commit();
  return static_cast<int>(r.affected_rows());
}

std::optional<std::chrono::milliseconds> dlq_repository::next_due_in() {
  pqxx::read_transaction tx(conn_);
  auto r = tx.exec_prepared1("dlq_next_due");
  if (r[0].is_null())
    return std::nullopt;
  return std::chrono::milliseconds(std::max<long long>(0, r[0].as<long long>()));
}

} // namespace outboxd::persistence
