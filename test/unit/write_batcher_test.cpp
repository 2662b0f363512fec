// The write batcher: a lone request is written at once; requests that arrive while the writers
// are busy are written together, at most `writers` batches at once and `max_batch` requests each,
// a second batch only once the writes in progress took `overlap_after`; errors reach the requests
// they belong to. No I/O: the write function records its batches and
// can be held until the test releases it.
#include "persistence/write_batcher.hpp"

#include <chrono>
#include <condition_variable>
#include <doctest/doctest.h>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace {

using batcher = outboxd::persistence::write_batcher<int, int>;

/// A write function that answers each request with its value × 10, records the batches, and
/// holds every write while the hold is on.
struct recorder {
  std::mutex m;
  std::condition_variable changed;
  bool holding = false;
  int writing = 0, most_at_once = 0;
  std::vector<std::vector<int>> batches;

  batcher::write_fn fn() {
    return [this](std::span<batcher::entry*> batch) {
      std::unique_lock lock(m);
      most_at_once = std::max(most_at_once, ++writing);
      changed.notify_all();
      changed.wait(lock, [&] { return !holding; });
      --writing;
      std::vector<int> values;
      for (auto* e : batch) {
        values.push_back(*e->request);
        if (*e->request < 0)
          e->error = std::make_exception_ptr(std::invalid_argument("negative"));
        else if (*e->request == 13)
          throw std::runtime_error("unlucky batch");
        else
          e->result = *e->request * 10;
      }
      batches.push_back(values);
    };
  }
  void hold() {
    std::lock_guard lock(m);
    holding = true;
  }
  void release() {
    std::lock_guard lock(m);
    holding = false;
    changed.notify_all();
  }
  /// Waits until `n` writes are held.
  void wait_writing(int n) {
    std::unique_lock lock(m);
    REQUIRE(changed.wait_for(lock, 10s, [&] { return writing == n; }));
  }
};

/// Waits until `n` requests are queued for a writer.
void wait_queued(const batcher& b, std::size_t n) {
  for (int i = 0; i < 10000 && b.snapshot().waiting != n; ++i)
    std::this_thread::sleep_for(1ms);
  REQUIRE(b.snapshot().waiting == n);
}

} // namespace

TEST_CASE("a lone request is written at once, in a batch of its own") {
  recorder r;
  batcher b(2, 64, 0ms, r.fn());
  CHECK(b.submit(4) == 40);
  CHECK(b.submit(5) == 50);
  CHECK(r.batches == std::vector<std::vector<int>>{{4}, {5}});
  auto s = b.snapshot();
  CHECK(s.batches == 2);
  CHECK(s.requests == 2);
  CHECK(s.waiting == 0);
}

TEST_CASE("requests that arrive while the writer is busy are written together") {
  recorder r;
  batcher b(1, 64, 0ms, r.fn());
  r.hold();
  std::vector<std::thread> threads;
  std::vector<int> results(6);
  threads.emplace_back([&] { results[0] = b.submit(1); });
  r.wait_writing(1);
  for (int i = 1; i < 6; ++i)
    threads.emplace_back([&, i] { results[i] = b.submit(i + 1); });
  wait_queued(b, 5);
  r.release();
  for (auto& t : threads)
    t.join();
  CHECK(results == std::vector<int>{10, 20, 30, 40, 50, 60});
  REQUIRE(r.batches.size() == 2);
  CHECK(r.batches[0] == std::vector<int>{1});
  CHECK(r.batches[1].size() == 5);
  CHECK(b.snapshot().requests == 6);
}

TEST_CASE("at most `writers` batches are written at once, of at most `max_batch` requests") {
  recorder r;
  batcher b(2, 2, 0ms, r.fn());
  r.hold();
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&, i] { b.submit(i); });
  r.wait_writing(2);
  for (int i = 2; i < 7; ++i)
    threads.emplace_back([&, i] { b.submit(i); });
  wait_queued(b, 5);
  r.release();
  for (auto& t : threads)
    t.join();
  CHECK(r.most_at_once == 2);
  std::size_t total = 0;
  for (const auto& batch : r.batches) {
    CHECK(batch.size() <= 2);
    total += batch.size();
  }
  CHECK(total == 7);
  CHECK(r.batches.size() == 5); // 1 + 1, then the five queued as 2 + 2 + 1
}

TEST_CASE("a second batch starts only once the write in progress took overlap_after") {
  recorder r;
  r.hold();
  std::vector<std::thread> threads;
  SUBCASE("before that, requests wait for the one writer") {
    batcher b(2, 64, std::chrono::hours(1), r.fn());
    threads.emplace_back([&] { b.submit(1); });
    r.wait_writing(1);
    threads.emplace_back([&] { b.submit(2); });
    threads.emplace_back([&] { b.submit(3); });
    wait_queued(b, 2); // a second writer would have taken them at once
    r.release();
    for (auto& t : threads)
      t.join();
    CHECK(r.most_at_once == 1);
    CHECK(r.batches.size() == 2);
  }
  SUBCASE("after it, a second writer takes what waits") {
    batcher b(2, 64, 20ms, r.fn());
    threads.emplace_back([&] { b.submit(1); });
    r.wait_writing(1);
    threads.emplace_back([&] { b.submit(2); });
    r.wait_writing(2);
    r.release();
    for (auto& t : threads)
      t.join();
    CHECK(r.most_at_once == 2);
  }
}

TEST_CASE("an error reaches only the requests it belongs to") {
  recorder r;
  batcher b(1, 64, 0ms, r.fn());
  SUBCASE("an entry's own error") {
    r.hold();
    std::vector<std::thread> threads;
    int ok_result = 0;
    bool refused = false;
    threads.emplace_back([&] { b.submit(1); });
    r.wait_writing(1);
    threads.emplace_back([&] {
      try {
        b.submit(-1);
      } catch (const std::invalid_argument&) {
        refused = true;
      }
    });
    threads.emplace_back([&] { ok_result = b.submit(2); });
    wait_queued(b, 2);
    r.release();
    for (auto& t : threads)
      t.join();
    CHECK(refused);
    CHECK(ok_result == 20);
    CHECK(r.batches.back().size() == 2); // both were in one batch
  }
  SUBCASE("a thrown error fails the batch it was thrown for, not the next one") {
    CHECK_THROWS_WITH_AS(b.submit(13), "unlucky batch", std::runtime_error);
    CHECK(b.submit(3) == 30);
  }
}
