// Server configuration shared by the API server and the standalone simulator, and the one place
// where exceptions and library errors become JSON error responses.
#include "http/listener.hpp"

#include "domain/ports.hpp"
#include "http/connection_gate.hpp"
#include "http/errors.hpp"
#include "log/log.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <httplib.h>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

namespace outboxd::http {
namespace {

constexpr int listen_backlog = 1024;

thread_local matched_route last_route;

void render_error(httplib::Response& res, error_kind kind, const std::string& message,
                  const domain::field_errors& details = {}, const std::string& request_id = {}) {
  last_route.problem = message;
  res.status = status_of(kind);
  // A request the library refused before routing got none of the pre-routing's headers.
  if (!res.has_header("X-Content-Type-Options"))
    res.set_header("X-Content-Type-Options", "nosniff");
  res.set_content(error_body(kind, message, details, request_id), "application/json");
}

/// HTTP/1.1 says a request with neither Content-Length nor Transfer-Encoding has no body (RFC 9112
/// section 6.3), which is what `curl -X POST url` sends. cpp-httplib 0.11 instead reads the body of
/// every POST/PUT/PATCH/DELETE until the peer closes the connection: a keep-alive client waits for
/// the read timeout and gets a 400. Declaring the empty body lets the library read nothing and
/// route the request as usual; a handler that needs a body then says so (400/415/422).
void declare_empty_body(const httplib::Request& req) {
  const auto& m = req.method;
  if (m != "POST" && m != "PUT" && m != "PATCH" && m != "DELETE")
    return;
  if (req.has_header("Content-Length") || req.has_header("Transfer-Encoding"))
    return;
  // The pre-routing hook gets the library's own (non-const) request object as const; the
  // library itself adds headers (REMOTE_ADDR, ...) to it the same way before routing.
  const_cast<httplib::Request&>(req).set_header("Content-Length", "0");
}

/// Every answer is sent whole: the library would otherwise honour a `Range` header on any route,
/// overlapping ranges included, and build a multipart answer of up to thousands of copies of the
/// body in memory (an 8 KB request made a 100 MB answer). Nothing served here is worth resuming.
void serve_whole_bodies(const httplib::Request& req) {
  const_cast<httplib::Request&>(req).ranges.clear(); // as declare_empty_body
}

/// What is wrong with the query of `target`, if anything: a parameter given twice (which one
/// counts would be a guess; names compared as the library reads them, percent-decoded, so that
/// `limit` and `%6Cimit` are one name) or a raw '=' inside a value (the library would keep only
/// what follows the last one, so `aggregateId=zzz=1` read as 1). Either is refused rather than
/// read wrongly.
std::optional<std::string> query_problem(std::string_view target) {
  const auto at = target.find('?');
  if (at == std::string_view::npos)
    return std::nullopt;
  auto query = target.substr(at + 1);
  std::vector<std::string> names;
  while (!query.empty()) {
    const auto end = std::min(query.find('&'), query.size());
    const auto param = query.substr(0, end);
    query.remove_prefix(std::min(end + 1, query.size()));
    if (param.empty())
      continue;
    const auto equals = param.find('=');
    auto name = httplib::detail::decode_url(std::string(param.substr(0, equals)), true);
    if (equals != std::string_view::npos && param.find('=', equals + 1) != std::string_view::npos)
      return fmt::format("query parameter '{}': a '=' in its value must be written %3D",
                         loggable(name));
    if (std::find(names.begin(), names.end(), name) != names.end())
      return fmt::format("query parameter '{}' is given more than once", loggable(name));
    names.push_back(std::move(name));
  }
  return std::nullopt;
}

/// Whether `path` is one `pattern` (a documented path, `{name}` for any one segment) names.
bool path_matches(std::string_view pattern, std::string_view path) {
  for (;;) {
    auto p_end = pattern.find('/', 1);
    auto s_end = path.find('/', 1);
    auto p = pattern.substr(0, p_end);
    auto s = path.substr(0, s_end);
    bool any = p.size() > 2 && p[1] == '{' && p.back() == '}';
    if (any ? s.size() < 2 : p != s)
      return false;
    if (p_end == std::string_view::npos || s_end == std::string_view::npos)
      return p_end == s_end;
    pattern.remove_prefix(p_end);
    path.remove_prefix(s_end);
  }
}

/// The regex httplib matches a documented path with: each `{name}` becomes one captured segment,
/// and regex metacharacters elsewhere (the `.` of a file name) match only themselves.
std::string pattern_of(std::string_view path) {
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '{') {
      auto close = path.find('}', i);
      if (close == std::string_view::npos)
        throw std::logic_error("route path " + std::string(path) + " has an unclosed '{'");
      out += "([^/]+)";
      i = close;
      continue;
    }
    if (std::string_view(".[]()*+?^$|\\").find(path[i]) != std::string_view::npos)
      out += '\\';
    out += path[i];
  }
  return out;
}

/// httplib's server whose request processing the connection gate runs, one whole request at a
/// time, instead of the library's own loop of a thread per connection.
class gated_server final : public httplib::Server {
public:
  void process(httplib::Stream& stream, bool close_connection, bool& connection_closed) {
    process_request(stream, close_connection, connection_closed, nullptr);
  }
};

/// A plain server (served through the connection gate), or an HTTPS one when the settings name a
/// certificate and key (and a client CA: then every client must present a certificate it
/// signed), which serves its connections itself.
std::unique_ptr<httplib::Server> make_server(const conf::server_settings& settings) {
  const auto& tls = settings.tls;
  if (tls.cert_file.empty())
    return std::make_unique<gated_server>();
  auto server = std::make_unique<httplib::SSLServer>(
      tls.cert_file.c_str(), tls.key_file.c_str(),
      tls.client_ca_file.empty() ? nullptr : tls.client_ca_file.c_str());
  if (!server->is_valid())
    throw std::runtime_error(fmt::format(
        "server.tls: the certificate {} and key {}{} do not load together", tls.cert_file,
        tls.key_file,
        tls.client_ca_file.empty() ? "" : " (or the client CA " + tls.client_ca_file + ")"));
  return server;
}

bool changes_state(const std::string& method) {
  return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE";
}

} // namespace

void listener::answer_cors(const httplib::Request& req, httplib::Response& res) const {
  auto origin = req.get_header_value("Origin");
  if (origin.empty() || !policy_.origin_allowed(req, origin))
    return;
  res.set_header("Access-Control-Allow-Origin", origin);
  res.set_header("Vary", "Origin");
  if (req.method != "OPTIONS")
    return;
  res.set_header("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE");
  res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type, Idempotency-Key");
  res.set_header("Access-Control-Max-Age", "600");
}

listener::listener(const conf::server_settings& settings, std::string component,
                   access_policy policy)
    : settings_(settings), component_(std::move(component)), policy_(std::move(policy)),
      server_(make_server(settings)) {
  auto& s = *server_;
  if (auto* gated = dynamic_cast<gated_server*>(server_.get())) {
    gate_limits limits;
    limits.request_timeout = settings_.request_timeout;
    limits.keep_alive_timeout = settings_.keep_alive_timeout;
    limits.write_timeout = settings_.write_timeout;
    limits.max_body_bytes = settings_.max_body_bytes;
    limits.max_connections = settings_.max_connections;
    limits.max_connections_per_client = settings_.max_connections_per_client;
    limits.workers = settings_.threads;
    gate_ = std::make_unique<connection_gate>(
        limits,
        [gated](httplib::Stream& stream, bool close, bool& closed) {
          gated->process(stream, close, closed);
        },
        component_,
        [this](std::string_view method, std::string_view target) {
          return runs_on_gate(method, target);
        });
  }
  auto threads = static_cast<std::size_t>(settings_.threads);
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_tcp_nodelay(true); // without it every keep-alive response waits 40 ms for Nagle
  s.set_keep_alive_max_count(100000);
  s.set_keep_alive_timeout(
      std::chrono::duration_cast<std::chrono::seconds>(settings_.keep_alive_timeout).count());
  s.set_read_timeout(settings_.read_timeout);
  s.set_write_timeout(settings_.write_timeout);
  s.set_payload_max_length(settings_.max_body_bytes);
  // Not the library's default options: they add SO_REUSEPORT, which lets a second process bind
  // the same port and silently take half the connections. The library also listens with a
  // backlog of 5; remember the socket to listen again with more.
  s.set_socket_options([this](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd_ = sock;
  });
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    declare_empty_body(req);
    serve_whole_bodies(req);
    res.set_header("X-Request-Id", next_request_id());
    // No answer is to be read as another type than the one it declares.
    res.set_header("X-Content-Type-Options", "nosniff");
    if (on_request_)
      on_request_(req, res);
    answer_cors(req, res);
    if (auto problem = query_problem(req.target)) {
      render_error(res, error_kind::bad_request, *problem);
      return httplib::Server::HandlerResponse::Handled;
    }
    // A field read as one value may be given once: of two, a proxy in front and the checks here
    // could each read another (which Host, which token, which Idempotency-Key). HTTP/1.1 also
    // requires a Host (RFC 9112 section 3.2). (The connection gate refuses two Hosts already;
    // TLS connections do not pass it.)
    for (const char* field : {"Host", "Authorization", "Idempotency-Key", "Content-Type", "Origin"})
      if (req.get_header_value_count(field) > 1) {
        render_error(res, error_kind::bad_request,
                     fmt::format("the {} header is given more than once", field));
        return httplib::Server::HandlerResponse::Handled;
      }
    if (req.version == "HTTP/1.1" && !req.has_header("Host")) {
      render_error(res, error_kind::bad_request, "an HTTP/1.1 request must send a Host header");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.method != "OPTIONS")
      return httplib::Server::HandlerResponse::Unhandled;
    // A CORS preflight: allowed origins got their headers above; any other gets none, so the
    // browser sends nothing.
    if (res.has_header("Access-Control-Allow-Origin") || !req.has_header("Origin")) {
      res.status = 204;
      res.set_header("Allow", "GET, POST, PUT, DELETE, OPTIONS");
    } else {
      render_error(res, error_kind::forbidden,
                   fmt::format("no cross-origin calls from '{}': list the origin in "
                               "server.allowedOrigins to allow them",
                               req.get_header_value("Origin").substr(0, 200)));
    }
    return httplib::Server::HandlerResponse::Handled;
  });
  s.set_exception_handler(
      [this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        try {
          std::rethrow_exception(ep);
        } catch (const api_error& e) {
          render_error(res, e.kind(), e.message(), e.details());
          if (e.kind() == error_kind::unauthorized)
            res.set_header("WWW-Authenticate", "Bearer realm=\"outboxd\"");
        } catch (const domain::store_unavailable& e) {
          log::warn(component_, "{} {}: database unavailable: {}", loggable(req.method),
                    loggable(req.path), e.what());
          render_error(res, error_kind::unavailable, "the database is unavailable; retry later");
        } catch (const std::exception& e) {
          auto id = res.get_header_value("X-Request-Id");
          log::error(component_, "{} {} failed (request {}): {}", loggable(req.method),
                     loggable(req.path), id, e.what());
          render_error(res, error_kind::internal, "internal error; see the server log", {}, id);
        }
      });
  // Errors the library produces itself (no route, body too large) get the same JSON shape.
  s.set_error_handler(httplib::Server::HandlerWithResponse(
      [this, limit = settings_.max_body_bytes](const httplib::Request& req,
                                               httplib::Response& res) {
        if (!res.body.empty())
          return httplib::Server::HandlerResponse::Unhandled;
        if (res.status == 413)
          render_error(
              res, error_kind::payload_too_large,
              fmt::format("request body is larger than server.maxBodyBytes ({} bytes)", limit));
        else if (res.status == 404) {
          if (auto allowed = methods_on(req.path); allowed.empty()) {
            render_error(res, error_kind::not_found,
                         fmt::format("no route for {} {}", req.method, req.path));
          } else {
            res.set_header("Allow", allowed);
            render_error(res, error_kind::method_not_allowed,
                         fmt::format("{} is not served on {}; it answers {}", req.method, req.path,
                                     allowed));
          }
        } else if (res.status == 400) {
          render_error(res, error_kind::bad_request, "malformed HTTP request");
          close_after_answer();
        } else if (res.status == 414) {
          render_error(res, error_kind::uri_too_long,
                       fmt::format("the request line is longer than {} bytes",
                                   CPPHTTPLIB_REQUEST_URI_MAX_LENGTH));
          close_after_answer();
        } else
          return httplib::Server::HandlerResponse::Unhandled;
        return httplib::Server::HandlerResponse::Handled;
      }));
}

listener::~listener() {
  stop();
}

void listener::on_request(std::function<void(const httplib::Request&, httplib::Response&)> hook) {
  on_request_ = std::move(hook);
}

void listener::route(std::string_view method, std::string path, route_kind kind, access needs,
                     route_handler route_handle) {
  auto pattern = pattern_of(path);
  auto& s = *server_;
  // The caller is checked before anything else, so one without the right learns nothing (not
  // even whether an id exists) and a forged request changes nothing.
  auto handle = [this, needs, kind, run = std::move(route_handle),
                 route_template = path](const httplib::Request& req, httplib::Response& res) {
    last_route = {route_template, kind, {}};
    // Answers are of the moment and may hold customers' data: no cache keeps them (the web UI's
    // files say their own policy).
    if (kind != route_kind::static_file)
      res.set_header("Cache-Control", "no-store");
    policy_.authorize(req, needs);
    // The simulated partners are open to outboxd's calls by any name (it reaches a standalone
    // simulator by its service name), but a rebound page could use up the Idempotency-Keys of
    // future orders: a browser's request must name this server.
    if (kind == route_kind::simulated_service)
      policy_.check_browser_host(req);
    if (changes_state(req.method))
      policy_.check_forgery(req, kind == route_kind::api);
    run(req, res);
  };
  if (method == "GET")
    s.Get(pattern, std::move(handle));
  else if (method == "POST")
    s.Post(pattern, std::move(handle));
  else if (method == "PUT")
    s.Put(pattern, std::move(handle));
  else if (method == "PATCH")
    s.Patch(pattern, std::move(handle));
  else if (method == "DELETE")
    s.Delete(pattern, std::move(handle));
  else
    throw std::logic_error("route " + path + " has an unsupported method " + std::string(method));
  routes_.push_back({std::string(method), std::move(path), needs, kind});
}

std::string listener::methods_on(std::string_view path) const {
  std::string out;
  auto add = [&out](std::string_view method) {
    if (out.find(method) == std::string::npos)
      out += fmt::format("{}{}", out.empty() ? "" : ", ", method);
  };
  for (const auto& r : routes_)
    if (path_matches(r.path, path)) {
      add(r.method);
      if (r.method == "GET")
        add("HEAD"); // the library answers HEAD with a GET route
    }
  return out;
}

void listener::run_on_gate(std::string_view method, std::string_view path) {
  auto named = std::find_if(routes_.begin(), routes_.end(), [&](const route_info& r) {
    return r.method == method && r.path == path;
  });
  if (named == routes_.end())
    throw std::logic_error(fmt::format("run_on_gate: no route {} {}", method, path));
  gate_routes_.push_back(*named);
}

bool listener::runs_on_gate(std::string_view method, std::string_view target) const {
  // A simulated partner's handlers take microseconds and defer their waits (latency, a late
  // answer, a key in flight), the UI's files are in memory, and the routes named by run_on_gate
  // answer at once: the gate thread runs them itself, so that they are served even while every
  // worker is busy. The route that serves the request is the first that matches, as in
  // httplib's routing.
  auto path = target.substr(0, target.find('?'));
  auto serving = std::find_if(routes_.begin(), routes_.end(), [&](const route_info& r) {
    return r.method == method && path_matches(r.path, path);
  });
  return serving != routes_.end() &&
         (serving->kind != route_kind::api ||
          std::find(gate_routes_.begin(), gate_routes_.end(), *serving) != gate_routes_.end());
}

int listener::bind(int port) {
  int bound = port == 0 ? server_->bind_to_any_port(settings_.host)
                        : (server_->bind_to_port(settings_.host, port) ? port : -1);
  if (bound < 0)
    throw std::runtime_error(fmt::format("cannot listen on {}:{} (address in use or not available)",
                                         settings_.host, port));
  if (listen_fd_ >= 0)
    ::listen(listen_fd_, listen_backlog);
  return bound;
}

void listener::start() {
  if (gate_)
    gate_->start(listen_fd_);
  else
    thread_ = std::thread([this] { server_->listen_after_bind(); });
}

void listener::stop() {
  if (gate_) {
    gate_->stop();
    if (listen_fd_ >= 0)
      ::close(listen_fd_);
    listen_fd_ = -1;
    return;
  }
  if (server_->is_running() || thread_.joinable())
    server_->stop();
  if (thread_.joinable())
    thread_.join();
}

std::string loggable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (c > 0x20 && c < 0x7F)
      out += static_cast<char>(c);
    else
      out += fmt::format("%{:02X}", c);
  }
  return out;
}

matched_route take_matched_route() {
  return std::exchange(last_route, {});
}

} // namespace outboxd::http
