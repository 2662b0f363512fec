// The dead-letter queue's units of work: claim with a lease, resolve (compensated), retry,
// fail, reap expired leases, and the operator's redrive and inspection.
#pragma once

#include "domain/outbox.hpp"
#include "persistence/aggregate_hooks.hpp"
#include "persistence/claim_walk.hpp"
#include "persistence/outbox_repository.hpp"

#include <chrono>
#include <optional>
#include <pqxx/pqxx>
#include <string>
#include <vector>

namespace outboxd::persistence {

/// A dead letter claimed by a dead-letter processor.
struct claimed_dead_letter {
  std::int64_t id = 0;
  std::int64_t lease_token = 0;
  std::int64_t original_event_id = 0;
  std::string aggregate_type;
  std::string aggregate_id;
  std::string event_type;
  std::string reason;
  std::string last_error;
  int attempts = 0;
  /// Since its compensation first failed (or was first held) at the claim; zero when never.
  std::chrono::milliseconds failing_for{0};
  std::chrono::steady_clock::time_point claimed_at{}; // when the lease was taken
  bool held_before = false; // its last run was held back (a gate's revert_error)
};

class dlq_repository {
public:
  /// Prepares its statements on `conn`, which it uses exclusively.
  dlq_repository(pqxx::connection& conn, hooks_by_type hooks);

  /// Claims up to `limit` due PENDING dead letters whose aggregate has no unfinished earlier
  /// outbox event.
  std::vector<claimed_dead_letter> claim(const std::string& owner, int limit,
                                         std::chrono::milliseconds lease);

  /// Compensated: PROCESSED, and `outcome` applied to the aggregate; false when the lease was
  /// lost.
  bool resolve(const claimed_dead_letter& d, domain::engine_outcome outcome,
               const std::string& reason);

  /// Back to PENDING with attempts+1 after `delay`; false when the lease was lost.
  bool retry(const claimed_dead_letter& d, std::chrono::milliseconds delay,
             const std::string& revert_error);

  /// Held back without a call (circuit open, a limit reached): PENDING, due after `delay`,
  /// attempts unchanged, `why` as revert_error; false when the lease was lost.
  bool postpone(const claimed_dead_letter& d, std::chrono::milliseconds delay,
                const std::string& why);
  /// Pushes the lease out; false when the lease was lost.
  bool extend_lease(const claimed_dead_letter& d, std::chrono::milliseconds lease);
  /// FAILED (waits for an operator), order ATTENTION, with the step that could not be done
  /// ("<destination>.revert", or a destination whose settling failed; empty: unknown); false
  /// when the lease was lost.
  bool fail(const claimed_dead_letter& d, const std::string& revert_error,
            const std::string& failed_step);

  /// Hands an interrupted claim back unchanged.
  bool release(const claimed_dead_letter& d);

  /// Expired PROCESSING leases go back to PENDING with attempts+1 (or FAILED when out of
  /// retries, the order in ATTENTION); says which. Nothing when `may_reap` says no.
  reaped reap_expired(int max_retries, const reap_guard& may_reap = {});

  /// Deletes up to `batch` resolved (PROCESSED) dead letters resolved longer than `age` ago,
  /// oldest first; returns how many. Pending, running and FAILED ones are never deleted.
  int delete_resolved(std::chrono::milliseconds age, int batch);

  /// Time until the earliest PENDING dead letter with a future next_retry_at becomes due.
  std::optional<std::chrono::milliseconds> next_due_in();

private:
  pqxx::connection& conn_;
  hooks_by_type hooks_;
  claim_statement claim_;
};

} // namespace outboxd::persistence
