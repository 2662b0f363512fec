// Runs one claimed event to its decision: the fan-out of a forward event, or the compensation of
// a cancellation, and the compensation of a dead letter. Orchestration only: routing, templates,
// classification and retry delays are decided by domain/, rows written by persistence/. Runs are
// coroutines: a call, or a wait for a destination's slot, suspends the run and lets the other
// runs of the processor go on; database statements are short and run in place.
#pragma once

#include "actors/attempt_writer.hpp"
#include "actors/call_driver.hpp"
#include "actors/completion_writer.hpp"
#include "actors/database_lane.hpp"
#include "actors/destination_gates.hpp"
#include "actors/messages.hpp"
#include "actors/task.hpp"
#include "client/call.hpp"
#include "domain/attempt.hpp"
#include "domain/delivery.hpp"
#include "persistence/outbox_repository.hpp"

#include <chrono>
#include <exception>
#include <functional>
#include <optional>
#include <pqxx/except>
#include <random>
#include <string>

namespace outboxd::actors {

/// Before a call, makes sure the run's lease outlasts it: `needed` is the call's deadline.
/// False when the lease was lost (the run must stop and drop its result).
using lease_keeper = std::function<bool(std::chrono::milliseconds needed)>;

/// The keeper of a lease of length `lease` taken at `claimed_at`: it calls `renew` (which pushes
/// the lease out by `lease` and says whether it still held it) when what is left would not
/// outlast the call plus a quarter of a lease.
lease_keeper renewing_lease(std::chrono::milliseconds lease,
                            std::chrono::steady_clock::time_point claimed_at,
                            std::function<bool()> renew);

/// The failure of `reason`'s destination that `last_error` (an event's, at its claim) tells of:
/// the error itself ("<destination>: ..."), or what a held run's kept of it; nullopt for none or
/// another destination's.
inline std::optional<std::string> last_answer(const std::string& reason,
                                              const std::optional<std::string>& last_error) {
  if (!last_error)
    return std::nullopt;
  std::string_view error = *last_error;
  if (error.starts_with(domain::held_back_prefix)) {
    auto at = error.find(domain::last_answer_marker);
    if (at == std::string_view::npos)
      return std::nullopt;
    error.remove_prefix(at + domain::last_answer_marker.size());
  }
  const auto destination = std::string_view(reason).substr(0, reason.find(':') + 1);
  if (destination.empty() || !error.starts_with(destination))
    return std::nullopt;
  return std::string(error);
}

/// A gate's `reason` ("<destination>: ...") with the destination's last answer before the hold,
/// when `last_error` tells of one: what a run that gives up while held says.
inline std::string with_last_answer(const std::string& reason,
                                    const std::optional<std::string>& last_error) {
  auto out = reason;
  if (auto last = last_answer(reason, last_error))
    out.append(domain::last_answer_marker).append(*last);
  return out;
}

/// The last_error of a run held back for `reason` (with_last_answer, so that the next hold and a
/// give-up still know the destination's answer).
inline std::string held_error(const std::string& reason,
                              const std::optional<std::string>& last_error = std::nullopt) {
  return domain::held_back_prefix + with_last_answer(reason, last_error);
}
/// How every held_error() of `destination`'s gate starts.
inline std::string held_prefix(const std::string& destination) {
  return held_error(destination + ":");
}

/// Why a call was not made: its destination's gate held the run back (`held`), or the run's
/// lease was lost (no `held`).
struct not_called {
  std::optional<destination_gates::hold> held;
};

/// How a compensation (a run of reverts) ended.
struct compensation_result {
  enum class kind { done, failed, held, interrupted, lease_lost };
  kind what = kind::done;
  /// For `failed`: retryable or non_retryable.
  domain::attempt_outcome failure = domain::attempt_outcome::non_retryable;
  std::string error;       // "<destination>.revert: <why>" for failures
  std::string destination; // for `failed` and `held`: the destination whose revert stopped it
  /// For `failed` and `held`: the step that stopped it, "<destination>.revert", or the
  /// destination whose settling re-send did.
  std::string step;
  std::optional<std::chrono::milliseconds> retry_after;
  destination_gates::hold hold; // for `held`
  int reverted = 0;

  /// A compensation stopped before a call of `step` to `destination`.
  static compensation_result stopped(const not_called& why, std::string destination,
                                     std::string step);
};

class event_runner {
public:
  /// `actor_name` tags the log lines (e.g. "outbox-processor-2"); calls and waits go through
  /// `driver`, which must outlive the runner.
  /// `own_connections` (0 for none): connections of its own on which the attempt rows and the
  /// completions go out without the thread waiting for them (database_lane).
  event_runner(const engine_context& ctx, std::string actor_name, call_driver& driver,
               int own_connections = 0);

  /// Runs a claimed outbox event and completes, retries, dead-letters or releases it. A database
  /// error other than a lost connection (the database refusing a statement) fails the run
  /// (fail()) instead of escaping; a lost connection, and any other exception, escape to the
  /// claim loop. `e` must live until the run ended.
  task<void> run(const persistence::claimed_event& e);

  /// Holds `e` back after the database refused to record its run (`cause`), logged at ERROR:
  /// due again after domain::database_hold_delay, without spending a retry and without ever
  /// dead-lettering it for this (its calls may all have succeeded), `cause` in last_error. Never
  /// throws but for a lost connection.
  void hold_for_database(const persistence::claimed_event& e, const std::string& cause);
  /// Carries out the decision after a failed run of `e`: schedules the retry or dead-letters it
  /// (a cancellation as FAILED, for an operator, with the step its compensation could not get
  /// done: `failed_step`), counting and logging it. `made_call` false: the run made no call (held
  /// back past its retryFor), and does not count as one.
  void carry_out(const persistence::claimed_event& e, const domain::next_step& next,
                 const std::string& error, bool retry_after_given, bool made_call = true,
                 const std::string& failed_step = {});

  /// The runner's database lane, if it has one.
  database_lane* lane() { return lane_.get(); }
  /// Runs waiting for their completion to be written (their calls are over).
  std::size_t finishing() const { return completions_.finishing(); }

  /// Whether event type `event_type` is a cancellation ("!<type>").
  static bool is_cancellation(const std::string& event_type) {
    return event_type.rfind('!', 0) == 0;
  }

  /// The last_error of a run that database error `error` ended: "recording failed:
  /// <PostgreSQL's message>" (its first line, without the severity).
  static std::string failure_cause(const pqxx::failure& error);

  /// Reverts, newest fan-out step first, the successful forward calls of `original_event_id`
  /// that have a revert and are not reverted yet. `row_event_type` labels the revert rows;
  /// `keep_lease` is asked before each call.
  task<compensation_result> compensate(std::int64_t original_event_id,
                                       const std::string& aggregate_type,
                                       const std::string& aggregate_id,
                                       const std::string& row_event_type, int attempt,
                                       const lease_keeper& keep_lease);

  /// The retry budget of a run of `run` that `destination` failed (or held back): outbox.* or
  /// dlq.*, with the destination's maxRetries / retryFor when it sets them ("" for none).
  domain::retry_budget budget(domain::run_kind run, const std::string& destination) const;

  /// What follows run `attempt` of `run` that failed with `outcome` at `destination`,
  /// `failing_for` after its first failure (domain::decide_after_failure with budget() and this
  /// worker's jitter).
  domain::next_step decide(domain::run_kind run, domain::attempt_outcome outcome, int attempt,
                           std::chrono::milliseconds failing_for, const std::string& destination,
                           const std::optional<std::chrono::milliseconds>& retry_after);

  /// What a run held back by `hold` does: its next attempt is due after the hold's delay (with a
  /// little jitter), unless its retryFor is spent (then `give_up` holds the final step).
  struct hold_decision {
    std::chrono::milliseconds delay{0};
    std::optional<domain::next_step> give_up;
  };
  hold_decision after_hold(domain::run_kind run, const std::string& destination,
                           std::chrono::milliseconds failing_for,
                           const destination_gates::hold& hold);

  /// The keeper of outbox event `e`'s lease (renewing_lease with outbox.leaseTimeout).
  lease_keeper outbox_lease(const persistence::claimed_event& e);

private:
  /// How one forward call ended; with `not_made`, no call was made and there is no row.
  struct step_result {
    domain::attempt_outcome outcome = domain::attempt_outcome::success;
    std::string error;
    std::optional<std::chrono::milliseconds> retry_after;
    std::optional<std::string> response_json; // of a success
    persistence::attempt_row row;             // the attempt, for the caller to record
    std::optional<not_called> not_made;
    std::optional<destination_gates::hold> reopened; // see call_through_gate
  };

  /// A call through the destination's gate, after `keep_lease`: the result, or why none was made.
  /// Waits for a free slot (up to max_limit_wait) and a rate token by suspending the run. When
  /// the call probed an open circuit and failed, `reopened` is set to the hold of the circuit
  /// opened again: the run is held back like the others, its failure spending no retry (the
  /// destination is down; this run only happened to be the one that asked).
  task<std::variant<client::call_result, not_called>>
  call_through_gate(const std::string& destination, const client::call_request& req,
                    const lease_keeper& keep_lease,
                    std::optional<destination_gates::hold>& reopened);

  /// Calls destination `name` (position `index` of the fan-out) of event `e` with its
  /// Idempotency-Key; the caller records the returned row.
  task<step_result> call_step(const persistence::claimed_event& e, std::size_t index,
                              const std::string& name, const rapidjson::Value& payloads,
                              const domain::previous_responses& previous, int attempt,
                              const lease_keeper& keep_lease);
  /// Re-sends the uncertain step of `original_event_id` (domain::uncertain_step), so that what
  /// the remote applied is known and can be reverted. nullopt when settled (or nothing to do).
  task<std::optional<compensation_result>> settle_uncertain_step(std::int64_t original_event_id,
                                                                 int attempt,
                                                                 const lease_keeper& keep_lease);
  /// Holds `e` back (or gives it up when its retryFor is spent).
  void hold_back(const persistence::claimed_event& e, domain::run_kind run,
                 const std::string& destination, const destination_gates::hold& hold,
                 const std::string& step = {});
  /// Appends an attempt row (with the rows of the processor's other runs, see attempt_writer)
  /// and counts it in the metrics; the run goes on once the row is committed.
  task<void> record(const persistence::attempt_row& row);
  void lease_lost(const persistence::claimed_event& e, const char* what);
  /// The step of `event_id`'s fan-out an earlier run may have applied without knowing: a call of
  /// it got no answer, or a run was cut off at it (domain::uncertain_step).
  std::optional<std::string> uncertain_step_of(std::int64_t event_id,
                                               const std::vector<std::string>& fanout);
  // Nothing was called under the lost lease, so nothing is dropped.
  void lease_lost_before(const persistence::claimed_event& e, const std::string& destination);
  task<void> run_fanout(const persistence::claimed_event& e);
  task<void> run_cancellation(const persistence::claimed_event& e);
  /// The outbox repository on a borrowed connection, for one statement.
  persistence::worker_connections::lease<persistence::outbox_repository> repo() {
    return ctx_.db->outbox(name_);
  }

  const engine_context& ctx_;
  std::string name_;
  call_driver& driver_;
  std::unique_ptr<database_lane> lane_; // null: statements on borrowed connections
  attempt_writer rows_;
  completion_writer completions_;
  std::mt19937_64 rng_;
};

} // namespace outboxd::actors
