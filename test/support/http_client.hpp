// A blocking HTTP client for tests: one keep-alive connection to 127.0.0.1:port.
#pragma once

#include <map>
#include <memory>
#include <rapidjson/document.h>
#include <string>

namespace httplib {
class Client;
}

namespace outboxd::test {

struct http_response {
  int status = 0; // 0: no response (connection error)
  std::string body;
  std::multimap<std::string, std::string> headers;
  rapidjson::Document json; // parsed body (kNullType when not JSON)

  std::string header(const std::string& name) const;
  /// The string at a JSON pointer such as "/error/code" ("" when absent or not a string).
  std::string str(const char* pointer) const;
  /// The integer at a JSON pointer (-1 when absent).
  long long num(const char* pointer) const;
  /// Whether the value at a JSON pointer is `true`.
  bool boolean(const char* pointer) const;
  /// Whether the value at a JSON pointer is present and null.
  bool is_null(const char* pointer) const;
};

class http_client {
public:
  explicit http_client(int port);
  ~http_client();

  /// Headers sent with every later request (e.g. an Authorization token).
  void set_default_headers(const std::map<std::string, std::string>& headers);

  http_response get(const std::string& path);
  http_response del(const std::string& path,
                    const std::map<std::string, std::string>& headers = {});
  http_response post(const std::string& path, const std::string& body,
                     const std::map<std::string, std::string>& headers = {},
                     const std::string& content_type = "application/json");
  http_response put(const std::string& path, const std::string& body,
                    const std::map<std::string, std::string>& headers = {},
                    const std::string& content_type = "application/json");

private:
  std::unique_ptr<httplib::Client> client_;
};

/// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port();

} // namespace outboxd::test
