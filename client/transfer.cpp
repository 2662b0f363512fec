// One transfer on a libcurl easy handle: method, body, headers, the whole-call deadline, the
// body cap, the header cap and the TLS options; then curl's outcome in the engine's terms.
#include "client/transfer.hpp"

#include <algorithm>
#include <cctype>
#include <fmt/format.h>

namespace outboxd::client {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
    s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.remove_suffix(1);
  return s;
}

long millis(std::chrono::milliseconds ms) {
  return static_cast<long>(std::max<std::chrono::milliseconds::rep>(1, ms.count()));
}

struct url_handle_deleter {
  void operator()(CURLU* u) const { curl_url_cleanup(u); }
};

// A string from curl's URL API, freed with curl_free.
std::string url_part(CURLU* u, CURLUPart part, unsigned flags = 0) {
  char* text = nullptr;
  if (curl_url_get(u, part, &text, flags) != CURLUE_OK || !text)
    return {};
  std::string out(text);
  curl_free(text);
  return out;
}

} // namespace

transfer::transfer(const call_request& request)
    : request_(request), started_(std::chrono::steady_clock::now()) {}

transfer::~transfer() = default;

bool transfer::configure(CURL* easy) {
  easy_ = easy;
  if (!set_target() || !set_method())
    return false;
  // Worker threads call this: curl must never use signals (its DNS timeouts would otherwise).
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, error_text_.data());
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L); // a redirect must not take a call elsewhere
  // Sent exactly as built: the engine percent-encodes path segments itself.
  curl_easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  // curl's default too; said here because keep-alive requests would wait for delayed ACKs.
  curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(easy, CURLOPT_USERAGENT, "outboxd");
  // The deadline covers everything from the first connect attempt to the last body byte.
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, millis(request_.timeout));
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                   millis(std::min(request_.connect_timeout, request_.timeout)));
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &transfer::on_body);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, this);
  curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, &transfer::on_header);
  curl_easy_setopt(easy, CURLOPT_HEADERDATA, this);
  set_tls();

  for (const auto& [name, value] : request_.headers)
    // "Name;" is curl's way to send a header with an empty value ("Name:" would remove it).
    add_header(value.empty() ? name + ";" : name + ": " + value);
  // curl would otherwise wait up to a second for "100 Continue" before sending larger bodies.
  add_header("Expect:");
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers_.get());
  return true;
}

bool transfer::set_target() {
  std::unique_ptr<CURLU, url_handle_deleter> u(curl_url());
  if (!u || curl_url_set(u.get(), CURLUPART_URL, request_.url.c_str(), 0) != CURLUE_OK) {
    refused_ = "not an absolute URL: " + request_.url;
    return false;
  }
  auto scheme = url_part(u.get(), CURLUPART_SCHEME);
  if (scheme != "http" && scheme != "https") {
    refused_ = "not an http(s) URL: " + request_.url;
    return false;
  }
  url_ = request_.url;
  const auto& name = request_.tls.server_name;
  if (scheme == "https" && !name.empty()) {
    // tls.serverName: the URL names the server curl checks the certificate against and sends
    // as SNI, so the URL carries that name while CONNECT_TO sends the connection to the real
    // host. The Host header keeps the configured URL's authority, as without serverName.
    auto host = url_part(u.get(), CURLUPART_HOST);
    auto port = url_part(u.get(), CURLUPART_PORT, CURLU_DEFAULT_PORT);
    auto explicit_port = url_part(u.get(), CURLUPART_PORT);
    if (!has_header("Host"))
      add_header("Host: " + host + (explicit_port.empty() ? "" : ":" + explicit_port));
    curl_url_set(u.get(), CURLUPART_HOST, name.c_str(), 0);
    url_ = url_part(u.get(), CURLUPART_URL);
    auto entry = fmt::format("{}:{}:{}:{}", name, port, host, port);
    connect_to_.reset(curl_slist_append(nullptr, entry.c_str()));
    curl_easy_setopt(easy_, CURLOPT_CONNECT_TO, connect_to_.get());
  }
  curl_easy_setopt(easy_, CURLOPT_URL, url_.c_str());
  return true;
}

bool transfer::set_method() {
  const auto& m = request_.method;
  const bool has_body = !request_.body.empty();
  bool send_body = false;
  if (m == "GET") {
    curl_easy_setopt(easy_, CURLOPT_HTTPGET, 1L);
  } else if (m == "HEAD") {
    curl_easy_setopt(easy_, CURLOPT_NOBODY, 1L);
  } else if (m == "POST" || m == "PUT" || m == "PATCH") {
    send_body = true;
  } else if (m == "DELETE") {
    send_body = has_body;
  } else {
    refused_ = "unsupported method " + m;
    return false;
  }
  if (send_body) {
    curl_easy_setopt(easy_, CURLOPT_POSTFIELDS, request_.body.data());
    curl_easy_setopt(easy_, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(request_.body.size()));
    if (!has_header("Content-Type"))
      add_header("Content-Type: application/json");
  }
  if (m != "GET" && m != "HEAD" && m != "POST")
    curl_easy_setopt(easy_, CURLOPT_CUSTOMREQUEST, m.c_str());
  return true;
}

void transfer::set_tls() {
  const auto& tls = request_.tls;
  if (tls.insecure_skip_verify) {
    curl_easy_setopt(easy_, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(easy_, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (!tls.ca_file.empty())
    curl_easy_setopt(easy_, CURLOPT_CAINFO, tls.ca_file.c_str());
  if (!tls.cert_file.empty()) {
    curl_easy_setopt(easy_, CURLOPT_SSLCERT, tls.cert_file.c_str());
    curl_easy_setopt(easy_, CURLOPT_SSLCERTTYPE, "PEM");
  }
  if (!tls.key_file.empty())
    curl_easy_setopt(easy_, CURLOPT_SSLKEY, tls.key_file.c_str());
}

void transfer::add_header(const std::string& line) {
  auto* list = curl_slist_append(headers_.get(), line.c_str());
  if (list) {
    (void)headers_.release(); // curl_slist_append returns the same list, now longer
    headers_.reset(list);
  }
}

bool transfer::has_header(std::string_view name) const {
  return std::any_of(request_.headers.begin(), request_.headers.end(),
                     [&](const auto& h) { return iequals(h.first, name); });
}

std::size_t transfer::on_body(char* data, std::size_t size, std::size_t count, void* self) {
  auto& t = *static_cast<transfer*>(self);
  const std::size_t n = size * count;
  t.body_started_ = true;
  auto& body = t.result_.body;
  const std::size_t cap = t.request_.max_response_bytes;
  const std::size_t room = cap - std::min(cap, body.size());
  if (n > room) {
    // Anything short of n tells curl to stop: the connection is closed, the rest never read.
    body.append(data, room);
    t.capped_ = true;
    return 0;
  }
  body.append(data, n);
  if (body.size() == cap) {
    // With a Content-Length beyond the cap, waiting for the next byte would only waste time.
    curl_off_t length = -1;
    curl_easy_getinfo(t.easy_, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    if (length > static_cast<curl_off_t>(cap)) {
      t.capped_ = true;
      return 0;
    }
  }
  return n;
}

std::size_t transfer::on_header(char* data, std::size_t size, std::size_t count, void* self) {
  auto& t = *static_cast<transfer*>(self);
  const std::size_t n = size * count;
  t.header_bytes_ += n;
  if (t.header_bytes_ > max_response_header_bytes) {
    t.headers_too_large_ = true;
    return 0;
  }
  std::string_view line(data, n);
  // Fields of a chunked body's trailer come here too: they must not set the answer's type or
  // its Retry-After.
  if (t.body_started_)
    return n;
  if (line.rfind("HTTP/", 0) == 0) {
    // A new status line: an interim 1xx answer's headers do not belong to the final one.
    t.result_.content_type.clear();
    t.result_.retry_after.clear();
    t.content_length_.clear();
    return n;
  }
  auto colon = line.find(':');
  if (colon == std::string_view::npos)
    return n;
  auto name = trim(line.substr(0, colon));
  auto value = trim(line.substr(colon + 1));
  if (iequals(name, "Content-Length")) {
    // Two lengths that disagree leave the answer's end to guessing (RFC 9112, section 6.3).
    if (!t.content_length_.empty() && t.content_length_ != value) {
      t.conflicting_length_ = true;
      return 0;
    }
    t.content_length_ = value;
  } else if (iequals(name, "Content-Type"))
    t.result_.content_type = value;
  else if (iequals(name, "Retry-After"))
    t.result_.retry_after = value;
  return n;
}

call_result transfer::finish(CURLcode code) {
  result_.duration = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started_);
  if (!refused_.empty()) {
    result_.body.clear();
    result_.error = refused_;
    return std::move(result_);
  }
  if (code == CURLE_OK || (code == CURLE_WRITE_ERROR && capped_)) {
    long status = 0;
    curl_easy_getinfo(easy_, CURLINFO_RESPONSE_CODE, &status);
    result_.status = static_cast<int>(status);
    result_.truncated = capped_;
    return std::move(result_);
  }
  // No answer the engine can classify: whatever arrived is not it.
  result_.body.clear();
  result_.content_type.clear();
  result_.retry_after.clear();
  result_.error = describe(code);
  return std::move(result_);
}

std::string transfer::describe(CURLcode code) const {
  std::string detail = error_text_[0] ? error_text_.data() : curl_easy_strerror(code);
  switch (code) {
  case CURLE_OPERATION_TIMEDOUT: {
    // A reused connection has no connect time: what tells is whether the request went out.
    curl_off_t pretransfer = 0;
    long request_bytes = 0;
    curl_easy_getinfo(easy_, CURLINFO_PRETRANSFER_TIME_T, &pretransfer);
    curl_easy_getinfo(easy_, CURLINFO_REQUEST_SIZE, &request_bytes);
    if (pretransfer == 0 && request_bytes == 0)
      return fmt::format("connect timeout after {}ms: {}",
                         millis(std::min(request_.connect_timeout, request_.timeout)), detail);
    // The first words are the ones operators and older records know for a call cut short.
    return fmt::format("read failed or timed out: timeout, the call's deadline of {}ms passed: {}",
                       millis(request_.timeout), detail);
  }
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_CONNECT:
    return "connection failed: " + detail;
  case CURLE_PEER_FAILED_VERIFICATION:
    return "TLS: certificate verify failed: " + detail;
  case CURLE_SSL_CONNECT_ERROR:
    return "TLS: handshake failed: " + detail;
  case CURLE_SSL_CERTPROBLEM:
    return "TLS: client certificate problem: " + detail;
  case CURLE_SSL_CACERT_BADFILE:
    return "TLS: CA file problem: " + detail;
  case CURLE_SEND_ERROR:
    return "write failed: " + detail;
  case CURLE_GOT_NOTHING:
  case CURLE_RECV_ERROR:
  case CURLE_PARTIAL_FILE:
    return "read failed: " + detail;
  case CURLE_WRITE_ERROR:
    if (headers_too_large_)
      return fmt::format("response headers too large (over {} bytes)", max_response_header_bytes);
    if (conflicting_length_)
      return "read failed: the answer has two Content-Length headers that disagree";
    return "read failed: " + detail;
  case CURLE_OUT_OF_MEMORY:
    // What curl answers to one header line longer than it takes (100 KB).
    if (!body_started_)
      return "response headers too large (a header line over 100 KB)";
    return fmt::format("transfer failed: {}", detail);
  default:
    return fmt::format("transfer failed: {}", detail);
  }
}

void init_curl_once() {
  static const bool done = [] {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return true;
  }();
  (void)done;
}

} // namespace outboxd::client
