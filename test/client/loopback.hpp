// Loopback servers for the client tests: a raw TCP server whose per-connection script can behave
// as badly as a real remote does, and a throwaway PKI made with the `openssl` command.
#pragma once

#include "test/support/test_pki.hpp"

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace outboxd::test {

/// Accepts connections on 127.0.0.1 (a free port) and runs `script` on each, one thread per
/// connection. Counts accepted connections. Stops (and joins) in the destructor.
class raw_server {
public:
  using script = std::function<void(int fd)>;
  explicit raw_server(script s);
  ~raw_server();
  raw_server(const raw_server&) = delete;
  raw_server& operator=(const raw_server&) = delete;

  int port() const { return port_; }
  std::string url(const std::string& path = "/") const;
  int accepted() const { return accepted_; }
  /// Every request head (request line and headers) and body the scripts read, in order.
  std::vector<std::string> requests() const;
  void remember(std::string request);

private:
  void accept_loop();
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<int> accepted_{0};
  std::atomic<bool> stopping_{false};
  script script_;
  std::thread acceptor_;
  mutable std::mutex mutex_;
  std::vector<std::thread> connections_;
  std::vector<std::string> requests_;
};

/// Reads one request (head and Content-Length body) from `fd`; empty when the peer closed.
std::string read_request(int fd);
/// Writes all of `bytes`; false once the peer is gone.
bool write_all(int fd, const std::string& bytes);
/// A keep-alive script: reads requests on `fd` until the peer closes, has `server` remember each
/// and answers each with `answer`.
void answer_and_remember(raw_server& server, int fd, const std::string& answer);

} // namespace outboxd::test
