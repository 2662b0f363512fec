// A small lazy coroutine task: task<T> starts when awaited, resumes its awaiter when it ends
// (symmetric transfer), and hands the awaiter its value or rethrows its exception there.
// spawn_detached() starts a top-level task and reports how it ended. No I/O, no threads.
#pragma once

#include <coroutine>
#include <exception>
#include <functional>
#include <optional>
#include <utility>

namespace outboxd::actors {

template <class T> class task;

namespace detail {

/// What every task promise shares: who awaits it and the exception it ended with.
struct task_promise_base {
  std::coroutine_handle<> continuation;
  std::exception_ptr error;

  std::suspend_always initial_suspend() noexcept { return {}; }
  /// Resumes the awaiter directly (no stack growth), or returns to whoever resumed us.
  struct final_awaiter {
    bool await_ready() noexcept { return false; }
    template <class P> std::coroutine_handle<> await_suspend(std::coroutine_handle<P> h) noexcept {
      auto next = h.promise().continuation;
      return next ? next : std::noop_coroutine();
    }
    void await_resume() noexcept {}
  };
  final_awaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() noexcept { error = std::current_exception(); }
};

template <class T> struct task_promise : task_promise_base {
  std::optional<T> value;
  task<T> get_return_object() noexcept;
  template <class U> void return_value(U&& v) { value.emplace(std::forward<U>(v)); }
  T take() {
    if (error)
      std::rethrow_exception(error);
    return std::move(*value);
  }
};

template <> struct task_promise<void> : task_promise_base {
  task<void> get_return_object() noexcept;
  void return_void() noexcept {}
  void take() {
    if (error)
      std::rethrow_exception(error);
  }
};

} // namespace detail

/// A coroutine that runs when co_awaited and gives its awaiter a T (or its exception). Owns its
/// frame: destroying an unfinished task destroys the frame (and the tasks it awaits).
template <class T = void> class [[nodiscard]] task {
public:
  using promise_type = detail::task_promise<T>;

  task(task&& other) noexcept : h_(std::exchange(other.h_, {})) {}
  task& operator=(task&& other) noexcept {
    if (this != &other) {
      if (h_)
        h_.destroy();
      h_ = std::exchange(other.h_, {});
    }
    return *this;
  }
  task(const task&) = delete;
  task& operator=(const task&) = delete;
  ~task() {
    if (h_)
      h_.destroy();
  }

  /// Awaiting starts the task; the awaiter resumes when it ends.
  auto operator co_await() && noexcept {
    struct awaiter {
      std::coroutine_handle<promise_type> h;
      bool await_ready() noexcept { return !h || h.done(); }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
        h.promise().continuation = awaiting;
        return h;
      }
      T await_resume() { return h.promise().take(); }
    };
    return awaiter{h_};
  }

  /// Whether the task ran to its end (for tests and the detached runner).
  bool done() const noexcept { return !h_ || h_.done(); }

private:
  friend promise_type;
  explicit task(std::coroutine_handle<promise_type> h) noexcept : h_(h) {}
  std::coroutine_handle<promise_type> h_;
};

namespace detail {
template <class T> task<T> task_promise<T>::get_return_object() noexcept {
  return task<T>(std::coroutine_handle<task_promise<T>>::from_promise(*this));
}
inline task<void> task_promise<void>::get_return_object() noexcept {
  return task<void>(std::coroutine_handle<task_promise<void>>::from_promise(*this));
}
} // namespace detail

/// A started top-level task (see spawn_detached): its frame frees itself when the task ends, or
/// is destroyed through `handle` while suspended (cancellation; `done` is then never called).
struct detached_run {
  struct promise_type {
    detached_run get_return_object() noexcept {
      return {std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); } // `done` must not throw
  };
  std::coroutine_handle<> handle;
};

/// Starts `t` at once and calls `done` when it ended, with its exception (or null). The handle
/// it returns stays valid until `done` is called, and may be destroyed before that to cancel.
inline detached_run spawn_detached(task<void> t, std::function<void(std::exception_ptr)> done) {
  std::exception_ptr error;
  try {
    co_await std::move(t);
  } catch (...) {
    error = std::current_exception();
  }
  done(error);
}

} // namespace outboxd::actors
