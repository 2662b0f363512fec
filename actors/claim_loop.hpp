// The claim loop both processors run: claim, start runs while fewer than the processor's cap are
// in flight, drive their calls for a short slice, then let the mailbox (stop, wake-ups) be served
// before the next slice (a process message to itself); claim again when there is room, keeping a
// short queue of claimed events ready for the slots that free up while the runs are quick. Idle
// until a wake-up or the next due retry. A lost database connection drops the unstarted claims and
// retries after the shared backoff.
#pragma once

#include "actors/call_driver.hpp"
#include "actors/messages.hpp"
#include "actors/task.hpp"
#include "log/log.hpp"
#include "metrics/metrics.hpp"

#include <algorithm>
#include <caf/all.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outboxd::actors {

/// The loop of one processor. `Work` says what is claimed and how one item is run:
///   using item = ...;
///   static constexpr const char* queue;                   // label of the claim-time histogram
///   static constexpr const char* items;                   // what it claims, for log lines
///   std::vector<item> claim(int room);                    // the next claim (may throw); `room`
///                                                         // is how many to take: the runs that
///                                                         // fit now and the queue ahead
///   bool claim_async(int room, done);                     // sends the claim when it can without
///                                                         // waiting (false: claim() instead);
///                                                         // done(items, error) runs from a later
///                                                         // drive() and says how many it started
///   void claimed(const std::vector<item>&, bool more);    // after each claim, empty ones too;
///                                                         // `more`: an idle processor's claim
///                                                         // filled all its room (more may be due)
///   std::optional<std::chrono::milliseconds> next_due_in(); // the earliest delayed item
///   task<void> run(const item&);                          // one item, start to finish
///   std::size_t finishing() const;                        // runs left with only their last
///                                                         // statement to wait for (no call)
///   bool release(const item&);                            // hand an unstarted claim back
/// The loop lives in the actor's state; the actor forwards wake-ups, ticks, process messages
/// and its stop to it.
template <class Work> class claim_loop {
public:
  using item = typename Work::item;
  using clock = std::chrono::steady_clock;
  /// How long one slice drives the calls before the mailbox is served again.
  static constexpr std::chrono::milliseconds slice{50};
  /// A processor keeps a queue of claimed events ahead of its free slots only while its slots
  /// free up at least this often (its runs' time over its cap): the queue, a quarter of the cap
  /// (at least four, or the whole cap), is then taken within about a run's time at most. With
  /// slower runs a queued event would wait for one to end while another processor's slot stood
  /// free, and a claim per free slot costs little at that pace (100 a second at most).
  static constexpr std::chrono::milliseconds quick_slots{10};

  /// `driver` carries the runs' calls (the work's runner uses the same one); at most
  /// `calls_in_flight` items run at once, not counting those that only wait for their last
  /// statement (see busy()).
  claim_loop(caf::event_based_actor* self, context_ptr ctx, std::string tag,
             std::unique_ptr<call_driver> driver, Work work, int calls_in_flight)
      : self_(self), ctx_(std::move(ctx)), tag_(std::move(tag)), driver_(std::move(driver)),
        work_(std::move(work)), cap_(std::max(1, calls_in_flight)) {}

  /// Runs still in flight end where they wait (their leases expire; the reaper hands them on).
  ~claim_loop() { driver_->cancel_all(); }
  claim_loop(const claim_loop&) = delete;
  claim_loop& operator=(const claim_loop&) = delete;

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

  /// Work may be waiting: claim at the next chance.
  void claim() {
    claim_wanted_ = true;
    kick();
  }

  /// A timer fired: claims unless a later timer replaced it.
  void tick(std::uint64_t timer) {
    if (timer == timer_) {
      backoff_until_.reset();
      claim();
    }
  }

  /// One slice: start what fits, claim when the claimed ones have all started, drive the calls.
  void process_next() {
    driving_ = false;
    count_busy_slots();
    if (stopping_) {
      // A claim in flight is waited for: what it took goes back at once, not when its leases
      // expire.
      if (running_.empty() && !claim_in_flight_)
        return finish_stop();
      if (clock::now() >= stop_deadline_) {
        if (!grace_)
          return finish_stop();
        abandon_calls();
      }
    } else {
      release_stale_claims();
      start_runs();
      if (claim_now())
        start_runs();
    }
    if (running_.empty() && !claim_in_flight_) {
      // Everything claimed ended at once (held back, nothing to deliver): claim again, as after
      // a batch. Otherwise idle: a wake-up or a timer brings the next claim.
      if (!stopping_ && claim_wanted_ && !backoff_until_ && !ctx_->stopping)
        kick();
      return;
    }
    driver_->drive(slice);
    reap();
    count_busy_slots();
    kick();
  }

  /// Stops claiming and starting, hands the unstarted claims back, and calls `stopped` once the
  /// runs in flight have ended (they finish their call and stop at the next step). When `timeout`
  /// passes first, the calls still in flight are abandoned and their runs get `grace` more to
  /// record them (each as a call without an answer, which the item's retry then follows); what
  /// is left after that is dropped where it waits (its lease expires).
  void stop(std::chrono::milliseconds timeout, std::chrono::milliseconds grace,
            std::function<void()> stopped) {
    stopping_ = true;
    try {
      hand_back([](const item&) { return true; }, "at the stop");
    } catch (const std::exception& e) {
      log::warn(tag_, "could not hand back claims (their leases will expire): {}", e.what());
    }
    queue_.clear();
    on_stopped_ = std::move(stopped);
    stop_deadline_ = clock::now() + timeout;
    grace_ = grace;
    if (!running_.empty())
      log::info(tag_, "waiting for {} run(s) in flight to end", running_.size());
    kick();
  }

  bool stopping() const { return stopping_; }
  const std::string& tag() const { return tag_; }
  Work& work() { return work_; }

private:
  /// Starts runs from the claimed queue while there is room.
  void start_runs() {
    while (!queue_.empty() && busy() < cap_ && !backoff_until_) {
      if (ctx_->stopping) {
        stop_claims_on_shutdown();
        return;
      }
      const auto id = ++next_run_;
      auto& it =
          *running_.emplace(id, std::make_unique<item>(std::move(queue_.front()))).first->second;
      queue_.pop_front();
      driver_->spawn(work_.run(it), [this, id, started = clock::now()](std::exception_ptr error) {
        took(clock::now() - started);
        ended_.emplace_back(id, error);
      });
    }
    reap();
    count_busy_slots();
  }

  /// Hands back the unstarted claims from the front of the queue while `due` says so, and logs
  /// their ids (`why` ends the line). A claim whose lease was already lost is dropped.
  template <class Due> void hand_back(Due&& due, std::string_view why) {
    std::vector<std::int64_t> released;
    while (!queue_.empty() && due(queue_.front())) {
      if (work_.release(queue_.front()))
        released.push_back(queue_.front().id);
      queue_.pop_front();
    }
    if (!released.empty())
      log::info(tag_, "handed back {} unstarted claim(s) ({} {}) {}", released.size(), Work::items,
                fmt::join(released, ", "), why);
  }

  /// The engine began to stop before this processor heard of it: unstarted claims go back.
  void stop_claims_on_shutdown() {
    guarded([&] { hand_back([](const item&) { return true; }, "at the stop"); });
  }

  /// Claims that have waited unstarted for a third of their lease go back (PENDING again, no
  /// attempt counted): a processor whose runs are slow must not sit on events it cannot start
  /// in time, or their leases expire, the reaper counts each expiry as an attempt (a dead
  /// letter out of retries is FAILED), and another worker could have run them meanwhile. Until
  /// a run ends, this processor then claims no more than its free slots.
  void release_stale_claims() {
    const auto oldest = clock::now() - ctx_->settings.outbox.lease_timeout / 3;
    if (queue_.empty() || queue_.front().claimed_at > oldest)
      return;
    claim_ahead_ = false;
    guarded([&] {
      hand_back([oldest](const item& i) { return i.claimed_at <= oldest; },
                "not started within a third of their lease");
    });
  }

  /// Claims when asked to and there is room enough. While the slots free up quickly (see
  /// quick_slots), runs in flight wait for a quarter of the cap and at least four free slots (the
  /// whole cap when it is smaller), so that claims stay batches (with one per event that ends, a
  /// small cap paid a claim's round trip and transaction for every event), and the claim also fills
  /// a small queue (as many) of events that start the moment a run ends, instead of leaving their
  /// slots empty until the next claim. Otherwise, and before its runs were timed, the processor
  /// claims what its free slots take, as soon as one is free. True when something was claimed.
  bool claim_now() {
    if (!claim_wanted_ || ctx_->stopping || backoff_until_ || claim_in_flight_)
      return false;
    const bool quick = run_time_ && *run_time_ / cap_ < quick_slots;
    const int batch = cap_ > 1 && quick ? std::max(std::min(cap_, 4), cap_ / 4) : 1;
    const int ahead = cap_ > 1 && quick && claim_ahead_ ? batch : 0;
    const int room = cap_ + ahead - busy() - static_cast<int>(queue_.size());
    if (room <= 0 || (!running_.empty() && room < batch))
      return false;
    const auto started = clock::now();
    const bool idle = running_.empty() && queue_.empty();
    bool got = false;
    guarded([&] {
      // Sent without waiting when the work can (its runs go on meanwhile; landed() starts the
      // claimed ones), else made here.
      claim_in_flight_ = work_.claim_async(
          room, [this, started, idle, room](std::vector<item> claimed, std::exception_ptr error) {
            claim_in_flight_ = false;
            if (error) {
              guarded([&] { std::rethrow_exception(error); });
              return std::size_t{0};
            }
            const auto n = claimed.size();
            if (!landed(std::move(claimed), started, idle, room))
              return std::size_t{0};
            start_runs();
            return n;
          });
      if (!claim_in_flight_)
        got = landed(work_.claim(room), started, idle, room);
    });
    return got;
  }

  /// A claim of `room` made at `started` came back: queued, or handed back when the stop began
  /// meanwhile; with nothing claimed, the next claim waits for a wake-up or the next due item.
  /// True when something was queued.
  bool landed(std::vector<item> claimed, clock::time_point started, bool idle, int room) {
    metrics::global().claim_seconds.observe(
        {{"queue", Work::queue}}, std::chrono::duration<double>(clock::now() - started).count());
    if (stopping_ || ctx_->stopping) {
      queue_.insert(queue_.end(), std::make_move_iterator(claimed.begin()),
                    std::make_move_iterator(claimed.end()));
      guarded([&] { hand_back([](const item&) { return true; }, "at the stop"); });
      return false;
    }
    work_.claimed(claimed, idle && static_cast<int>(claimed.size()) == room);
    if (claimed.empty()) {
      claim_wanted_ = false;
      const auto poll = ctx_->settings.outbox.poll_interval;
      auto next = work_.next_due_in();
      schedule(next ? std::min(*next + std::chrono::milliseconds(1), poll) : poll);
      return false;
    }
    queue_.insert(queue_.end(), std::make_move_iterator(claimed.begin()),
                  std::make_move_iterator(claimed.end()));
    return true;
  }

  /// The slots in use: the runs, less those whose completion is being written. Such a run makes
  /// no more calls, and its statement may wait on the database for a while (on a connection of
  /// the processor's own the thread does not wait with it), so the next event starts meanwhile.
  /// Its aggregate's next event cannot be claimed before that commit.
  int busy() const {
    return std::max(0, static_cast<int>(running_.size()) - static_cast<int>(work_.finishing()));
  }

  /// Adds the slot-seconds since the last count (the slots busy then, times the time since) to
  /// outboxd_processor_busy_slot_seconds_total, and notes the slots busy now. Counted where a pass
  /// begins, where runs start and where ended runs are reaped after the calls were driven; a run
  /// that ends, or hands over its completion, within a pass is counted to the pass's end. Handed to
  /// the metric at most every tenth of a second, and whenever no slot is busy.
  void count_busy_slots() {
    const auto now = clock::now();
    busy_slot_seconds_ += std::chrono::duration<double>(now - counted_at_).count() * counted_busy_;
    counted_at_ = now;
    counted_busy_ = busy();
    if (busy_slot_seconds_ > 0 && (counted_busy_ == 0 || now - reported_at_ >= report_every)) {
      metrics::global().busy_slot_seconds.inc({{"queue", Work::queue}}, busy_slot_seconds_);
      busy_slot_seconds_ = 0;
      reported_at_ = now;
    }
  }
  static constexpr std::chrono::milliseconds report_every{100};

  /// Adds an ended run's time (from its start) to the moving average.
  void took(clock::duration d) { run_time_ = run_time_ ? *run_time_ + (d - *run_time_) / 8 : d; }

  /// Forgets the runs that ended. A lost connection ends only its run (the claim loop backs off);
  /// any other exception crashes the actor, as it did the run.
  void reap() {
    auto ended = std::move(ended_);
    ended_.clear();
    std::exception_ptr crash;
    for (auto& [id, error] : ended) {
      running_.erase(id);
      claim_wanted_ = true;
      claim_ahead_ = true;
      if (!error)
        continue;
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        if (!persistence::is_connection_loss(e)) {
          crash = error;
          continue;
        }
        connection_lost(e);
      } catch (...) {
        crash = error;
      }
    }
    if (crash)
      std::rethrow_exception(crash);
  }

  /// Runs `f`; a lost connection drops the unstarted claims and retries later, a statement the
  /// database refused for now (cut short, read-only, out of resources) is retried later.
  template <class F> void guarded(F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      if (persistence::is_temporary_refusal(e)) {
        ctx_->db->refused(tag_, e);
        back_off();
        return;
      }
      if (!persistence::is_connection_loss(e))
        throw;
      connection_lost(e);
    }
  }

  /// The unstarted claims are dropped (their leases expire and the reaper hands them to a worker
  /// that can reach the database); the runs in flight go on, each fenced by its lease token, and
  /// each one the loss reaches ends there.
  void connection_lost(const std::exception& e) {
    ctx_->db->lost(tag_, e);
    queue_.clear();
    back_off();
  }

  /// No claim before the database's retry delay.
  void back_off() {
    if (!backoff_until_) {
      const auto delay = ctx_->db->retry_in();
      backoff_until_ = clock::now() + delay;
      schedule(delay);
    }
  }

  /// The stop's timeout passed with calls in flight: they end without their answers, and the
  /// runs get the grace period to record them.
  void abandon_calls() {
    std::vector<std::int64_t> ids;
    for (const auto& [run, it] : running_)
      ids.push_back(it->id);
    stop_deadline_ = clock::now() + *std::exchange(grace_, std::nullopt);
    const auto calls = driver_->abandon_calls(
        "abandoned without an answer: outboxd was stopping and outbox.shutdownTimeout ran out "
        "(the partner may have received the request)");
    log::warn(tag_,
              "{} run(s) still in flight at the shutdown timeout ({}); {} call(s) abandoned "
              "without an answer, to be recorded and retried",
              running_.size(), fmt::join(ids, ", "), calls);
  }

  void finish_stop() {
    if (!running_.empty()) {
      std::vector<std::int64_t> ids;
      for (const auto& [run, it] : running_)
        ids.push_back(it->id);
      log::warn(tag_,
                "{} run(s) still in flight at the shutdown timeout, dropped (their leases "
                "expire): {}",
                running_.size(), fmt::join(ids, ", "));
      driver_->cancel_all();
      running_.clear();
    }
    count_busy_slots();
    if (auto stopped = std::exchange(on_stopped_, nullptr))
      stopped();
  }

  void kick() {
    if (driving_)
      return;
    driving_ = true;
    self_->send(self_, process_atom::value);
  }

  void schedule(std::chrono::milliseconds delay) {
    self_->delayed_send(self_, delay, tick_atom::value, ++timer_);
  }

  caf::event_based_actor* self_;
  context_ptr ctx_;
  std::string tag_;
  std::unique_ptr<call_driver> driver_;
  Work work_;
  const int cap_;
  std::deque<item> queue_;                                 // claimed, not started
  std::map<std::uint64_t, std::unique_ptr<item>> running_; // started, by run id (stable addresses)
  std::vector<std::pair<std::uint64_t, std::exception_ptr>> ended_;
  std::uint64_t next_run_ = 0;
  std::uint64_t timer_ = 0;
  std::optional<clock::time_point> backoff_until_; // after a lost connection
  std::optional<clock::duration> run_time_;        // moving average; none before a run ended
  bool claim_wanted_ = true;
  bool claim_ahead_ = true; // false from a stale claim's release until a run ends
  bool driving_ = false;    // a process message is on its way
  bool claim_in_flight_ = false;
  bool stopping_ = false;
  clock::time_point stop_deadline_;
  clock::time_point counted_at_ = clock::now(); // of the busy slots (count_busy_slots)
  int counted_busy_ = 0;
  double busy_slot_seconds_ = 0; // not yet handed to the metric
  clock::time_point reported_at_ = counted_at_;
  std::optional<std::chrono::milliseconds> grace_; // unused yet: the calls were not abandoned
  std::function<void()> on_stopped_;
};

} // namespace outboxd::actors
