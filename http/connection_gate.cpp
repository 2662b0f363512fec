// The connection gate: an epoll thread that holds connections until a request has arrived whole,
// and workers that run whole requests through httplib's request processing, and hold deferred
// answers until their time. A quick request (a simulated partner's) runs on the epoll thread
// itself, its answer written without waiting.
#include "http/connection_gate.hpp"

#include "http/errors.hpp"
#include "http/request_framing.hpp"
#include "log/log.hpp"
#include "metrics/metrics.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <optional>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

namespace outboxd::http {

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct connection_gate::connection {
  int fd = -1;
  std::string client; // the peer's address
  int client_port = 0;
  std::string local;
  int local_port = 0;
  std::string buffer;                     // received and not yet served
  clock::time_point idle_since;           // the last moment no request was pending
  std::optional<clock::time_point> since; // the first byte of the request being received
  bool continue_sent = false;             // "100 Continue" already sent for that request
  /// The part of an answer the client has not taken yet: the gate thread writes it as the
  /// client reads (its socket armed for writing, not reading), then serves what follows.
  std::string unsent;
  clock::time_point unsent_since;
  bool close_after_unsent = false;
  /// A worker has it and the gate does not touch it. Set by the gate when it hands the
  /// connection over; cleared by the worker (under the gate's mutex, then the connection is
  /// armed again) or by the gate when the worker hands it back through the gate thread.
  std::atomic<bool> with_worker = false;
  /// Whether the worker waits linger_time for the next request: while the client sends it at
  /// once (a busy keep-alive client). Off after a wait that saw nothing, on again when the gate
  /// sees a request come within linger_time of the last answer: a client that reuses its
  /// connection later (after its own work) does not cost a timed wait per request.
  bool lingers = true;
  std::size_t served = 0;
};

namespace {

constexpr int max_events = 256;
constexpr milliseconds tick{100};
constexpr milliseconds accept_pause{100}; // after running out of file descriptors
constexpr std::size_t requests_per_connection = 100000;
/// A request still arriving after this long may be shed when the connection caps are reached.
constexpr milliseconds slow_request{1000};
// When the request first in line for a worker has waited longer, a new request gets a 503 at
// once. (Not a count: a deferred answer's runs are short, and a thousand of them may fall due
// together; the line is bounded by the connections anyway, each with one request at a time.)
constexpr milliseconds queue_wait_limit{500};
constexpr std::string_view continue_line = "HTTP/1.1 100 Continue\r\n\r\n";
// How long a worker waits for a keep-alive client's next request before handing the connection
// back: a worker is held at most this long per request by a client that sends nothing.
constexpr milliseconds linger_time{1};
// A quick request larger than this (head and body) runs on a worker all the same: reading and
// parsing it must not make the gate thread's turn long for everyone else.
constexpr std::size_t quick_max_bytes = 16 * 1024;

/// What the worker thread knows of the request it runs, for defer_answer() and its kin.
struct gate_run {
  bool stopping = false;                      // the gate stops: nothing may be deferred
  std::shared_ptr<void> resumed;              // the state of a resumed run
  std::optional<clock::time_point> first_run; // when a resumed request first ran
  bool deferred = false;                      // the handler deferred its answer
  bool close = false;                         // the connection ends after this answer
  milliseconds delay{0};
  std::shared_ptr<void> state;
};
thread_local gate_run* current_run = nullptr;

/// Sends what `fd` takes of `data` now: how many bytes, or -1 when the connection failed.
ssize_t send_now(int fd, std::string_view data) {
  std::size_t done = 0;
  while (done < data.size()) {
    auto n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0)
      done += static_cast<std::size_t>(n);
    else if (n < 0 && errno == EINTR)
      continue;
    else if (n < 0 && errno == EAGAIN)
      break;
    else
      return -1;
  }
  return static_cast<ssize_t>(done);
}

/// Answers waiting for their clients to read them, in all: past this, a worker waits for its
/// client (at most server.writeTimeout) rather than leave the rest to the gate thread.
constexpr std::size_t max_unsent_bytes = 32u << 20;

/// Sends all of `data` to `fd`, waiting at most `timeout` for room; false when it could not.
bool send_within(int fd, std::string_view data, milliseconds timeout) {
  auto deadline = clock::now() + timeout;
  for (;;) {
    auto sent = send_now(fd, data);
    if (sent < 0)
      return false;
    data.remove_prefix(static_cast<std::size_t>(sent));
    if (data.empty())
      return true;
    auto left = std::chrono::duration_cast<milliseconds>(deadline - clock::now()).count();
    pollfd p{fd, POLLOUT, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0)
      return false;
  }
}

/// The method and target of the request at the start of `buffer` (whole, so its first line is).
std::pair<std::string_view, std::string_view> request_line(std::string_view buffer) {
  auto line = buffer.substr(0, buffer.find("\r\n"));
  auto method_end = line.find(' ');
  if (method_end == std::string_view::npos)
    return {};
  auto target = line.substr(method_end + 1);
  return {line.substr(0, method_end), target.substr(0, target.find(' '))};
}

/// One request's bytes as httplib reads them (its header block as sent: see head_as_sent), and
/// the buffer that collects its answer (written to the connection after the handler, without
/// waiting for the client).
class gate_stream final : public httplib::Stream {
public:
  gate_stream(connection_gate::connection& c, std::size_t length, const gate_run& run,
              std::string& out)
      : c_(c), length_(length), run_(run), out_(out) {
    auto request = std::string_view(c_.buffer).substr(0, length_);
    if (auto head = head_as_sent(request)) {
      head_ = std::move(*head);
      position_ = request.find("\r\n\r\n") + 4; // the body, read after head_
    }
  }

  bool is_readable() const override { return head_read_ < head_.size() || position_ < length_; }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    if (head_read_ < head_.size()) {
      auto n = std::min(size, head_.size() - head_read_);
      std::memcpy(ptr, head_.data() + head_read_, n);
      head_read_ += n;
      return static_cast<ssize_t>(n);
    }
    auto n = std::min(size, length_ - position_);
    std::memcpy(ptr, c_.buffer.data() + position_, n);
    position_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (run_.deferred) // the answer comes from the request's resumption
      return static_cast<ssize_t>(size);
    // The gate sent "100 Continue" when it asked for the body; httplib would send it again.
    if (c_.continue_sent && std::string_view(ptr, size) == continue_line)
      return static_cast<ssize_t>(size);
    out_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.client;
    port = c_.client_port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.local;
    port = c_.local_port;
  }
  socket_t socket() const override { return c_.fd; }

private:
  connection_gate::connection& c_;
  std::size_t length_;
  std::string head_; // the header block rewritten, when it had to be
  std::size_t head_read_ = 0;
  std::size_t position_ = 0; // in c_.buffer
  const gate_run& run_;
  std::string& out_;
};

std::pair<std::string, int> address_of(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
    return {text, ntohs(v6.sin6_port)};
  }
  const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
  ::inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
  return {text, ntohs(v4.sin_port)};
}

const char* reason_phrase(int status) {
  switch (status) {
  case 400:
    return "Bad Request";
  case 408:
    return "Request Timeout";
  case 413:
    return "Payload Too Large";
  case 431:
    return "Request Header Fields Too Large";
  default:
    return "Service Unavailable";
  }
}

/// An error answer written without waiting (best effort: the connection is closed after it).
void send_error_now(int fd, int status, error_kind kind, const std::string& message) {
  auto body = error_body(kind, message, {});
  auto text = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: "
                          "{}\r\nConnection: close\r\nX-Request-Id: {}\r\n{}\r\n{}",
                          status, reason_phrase(status), body.size(), next_request_id(),
                          status == 503 ? "Retry-After: 1\r\n" : "", body);
  (void)::send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

error_kind kind_of(int status) {
  switch (status) {
  case 400:
    return error_kind::bad_request;
  case 408:
    return error_kind::request_timeout;
  case 413:
    return error_kind::payload_too_large;
  case 431:
    return error_kind::request_headers_too_large;
  default:
    return error_kind::unavailable;
  }
}

} // namespace

bool defer_answer(milliseconds delay, std::shared_ptr<void> state) {
  if (!current_run || current_run->stopping)
    return false;
  current_run->deferred = true;
  current_run->delay = std::max(delay, milliseconds{0});
  current_run->state = std::move(state);
  return true;
}

std::shared_ptr<void> resumed_state() {
  return current_run ? current_run->resumed : nullptr;
}

bool answer_deferred() {
  return current_run && current_run->deferred;
}

std::optional<clock::time_point> deferred_since() {
  return current_run ? current_run->first_run : std::nullopt;
}

void close_after_answer() {
  if (current_run)
    current_run->close = true;
}

connection_gate::connection_gate(gate_limits limits, process run, std::string component,
                                 quick_request quick)
    : limits_(limits), run_(std::move(run)), component_(std::move(component)),
      quick_(std::move(quick)) {}

connection_gate::~connection_gate() {
  stop();
}

void connection_gate::start(int listen_fd) {
  listen_fd_ = listen_fd;
  ::fcntl(listen_fd_, F_SETFL, ::fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0)
    throw std::runtime_error(
        fmt::format("cannot set up the HTTP connection gate: {}", std::strerror(errno)));
  for (int fd : {listen_fd_, wake_fd_}) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &e);
  }
  for (int i = 0; i < limits_.workers; ++i)
    workers_.emplace_back([this] { worker_loop(); });
  gate_thread_ = std::thread([this] { gate_loop(); });
}

void connection_gate::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_)
      return;
    stopping_ = true;
    // Deferred answers are due at once: the workers answer them before they end.
    for (auto& d : deferred_)
      ready_.push_back(std::move(d.request));
    deferred_.clear();
    waiting_ = ready_.size();
  }
  ready_cv_.notify_all();
  wake(); // the gate thread stops accepting
  // Workers finish what has arrived whole (answering it with Connection: close), then the gate
  // thread closes what is left.
  for (auto& w : workers_)
    w.join();
  workers_.clear();
  workers_done_ = true;
  wake();
  if (gate_thread_.joinable())
    gate_thread_.join();
  for (int fd : {epoll_fd_, wake_fd_})
    if (fd >= 0)
      ::close(fd);
  epoll_fd_ = wake_fd_ = -1;
}

void connection_gate::wake() {
  std::uint64_t one = 1;
  if (wake_fd_ >= 0)
    (void)::write(wake_fd_, &one, sizeof one);
}

void connection_gate::gate_loop() {
  epoll_event events[max_events];
  auto last_sweep = clock::now();
  for (;;) {
    int n = wait_events(events, max_events);
    auto now = clock::now();
    if (workers_done_)
      break;
    bool stopping;
    {
      std::lock_guard lock(mutex_);
      stopping = stopping_;
    }
    if (stopping && !accept_paused_) {
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
      accept_paused_ = true;
      accept_resume_ = clock::time_point::max();
    }
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == listen_fd_) {
        accept_all(now);
      } else if (fd == wake_fd_) {
        std::uint64_t count;
        (void)::read(wake_fd_, &count, sizeof count);
      } else if (auto it = connections_.find(fd);
                 // (a worker's connection is not armed; only a stale event of a closed one,
                 // whose descriptor was reused in this same batch, can name it)
                 it != connections_.end() &&
                 !it->second->with_worker.load(std::memory_order_acquire)) {
        if (it->second->unsent.empty())
          on_readable(*it->second, now);
        else
          on_writable(*it->second, now);
      }
    }
    take_back(now);
    release_due(now);
    if (accept_paused_ && now >= accept_resume_) {
      epoll_event e{};
      e.events = EPOLLIN;
      e.data.fd = listen_fd_;
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &e);
      accept_paused_ = false;
    }
    if (now - last_sweep >= tick) {
      sweep(now);
      last_sweep = now;
    }
  }
  take_back(clock::now());
  while (!connections_.empty())
    close_connection(*connections_.begin()->second);
}

void connection_gate::accept_all(clock::time_point now) {
  for (;;) {
    sockaddr_storage peer{};
    socklen_t size = sizeof peer;
    int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &size,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: stop accepting for a moment rather than spin on the backlog.
        log::warn(component_, "cannot accept a connection ({}); pausing accepts for {} ms",
                  std::strerror(errno), accept_pause.count());
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
        accept_paused_ = true;
        accept_resume_ = now + accept_pause;
      }
      return;
    }
    int yes = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes); // no Nagle wait per answer
    auto [client, client_port] = address_of(peer);
    if (!make_room(client)) {
      refuse(fd, 503, "the server has too many connections open; retry later", "busy");
      ::close(fd);
      continue;
    }
    auto c = std::make_unique<connection>();
    c->fd = fd;
    c->client = client;
    c->client_port = client_port;
    sockaddr_storage local{};
    socklen_t local_size = sizeof local;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_size) == 0)
      std::tie(c->local, c->local_port) = address_of(local);
    c->idle_since = now;
    arm(*c, EPOLL_CTL_ADD);
    ++per_client_[client];
    connections_.emplace(fd, std::move(c));
  }
}

bool connection_gate::make_room(const std::string& client) {
  std::lock_guard lock(mutex_); // a worker may be handing a connection back (hand_back)
  auto mine = per_client_.find(client);
  bool client_full =
      mine != per_client_.end() && mine->second >= limits_.max_connections_per_client;
  bool all_full = static_cast<int>(connections_.size()) >= limits_.max_connections;
  if (!client_full && !all_full)
    return true;
  // Shed the connection that has waited longest without a request, else the one whose request
  // has been arriving longest (for at least slow_request): of this client when it is the
  // client's cap that is reached. Clients that dribble their requests to fill the caps then make
  // room for everyone else instead of keeping them out until their request timeout.
  auto now = clock::now();
  connection* idle = nullptr;
  connection* slow = nullptr;
  clock::time_point slow_since;
  for (auto& [fd, c] : connections_) {
    if (c->with_worker || (client_full && c->client != client))
      continue;
    // A client that has not read its answer yet is as slow as one still sending its request.
    auto since = c->unsent.empty() ? c->since : std::optional(c->unsent_since);
    if (!since && (!idle || c->idle_since < idle->idle_since))
      idle = c.get();
    if (since && now - *since >= slow_request && (!slow || *since < slow_since)) {
      slow = c.get();
      slow_since = *since;
    }
  }
  connection* shed = idle ? idle : slow;
  if (!shed) {
    metrics::global().http_connections_refused.inc(
        {{"reason", client_full ? "client_cap" : "busy"}});
    return false;
  }
  metrics::global().http_connections_refused.inc({{"reason", idle ? "idle_shed" : "slow_shed"}});
  if (!idle)
    log::debug(component_, "{}:{}: shed to make room (slow for {} ms)", shed->client,
               shed->client_port,
               std::chrono::duration_cast<milliseconds>(now - slow_since).count());
  close_connection(*shed);
  return true;
}

void connection_gate::on_readable(connection& c, clock::time_point now) {
  char chunk[16384];
  for (;;) {
    auto n = ::recv(c.fd, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n > 0) {
      if (c.buffer.empty()) {
        c.since = now;
        c.lingers = now - c.idle_since <= linger_time;
      }
      c.buffer.append(chunk, static_cast<std::size_t>(n));
      // Enough to judge the request (or its header block) whatever comes next.
      if (c.buffer.size() > limits_.max_header_bytes + limits_.max_body_bytes)
        break;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      break;
    // Closed by the peer (or reset): a whole request sent before a half-close is still served.
    if (n == 0 && frame_request(c.buffer, limits_.max_header_bytes, limits_.max_body_bytes).what ==
                      request_frame::kind::complete)
      break;
    close_connection(c);
    return;
  }
  try_dispatch(c);
}

void connection_gate::try_dispatch(connection& c, bool quick_allowed) {
  if (c.buffer.empty())
    return arm(c, EPOLL_CTL_MOD);
  auto frame = frame_request(c.buffer, limits_.max_header_bytes, limits_.max_body_bytes);
  using kind = request_frame::kind;
  switch (frame.what) {
  case kind::incomplete:
    if (frame.expects_continue && !c.continue_sent) {
      (void)::send(c.fd, continue_line.data(), continue_line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      c.continue_sent = true;
    }
    return arm(c, EPOLL_CTL_MOD);
  case kind::headers_too_large:
    return refuse(
        c, 431,
        fmt::format("the request headers are larger than {} bytes", limits_.max_header_bytes),
        "too_large");
  case kind::body_too_large:
    return refuse(c, 413,
                  fmt::format("request body is larger than server.maxBodyBytes ({} bytes)",
                              limits_.max_body_bytes),
                  "too_large");
  case kind::malformed:
    return refuse(c, 400,
                  "malformed HTTP request (a header field or the body's length cannot be read)",
                  "malformed");
  case kind::complete:
    break;
  }
  bool quick = quick_allowed && quick_ && frame.length <= quick_max_bytes &&
               std::apply(quick_, request_line(c.buffer));
  {
    std::lock_guard lock(mutex_);
    auto now = clock::now();
    bool behind = !ready_.empty() && now - ready_.front().queued > queue_wait_limit;
    if (stopping_ || (behind && !quick)) {
      quick = false;
    } else {
      c.with_worker = true; // not armed (one-shot): no event comes for it until re-armed
      if (!quick) {
        ready_.push_back({.conn = &c, .length = frame.length, .queued = now});
        waiting_ = ready_.size();
        ready_cv_.notify_one();
        return;
      }
    }
  }
  if (quick)
    return serve_on_gate({.conn = &c, .length = frame.length, .quick = true});
  refuse(c, 503, "the server is busy; retry later", "busy");
}

void connection_gate::sweep(clock::time_point now) {
  std::lock_guard lock(mutex_); // a worker may be handing a connection back (hand_back)
  std::vector<connection*> late;
  std::vector<connection*> idle;
  std::vector<connection*> not_reading;
  for (auto& [fd, c] : connections_) {
    if (c->with_worker)
      continue;
    if (!c->unsent.empty()) {
      if (now - c->unsent_since > limits_.write_timeout)
        not_reading.push_back(c.get());
    } else if (c->since && now - *c->since > limits_.request_timeout)
      late.push_back(c.get());
    else if (!c->since && now - c->idle_since > limits_.keep_alive_timeout)
      idle.push_back(c.get());
  }
  for (auto* c : late)
    refuse(*c, 408,
           fmt::format("the request did not arrive whole within server.requestTimeout ({} ms)",
                       limits_.request_timeout.count()),
           "timeout");
  for (auto* c : idle)
    close_connection(*c);
  for (auto* c : not_reading) {
    log::debug(component_,
               "{}:{}: closed: {} bytes of an answer not read within "
               "server.writeTimeout ({} ms)",
               c->client, c->client_port, c->unsent.size(), limits_.write_timeout.count());
    metrics::global().http_connections_refused.inc({{"reason", "slow_reader"}});
    close_connection(*c);
  }
}

void connection_gate::take_back(clock::time_point now) {
  std::vector<std::pair<connection*, bool>> back;
  {
    std::lock_guard lock(mutex_);
    back.swap(returned_);
  }
  for (auto [c, close] : back) {
    c->with_worker = false;
    if (close && c->unsent.empty()) {
      close_connection(*c);
      continue;
    }
    if (!c->unsent.empty()) { // the rest of its answer goes out as the client reads
      c->close_after_unsent = close;
      arm(*c, EPOLL_CTL_MOD, true);
      continue;
    }
    c->idle_since = now;
    c->since = c->buffer.empty() ? std::nullopt : std::optional(now);
    c->continue_sent = false;
    try_dispatch(*c);
  }
}

void connection_gate::refuse(int fd, int status, const std::string& message, const char* reason) {
  metrics::global().http_connections_refused.inc({{"reason", reason}});
  send_error_now(fd, status, kind_of(status), message);
}

void connection_gate::refuse(connection& c, int status, const std::string& message,
                             const char* reason) {
  log::debug(component_, "{}:{}: {} ({})", c.client, c.client_port, message, status);
  refuse(c.fd, status, message, reason);
  close_connection(c);
}

void connection_gate::close_connection(connection& c) {
  unsent_bytes_ -= c.unsent.size();
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  ::close(c.fd);
  if (auto it = per_client_.find(c.client); it != per_client_.end() && --it->second <= 0)
    per_client_.erase(it);
  connections_.erase(c.fd); // destroys c
}

void connection_gate::worker_loop() {
  for (;;) {
    ready_request r;
    {
      std::unique_lock lock(mutex_);
      ready_cv_.wait(lock, [this] { return stopping_ || !ready_.empty(); });
      if (ready_.empty())
        return;
      r = std::move(ready_.front());
      ready_.pop_front();
      waiting_ = ready_.size();
    }
    serve(std::move(r));
  }
}

connection_gate::run_outcome connection_gate::run_once(ready_request& r, std::string& out) {
  auto& c = *r.conn;
  bool stopping;
  {
    std::lock_guard lock(mutex_);
    stopping = stopping_;
  }
  if (!r.resumed)
    ++c.served;
  bool close = stopping || c.served >= requests_per_connection;
  bool closed = false;
  gate_run run;
  run.stopping = stopping;
  if (r.resumed) {
    run.resumed = std::move(r.state);
    run.first_run = r.started;
  } else {
    r.started = clock::now();
  }
  out.clear();
  gate_stream stream(c, r.length, run, out);
  current_run = &run;
  try {
    run_(stream, close, closed);
  } catch (const std::exception& e) {
    log::error(component_, "{}:{}: request processing failed: {}", c.client, c.client_port,
               e.what());
    run.deferred = false;
    closed = true;
  }
  current_run = nullptr;
  if (run.deferred) { // the request stays in the buffer for its resumption
    r.resumed = true;
    r.state = std::move(run.state);
    return {true, run.delay, false};
  }
  c.buffer.erase(0, r.length);
  return {false, {}, close || closed || run.close};
}

bool connection_gate::send_waiting(connection& c, std::string_view data) {
  const int cap = std::max(1, limits_.workers / 4);
  if (writing_workers_.fetch_add(1) >= cap) {
    --writing_workers_;
    log::debug(component_,
               "{}:{}: closed: {} bytes of an answer over the budget of unsent answers, with {} "
               "worker(s) waiting for clients to read already",
               c.client, c.client_port, data.size(), cap);
    metrics::global().http_connections_refused.inc({{"reason", "slow_reader"}});
    return false;
  }
  bool sent = send_within(c.fd, data, limits_.write_timeout);
  --writing_workers_;
  if (!sent) {
    log::debug(component_,
               "{}:{}: closed: {} bytes of an answer not read within "
               "server.writeTimeout ({} ms)",
               c.client, c.client_port, data.size(), limits_.write_timeout.count());
    metrics::global().http_connections_refused.inc({{"reason", "slow_reader"}});
  }
  return sent;
}

void connection_gate::serve(ready_request r) {
  auto& c = *r.conn;
  if (!r.unsent.empty()) // the rest of a quick answer: then the gate thread takes over again
    return give_back(&c, !send_waiting(c, r.unsent) || r.close_after);
  std::string out;
  for (;;) {
    auto o = run_once(r, out);
    if (o.deferred && defer(r, o.delay))
      return;
    if (o.deferred) // the gate stops: the request runs again at once, and answers now
      continue;
    switch (send_or_park(c, out)) {
    case sent::failed:
      return give_back(&c, true);
    case sent::parked: // the gate thread writes the rest, then serves what follows
      return give_back(&c, o.close);
    case sent::over_budget: // wait for the client here, as long as server.writeTimeout
      if (!send_waiting(c, c.unsent))
        o.close = true;
      c.unsent.clear();
      break;
    case sent::all:
      break;
    }
    if (o.close)
      return give_back(&c, true);
    // The next request, if it is already whole (pipelined) or arrives whole within a moment (a
    // busy keep-alive client), is served at once: no round trip through the gate thread.
    // Not while other requests wait for a worker.
    auto next = frame_request(c.buffer, limits_.max_header_bytes, limits_.max_body_bytes);
    if (next.what != request_frame::kind::complete && c.lingers && waiting_ == 0 && linger(c))
      next = frame_request(c.buffer, limits_.max_header_bytes, limits_.max_body_bytes);
    if (next.what != request_frame::kind::complete)
      return c.buffer.empty() ? hand_back(c) : give_back(&c, false);
    r = ready_request{.conn = &c, .length = next.length};
    c.continue_sent = false;
  }
}

void connection_gate::serve_on_gate(ready_request r) {
  auto& c = *r.conn;
  std::string out;
  run_outcome o;
  do
    o = run_once(r, out);
  while (o.deferred && !defer(r, o.delay)); // the gate stops: it answers now
  if (o.deferred)
    return;
  switch (send_or_park(c, out)) {
  case sent::failed:
    return close_connection(c);
  case sent::parked:
    c.with_worker = false;
    c.close_after_unsent = o.close;
    return arm(c, EPOLL_CTL_MOD, true);
  case sent::over_budget: { // a worker waits for the client to read
    std::lock_guard lock(mutex_);
    ready_.push_back({.conn = &c,
                      .length = 0,
                      .queued = clock::now(),
                      .unsent = std::exchange(c.unsent, {}),
                      .close_after = o.close});
    waiting_ = ready_.size();
    ready_cv_.notify_one();
    return;
  }
  case sent::all:
    break;
  }
  if (o.close)
    return close_connection(c);
  c.with_worker = false;
  answered(c, clock::now());
}

connection_gate::sent connection_gate::send_or_park(connection& c, const std::string& out) {
  auto n = send_now(c.fd, out);
  if (n < 0)
    return sent::failed;
  if (static_cast<std::size_t>(n) == out.size())
    return sent::all;
  c.unsent.assign(out, static_cast<std::size_t>(n));
  c.unsent_since = clock::now();
  if (unsent_bytes_.fetch_add(c.unsent.size()) + c.unsent.size() <= max_unsent_bytes)
    return sent::parked;
  unsent_bytes_ -= c.unsent.size();
  return sent::over_budget;
}

void connection_gate::on_writable(connection& c, clock::time_point now) {
  auto n = send_now(c.fd, c.unsent);
  if (n < 0)
    return close_connection(c);
  c.unsent.erase(0, static_cast<std::size_t>(n));
  unsent_bytes_ -= static_cast<std::size_t>(n);
  if (!c.unsent.empty())
    return arm(c, EPOLL_CTL_MOD, true);
  if (c.close_after_unsent)
    return close_connection(c);
  answered(c, now);
}

void connection_gate::answered(connection& c, clock::time_point now) {
  c.idle_since = now;
  c.since = c.buffer.empty() ? std::nullopt : std::optional(now);
  c.continue_sent = false;
  try_dispatch(c, false); // a pipelined request goes to a worker: one client cannot hold the gate
}

bool connection_gate::linger(connection& c) {
  pollfd p{c.fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(linger_time.count())) <= 0) {
    c.lingers = false;
    return false;
  }
  char chunk[16384];
  auto n = ::recv(c.fd, chunk, sizeof chunk, MSG_DONTWAIT);
  if (n <= 0)
    return false; // the gate sees the close (or the error) again and ends the connection
  c.buffer.append(chunk, static_cast<std::size_t>(n));
  return true;
}

void connection_gate::hand_back(connection& c) {
  c.idle_since = clock::now();
  c.since.reset();
  c.continue_sent = false;
  // Under the mutex: the gate closes idle connections (sweep, make_room) under it too, so it
  // never closes this one between the two steps below.
  std::lock_guard lock(mutex_);
  c.with_worker.store(false, std::memory_order_release);
  arm(c, EPOLL_CTL_MOD);
}

void connection_gate::arm(connection& c, int op, bool for_writing) {
  // One-shot: after one event the gate (or the worker it hands the connection to) owns the
  // connection until it arms it again, so no two threads ever read it at once.
  epoll_event e{};
  e.events = (for_writing ? EPOLLOUT : EPOLLIN) | EPOLLRDHUP | EPOLLONESHOT;
  e.data.fd = c.fd;
  ::epoll_ctl(epoll_fd_, op, c.fd, &e);
}

void connection_gate::give_back(connection* c, bool close) {
  {
    std::lock_guard lock(mutex_);
    returned_.emplace_back(c, close);
  }
  wake();
}

bool connection_gate::defer(ready_request& r, milliseconds delay) {
  auto due = clock::now() + delay;
  bool earlier;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) // no more waiting
      return false;
    deferred_.push_back({due, std::move(r)});
    std::push_heap(deferred_.begin(), deferred_.end(), std::greater<>{});
    earlier = due < gate_wakes_at_;
    if (earlier)
      gate_wakes_at_ = due;
  }
  if (earlier)
    wake();
  return true;
}

void connection_gate::release_due(clock::time_point now) {
  std::vector<ready_request> quick;
  {
    std::lock_guard lock(mutex_);
    while (!deferred_.empty() && deferred_.front().due <= now) {
      std::pop_heap(deferred_.begin(), deferred_.end(), std::greater<>{});
      auto& r = deferred_.back().request;
      if (r.quick) {
        quick.push_back(std::move(r));
      } else {
        ready_.push_back(std::move(r));
        ready_.back().queued = now;
        ready_cv_.notify_one();
      }
      deferred_.pop_back();
    }
    waiting_ = ready_.size();
  }
  for (auto& r : quick)
    serve_on_gate(std::move(r));
}

int connection_gate::wait_events(epoll_event* events, int max) {
  auto now = clock::now();
  auto next = now + tick;
  {
    std::lock_guard lock(mutex_);
    if (!deferred_.empty())
      next = std::min(next, deferred_.front().due);
    gate_wakes_at_ = next;
  }
  // To the microsecond (epoll_pwait2, Linux 5.11): a deferred answer is not a millisecond late.
  auto ns = std::max<std::int64_t>(
      0, std::chrono::duration_cast<std::chrono::nanoseconds>(next - now).count());
  if (precise_wait_) {
    timespec t{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    int n = ::epoll_pwait2(epoll_fd_, events, max, &t, nullptr);
    if (n >= 0 || errno != ENOSYS)
      return n;
    precise_wait_ = false;
  }
  return ::epoll_wait(epoll_fd_, events, max, static_cast<int>((ns + 999'999) / 1'000'000));
}

} // namespace outboxd::http
