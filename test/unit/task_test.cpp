// The coroutine task type the processors run events on: laziness, values and exceptions handed to
// the awaiter, deep chains without stack growth, detached runs and their cancellation. No I/O: a
// hand-made awaitable stands in for a call.
#include "actors/task.hpp"

#include <coroutine>
#include <doctest/doctest.h>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

using outboxd::actors::spawn_detached;
using outboxd::actors::task;

namespace {

/// Suspends the awaiting coroutine until release() resumes it with a value.
struct gate {
  std::vector<std::coroutine_handle<>> waiting;
  int value = 0;
  auto wait() {
    struct awaiter {
      gate& g;
      bool await_ready() noexcept { return false; }
      void await_suspend(std::coroutine_handle<> h) { g.waiting.push_back(h); }
      int await_resume() noexcept { return g.value; }
    };
    return awaiter{*this};
  }
  void release(int v) {
    value = v;
    auto w = std::move(waiting);
    waiting.clear();
    for (auto h : w)
      h.resume();
  }
};

task<int> answer(int x) {
  co_return x * 2;
}

task<int> sum_of_answers(int& started) {
  ++started;
  int a = co_await answer(1);
  int b = co_await answer(20);
  co_return a + b;
}

task<std::string> fails() {
  throw std::runtime_error("refused");
  co_return "never";
}

task<int> waits(gate& g) {
  int got = co_await g.wait();
  co_return got + 1;
}

task<int> chain(int depth) {
  if (depth == 0)
    co_return 0;
  int below = co_await chain(depth - 1);
  co_return below + 1;
}

/// Counts its own destruction, to see that a cancelled frame is freed.
struct tracked {
  std::shared_ptr<int> destroyed;
  ~tracked() { ++*destroyed; }
};

task<void> holds(gate& g, std::shared_ptr<int> destroyed) {
  tracked t{std::move(destroyed)};
  co_await g.wait();
}

task<void> outer_holds(gate& g, std::shared_ptr<int> destroyed) {
  tracked t{destroyed};
  co_await holds(g, destroyed);
}

// Lambdas that are coroutines keep their captures in the lambda object, not in the frame: the
// top-level runs below are free functions whose parameters the frame owns.
template <class T> task<void> assign(task<T> t, T& out) {
  out = co_await std::move(t);
}

task<void> push_plus(task<int> t, std::vector<int>& out, int plus) {
  out.push_back(co_await std::move(t) + plus);
}

task<std::string> catcher() {
  try {
    co_return co_await fails();
  } catch (const std::runtime_error& e) {
    co_return std::string("caught ") + e.what();
  }
}

task<void> discard(task<std::string> t) {
  co_await std::move(t);
}

} // namespace

TEST_CASE("a task does nothing until it is awaited, then gives its value to the awaiter") {
  int started = 0;
  auto t = sum_of_answers(started);
  CHECK(started == 0);
  int result = -1;
  spawn_detached(assign(std::move(t), result), [](std::exception_ptr) {});
  CHECK(started == 1);
  CHECK(result == 42);
}

TEST_CASE("an exception thrown in a task is rethrown at its awaiter") {
  std::string caught;
  spawn_detached(assign(catcher(), caught), [](std::exception_ptr) {});
  CHECK(caught == "caught refused");
}

TEST_CASE("a detached run reports the exception it ended with") {
  std::exception_ptr seen;
  bool done = false;
  spawn_detached(discard(fails()), [&](std::exception_ptr e) {
    done = true;
    seen = e;
  });
  CHECK(done);
  REQUIRE(seen);
  CHECK_THROWS_WITH_AS(std::rethrow_exception(seen), "refused", std::runtime_error);
}

TEST_CASE("a suspended run resumes where it waited and reports its end once") {
  gate g;
  int result = 0;
  int ends = 0;
  spawn_detached(assign(waits(g), result), [&](std::exception_ptr e) {
    CHECK_FALSE(e);
    ++ends;
  });
  CHECK(ends == 0);
  REQUIRE(g.waiting.size() == 1);
  g.release(41);
  CHECK(result == 42);
  CHECK(ends == 1);
}

TEST_CASE("many runs wait at once and each resumes with its own continuation") {
  gate g;
  std::vector<int> results;
  for (int i = 0; i < 100; ++i)
    spawn_detached(push_plus(waits(g), results, i), [](std::exception_ptr) {});
  CHECK(results.empty());
  CHECK(g.waiting.size() == 100);
  g.release(0);
  REQUIRE(results.size() == 100);
  CHECK(results.front() == 1);
  CHECK(results.back() == 100);
}

TEST_CASE("a chain of tasks a thousand deep hands every value back up") {
  int result = 0;
  spawn_detached(assign(chain(1000), result), [](std::exception_ptr) {});
  CHECK(result == 1000);
}

TEST_CASE(
    "destroying a suspended run frees its frame and the frames it awaits, without ending it") {
  gate g;
  auto destroyed = std::make_shared<int>(0);
  bool ended = false;
  auto run = spawn_detached(outer_holds(g, destroyed), [&](std::exception_ptr) { ended = true; });
  REQUIRE(g.waiting.size() == 1);
  CHECK(*destroyed == 0);
  run.handle.destroy();
  CHECK(*destroyed == 2);
  CHECK_FALSE(ended);
}
