#include "test/support/partner.hpp"

#include "test/support/http_client.hpp"

#include <arpa/inet.h>
#include <cctype>
#include <fmt/format.h>
#include <netinet/in.h>
#include <stdexcept>
#include <sys/socket.h>
#include <unistd.h>

namespace outboxd::test {
namespace {

std::string lower(std::string s) {
  for (auto& c : s)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

} // namespace

partner::partner() : port(free_port()), handler_([](const request&) { return answer{200, "{}"}; }) {
  listen();
}

partner::~partner() {
  stopping_ = true;
  set_mode(mode::refuse); // closes the port and joins the acceptor
  mode_changed_.notify_all();
  std::vector<std::thread> connections;
  {
    std::lock_guard lock(mutex_);
    connections.swap(connections_);
  }
  for (auto& t : connections)
    t.join();
}

void partner::listen() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 256) != 0) {
    ::close(fd);
    throw std::runtime_error(fmt::format("partner: cannot listen on port {}", port));
  }
  listen_fd_ = fd;
  acceptor_ = std::thread([this, fd] { accept_loop(fd); });
}

void partner::handle(std::function<answer(const request&)> handler) {
  std::lock_guard lock(mutex_);
  handler_ = std::move(handler);
}

void partner::set_mode(mode m) {
  std::thread acceptor;
  {
    std::lock_guard lock(mutex_);
    if (m == mode::refuse && listen_fd_ >= 0) {
      ::shutdown(listen_fd_, SHUT_RDWR);
      ::close(listen_fd_);
      listen_fd_ = -1;
      acceptor.swap(acceptor_);
    }
    mode_ = m;
  }
  mode_changed_.notify_all();
  if (acceptor.joinable())
    acceptor.join();
  if (m != mode::refuse && !stopping_) {
    std::lock_guard lock(mutex_);
    if (listen_fd_ < 0)
      listen();
  }
}

std::vector<partner::request> partner::requests() const {
  std::lock_guard lock(mutex_);
  return requests_;
}

std::size_t partner::request_count() const {
  std::lock_guard lock(mutex_);
  return requests_.size();
}

std::size_t partner::connection_count() const {
  std::lock_guard lock(mutex_);
  return connections_.size();
}

void partner::accept_loop(int fd) {
  while (true) {
    int c = ::accept(fd, nullptr, nullptr);
    if (c < 0)
      return;
    std::lock_guard lock(mutex_);
    connections_.emplace_back([this, c] { serve(c); });
  }
}

void partner::serve(int c) {
  timeval tv{10, 0};
  ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string in;
  char buf[8192];
  std::size_t head_end = std::string::npos, need = 0;
  while (head_end == std::string::npos || in.size() < need) {
    auto n = ::recv(c, buf, sizeof buf, 0);
    if (n <= 0) {
      ::close(c);
      return;
    }
    in.append(buf, static_cast<std::size_t>(n));
    if (head_end == std::string::npos && (head_end = in.find("\r\n\r\n")) != std::string::npos) {
      auto head = lower(in.substr(0, head_end));
      auto at = head.find("content-length:");
      need = head_end + 4 + (at == std::string::npos ? 0 : std::stoul(head.substr(at + 15)));
    }
  }
  request r;
  r.head = in.substr(0, head_end);
  r.body = in.substr(head_end + 4);
  auto space = r.head.find(' ');
  r.method = r.head.substr(0, space);
  r.path = r.head.substr(space + 1, r.head.find(' ', space + 1) - space - 1);
  r.arrived = std::chrono::steady_clock::now();
  int now_in_flight = ++in_flight_;
  for (int seen = max_in_flight_; now_in_flight > seen;)
    if (max_in_flight_.compare_exchange_weak(seen, now_in_flight))
      break;
  answer a;
  {
    std::unique_lock lock(mutex_);
    requests_.push_back(r);
    // A hanging partner keeps the request until the test changes the mode or stops.
    mode_changed_.wait(lock, [this] { return mode_ != mode::hang || stopping_; });
    a = handler_(r);
  }
  if (a.delay.count() > 0)
    std::this_thread::sleep_for(a.delay);
  auto out = fmt::format("HTTP/1.1 {} Answer\r\nContent-Length: {}\r\n", a.status, a.body.size());
  if (!a.content_type.empty())
    out += "Content-Type: " + a.content_type + "\r\n";
  out += a.headers + "Connection: close\r\n\r\n" + a.body;
  --in_flight_;
  ::send(c, out.data(), out.size(), MSG_NOSIGNAL);
  ::close(c);
}

} // namespace outboxd::test
