// The loop under a processor's runs in flight: outgoing calls on one multi driver, timers, and
// the runs themselves (top-level coroutines). A run co_awaits call() and sleep_until(); drive()
// resumes it on the processor's thread when its call finished or its time came. Not thread-safe.
#pragma once

#include "actors/task.hpp"
#include "client/multi_caller.hpp"

#include <algorithm>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <queue>
#include <string_view>
#include <vector>

namespace outboxd::actors {

class call_driver {
public:
  using clock = std::chrono::steady_clock;

  /// Work that runs hand over and then wait for, done for all of them at once (their attempt
  /// rows written in one statement): drive() flushes it each time it has resumed runs, before
  /// it waits on the calls, until nothing is left.
  class batch {
  public:
    virtual ~batch() = default;
    /// Does what is pending and resumes the runs that waited for it; how many. A batch may
    /// decline (0, leaving its work pending) while another batch's work must go first: drive()
    /// comes back to it once a later batch has flushed something.
    virtual std::size_t flush() = 0;
    /// Forgets what is pending without resuming its runs (they are being destroyed).
    virtual void drop() = 0;
    /// How many runs wait on the next flush.
    virtual std::size_t pending() const = 0;
  };

  /// Calls that take less than this on average are fast enough for drive() to wait for the
  /// other calls in flight (at most one average call) before it flushes the batches of those
  /// that finished, so that their runs share a statement and a commit.
  static constexpr std::chrono::microseconds fast_call{1000};

  explicit call_driver(std::chrono::microseconds linger_below = fast_call)
      : linger_below_(linger_below), typical_call_(linger_below) {}
  /// Cancels everything (see cancel_all).
  ~call_driver();
  call_driver(const call_driver&) = delete;
  call_driver& operator=(const call_driver&) = delete;

  /// Awaitable: makes one call; the awaiting coroutine resumes with its result.
  auto call(const client::call_request& request) {
    struct awaiter {
      call_driver& d;
      const client::call_request& request;
      client::call_result result;
      bool await_ready() noexcept { return false; }
      void await_suspend(std::coroutine_handle<> h) {
        d.calls_.start(request, [this, h, started = clock::now()](client::call_result r) {
          d.took(clock::now() - started);
          result = std::move(r);
          h.resume();
        });
      }
      client::call_result await_resume() { return std::move(result); }
    };
    return awaiter{*this, request, {}};
  }

  /// Awaitable: resumes the awaiting coroutine at `at` (at once when it has passed).
  auto sleep_until(clock::time_point at) {
    struct awaiter {
      call_driver& d;
      clock::time_point at;
      bool await_ready() noexcept { return at <= clock::now(); }
      void await_suspend(std::coroutine_handle<> h) { d.timers_.push({at, ++d.timer_seq_, h}); }
      void await_resume() noexcept {}
    };
    return awaiter{*this, at};
  }

  /// Starts `run` at once (it runs until its first call, which is sent, or sleep); `done` is
  /// called, from spawn() or a later drive(), with the exception it ended with (or null).
  void spawn(task<void> run, std::function<void(std::exception_ptr)> done);

  /// `b` is flushed by drive() (batches in the order attached, those attached `ahead` before the
  /// others) and dropped by cancel_all(); it must detach itself before it is destroyed.
  void attach(batch* b, bool ahead = false) {
    batches_.insert(ahead ? batches_.begin() : batches_.end(), b);
  }
  void detach(batch* b) {
    batches_.erase(std::remove(batches_.begin(), batches_.end(), b), batches_.end());
  }

  /// Waits on `fd` with the calls (see multi_caller::watch): `ready` resumes runs and says how
  /// many.
  void watch(int fd, std::function<std::size_t()> ready) { calls_.watch(fd, std::move(ready)); }
  void unwatch(int fd) { calls_.unwatch(fd); }

  /// Runs started and not ended.
  std::size_t running() const { return runs_.size(); }

  /// Whether the calls are fast (see fast_call): then this driver's thread, not the calls, sets
  /// the pace, and runs share statements even when some of them wait a little longer for it.
  bool calls_are_fast() const { return typical_call_ < linger_below_; }

  /// Resumes the runs whose time came and waits, at most `max_wait` (less when a timer is due
  /// sooner), for calls to finish, resuming their runs; flushes the batch after each of these
  /// (and before the wait), so no run waits on it past drive(). Returns how many runs were
  /// resumed.
  std::size_t drive(std::chrono::milliseconds max_wait);

  /// Ends the calls in flight without their answers: the next drive() resumes their runs with a
  /// transport error reading `why` (so that each can record its call). Returns how many.
  std::size_t abandon_calls(std::string_view why) { return calls_.abandon_all(why); }

  /// Ends every run where it waits, without resuming it: its calls are dropped, its frame
  /// destroyed (a permit it held frees its slot), its `done` never called.
  void cancel_all();

private:
  struct timer {
    clock::time_point at;
    std::uint64_t seq;
    std::coroutine_handle<> h;
    bool operator>(const timer& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  std::size_t resume_due_timers();
  std::size_t flush_batch();
  /// Adds a finished call's time to the moving average.
  void took(clock::duration d) { typical_call_ += (d - typical_call_) / 8; }
  /// Runs waiting on the next flush.
  std::size_t pending() const;
  /// With fast calls and runs waiting on a flush: runs the calls in flight for up to one average
  /// call more, until group_rows runs wait, so that those finishing meanwhile join the flush. How
  /// many runs it resumed.
  std::size_t linger();
  static constexpr std::size_t group_rows = 4;

  client::multi_caller calls_;
  std::priority_queue<timer, std::vector<timer>, std::greater<>> timers_;
  std::uint64_t timer_seq_ = 0;
  std::map<std::uint64_t, std::coroutine_handle<>> runs_; // live top-level runs by id
  std::uint64_t next_run_ = 0;
  std::vector<batch*> batches_;
  const clock::duration linger_below_;
  clock::duration typical_call_; // starts at linger_below_: no lingering before a fast call
};

} // namespace outboxd::actors
