// The claim statement of both queues (outbox events and dead letters), built from what differs
// between them: the table, the tests a due row must pass, and what the claim returns.
//
// It walks the queue's due index one entry at a time (each step the first PENDING id after the
// last: an index-only scan of the partial index on id WHERE status = 'PENDING') and only then
// tests that candidate and locks it (FOR UPDATE SKIP LOCKED), once per step. The probes are kept
// apart from the walk (OFFSET 0 keeps the planner from turning them into joins or hashed
// sub-plans), so a claim costs the rows it takes plus the due entries it steps over, whatever the
// statistics say. With the tests inside the walk's own scan, the planner could walk the primary
// key instead and filter, running the dead-letter probe (free by its estimate on an empty table)
// for every PROCESSED row before the oldest due one: in a burst, thousands of rows and 100-500 ms
// per claim. Earlier, a single `ORDER BY id LIMIT n` over NOT EXISTS let it sort the whole
// backlog, or scan every unfinished event once per candidate, and such claims ran for minutes
// while their row locks held up the completions. Parameters: $1 how many, $2 the lease owner,
// $3 the lease in milliseconds.
#pragma once

#include <fmt/format.h>
#include <string>
#include <string_view>

namespace outboxd::persistence {

/// The claim of `table`, whose rows the tests and `returning` name `row` (one letter).
inline std::string claim_walk_sql(std::string_view table, char row, std::string_view tests,
                                  std::string_view returning) {
  return fmt::format(R"sql(
WITH RECURSIVE walk (id, n, taken) AS (
    SELECT 0::bigint, 0, NULL::bigint
  UNION ALL
    SELECT c.id, walk.n + (t.taken IS NOT NULL)::int, t.taken
      FROM walk,
           LATERAL (SELECT s.id FROM {0} s
                     WHERE s.status = 'PENDING' AND s.id > walk.id
                     ORDER BY s.id LIMIT 1) c,
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

} // namespace outboxd::persistence
