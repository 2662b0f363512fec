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
    /// Does what is pending and resumes the runs that waited for it; how many.
    virtual std::size_t flush() = 0;
    /// Forgets what is pending without resuming its runs (they are being destroyed).
    virtual void drop() = 0;
  };

  call_driver() = default;
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
        d.calls_.start(request, [this, h](client::call_result r) {
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

  /// `b` is flushed by drive() (batches in the order attached) and dropped by cancel_all(); it
  /// must detach itself before it is destroyed.
  void attach(batch* b) { batches_.push_back(b); }
  void detach(batch* b) {
    batches_.erase(std::remove(batches_.begin(), batches_.end(), b), batches_.end());
  }

  /// Runs started and not ended.
  std::size_t running() const { return runs_.size(); }

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

  client::multi_caller calls_;
  std::priority_queue<timer, std::vector<timer>, std::greater<>> timers_;
  std::uint64_t timer_seq_ = 0;
  std::map<std::uint64_t, std::coroutine_handle<>> runs_; // live top-level runs by id
  std::uint64_t next_run_ = 0;
  std::vector<batch*> batches_;
};

} // namespace outboxd::actors
