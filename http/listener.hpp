// The HTTP server every outboxd endpoint set runs on: cpp-httplib configured for keep-alive
// load (TCP_NODELAY, thread pool, 1024 listen backlog, no SO_REUSEPORT) with JSON errors, and
// body-less POST/PUT/PATCH/DELETE requests (no Content-Length) read as empty bodies. It is also
// the one registry of what a server serves: every route set registers through route().
#pragma once

#include "conf/settings.hpp"
#include "http/auth.hpp"

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace httplib {
class Server;
struct Request;
struct Response;
} // namespace httplib

namespace outboxd::http {

class connection_gate;

/// Who a route is for, which says where it is documented.
enum class route_kind {
  api,               ///< outboxd's own API, documented in docs/openapi.json
  simulated_service, ///< the simulated outside world outboxd calls (not documented there)
  static_file,       ///< the web UI's files (not documented there)
};

/// One served route: the method and the path as documented, with `{name}` for a path segment
/// (e.g. `GET /api/orders/{id}`), and what it needs from its caller.
struct route_info {
  std::string method;
  std::string path;
  access needs = access::open;
  route_kind kind = route_kind::api;
  bool operator==(const route_info&) const = default;
};

/// What a route runs. It may throw: the listener answers api_error with its status and any other
/// exception with a JSON 500 (or 503 when the database is unavailable).
using route_handler = std::function<void(const httplib::Request&, httplib::Response&)>;

class listener {
public:
  /// Threads, timeouts, the body limit and TLS come from `settings`; `component` tags log lines;
  /// `policy` says who may call each route. Throws std::runtime_error when TLS is configured and
  /// its certificate and key do not load.
  listener(const conf::server_settings& settings, std::string component, access_policy policy = {});
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
  /// Stops accepting, waits for requests in flight, joins the threads. Idempotent.
  void stop();

  /// Serves `method` (GET, POST, PUT, PATCH or DELETE) on `path` and records the route. Each
  /// `{name}` segment matches one path segment and is captured (req.matches[1], [2], ...); the
  /// rest of the path is literal. Routes of one method are tried in registration order and the
  /// first whose path matches wins. Before `handle` runs, the caller must have what `needs`
  /// says (else 401/403), a browser's request to a simulated service must name this server
  /// (access_policy::check_browser_host), and a state-changing request must pass the forgery
  /// checks (API routes also the content-type rule). Register before start(); throws
  /// std::logic_error for another method.
  void route(std::string_view method, std::string path, route_kind kind, access needs,
             route_handler handle);

  /// Has the connection gate thread run the route `method` `path` (registered before) itself, as
  /// it runs the simulated partners' routes and the UI's files: for a handler that answers at
  /// once without the database, so that it is served even while every worker is busy.
  void run_on_gate(std::string_view method, std::string_view path);

  /// Every route registered so far, in registration order.
  std::vector<route_info> routes() const { return routes_; }

  /// The underlying server, for server-wide hooks (logging). Routes go through route(), so that
  /// routes() lists everything served.
  httplib::Server& native() { return *server_; }

private:
  /// The methods served on `path` ("GET, HEAD, DELETE"), empty when no route's path matches it:
  /// a request with another method gets 405 and these as its Allow header.
  std::string methods_on(std::string_view path) const;
  /// Whether the connection gate runs the request itself: a simulated partner's route, a UI file,
  /// a route named by run_on_gate.
  bool runs_on_gate(std::string_view method, std::string_view target) const;
  /// The CORS headers a request from an allowed origin gets (with the preflight's for OPTIONS).
  void answer_cors(const httplib::Request& req, httplib::Response& res) const;

  conf::server_settings settings_;
  std::string component_;
  access_policy policy_;
  std::unique_ptr<httplib::Server> server_;
  std::unique_ptr<connection_gate> gate_; // plain HTTP: the connections, until stop()
  std::function<void(const httplib::Request&, httplib::Response&)> on_request_;
  std::vector<route_info> routes_;
  std::vector<route_info> gate_routes_; // named by run_on_gate
  std::thread thread_;
  int listen_fd_ = -1;
};

/// A request's method or (decoded) path as a log line shows it: spaces, control characters and
/// bytes beyond ASCII percent-encoded, so that the path cannot fake the line's other fields.
std::string loggable(std::string_view text);

/// The route a request was handed to: its template ("/api/orders/{id}") and kind, and the
/// message of the error it was answered with.
struct matched_route {
  std::string path; // empty when the request reached no route
  route_kind kind = route_kind::api;
  std::string problem; // empty unless the answer is an error
};

/// For the request logger: the route the calling thread's last request was handed to; the call
/// clears it. A label made of its template, unlike one made of the path, has as many values as
/// there are routes.
matched_route take_matched_route();

} // namespace outboxd::http
