// The outbox's units of work: claim with a lease, record attempts, complete / retry /
// dead-letter fenced by the lease token, reap expired leases, retention. One instance per
// worker connection.
#pragma once

#include "domain/attempt.hpp"
#include "domain/order.hpp"
#include "domain/outbox.hpp"
#include "persistence/aggregate_hooks.hpp"
#include "persistence/claim_walk.hpp"
#include "persistence/statement_lane.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <pqxx/pqxx>
#include <set>
#include <string>
#include <vector>

namespace outboxd::persistence {

/// An event claimed by a worker. `lease_token` fences every later update.
struct claimed_event {
  std::int64_t id = 0;
  std::int64_t lease_token = 0;
  std::string aggregate_type;
  std::string aggregate_id;
  std::string event_type;
  std::string payloads_json;
  int attempts = 0;         // attempts finished before this one
  bool has_results = false; // earlier runs left rows in the result table (resume from them)
  /// Since its first failure (or first hold) at the claim; zero when it never failed.
  std::chrono::milliseconds failing_for{0};
  std::chrono::steady_clock::time_point claimed_at{}; // when the lease was taken or last extended
  bool held_before = false;                // its last run was held back (a gate's last_error)
  std::optional<std::string> last_error{}; // its last run's end, if it failed or was held back
};

/// One HTTP attempt to record (id and published_at are set by the database).
using attempt_row = domain::attempt_columns;

/// The latest successful attempt of one destination of an event.
struct stored_success {
  std::string destination;
  int fanout_order = 0;
  std::string endpoint_url;
  std::optional<std::string> request_json;
  std::optional<std::string> response_json;
};

/// What an event asked for, read back by a compensation that must re-send one of its calls.
struct event_body {
  std::string aggregate_type;
  std::string aggregate_id;
  std::string event_type;
  std::string payloads_json;
  std::optional<int> attempts; // finished attempts (unknown once only its dead letter is left)
};

/// Hooks by aggregate type ("order" → order_hooks).
using hooks_by_type = std::map<std::string, aggregate_hooks*, std::less<>>;

/// The hooks of `aggregate_type`, nullptr when it has none.
inline const aggregate_hooks* hooks_of(const hooks_by_type& hooks,
                                       const std::string& aggregate_type) {
  auto it = hooks.find(aggregate_type);
  return it == hooks.end() ? nullptr : it->second;
}

/// Asked by a reap, inside its transaction, with the database's now(): whether leases that look
/// expired at that time may be reaped (domain::lease_clock decides). Empty: always.
using reap_guard = std::function<bool(std::chrono::system_clock::time_point database_now)>;

/// Whether `tx` may reap (asks `may_reap` with the transaction's now()).
bool may_reap_in(pqxx::transaction_base& tx, const reap_guard& may_reap);

/// What the lease reaper did.
struct reaped {
  std::vector<std::int64_t> returned;      // back to PENDING
  std::vector<std::int64_t> dead_lettered; // out of attempts (dead letters: FAILED)
  /// What the reap put in ATTENTION, one description each ("dead letter 7 (order 12)"): a dead
  /// letter or a cancellation out of attempts, to be logged as an error.
  std::vector<std::string> attention;
  /// Rows the database refused to move (a user's trigger, say), each with why: left as they
  /// were (or, for a dead letter, FAILED without its order's transition), to be logged as errors.
  /// The other rows of the reap are moved all the same.
  std::vector<std::string> refused;
};

/// Runs `f` (statements on `tx`) in a savepoint of `tx`: true when they went through; false,
/// with the database's message in `why`, when the database refused one (rolled back to the
/// savepoint, `tx` goes on). A lost connection still throws.
bool in_savepoint(pqxx::transaction_base& tx, const std::function<void()>& f, std::string& why);

class outbox_repository {
public:
  /// Prepares its statements on `conn`, which it uses exclusively.
  outbox_repository(pqxx::connection& conn, hooks_by_type hooks);

  /// Claims up to `limit` due events (oldest first, per-aggregate order kept, rows locked by
  /// other claims skipped), leased to `owner` for `lease`. Its cost is the events it takes plus
  /// the due events it steps over (held back by their aggregate, or being claimed), not the
  /// backlog or the history, whatever the tables' statistics say.
  std::vector<claimed_event> claim(const std::string& owner, int limit,
                                   std::chrono::milliseconds lease);

  /// Appends one attempt row (its own transaction: committed before the state moves on).
  void record_attempt(const attempt_row& row);
  /// Appends attempt rows, up to max_rows_per_insert in one statement (one transaction, one
  /// round trip; more make several), each committed before this returns, or throws.
  void record_attempts(const std::vector<const attempt_row*>& rows);
  /// The most rows one statement of record_attempts() inserts.
  static constexpr std::size_t max_rows_per_insert = 128;

  /// The latest successful forward attempt per destination of `event_id` (resume and
  /// compensation input), in fan-out order.
  std::vector<stored_success> successes(std::int64_t event_id);

  /// How each destination of `event_id` stands, reverts ("<destination>.revert") included;
  /// destinations without rows are absent.
  std::map<std::string, domain::step_history> step_states(std::int64_t event_id);
  /// The runs of `event_id` (by lease token) whose lease expired before they ended: the reaper
  /// took them back, perhaps in the middle of a call. 0: a run before these were recorded.
  std::vector<std::int64_t> interrupted_runs(std::int64_t event_id);

  /// The type and payloads of `event_id`, from the outbox or else from its dead letter.
  std::optional<event_body> body_of(std::int64_t event_id);

  /// Destinations of `event_id` that already have a successful `<destination>.revert` row.
  std::vector<std::string> reverted_destinations(std::int64_t event_id);

  /// The id of the latest `event_type` event of an aggregate (from the outbox, or from the
  /// result table once retention removed the event); nullopt when it never ran.
  std::optional<std::int64_t> latest_event_id(const std::string& aggregate_type,
                                              const std::string& aggregate_id,
                                              const std::string& event_type);

  /// Pushes the lease out; false when the lease was lost.
  bool extend_lease(const claimed_event& e, std::chrono::milliseconds lease);

  /// PROCESSED, and `outcome` applied to the aggregate, in one statement; false when the lease
  /// was lost (nothing changed). `last_attempt`, the row of the call that ended the run, is
  /// appended in the same statement, so it commits with the state change (and also when the
  /// lease was lost: the call was made).
  bool complete(const claimed_event& e, std::optional<domain::engine_outcome> outcome,
                const std::string& reason = {}, const attempt_row* last_attempt = nullptr);

  /// One event of complete_all(), with the row of the call that ended its run (or none).
  struct completion {
    const claimed_event* event = nullptr;
    const attempt_row* last_attempt = nullptr;
  };
  /// complete() for events of `aggregate_type` that end with the same outcome and reason, up to
  /// max_rows_per_insert in one statement (one transaction, one commit; more make several), each
  /// event fenced by its own lease token: per event, in order, whether it was completed.
  /// `riders`, attempt rows of other runs, are appended in the first statement (committed with
  /// it, or not at all when it fails): one round trip and one commit for both.
  std::vector<bool> complete_all(const std::string& aggregate_type,
                                 std::optional<domain::engine_outcome> outcome,
                                 const std::string& reason, const std::vector<completion>& events,
                                 const std::vector<const attempt_row*>& riders = {});

  /// Back to PENDING with attempts+1, due after `delay`; false when the lease was lost.
  bool retry(const claimed_event& e, std::chrono::milliseconds delay, const std::string& error);

  /// DEAD plus its dead_letter_events row (status `dlq_status`), and `outcome` applied to the
  /// aggregate, in one transaction: the dead letter's id, nullopt when the lease was lost. The
  /// run counts in `attempts` unless `counts_run` is false (a run that made no call, held back
  /// past its retryFor).
  std::optional<std::int64_t>
  dead_letter(const claimed_event& e, const std::string& reason, const std::string& error,
              const std::string& dlq_status = "PENDING",
              std::optional<domain::engine_outcome> outcome = std::nullopt, bool counts_run = true,
              const std::string& failed_step = {});

  /// Held back (circuit open, a limit reached, the database refusing a statement): PENDING, due
  /// after `delay`, attempts unchanged, `why` as last_error; `cut_off`: the run may have stopped
  /// in the middle of a call (recorded as the reaper records the runs it takes back). False when
  /// the lease was lost.
  bool postpone(const claimed_event& e, std::chrono::milliseconds delay, const std::string& why,
                bool cut_off = false);
  /// Every PENDING event and dead letter whose last error starts with `held_prefix` (runs held
  /// back by a destination whose circuit has just closed) is due now; how many.
  long long make_held_due(const std::string& held_prefix);
  /// Hands an unstarted (or abandoned) claim back: PENDING, attempts unchanged, due now.
  bool release(const claimed_event& e);

  /// Expired PROCESSING leases go back to PENDING with attempts+1, or to DEAD with a dead
  /// letter once `max_retries` retries are used up; nothing when `may_reap` (given the
  /// database's time) says no.
  reaped reap_expired(int max_retries, const reap_guard& may_reap = {});

  /// Deletes up to `batch` PROCESSED events older than `age`; returns how many.
  int delete_processed(std::chrono::milliseconds age, int batch);

  /// Time until the earliest PENDING event with a future next_retry_at becomes due.
  std::optional<std::chrono::milliseconds> next_due_in();

private:
  /// The name of the statement `done_sql` (a `WITH done AS (...)` list whose `done` yields the
  /// finished rows' aggregate_id) followed by the aggregate's transition for `outcome` with
  /// $`reason_param` as reason and, when `attempt_param` is not 0, the insert of `attempt_rows`
  /// attempt rows from the parameters starting there; it answers `answer` over `done`. Prepared
  /// on first use, named by `kind` (which must tell apart the done_sql it is used with).
  /// The name of `s`, prepared on this connection at its first use.
  const std::string& prepared(const bound_statement& s);
  const std::string& finishing(const std::string& kind, const std::string& done_sql,
                               const std::string& aggregate_type,
                               std::optional<domain::engine_outcome> outcome, int reason_param,
                               int attempt_param, std::size_t attempt_rows, const char* answer);
  std::optional<std::int64_t> dead_letter_in(pqxx::transaction_base& tx, const claimed_event& e,
                                             const std::string& reason, const std::string& error,
                                             const std::string& dlq_status,
                                             std::optional<domain::engine_outcome> outcome,
                                             bool counts_run = true,
                                             const std::string& failed_step = {});

  pqxx::connection& conn_;
  hooks_by_type hooks_;
  claim_statement claim_;
  std::set<std::string> prepared_; // names of the statements prepared on first use
};

/// The statements that record_attempts() and complete_all() run, for a statement_lane: one
/// statement each (at most outbox_repository::max_rows_per_insert events or rows).
struct outbox_statements {
  /// Inserts `rows` (committed without waiting for the WAL flush).
  static bound_statement attempts(const std::vector<const attempt_row*>& rows);
  /// Completes `events` as complete_all() does (the aggregate's transition from `hooks`), with
  /// `riders`; its rows are the ids completed.
  static bound_statement completions(const hooks_by_type& hooks, const std::string& aggregate_type,
                                     std::optional<domain::engine_outcome> outcome,
                                     const std::string& reason,
                                     const std::vector<outbox_repository::completion>& events,
                                     const std::vector<const attempt_row*>& riders);
  /// Per event, in order, whether `ids` (a completions statement's rows) has it.
  static std::vector<bool> completed(const std::vector<std::int64_t>& ids,
                                     const std::vector<outbox_repository::completion>& events);

  /// A claim as outbox_repository::claim() makes it, on a connection set up with lane_setup.
  static bound_statement claim(const std::string& owner, int limit,
                               std::chrono::milliseconds lease);
  /// The events a claim's rows hold, by id; `sent` is when the claim was sent (their leases run
  /// from a moment after it).
  static std::vector<claimed_event> claimed(const text_rows& rows,
                                            std::chrono::steady_clock::time_point sent);
  /// The planner settings of every claim (see claim_walk.hpp), for the lane's whole session.
  static const char* const lane_setup;
};

} // namespace outboxd::persistence
