// Requests from many threads written together. A thread that submits a request queues it; when no
// batch is being written, the thread takes everything queued (its own request included, up to
// `max_batch`) and writes it in one go, for every waiting thread. So a lone request is written at
// once, and under load each round trip and commit carries what arrived during the one before.
// One write at a time batches best; a second one (up to `writers`) starts only once every write
// in progress has taken longer than `overlap_after`, so one slow write (a lock wait, say) does not
// hold up the others.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

namespace outboxd::persistence {

template <class Request, class Result> class write_batcher {
public:
  /// One request of a batch: the writer sets its result or its error.
  struct entry {
    const Request* request;
    std::optional<Result> result;
    std::exception_ptr error;
  };
  /// Writes a batch. What it throws becomes the error of every entry it left without a result.
  using write_fn = std::function<void(std::span<entry*>)>;

  struct stats {
    std::size_t waiting = 0;   // requests queued for a writer now
    std::uint64_t batches = 0; // batches written so far
    std::uint64_t requests = 0;
  };

  write_batcher(int writers, std::size_t max_batch, std::chrono::milliseconds overlap_after,
                write_fn write)
      : writers_(writers < 1 ? 1 : writers), max_batch_(max_batch < 1 ? 1 : max_batch),
        overlap_after_(overlap_after), write_(std::move(write)) {}

  /// Returns once `request` is written: its result, or rethrows its error.
  Result submit(const Request& request) {
    slot mine{{&request, std::nullopt, nullptr}};
    std::unique_lock lock(mutex_);
    queue_.push_back(&mine);
    while (!mine.done) {
      if (queue_.empty() || writing_ >= writers_) { // mine is being written, or all writers busy
        done_.wait(lock);
        continue;
      }
      if (writing_ > 0) {
        auto due = last_start_ + overlap_after_;
        if (clock::now() < due) {
          done_.wait_until(lock, due);
          continue;
        }
      }
      ++writing_;
      last_start_ = clock::now();
      std::vector<slot*> batch;
      while (!queue_.empty() && batch.size() < max_batch_) {
        batch.push_back(queue_.front());
        queue_.pop_front();
      }
      lock.unlock();
      write(batch);
      lock.lock();
      --writing_;
      ++batches_;
      requests_ += batch.size();
      for (auto* s : batch)
        s->done = true;
      done_.notify_all();
    }
    lock.unlock();
    if (mine.e.error)
      std::rethrow_exception(mine.e.error);
    return std::move(*mine.e.result);
  }

  stats snapshot() const {
    std::lock_guard lock(mutex_);
    return {queue_.size(), batches_, requests_};
  }

private:
  using clock = std::chrono::steady_clock;
  struct slot {
    entry e;
    bool done = false; // guarded by mutex_
  };

  void write(const std::vector<slot*>& batch) {
    std::vector<entry*> entries;
    entries.reserve(batch.size());
    for (auto* s : batch)
      entries.push_back(&s->e);
    try {
      write_(entries);
    } catch (...) {
      for (auto* e : entries)
        if (!e->result && !e->error)
          e->error = std::current_exception();
    }
    for (auto* e : entries)
      if (!e->result && !e->error)
        e->error =
            std::make_exception_ptr(std::logic_error("write_batcher: request left unwritten"));
  }

  const int writers_;
  const std::size_t max_batch_;
  const std::chrono::milliseconds overlap_after_;
  const write_fn write_;
  mutable std::mutex mutex_;
  std::condition_variable done_;
  std::deque<slot*> queue_;
  int writing_ = 0;
  clock::time_point last_start_; // of the newest write in progress
  std::uint64_t batches_ = 0;
  std::uint64_t requests_ = 0;
};

} // namespace outboxd::persistence
