// Raw loopback server used by the client tests.
#include "test/client/loopback.hpp"

#include "test/support/process.hpp"

#include <arpa/inet.h>
#include <cstdlib>
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <stdexcept>
#include <sys/socket.h>
#include <unistd.h>
#include <utility>

namespace outboxd::test {

raw_server::raw_server(script s) : script_(std::move(s)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 16) != 0)
    throw std::runtime_error("raw_server: cannot listen on 127.0.0.1");
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

raw_server::~raw_server() {
  stopping_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR); // wakes accept()
  acceptor_.join();
  ::close(listen_fd_);
  std::lock_guard lock(mutex_);
  for (auto& t : connections_)
    t.join();
}

std::string raw_server::url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

std::vector<std::string> raw_server::requests() const {
  std::lock_guard lock(mutex_);
  return requests_;
}

void raw_server::remember(std::string request) {
  std::lock_guard lock(mutex_);
  requests_.push_back(std::move(request));
}

void raw_server::accept_loop() {
  while (!stopping_) {
    int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0)
      return;
    ++accepted_;
    std::lock_guard lock(mutex_);
    connections_.emplace_back([this, fd] {
      script_(fd);
      ::close(fd);
    });
  }
}

std::string read_request(int fd) {
  std::string text;
  char buffer[4096];
  std::size_t head_end = std::string::npos;
  while ((head_end = text.find("\r\n\r\n")) == std::string::npos) {
    auto n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0)
      return {};
    text.append(buffer, static_cast<std::size_t>(n));
  }
  std::size_t length = 0;
  for (const char* name : {"Content-Length: ", "content-length: "})
    if (auto at = text.find(name); at != std::string::npos && at < head_end)
      length = std::stoul(text.substr(at + std::char_traits<char>::length(name)));
  while (text.size() < head_end + 4 + length) {
    auto n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0)
      return {};
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

bool write_all(int fd, const std::string& bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    auto n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0)
      return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

void answer_and_remember(raw_server& server, int fd, const std::string& answer) {
  for (;;) {
    auto request = read_request(fd);
    if (request.empty())
      return;
    server.remember(std::move(request));
    if (!write_all(fd, answer))
      return;
  }
}

} // namespace outboxd::test
