// The claim statement of both queues (outbox events and dead letters), built from what differs
// between them: the table, the tests a due row must pass, and what the claim returns.
//
// It walks the queue's due-order index one entry at a time (each step the next PENDING row in the
// order rows fall due: those never run by id, then retries and held-back runs by the time they are
// due; the walk ends at the first row not due yet) and only then tests that candidate and locks
// it (FOR UPDATE SKIP LOCKED), once per step. The probes are kept apart from the walk (OFFSET 0
// keeps the planner from turning them into joins or hashed sub-plans), so a claim costs the rows
// it takes plus the due rows it steps over (locked, or behind an earlier event of their
// aggregate), whatever the statistics say; rows waiting out a retry or an open circuit cost
// nothing. (Walking the due index by id alone, a claim stepped over every one of those: during a
// partner's outage each claim read the whole backlog.) With the tests inside the walk's own scan,
// the planner could walk the primary key instead and filter, running the dead-letter probe (free by
// its estimate on an empty table) for every PROCESSED row before the oldest due one: in a burst,
// thousands of rows and 100-500 ms per claim. Earlier, a single `ORDER BY id LIMIT n` over NOT
// EXISTS let it sort the whole backlog, or scan every unfinished event once per candidate, and such
// claims ran for minutes while their row locks held up the completions. Parameters: $1 how many, $2
// the lease owner, $3 the lease in milliseconds.
//
// Planning the walk costs about twice running it (1.1 against 0.55 ms at 16 in flight, latency 0,
// where a claim comes every event or two), so each connection prepares it once. A kept plan must
// not depend on the statistics it was made with: one made while the tables were empty (and
// analyzed so) scans them whole at every step and probe, which after a burst of 10 000 events
// touched 14 million pages for a claim of ten. The claim is therefore always planned with index
// paths only (sequential scans, sorts, hash and merge joins, bitmap scans and JIT off, for the
// claim's own transaction), and with none of its parameters changing the plan, generically.
#pragma once

#include <chrono>
#include <fmt/format.h>
#include <pqxx/pqxx>
#include <string>
#include <string_view>
#include <utility>

namespace outboxd::persistence {

/// The claim of `table`, whose rows the tests and `returning` name `row` (one letter).
inline std::string claim_walk_sql(std::string_view table, char row, std::string_view tests,
                                  std::string_view returning) {
  return fmt::format(R"sql(
WITH RECURSIVE walk (due, id, n, taken) AS (
    SELECT '-infinity'::timestamptz, 0::bigint, 0, NULL::bigint
  UNION ALL
    SELECT c.due, c.id, walk.n + (t.taken IS NOT NULL)::int, t.taken
      FROM walk,
           LATERAL (SELECT coalesce(s.next_retry_at, '-infinity'::timestamptz) AS due, s.id
                      FROM {0} s
                     WHERE s.status = 'PENDING'
                       AND (coalesce(s.next_retry_at, '-infinity'::timestamptz), s.id)
                           > (walk.due, walk.id)
                       AND coalesce(s.next_retry_at, '-infinity'::timestamptz) <= now()
                     ORDER BY coalesce(s.next_retry_at, '-infinity'::timestamptz), s.id
                     LIMIT 1) c,
           LATERAL (SELECT (
             SELECT {1}.id FROM {0} {1}
              WHERE {1}.id = c.id AND {1}.status = 'PENDING'
                AND ({1}.next_retry_at IS NULL OR {1}.next_retry_at <= now())
                {2}
              FOR UPDATE SKIP LOCKED) AS taken OFFSET 0) t
     WHERE walk.n < $1)
UPDATE {0} {1}
   SET status = 'PROCESSING', lease_owner = $2, lease_token = nextval('lease_tokens'),
       lease_expires_at = now() + $3::bigint * interval '1 millisecond', status_changed_at = now()
  FROM walk WHERE {1}.id = walk.taken
RETURNING {3})sql",
                     table, row, tests, returning);
}

/// A claim (made by claim_walk_sql) prepared on one connection.
class claim_statement {
public:
  claim_statement(std::string name, std::string sql)
      : name_(std::move(name)), sql_(std::move(sql)) {}

  /// Claims up to `limit` for `owner`, leased for `lease`, in one round trip (the first run
  /// prepares the statement first: a PREPARE stays when its transaction fails), with the planner
  /// settings above for `tx`'s transaction only (the statement's own for a nontransaction).
  pqxx::result run(pqxx::transaction_base& tx, int limit, const std::string& owner,
                   std::chrono::milliseconds lease) {
    if (!prepared_) {
      tx.exec(fmt::format("PREPARE {}(integer, text, bigint) AS {}", name_, sql_));
      prepared_ = true;
    }
    // One statement sets them all: seven SET LOCALs, each parsed and run on its own, cost about
    // 0.19 ms of machine CPU per claim, one select of set_config 0.07 (pgbench, a transaction of
    // the settings and a SELECT 1, two cores saturated: 7 300 against 12 500 transactions/s).
    return tx.exec(fmt::format(
        "SELECT set_config('enable_seqscan', 'off', true), set_config('enable_sort', 'off', "
        "true), set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', "
        "'off', true), set_config('enable_bitmapscan', 'off', true), set_config('jit', 'off', "
        "true), set_config('plan_cache_mode', 'force_generic_plan', true); EXECUTE {}({}, {}, {})",
        name_, limit, tx.quote(owner), lease.count()));
  }

private:
  const std::string name_;
  const std::string sql_;
  bool prepared_ = false;
};

} // namespace outboxd::persistence
