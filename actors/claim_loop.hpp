// The claim loop both processors run: claim a batch, run it one item per message (so the mailbox,
// and with it shutdown, is served between items), claim again; idle until a wake-up or the next
// due retry. A lost database connection drops the batch and retries after the shared backoff.
#pragma once

#include "actors/messages.hpp"
#include "log/log.hpp"

#include <algorithm>
#include <caf/all.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace outboxd::actors {

/// The loop of one processor. `Work` says what is claimed and how one item is run:
///   using item = ...;
///   std::vector<item> claim();                            // the next batch (may throw)
///   void claimed(const std::vector<item>&);               // after each claim, empty ones too
///   std::optional<std::chrono::milliseconds> next_due_in(); // the earliest delayed item
///   void run(const item&);                                 // one item, start to finish
///   bool release(const item&);                             // hand an unstarted claim back
/// The loop lives in the actor's state; the actor forwards wake-ups, ticks, process messages
/// and its stop to it.
template <class Work> class claim_loop {
public:
  using item = typename Work::item;

  claim_loop(caf::event_based_actor* self, context_ptr ctx, std::string tag, Work work)
      : self_(self), ctx_(std::move(ctx)), tag_(std::move(tag)), work_(std::move(work)) {}

  /// Logs a crash under the processor's tag; the exception ends the actor.
  void install_crash_handler() {
    self_->set_exception_handler([tag = tag_](std::exception_ptr& ep) -> caf::error {
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        log::error(tag, "crashed: {}", e.what());
        return caf::make_error(caf::sec::runtime_error, e.what());
      }
    });
  }

  /// Claims, unless stopping or a batch is still being run.
  void claim() {
    if (stopping_ || ctx_->stopping || !batch_.empty())
      return;
    guarded([&] {
      auto claimed = work_.claim();
      work_.claimed(claimed);
      if (claimed.empty()) {
        const auto poll = ctx_->settings.outbox.poll_interval;
        auto next = work_.next_due_in();
        schedule(next ? std::min(*next + std::chrono::milliseconds(1), poll) : poll);
        return;
      }
      batch_.assign(claimed.begin(), claimed.end());
      self_->send(self_, process_atom::value);
    });
  }

  /// A timer fired: claims unless a later timer replaced it.
  void tick(std::uint64_t timer) {
    if (timer == timer_)
      claim();
  }

  /// Runs the next item of the batch (hands it back once shutdown began), or claims when the
  /// batch is done.
  void process_next() {
    if (batch_.empty()) {
      claim();
      return;
    }
    auto next = std::move(batch_.front());
    batch_.pop_front();
    bool ran = guarded([&] {
      if (ctx_->stopping)
        work_.release(next);
      else
        work_.run(next);
    });
    if (ran)
      self_->send(self_, process_atom::value);
  }

  /// Stops claiming and hands the unstarted claims back; how many were handed back, or nullopt
  /// when none were held.
  std::optional<int> stop() {
    stopping_ = true;
    if (batch_.empty())
      return std::nullopt;
    int released = 0;
    try {
      for (const auto& i : batch_)
        released += work_.release(i) ? 1 : 0;
    } catch (const std::exception& e) {
      log::warn(tag_, "could not hand back claims (their leases will expire): {}", e.what());
    }
    batch_.clear();
    return released;
  }

  bool stopping() const { return stopping_; }
  const std::string& tag() const { return tag_; }
  Work& work() { return work_; }

private:
  /// Runs `f`; a lost connection drops the batch (the leases expire and the reaper hands the
  /// claims to a worker that can reach the database) and retries later. False when it did.
  template <class F> bool guarded(F&& f) {
    try {
      f();
      return true;
    } catch (const std::exception& e) {
      if (!persistence::is_connection_loss(e))
        throw;
      ctx_->db->lost(tag_, e);
      batch_.clear();
      schedule(ctx_->db->retry_in());
      return false;
    }
  }

  void schedule(std::chrono::milliseconds delay) {
    self_->delayed_send(self_, delay, tick_atom::value, ++timer_);
  }

  caf::event_based_actor* self_;
  context_ptr ctx_;
  std::string tag_;
  Work work_;
  std::deque<item> batch_;
  std::uint64_t timer_ = 0;
  bool stopping_ = false;
};

} // namespace outboxd::actors
