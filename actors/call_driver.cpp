// Timers are a heap served before and after each wait on curl, and bound that wait; the runs'
// frames are kept by id so that a cancellation can destroy those still suspended.
#include "actors/call_driver.hpp"

#include "log/log.hpp"

#include <algorithm>

namespace outboxd::actors {

call_driver::~call_driver() {
  cancel_all();
}

void call_driver::spawn(task<void> run, std::function<void(std::exception_ptr)> done) {
  const auto id = ++next_run_;
  runs_.emplace(id, std::coroutine_handle<>{});
  auto started =
      spawn_detached(std::move(run), [this, id, done = std::move(done)](std::exception_ptr error) {
        runs_.erase(id);
        done(error);
      });
  // Still registered: the run is suspended (one that ended at once has erased itself).
  if (auto it = runs_.find(id); it != runs_.end())
    it->second = started.handle;
  // Its first call goes out now, not after the claim the processor makes before it drives.
  calls_.send();
}

std::size_t call_driver::resume_due_timers() {
  std::size_t resumed = 0;
  const auto now = clock::now();
  // Only timers due now: a resumed run may add one that is due at once, served next round.
  std::vector<std::coroutine_handle<>> due;
  while (!timers_.empty() && timers_.top().at <= now) {
    due.push_back(timers_.top().h);
    timers_.pop();
  }
  for (auto h : due) {
    h.resume();
    ++resumed;
  }
  return resumed;
}

std::size_t call_driver::flush_batch() {
  // A run resumed by a flush may hand over more (rows written back to back) before it calls.
  std::size_t resumed = 0;
  for (bool again = true; again;) {
    again = false;
    for (auto* b : batches_)
      if (auto n = b->flush()) {
        resumed += n;
        again = true;
        // The calls of the resumed runs go out before the next batch's statement.
        calls_.send();
      }
  }
  return resumed;
}

std::size_t call_driver::pending() const {
  std::size_t n = 0;
  for (const auto* b : batches_)
    n += b->pending();
  return n;
}

std::size_t call_driver::linger() {
  const auto typical = typical_call_;
  if (!calls_are_fast() || pending() == 0)
    return 0;
  // A flush costs a round trip and a commit, about as long as such a call: waiting for the calls
  // about to land costs each waiting run little and saves the database a commit per run. A flush
  // of group_rows runs shares its commit well enough; with more calls in flight, flushes reach it
  // by themselves (the rows gather while the previous statement runs).
  std::size_t resumed = 0;
  const auto until = clock::now() + typical;
  for (auto now = clock::now(); calls_.in_flight() > 0 && pending() < group_rows && now < until;
       now = clock::now())
    resumed += calls_.run(std::chrono::ceil<std::chrono::microseconds>(until - now));
  return resumed;
}

std::size_t call_driver::drive(std::chrono::milliseconds max_wait) {
  // The runs' lines of one pass go out in one write: before the wait on the calls, before each
  // statement (the connections write them when one is borrowed) and at the end.
  log::holder lines;
  // Runs started since the last drive may wait on the batch already.
  std::size_t resumed = flush_batch();
  resumed += resume_due_timers();
  resumed += flush_batch();
  auto wait = resumed ? std::chrono::milliseconds{0} : max_wait;
  if (!timers_.empty())
    wait = std::min(wait, std::max(std::chrono::milliseconds{0},
                                   std::chrono::ceil<std::chrono::milliseconds>(timers_.top().at -
                                                                                clock::now())));
  if (wait.count() > 0)
    log::write_held();
  resumed += calls_.run(wait);
  if (resumed > 0)
    resumed += linger();
  resumed += flush_batch();
  resumed += resume_due_timers();
  resumed += flush_batch();
  // The calls the resumed runs started go out now, not after the statements the processor makes
  // before its next slice (a claim, say).
  calls_.send();
  return resumed;
}

void call_driver::cancel_all() {
  for (auto* b : batches_)
    b->drop();
  calls_.cancel_all();
  timers_ = {};
  auto runs = std::move(runs_);
  runs_.clear();
  for (auto& [id, h] : runs)
    if (h)
      h.destroy();
}

} // namespace outboxd::actors
