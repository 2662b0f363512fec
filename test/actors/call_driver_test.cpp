// The call driver's wait before a flush, against a loopback partner: when calls are fast, the
// runs whose calls finish within about one call of each other wait on one flush (one statement,
// one commit for their rows); when calls are slow, a flush goes as soon as a call finished.
#include "actors/call_driver.hpp"
#include "test/support/partner.hpp"

#include <coroutine>
#include <doctest/doctest.h>
#include <string>
#include <vector>

using namespace outboxd;
using namespace outboxd::test;
using namespace std::chrono_literals;

namespace {

/// A batch that only resumes its runs, and notes how many each flush resumed.
struct counting_batch final : actors::call_driver::batch {
  explicit counting_batch(actors::call_driver& d) : driver(d) { driver.attach(this); }
  ~counting_batch() override { driver.detach(this); }

  auto wait() {
    struct awaiter {
      counting_batch& b;
      bool await_ready() noexcept { return false; }
      void await_suspend(std::coroutine_handle<> h) { b.waiting.push_back(h); }
      void await_resume() noexcept {}
    };
    return awaiter{*this};
  }
  std::size_t flush() override {
    auto runs = std::move(waiting);
    waiting.clear();
    if (!runs.empty())
      flushes.push_back(runs.size());
    for (auto h : runs)
      h.resume();
    return runs.size();
  }
  void drop() override { waiting.clear(); }
  std::size_t pending() const override { return waiting.size(); }

  actors::call_driver& driver;
  std::vector<std::coroutine_handle<>> waiting;
  std::vector<std::size_t> flushes; // runs resumed by each flush, in order
};

/// The partner answers /a after 20 ms and /b 15 ms later than that; each answer is a row.
struct fixture {
  explicit fixture(std::chrono::microseconds linger_below) : driver(linger_below), batch(driver) {
    p.handle([](const partner::request& r) {
      partner::answer a;
      a.delay = r.path == "/b" ? 35ms : 20ms;
      return a;
    });
  }

  actors::task<void> calls(std::vector<std::string> paths) {
    for (const auto& path : paths) {
      client::call_request req;
      req.method = "POST";
      req.url = "http://127.0.0.1:" + std::to_string(p.port) + path;
      co_await driver.call(req);
      co_await batch.wait(); // as a run waits for its attempt row
    }
  }
  void spawn(std::vector<std::string> paths) {
    driver.spawn(calls(std::move(paths)), [this](std::exception_ptr) { ++ended; });
  }
  void drive_until(int runs_ended) {
    for (auto deadline = std::chrono::steady_clock::now() + 10s;
         ended < runs_ended && std::chrono::steady_clock::now() < deadline;)
      driver.drive(50ms);
    REQUIRE(ended == runs_ended);
  }

  partner p;
  actors::call_driver driver;
  counting_batch batch;
  int ended = 0;
};

} // namespace

TEST_CASE("runs whose fast calls finish close together share a flush") {
  // Calls of about 20 ms count as fast here: the driver waits up to one such call.
  fixture f(200ms);
  f.spawn({"/a", "/a", "/a"}); // three calls one after the other: their time is learnt
  f.drive_until(1);
  CHECK(f.batch.flushes == std::vector<std::size_t>{1, 1, 1});
  f.batch.flushes.clear();
  f.spawn({"/a"});
  f.spawn({"/b"}); // finishes 15 ms after the first
  f.drive_until(3);
  CHECK(f.batch.flushes == std::vector<std::size_t>{2});
}

TEST_CASE("with slow calls each flush goes as soon as a call finished") {
  fixture f(actors::call_driver::fast_call); // 20 ms is slow for the default
  f.spawn({"/a", "/a", "/a"});
  f.drive_until(1);
  f.batch.flushes.clear();
  f.spawn({"/a"});
  f.spawn({"/b"});
  f.drive_until(3);
  CHECK(f.batch.flushes == std::vector<std::size_t>{1, 1});
}
