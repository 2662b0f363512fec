// A partner API for end-to-end tests, on raw sockets so that an answer carries exactly the bytes
// and headers the test chose: each request gets the answer of the test's handler, after the
// handler's delay, on a connection of its own (Connection: close). It counts what reached it
// (requests, and the most in flight at once), can refuse connections (its port closed) and can
// hang (read the request, never answer).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace outboxd::test {

class partner {
public:
  struct request {
    std::string method;
    std::string path;
    std::string head; // the request line and headers, as received
    std::string body;
    std::chrono::steady_clock::time_point arrived;
  };
  struct answer {
    int status = 200;
    std::string body;
    std::string content_type = "application/json";
    std::chrono::milliseconds delay{0}; // before the answer is sent
    std::string headers = "";           // more header lines, each ending in \r\n
  };
  enum class mode { answer, hang, refuse };

  /// Listens on a free loopback port; every request gets 200 `{}` until handle() says otherwise.
  partner();
  ~partner();
  partner(const partner&) = delete;
  partner& operator=(const partner&) = delete;

  /// The answer to each request from now on.
  void handle(std::function<answer(const request&)> handler);
  /// answer: requests are answered; hang: read and never answered (until the mode changes or the
  /// partner stops); refuse: the port is closed, connecting fails.
  void set_mode(mode m);

  /// Requests received so far (a hanging one counts once it is read).
  std::vector<request> requests() const;
  std::size_t request_count() const;
  /// Connections accepted so far (a connection is accepted once its handshake is done, before
  /// the client has sent anything on it).
  std::size_t connection_count() const;
  /// The most requests that were in progress (read, not yet answered) at once.
  int max_in_flight() const { return max_in_flight_; }

  const int port;

private:
  void listen();
  void accept_loop(int fd);
  void serve(int connection);

  mutable std::mutex mutex_;
  std::condition_variable mode_changed_;
  std::function<answer(const request&)> handler_;
  mode mode_ = mode::answer;
  int listen_fd_ = -1;
  std::thread acceptor_;
  std::vector<std::thread> connections_;
  std::vector<request> requests_;
  std::atomic<int> in_flight_{0};
  std::atomic<int> max_in_flight_{0};
  std::atomic<bool> stopping_{false};
};

} // namespace outboxd::test
