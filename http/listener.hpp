// The HTTP server every outboxd endpoint set runs on: cpp-httplib configured for keep-alive
// load (TCP_NODELAY, thread pool, 1024 listen backlog, no SO_REUSEPORT) with JSON errors, and
// body-less POST/PUT/PATCH/DELETE requests (no Content-Length) read as empty bodies.
#pragma once

#include "conf/settings.hpp"

#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace httplib {
class Server;
struct Request;
struct Response;
} // namespace httplib

namespace outboxd::http {

class listener {
public:
  /// Threads, timeouts and the body limit come from `settings`; `component` tags log lines.
  listener(const conf::server_settings& settings, std::string component);
  ~listener();
  listener(const listener&) = delete;
  listener& operator=(const listener&) = delete;

  /// Runs `hook` at the start of every request, before routing and before the body is read (to
  /// stamp a request id, start a timer). Set it before start(); a later call replaces it.
  void on_request(std::function<void(const httplib::Request&, httplib::Response&)> hook);

  /// Binds settings.host:port (0 picks a free port) and returns the port; throws
  /// std::runtime_error naming the address when it cannot be bound.
  int bind(int port);
  /// Serves on a background thread until stop().
  void start();
  /// Stops accepting, waits for requests in flight, joins the thread. Idempotent.
  void stop();

  httplib::Server& native() { return *server_; }

private:
  conf::server_settings settings_;
  std::string component_;
  std::unique_ptr<httplib::Server> server_;
  std::function<void(const httplib::Request&, httplib::Response&)> on_request_;
  std::thread thread_;
  int listen_fd_ = -1;
};

} // namespace outboxd::http
