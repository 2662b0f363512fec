// One HTTP transfer on libcurl: configures an easy handle from a call_request and turns what
// comes back into a call_result. The blocking caller runs it with curl_easy_perform; a driver
// on a multi handle can run the same set-up for many transfers at once.
#pragma once

#include "client/call.hpp"

#include <array>
#include <chrono>
#include <curl/curl.h>
#include <memory>
#include <string>
#include <string_view>

namespace outboxd::client {

/// curl_global_init, once per process, before the first handle anywhere (it is thread-safe since
/// curl 7.84; Debian 12 ships 7.88). Both callers call it first.
void init_curl_once();

/// The state of one transfer. curl keeps pointers into it, so it must outlive the transfer and
/// stay where it is (not copyable, not movable).
class transfer {
public:
  /// `request` must outlive the transfer too (its body is sent from where it is).
  explicit transfer(const call_request& request);
  ~transfer();
  transfer(const transfer&) = delete;
  transfer& operator=(const transfer&) = delete;

  /// Configures `easy` (new, or reset) for the request. False when the request cannot be made
  /// at all (unsupported method, not an absolute URL): do not run it; `finish` says why.
  bool configure(CURL* easy);

  /// The result once the transfer ended with `code` (ignored when `configure` returned false).
  call_result finish(CURLcode code);

private:
  static std::size_t on_body(char* data, std::size_t size, std::size_t count, void* self);
  static std::size_t on_header(char* data, std::size_t size, std::size_t count, void* self);
  bool set_method();
  bool set_target();
  void set_tls();
  void add_header(const std::string& line);
  bool has_header(std::string_view name) const;
  std::string describe(CURLcode code) const;

  struct slist_deleter {
    void operator()(curl_slist* list) const { curl_slist_free_all(list); }
  };

  const call_request& request_;
  CURL* easy_ = nullptr;
  std::unique_ptr<curl_slist, slist_deleter> headers_;
  std::unique_ptr<curl_slist, slist_deleter> connect_to_;
  std::string url_; // the URL curl is given (the request's, or rewritten for tls.serverName)
  std::array<char, CURL_ERROR_SIZE> error_text_{};
  std::string refused_; // why the request was not run
  call_result result_;
  std::size_t header_bytes_ = 0;
  bool headers_too_large_ = false;
  bool body_started_ = false;       // header lines after it are trailers, not the answer's
  std::string content_length_;      // the answer's Content-Length, to refuse a second one
  bool conflicting_length_ = false; // two Content-Length headers that disagree
  bool capped_ = false; // the body reached max_response_bytes and the transfer was stopped
  std::chrono::steady_clock::time_point started_;
};

} // namespace outboxd::client
