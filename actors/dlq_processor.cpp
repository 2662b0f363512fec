// dlq-processor-N: the claim loop over dead letters, compensating one at a time (LIFO reverts of
// the original event's successful calls). All reverted → PROCESSED and the order FAILED (or
// CANCELLED); retryable trouble → backoff up to dlq.maxRetries; otherwise FAILED and the order
// ATTENTION.
#include "actors/claim_loop.hpp"
#include "actors/event_runner.hpp"
#include "actors/workers.hpp"
#include "log/log.hpp"
#include "metrics/metrics.hpp"
#include "persistence/connection_pool.hpp"
#include "persistence/dlq_repository.hpp"

#include <caf/all.hpp>
#include <optional>

namespace outboxd::actors {
namespace {

using std::chrono::milliseconds;

/// What a dead-letter processor claims and how it compensates one dead letter.
class dlq_work {
public:
  using item = persistence::claimed_dead_letter;
  static constexpr const char* queue = "dead_letter";
  static constexpr const char* items = "dead letters";

  dlq_work(context_ptr ctx, std::string tag, call_driver& driver)
      : ctx_(std::move(ctx)), tag_(std::move(tag)),
        runner_(std::make_unique<event_runner>(*ctx_, tag_, driver)) {}

  /// What fits (the cap is 1: one dead letter, compensated before the next claim). A batch
  /// would wait in the queue for its turn while its leases ran out.
  template <class Done> bool claim_async(int, Done) { return false; }
  std::vector<item> claim(int room) {
    return repo()->claim(ctx_->lease_owner(tag_), room, ctx_->settings.outbox.lease_timeout);
  }
  void claimed(const std::vector<item>&, bool) {} // every dead-letter processor gets each wake
  std::optional<milliseconds> next_due_in() { return repo()->next_due_in(); }
  /// Compensates `d`; a database error other than a lost connection fails this attempt
  /// (fail()) instead of the worker.
  task<void> run(const item& d);
  bool release(const item& d) { return repo()->release(d); }
  std::size_t finishing() const { return 0; } // one at a time: the next waits for its end

private:
  task<void> compensate(const item& d);
  /// Renews the dead letter's lease before a call that would outlive most of it.
  lease_keeper lease_of(const item& d);
  /// Holds `d` back after the database refused to record its compensation (`cause`): due again
  /// after domain::database_hold_delay, no retry spent and never FAILED for this (as for events),
  /// `cause` as the revert error.
  void hold_for_database(const item& d, const std::string& cause);
  /// Carries out the decision after a failed compensation: the retry, or FAILED (with the `step`
  /// that failed, for an operator's resolve) and the order in ATTENTION.
  void carry_out(const item& d, const domain::next_step& next, const std::string& error,
                 const std::string& step);
  /// The dead-letter repository on a borrowed connection, for one statement.
  persistence::worker_connections::lease<persistence::dlq_repository> repo() {
    return ctx_->db->dlq(tag_);
  }

  context_ptr ctx_;
  std::string tag_;
  std::unique_ptr<event_runner> runner_;
};

task<void> dlq_work::run(const item& d) {
  try {
    co_await compensate(d);
  } catch (const pqxx::failure& error) {
    // As for events: a database error holds this dead letter back, it fails neither the
    // worker nor the compensation.
    if (persistence::is_connection_loss(error))
      throw; // the claim loop drops the batch and backs off
    hold_for_database(d, event_runner::failure_cause(error));
  }
}

void dlq_work::hold_for_database(const item& d, const std::string& cause) {
  const auto delay = domain::database_hold_delay(
      d.failing_for, runner_->budget(domain::run_kind::compensation, ""));
  log::error(tag_,
             "dead letter {} (event {} {} {} {}) compensation attempt {}: {}; held back, due "
             "again in {}ms (no retry spent: the database, not a partner, failed)",
             d.id, d.original_event_id, d.event_type, d.aggregate_type, d.aggregate_id,
             d.attempts + 1, cause, delay.count());
  try {
    repo()->postpone(d, delay, held_error(cause));
  } catch (const pqxx::failure& again) {
    if (persistence::is_connection_loss(again))
      throw;
    log::error(tag_,
               "dead letter {}: its failure could not be recorded either ({}); it waits for its "
               "lease to expire",
               d.id, again.what());
  }
}

void dlq_work::carry_out(const item& d, const domain::next_step& next, const std::string& error,
                         const std::string& step) {
  const int attempt = d.attempts + 1;
  if (next.what == domain::next_step::kind::retry) {
    if (repo()->retry(d, next.delay, error))
      log::warn(tag_, "dead letter {} compensation retry {} in {}ms: {}", d.id, attempt,
                next.delay.count(), error);
    return;
  }
  if (next.out_of_time)
    log::warn(tag_, "dead letter {}: dlq retryFor spent after {}s of failures, giving up", d.id,
              d.failing_for.count() / 1000);
  if (repo()->fail(d, error, step)) {
    metrics::global().compensations.inc({{"kind", "dead_letter"}, {"outcome", "failed"}});
    log::error(tag_,
               "order needs attention: compensation of dead letter {} ({} {} {}) failed "
               "after {} attempt(s): {}",
               d.id, d.event_type, d.aggregate_type, d.aggregate_id, attempt, error);
  }
}

lease_keeper dlq_work::lease_of(const item& d) {
  const auto lease = ctx_->settings.outbox.lease_timeout;
  return renewing_lease(lease, d.claimed_at,
                        [this, &d, lease] { return repo()->extend_lease(d, lease); });
}

task<void> dlq_work::compensate(const item& d) {
  const int attempt = d.attempts + 1;
  // A redriven failed cancellation compensates the event it cancels; any other dead letter
  // compensates its own event.
  bool cancellation = d.event_type.rfind('!', 0) == 0;
  std::optional<std::int64_t> original = d.original_event_id;
  if (cancellation)
    original = ctx_->db->outbox(tag_)->latest_event_id(d.aggregate_type, d.aggregate_id,
                                                       d.event_type.substr(1));
  auto outcome = cancellation ? domain::engine_outcome::cancellation_compensated
                              : domain::engine_outcome::fanout_compensated;
  log::info(tag_, "dead letter {} (event {} {} {} {}, {}): compensating, attempt {}", d.id,
            d.original_event_id, d.event_type, d.aggregate_type, d.aggregate_id, d.reason, attempt);
  compensation_result r;
  if (original) {
    auto keep_lease = lease_of(d);
    r = co_await runner_->compensate(*original, d.aggregate_type, d.aggregate_id, d.event_type,
                                     attempt, keep_lease);
  }
  switch (r.what) {
  case compensation_result::kind::interrupted:
    repo()->release(d);
    co_return;
  case compensation_result::kind::lease_lost:
    log::warn(tag_, "dead letter {}: lease lost; another worker owns it now", d.id);
    metrics::global().leases_lost.inc();
    co_return;
  case compensation_result::kind::held: {
    auto decision =
        runner_->after_hold(domain::run_kind::compensation, r.destination, d.failing_for, r.hold);
    if (decision.give_up) {
      carry_out(d, *decision.give_up,
                r.step + " held back past its time budget (" + r.hold.reason + ")", r.step);
      co_return;
    }
    if (repo()->postpone(d, decision.delay, held_error(r.hold.reason)))
      log::write(d.held_before ? log::level::debug : log::level::info, tag_,
                 fmt::format("dead letter {} ({} {} {}): held back ({}), due again in {}ms; no "
                             "retry spent",
                             d.id, d.event_type, d.aggregate_type, d.aggregate_id, r.hold.reason,
                             decision.delay.count()));
    co_return;
  }
  case compensation_result::kind::done:
    if (repo()->resolve(d, outcome, d.last_error)) {
      metrics::global().compensations.inc({{"kind", "dead_letter"}, {"outcome", "reverted"}});
      log::info(tag_, "dead letter {} compensated ({} revert(s)); {} {} {}", d.id, r.reverted,
                d.aggregate_type, d.aggregate_id,
                cancellation ? "cancelled" : "failed: " + d.last_error);
    }
    co_return;
  case compensation_result::kind::failed:
    break;
  }
  carry_out(d,
            runner_->decide(domain::run_kind::compensation, r.failure, attempt, d.failing_for,
                            r.destination, r.retry_after),
            r.error, r.step);
}

struct dlq_state {
  std::optional<claim_loop<dlq_work>> loop;
  static inline const char* name = "dlq_processor";
};

using dlq_actor = caf::stateful_actor<dlq_state>;

caf::behavior dlq_processor(dlq_actor* self, context_ptr ctx, int index, caf::actor supervisor) {
  auto tag = fmt::format("dlq-processor-{}", index + 1);
  // One compensation at a time: a dead letter is rare, and its reverts are few.
  auto driver = std::make_unique<call_driver>();
  auto& calls = *driver;
  self->state.loop.emplace(self, ctx, tag, std::move(driver), dlq_work(ctx, tag, calls), 1);
  self->state.loop->install_crash_handler();
  self->send(supervisor, register_atom::value, index, caf::actor_cast<caf::actor>(self));
  self->send(self, wake_atom::value);
  return {
      [self](wake_atom) { self->state.loop->claim(); },
      [self](dlq_wake_atom) { self->state.loop->claim(); },
      [self](sweep_atom) { self->state.loop->claim(); },
      [self](tick_atom, std::uint64_t timer) { self->state.loop->tick(timer); },
      [self](process_atom) { self->state.loop->process_next(); },
      [self, ctx](stop_atom) -> caf::result<bool> {
        auto rp = self->make_response_promise<bool>();
        const auto timeout = ctx->settings.outbox.shutdown_timeout;
        self->state.loop->stop(timeout / 2, timeout / 8, [self, rp]() mutable {
          rp.deliver(true);
          self->quit();
        });
        return rp;
      },
  };
}

} // namespace

caf::actor spawn_dlq_processor(caf::event_based_actor* parent, context_ptr ctx, int index,
                               caf::actor supervisor) {
  return parent->spawn<caf::detached + caf::monitored>(dlq_processor, std::move(ctx), index,
                                                       std::move(supervisor));
}

} // namespace outboxd::actors
