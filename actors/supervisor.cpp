// supervisor: spawns outbox.poolSize processors (each with its dead-letter child), the listener
// and the janitor; routes wake-ups to idle workers; restarts crashed children with backoff
// (domain::restart_backoff); stops everything in reverse order on request.
#include "actors/supervisor.hpp"

#include "actors/workers.hpp"
#include "log/log.hpp"

#include <caf/all.hpp>
#include <functional>
#include <map>
#include <set>

namespace outboxd::actors {
namespace {

constexpr const char* tag = "supervisor";
enum child_kind : int { processor_child = 0, listener_child = 1, janitor_child = 2 };

struct supervisor_state {
  context_ptr ctx;
  std::vector<caf::actor> processors;
  caf::actor listener;
  caf::actor janitor;
  std::map<int, caf::actor> dlq_processors;
  std::set<int> idle;
  bool pending_wake = false;
  /// By (kind, index).
  std::map<std::pair<int, int>, domain::restart_history> restarts;
  bool stopping = false;
  /// While stopping: the workers that did not answer in time, each ended by its down message.
  std::map<caf::actor_addr, std::function<void()>> late;
  std::set<caf::actor_addr> ended; // workers that ended while stopping
  static inline const char* name = "supervisor";
};

using supervisor = caf::stateful_actor<supervisor_state>;

void start_child(supervisor* self, int kind, int index) {
  auto& st = self->state;
  st.restarts[{kind, index}].started(std::chrono::steady_clock::now());
  switch (kind) {
  case processor_child:
    st.processors[index] = spawn_outbox_processor(self, st.ctx, index);
    break;
  case listener_child:
    st.listener = spawn_pg_listener(self, st.ctx);
    break;
  case janitor_child:
    st.janitor = spawn_janitor(self, st.ctx);
    break;
  }
}

/// Wakes one idle processor; if none is idle, the next one to become idle is woken at once, so
/// a notification arriving while all are busy is never lost.
void wake_one(supervisor* self) {
  auto& st = self->state;
  if (st.idle.empty()) {
    st.pending_wake = true;
    return;
  }
  auto index = *st.idle.begin();
  st.idle.erase(st.idle.begin());
  self->send(st.processors[index], wake_atom::value);
}

caf::behavior supervisor_actor(supervisor* self, context_ptr ctx) {
  auto& st = self->state;
  st.ctx = std::move(ctx);
  const auto& s = st.ctx->settings;
  st.processors.resize(static_cast<std::size_t>(s.outbox.pool_size));
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (st.stopping) {
      st.ended.insert(dm.source);
      if (auto late = st.late.find(dm.source); late != st.late.end()) {
        auto done = std::move(late->second);
        st.late.erase(late);
        done();
      }
      return;
    }
    // A dead-letter child is restarted by its processor; here it only leaves the wake-up list
    // (unless a newer child of that index registered already).
    for (auto it = st.dlq_processors.begin(); it != st.dlq_processors.end(); ++it)
      if (dm.source == it->second.address()) {
        st.dlq_processors.erase(it);
        return;
      }
    std::pair<int, int> who{-1, 0};
    for (std::size_t i = 0; i < st.processors.size(); ++i)
      if (dm.source == st.processors[i].address())
        who = {processor_child, static_cast<int>(i)};
    if (dm.source == st.listener.address())
      who = {listener_child, 0};
    if (dm.source == st.janitor.address())
      who = {janitor_child, 0};
    if (who.first < 0)
      return;
    if (who.first == processor_child) {
      st.idle.erase(who.second);
      st.dlq_processors.erase(who.second);
    }
    auto& history = st.restarts[who];
    auto delay = history.crashed(st.ctx->restart_backoff, std::chrono::steady_clock::now());
    const char* names[] = {"outbox-processor", "pg-listener", "janitor"};
    log::error(tag, "{}{} stopped ({}); restart {} in {}ms", names[who.first],
               who.first == processor_child ? "-" + std::to_string(who.second + 1) : "",
               self->system().render(dm.reason), history.crashes(), delay.count());
    self->delayed_send(self, delay, restart_atom::value, who.first, who.second);
  });
  for (int i = 0; i < s.outbox.pool_size; ++i)
    start_child(self, processor_child, i);
  if (s.outbox.use_listen_notify)
    start_child(self, listener_child, 0);
  start_child(self, janitor_child, 0);
  log::info(tag, "started {} outbox processor(s) with dead-letter children, {}, janitor",
            s.outbox.pool_size,
            s.outbox.use_listen_notify ? "pg-listener" : "no listener (polling only)");
  return {
      [self](wake_atom) { wake_one(self); },
      [self](dlq_wake_atom) {
        for (auto& [i, d] : self->state.dlq_processors)
          self->send(d, dlq_wake_atom::value);
      },
      [self](sweep_atom) {
        auto& st = self->state;
        for (auto& p : st.processors)
          self->send(p, sweep_atom::value);
        for (auto& [i, d] : st.dlq_processors)
          self->send(d, sweep_atom::value);
      },
      [self](idle_atom, int index) {
        auto& st = self->state;
        st.idle.insert(index);
        if (st.pending_wake) {
          st.pending_wake = false;
          wake_one(self);
        }
      },
      [self](register_atom, int index, caf::actor dlq) {
        // Watched so that a child that ended (crashed, or went down with its processor) is
        // never counted as registered.
        self->monitor(dlq);
        self->state.dlq_processors[index] = std::move(dlq);
      },
      [self](status_atom) {
        auto& st = self->state;
        supervisor_status out;
        out.processors = st.processors;
        out.dlq_children = st.dlq_processors;
        for (std::size_t i = 0; i < st.processors.size(); ++i) {
          auto it = st.restarts.find({processor_child, static_cast<int>(i)});
          bool known = it != st.restarts.end();
          out.processor_crashes.push_back(known ? it->second.crashes() : 0);
          out.processor_delay_ms.push_back(known ? it->second.last_delay().count() : 0);
        }
        return out;
      },
      [self](restart_atom, int kind, int index) {
        if (!self->state.stopping)
          start_child(self, kind, index);
      },
      [self](stop_atom) -> caf::result<bool> {
        auto& st = self->state;
        st.stopping = true;
        log::info(tag, "stopping: listener and janitor, then processors (calls in flight finish)");
        std::vector<caf::actor> children{st.listener, st.janitor};
        children.insert(children.end(), st.processors.rbegin(), st.processors.rend());
        auto rp = self->make_response_promise<bool>();
        auto remaining = std::make_shared<int>(0);
        auto done = [self, rp, remaining]() mutable {
          if (--*remaining == 0) {
            log::info(tag, "all workers stopped");
            rp.deliver(true);
            self->quit();
          }
        };
        for (auto& c : children) {
          if (!c)
            continue;
          ++*remaining;
          // A worker that does not answer in time is busy (in a statement, say): it counts as
          // stopped once it has ended, never before, so that nothing outlives this actor.
          self->request(c, st.ctx->settings.outbox.shutdown_timeout, stop_atom::value)
              .then([done](bool) mutable { done(); },
                    [self, done, who = c.address()](caf::error& e) mutable {
                      if (e == caf::sec::request_receiver_down || self->state.ended.count(who))
                        return done();
                      log::warn(tag, "a worker did not stop within outbox.shutdownTimeout; "
                                     "waiting for it to end");
                      self->state.late.emplace(who, done);
                    });
        }
        if (*remaining == 0) {
          rp.deliver(true);
          self->quit();
        }
        return rp;
      },
  };
}

} // namespace

caf::actor spawn_supervisor(caf::actor_system& system, context_ptr ctx) {
  return system.spawn(supervisor_actor, std::move(ctx));
}

} // namespace outboxd::actors
