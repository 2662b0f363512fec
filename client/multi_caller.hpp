// Many calls in flight on one thread: a driver on libcurl's multi interface. Each call is a
// `transfer` (the same set-up and outcome as the blocking caller); run() waits for sockets and
// hands finished calls to their completions on the calling thread. Not thread-safe: each worker
// owns one.
#pragma once

#include "client/call.hpp"

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string_view>
#include <vector>

namespace outboxd::client {

/// Calls in flight on one thread, with keep-alive connections (and DNS answers and TLS sessions)
/// kept between them.
class multi_caller {
public:
  /// Receives the result of one call, on the thread that called run().
  using completion = std::function<void(call_result)>;

  multi_caller();
  /// Cancels what is still in flight (completions are not called).
  ~multi_caller();
  multi_caller(const multi_caller&) = delete;
  multi_caller& operator=(const multi_caller&) = delete;

  /// Starts a call (the request is copied). `done` is called once, from a later run(), with the
  /// result: the answer, a transport error, or why the request could not be made. Each call keeps
  /// its own deadline (`request.timeout`) and body cap.
  void start(const call_request& request, completion done);

  /// Moves the calls in flight on, waiting at most `max_wait` for one to progress, and calls the
  /// completions of those that finished. Returns how many finished. Sleeps the whole `max_wait`
  /// when nothing is in flight.
  std::size_t run(std::chrono::microseconds max_wait);

  /// Sends what the calls started since the last run() can send now (connects, requests) without
  /// waiting or handing out results, so that they do not wait for the thread's next run().
  void send();

  /// Waits on `fd` (for reading) with the calls' sockets: run() calls `ready` when it is readable
  /// and counts what `ready` returns among the calls that finished. One callback per fd.
  void watch(int fd, std::function<std::size_t()> ready);
  /// Stops waiting on `fd` (before it is closed).
  void unwatch(int fd);

  /// Calls started and not yet handed to their completion.
  std::size_t in_flight() const { return running_.size() + ready_.size(); }

  /// Ends every call in flight without waiting for its answer: the next run() hands each to its
  /// completion as a transport error reading `why`. Returns how many.
  std::size_t abandon_all(std::string_view why);

  /// Drops every call in flight without calling its completion (shutdown, or its owner is gone).
  void cancel_all();

private:
  using clock = std::chrono::steady_clock;
  struct running;
  /// curl's socket callback: keeps the epoll set to the sockets and directions curl waits on.
  static int on_socket(void* easy, int fd, int what, void* self, void* socket_data);
  /// curl's timer callback: when curl next wants to be told that time passed.
  static int on_timer(void* multi, long timeout_ms, void* self);
  /// Tells curl that `fd` is ready (CURL_CSELECT_* in `events`), or that its timeout came.
  void act(int fd, int events);
  /// Tells curl its timeout came, if it did.
  void on_timeout();

  /// An easy handle for the next call: a spare one or a new one (null when curl cannot make one).
  void* take_easy();
  /// Resets a finished call's easy handle (out of the multi handle) and keeps it as a spare.
  void give_back(void* easy);
  /// Removes finished transfers from the multi handle; their results with their completions.
  std::vector<std::pair<completion, call_result>> collect();

  int epoll_fd_ = -1;                                    // the sockets of the calls in flight
  clock::time_point timeout_ = clock::time_point::max(); // curl's next timeout
  void* multi_;                                          // CURLM*
  void* share_;                                          // CURLSH*: DNS answers and TLS sessions
  std::map<void*, std::unique_ptr<running>> running_;    // by CURL*
  std::vector<void*> spare_;                             // CURL*s of finished calls, reset
  std::map<int, std::function<std::size_t()>> watched_;  // other sockets, by fd
  /// Calls that ended before reaching curl (a request that cannot be made), delivered by run().
  std::vector<std::pair<completion, call_result>> ready_;
};

} // namespace outboxd::client
