// Outgoing calls over cpp-httplib. Connections are reused across calls (keep-alive); a failed
// call drops its connection so the next one starts clean.
#include "client/caller.hpp"

#include "domain/url.hpp"

#include <httplib.h>

namespace outboxd::client {
namespace {

/// The operator's words for a transport error; httplib's own for the rare others.
std::string describe(httplib::Error e) {
  static constexpr std::pair<httplib::Error, const char*> words[] = {
      {httplib::Error::Connection, "connection failed"},
      {httplib::Error::ConnectionTimeout, "connect timeout"},
      {httplib::Error::Read, "read failed or timed out"},
      {httplib::Error::Write, "write failed"},
      {httplib::Error::ExceedRedirectCount, "too many redirects"},
      {httplib::Error::Canceled, "canceled"},
      {httplib::Error::SSLConnection, "TLS connection failed"},
      {httplib::Error::SSLServerVerification, "TLS server verification failed"},
  };
  for (const auto& [error, text] : words)
    if (error == e)
      return text;
  return httplib::to_string(e);
}

} // namespace

caller::caller() = default;
caller::~caller() = default;

httplib::Client& caller::client_for(const std::string& origin) {
  auto& c = clients_[origin];
  if (!c) {
    c = std::make_unique<httplib::Client>(origin);
    c->set_tcp_nodelay(true); // else every keep-alive request waits 40 ms for delayed ACK
    c->set_keep_alive(true);
    c->set_follow_location(false); // a redirect must not take a call to another host
  }
  return *c;
}

call_result caller::call(const call_request& request) {
  auto started = std::chrono::steady_clock::now();
  call_result out;
  auto parts = domain::split_url(request.url);
  const std::string origin(parts.origin);
  const std::string path = parts.path.empty() ? "/" : std::string(parts.path);
  if (origin.empty()) {
    out.error = "not an absolute URL: " + request.url;
    return out;
  }
  auto& c = client_for(origin);
  c.set_connection_timeout(request.connect_timeout);
  c.set_read_timeout(request.read_timeout);
  c.set_write_timeout(request.read_timeout);
  httplib::Headers headers(request.headers.begin(), request.headers.end());
  const char* type = "application/json";
  httplib::Result r{nullptr, httplib::Error::Unknown};
  const auto& m = request.method;
  if (m == "GET")
    r = c.Get(path.c_str(), headers);
  else if (m == "HEAD")
    r = c.Head(path.c_str(), headers);
  else if (m == "POST")
    r = c.Post(path.c_str(), headers, request.body, type);
  else if (m == "PUT")
    r = c.Put(path.c_str(), headers, request.body, type);
  else if (m == "PATCH")
    r = c.Patch(path.c_str(), headers, request.body, type);
  else if (m == "DELETE")
    r = request.body.empty() ? c.Delete(path.c_str(), headers)
                             : c.Delete(path.c_str(), headers, request.body, type);
  else
    out.error = "unsupported method " + m;
  if (r) {
    out.status = r->status;
    out.body = r->body;
    out.content_type = r->get_header_value("Content-Type");
    out.retry_after = r->get_header_value("Retry-After");
  } else if (out.error.empty()) {
    out.error = describe(r.error());
    clients_.erase(origin);
  }
  out.duration = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started);
  return out;
}

} // namespace outboxd::client
