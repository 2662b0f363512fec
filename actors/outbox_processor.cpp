// outbox-processor-N: the claim loop over outbox events, up to outbox.callsInFlight of them run at
// once, claims sized to the room left (with one in flight: to the backlog, domain::claim_sizing),
// idleness reported to the supervisor; and its dead-letter child, restarted with a backoff when
// it stops.
#include "actors/claim_loop.hpp"
#include "actors/event_runner.hpp"
#include "actors/workers.hpp"
#include "log/log.hpp"
#include "metrics/metrics.hpp"

#include <caf/all.hpp>
#include <optional>

namespace outboxd::actors {
namespace {

using std::chrono::milliseconds;

/// What an outbox processor claims and how it runs one event.
class outbox_work {
public:
  using item = persistence::claimed_event;
  static constexpr const char* queue = "outbox";
  static constexpr const char* items = "events";

  outbox_work(caf::event_based_actor* self, context_ptr ctx, int index, std::string tag,
              caf::actor supervisor, call_driver& driver)
      : self_(self), ctx_(std::move(ctx)), index_(index), tag_(std::move(tag)),
        supervisor_(std::move(supervisor)), claim_size_(sizing().base()),
        runner_(std::make_unique<event_runner>(*ctx_, tag_, driver, ctx_->own_connections)) {}

  std::vector<item> claim(int room) {
    const auto& s = ctx_->settings.outbox;
    // Many in flight: claim what fits now, so that no claim waits (and spends its lease) behind
    // the others. One in flight: a batch sized to the backlog, run one after the other.
    if (s.calls_in_flight > 1)
      return repo()->claim(ctx_->lease_owner(tag_), room, s.lease_timeout);
    auto now = std::chrono::steady_clock::now();
    if (claimed_ > 0)
      claim_size_ = sizing().next(claim_size_, claimed_, now - claimed_at_);
    auto claimed = repo()->claim(ctx_->lease_owner(tag_), claim_size_, s.lease_timeout);
    claimed_ = claimed.size();
    claimed_at_ = now;
    return claimed;
  }

  /// Sends the claim without waiting for it when the runner has a lane free; false otherwise.
  template <class Done> bool claim_async(int room, Done done) {
    const auto& s = ctx_->settings.outbox;
    auto* lane = runner_->lane();
    if (s.calls_in_flight <= 1 || !lane || !lane->idle())
      return false;
    lane->send(
        persistence::outbox_statements::claim(ctx_->lease_owner(tag_), room, s.lease_timeout),
        [done = std::move(done), sent = std::chrono::steady_clock::now()](
            persistence::text_rows rows, std::exception_ptr error) mutable {
          if (error)
            return done({}, error);
          return done(persistence::outbox_statements::claimed(rows, sent), nullptr);
        });
    return true;
  }

  void claimed(const std::vector<item>& claimed, bool more) {
    if (claimed.empty()) {
      claim_size_ = sizing().base();
      self_->send(supervisor_, idle_atom::value, index_);
      return;
    }
    // Woken for more than it could take (one notification can stand for many events): the
    // supervisor wakes another idle processor, or keeps the wake for the next one to fall idle.
    if (more && ctx_->settings.outbox.calls_in_flight > 1)
      self_->send(supervisor_, wake_atom::value);
    log::debug(tag_, "claimed {} event(s), first {}", claimed.size(), claimed.front().id);
    for (const auto& e : claimed)
      metrics::global().events_claimed.inc({{"event_type", e.event_type}});
  }

  std::optional<milliseconds> next_due_in() { return repo()->next_due_in(); }
  task<void> run(const item& e) { return runner_->run(e); }
  std::size_t finishing() const { return runner_->finishing(); }
  bool release(const item& e) { return repo()->release(e); }

private:
  /// The outbox repository on a borrowed connection, for one statement.
  persistence::worker_connections::lease<persistence::outbox_repository> repo() {
    return ctx_->db->outbox(tag_);
  }
  domain::claim_sizing sizing() const {
    return {ctx_->settings.outbox.batch_size, ctx_->settings.outbox.pool_size};
  }

  caf::event_based_actor* self_;
  context_ptr ctx_;
  int index_;
  std::string tag_;
  caf::actor supervisor_;
  int claim_size_;
  std::size_t claimed_ = 0; // events of the last claim, and when it was made
  std::chrono::steady_clock::time_point claimed_at_;
  std::unique_ptr<event_runner> runner_;
};

struct processor_state {
  context_ptr ctx;
  int index = 0;
  std::string tag;
  caf::actor supervisor;
  std::optional<claim_loop<outbox_work>> loop;
  caf::actor dlq;
  domain::restart_history dlq_restarts;
  bool stopping = false;
  static inline const char* name = "outbox_processor";
};

using processor = caf::stateful_actor<processor_state>;

void start_dlq_child(processor* self) {
  auto& st = self->state;
  st.dlq = spawn_dlq_processor(self, st.ctx, st.index, st.supervisor);
  // Linked, so that the child ends when this processor crashes: its restart brings a new one,
  // and the old must not go on running unsupervised next to it.
  self->link_to(st.dlq);
  st.dlq_restarts.started(std::chrono::steady_clock::now());
}

caf::behavior outbox_processor(processor* self, context_ptr ctx, int index, caf::actor supervisor) {
  auto& st = self->state;
  st.ctx = std::move(ctx);
  st.index = index;
  st.tag = fmt::format("outbox-processor-{}", index + 1);
  st.supervisor = std::move(supervisor);
  auto driver = std::make_unique<call_driver>();
  auto& calls = *driver;
  st.loop.emplace(self, st.ctx, st.tag, std::move(driver),
                  outbox_work(self, st.ctx, index, st.tag, st.supervisor, calls),
                  st.ctx->settings.outbox.calls_in_flight);
  st.loop->install_crash_handler();
  // The link to the dead-letter child is one-way in effect: its end is handled by the down
  // handler below (a restart), never by ending this processor too.
  self->set_exit_handler([self](caf::exit_msg& em) {
    if (em.source != self->state.dlq.address() && em.reason)
      self->quit(em.reason);
  });
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (dm.source != st.dlq.address() || st.stopping)
      return;
    auto delay = st.dlq_restarts.crashed(st.ctx->restart_backoff, std::chrono::steady_clock::now());
    log::error(st.tag, "dlq-processor-{} stopped ({}); restarting in {}ms", st.index + 1,
               self->system().render(dm.reason), delay.count());
    self->delayed_send(self, delay, restart_atom::value);
  });
  start_dlq_child(self);
  log::info(st.tag,
            "started (calls in flight {}, batch {}, lease {}ms, {} connection(s) of its own)",
            st.ctx->settings.outbox.calls_in_flight, st.ctx->settings.outbox.batch_size,
            st.ctx->settings.outbox.lease_timeout.count(), st.ctx->own_connections);
  self->send(self, wake_atom::value);
  return {
      [self](wake_atom) { self->state.loop->claim(); },
      [self](sweep_atom) { self->state.loop->claim(); },
      [self](tick_atom, std::uint64_t timer) { self->state.loop->tick(timer); },
      [self](process_atom) { self->state.loop->process_next(); },
      [self](restart_atom) {
        if (!self->state.stopping)
          start_dlq_child(self);
      },
      [self](stop_atom) -> caf::result<bool> {
        auto& st = self->state;
        st.stopping = true;
        auto rp = self->make_response_promise<bool>();
        // Its own runs and its dead-letter child's stop side by side; answer when both ended.
        auto pending = std::make_shared<int>(2);
        auto finish = [self, rp, pending]() mutable {
          if (--*pending > 0)
            return;
          log::info(self->state.tag, "stopped");
          rp.deliver(true);
          self->quit();
        };
        const auto timeout = st.ctx->settings.outbox.shutdown_timeout;
        st.loop->stop(timeout * 3 / 4, timeout / 8, finish);
        self->request(st.dlq, timeout, stop_atom::value)
            .then([finish](bool) mutable { finish(); },
                  [finish](caf::error&) mutable { finish(); });
        return rp;
      },
  };
}

} // namespace

caf::actor spawn_outbox_processor(caf::event_based_actor* supervisor, context_ptr ctx, int index) {
  return supervisor->spawn<caf::detached + caf::monitored>(outbox_processor, std::move(ctx), index,
                                                           caf::actor_cast<caf::actor>(supervisor));
}

} // namespace outboxd::actors
