// A raw HTTP/1.1 connection for tests that must send exactly the bytes another client sends (e.g.
// curl's body-less POST without Content-Length), and `curl` itself run as a process.
#pragma once

#include <arpa/inet.h>
#include <array>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <netinet/in.h>
#include <poll.h>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <unistd.h>

namespace outboxd::test {

/// One response as read off the wire; status 0 when none came (timeout, connection closed).
struct raw_response {
  int status = 0;
  std::string head; // status line and headers
  std::string body;
};

/// A TCP connection to 127.0.0.1:port that writes requests verbatim and reads responses whose
/// length is given by Content-Length (what the outboxd servers always send).
class raw_connection {
public:
  /// `receive_buffer` > 0: the socket's SO_RCVBUF, set before connecting (a client that takes
  /// little at a time).
  explicit raw_connection(int port, int receive_buffer = 0)
      : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    if (fd_ < 0)
      throw std::runtime_error("socket() failed");
    if (receive_buffer > 0)
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error("connect to 127.0.0.1:" + std::to_string(port) + " failed");
  }
  ~raw_connection() { ::close(fd_); }
  raw_connection(const raw_connection&) = delete;
  raw_connection& operator=(const raw_connection&) = delete;

  void send(const std::string& bytes) {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      auto n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0)
        throw std::runtime_error("send failed");
      sent += static_cast<std::size_t>(n);
    }
  }

  /// Reads one response; gives up (status 0) when it is not complete within `timeout`.
  raw_response read_response(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    raw_response r;
    std::size_t head_end;
    while ((head_end = buffer_.find("\r\n\r\n")) == std::string::npos)
      if (!fill(deadline))
        return r;
    r.head = buffer_.substr(0, head_end);
    std::size_t length = 0;
    auto at = lower(r.head).find("\r\ncontent-length:");
    if (at != std::string::npos)
      length = std::stoul(r.head.substr(at + 17));
    while (buffer_.size() < head_end + 4 + length)
      if (!fill(deadline))
        return r;
    r.body = buffer_.substr(head_end + 4, length);
    buffer_.erase(0, head_end + 4 + length);
    if (r.head.rfind("HTTP/1.1 ", 0) == 0)
      r.status = std::stoi(r.head.substr(9, 3));
    return r;
  }

  /// Whether the server closes the connection within `timeout` (what it sends first is dropped).
  bool closed_within(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0)
        return false;
      std::array<char, 4096> chunk{};
      if (::recv(fd_, chunk.data(), chunk.size(), 0) <= 0)
        return true;
    }
  }

private:
  static std::string lower(std::string s) {
    for (auto& c : s)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }

  bool fill(std::chrono::steady_clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      return false;
    std::array<char, 4096> chunk{};
    auto n = ::recv(fd_, chunk.data(), chunk.size(), 0);
    if (n <= 0)
      return false;
    buffer_.append(chunk.data(), static_cast<std::size_t>(n));
    return true;
  }

  int fd_;
  std::string buffer_;
};

/// Exactly what `curl -X <method> http://127.0.0.1:<port><path>` sends: no body, no
/// Content-Length, no Transfer-Encoding.
inline std::string curl_request(const std::string& method, const std::string& path, int port,
                                const std::string& extra_headers = {}) {
  return method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
         "\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n" + extra_headers + "\r\n";
}

/// Runs `curl -s -X <method>` against 127.0.0.1:port and returns "<body>\n<status>", or "" when
/// curl could not run. `curl_args` go before the URL (e.g. "-H 'Authorization: Bearer x'").
inline std::string run_curl(const std::string& method, const std::string& path, int port,
                            const std::string& curl_args = {}) {
  auto command = "curl -s --max-time 10 -w '\\n%{http_code}' -X " + method + " " + curl_args +
                 " 'http://127.0.0.1:" + std::to_string(port) + path + "' 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
  if (!pipe)
    return {};
  std::string out;
  std::array<char, 4096> chunk{};
  while (auto n = std::fread(chunk.data(), 1, chunk.size(), pipe.get()))
    out.append(chunk.data(), n);
  return out;
}

} // namespace outboxd::test
