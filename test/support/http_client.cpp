// Test HTTP client over cpp-httplib with TCP_NODELAY (else each request waits for Nagle).
#include "test/support/http_client.hpp"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <rapidjson/pointer.h>
#include <stdexcept>
#include <sys/socket.h>
#include <unistd.h>

namespace outboxd::test {
namespace {

httplib::Headers to_headers(const std::map<std::string, std::string>& h) {
  return httplib::Headers(h.begin(), h.end());
}

http_response convert(const httplib::Result& r) {
  http_response out;
  if (!r)
    return out;
  out.status = r->status;
  out.body = r->body;
  for (const auto& [k, v] : r->headers)
    out.headers.emplace(k, v);
  out.json.Parse(out.body.c_str());
  if (out.json.HasParseError())
    out.json.SetNull();
  return out;
}

} // namespace

std::string http_response::header(const std::string& name) const {
  for (const auto& [k, v] : headers)
    if (strcasecmp(k.c_str(), name.c_str()) == 0)
      return v;
  return "";
}

std::string http_response::str(const char* pointer) const {
  const auto* v = rapidjson::Pointer(pointer).Get(json);
  return v && v->IsString() ? std::string(v->GetString(), v->GetStringLength()) : "";
}

long long http_response::num(const char* pointer) const {
  const auto* v = rapidjson::Pointer(pointer).Get(json);
  return v && v->IsInt64() ? v->GetInt64() : -1;
}

bool http_response::boolean(const char* pointer) const {
  const auto* v = rapidjson::Pointer(pointer).Get(json);
  return v && v->IsTrue();
}

bool http_response::is_null(const char* pointer) const {
  const auto* v = rapidjson::Pointer(pointer).Get(json);
  return v && v->IsNull();
}

http_client::http_client(int port) : client_(std::make_unique<httplib::Client>("127.0.0.1", port)) {
  client_->set_tcp_nodelay(true);
  client_->set_keep_alive(true);
  client_->set_connection_timeout(5, 0);
  client_->set_read_timeout(30, 0);
}

http_client::~http_client() = default;

void http_client::set_default_headers(const std::map<std::string, std::string>& headers) {
  client_->set_default_headers({headers.begin(), headers.end()});
}

http_response http_client::get(const std::string& path) {
  return convert(client_->Get(path.c_str()));
}

http_response http_client::del(const std::string& path,
                               const std::map<std::string, std::string>& headers) {
  return convert(client_->Delete(path.c_str(), to_headers(headers)));
}

http_response http_client::post(const std::string& path, const std::string& body,
                                const std::map<std::string, std::string>& headers,
                                const std::string& content_type) {
  return convert(client_->Post(path.c_str(), to_headers(headers), body, content_type.c_str()));
}

http_response http_client::put(const std::string& path, const std::string& body,
                               const std::map<std::string, std::string>& headers,
                               const std::string& content_type) {
  return convert(client_->Put(path.c_str(), to_headers(headers), body, content_type.c_str()));
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot bind a free port");
  }
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

} // namespace outboxd::test
