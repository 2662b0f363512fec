// The multi driver: each transfer is added to one CURLM; curl_multi_poll waits on all of their
// sockets at once, so a thread carries as many calls as it is given, and the connection cache of
// the multi handle keeps keep-alive connections between them.
#include "client/multi_caller.hpp"

#include "client/transfer.hpp"

#include <curl/curl.h>
#include <iterator>

namespace outboxd::client {
namespace {

CURLM* multi_of(void* m) {
  return static_cast<CURLM*>(m);
}

} // namespace

/// One call in flight: its request (curl sends the body from it), its transfer and easy handle.
struct multi_caller::running {
  explicit running(call_request r) : request(std::move(r)), t(request) {}
  ~running() {
    if (easy)
      curl_easy_cleanup(easy);
  }
  call_request request;
  transfer t;
  CURL* easy = nullptr;
  completion done;
};

multi_caller::multi_caller() {
  init_curl_once();
  multi_ = curl_multi_init();
  CURLSH* share = curl_share_init();
  // One thread uses both handles, so no lock callbacks are needed. Connections are the multi
  // handle's own cache (shared by all its transfers); the share adds DNS and TLS sessions.
  curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
  curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  share_ = share;
}

multi_caller::~multi_caller() {
  cancel_all();
  curl_multi_cleanup(multi_of(multi_));
  curl_share_cleanup(static_cast<CURLSH*>(share_));
}

void multi_caller::start(const call_request& request, completion done) {
  auto r = std::make_unique<running>(request);
  r->done = std::move(done);
  r->easy = curl_easy_init();
  if (!r->easy) {
    call_result out;
    out.error = "transfer failed: cannot create a curl handle";
    ready_.emplace_back(std::move(r->done), std::move(out));
    return;
  }
  if (!r->t.configure(r->easy)) {
    ready_.emplace_back(std::move(r->done), r->t.finish(CURLE_OK));
    return;
  }
  curl_easy_setopt(r->easy, CURLOPT_SHARE, share_);
  curl_easy_setopt(r->easy, CURLOPT_PRIVATE, r.get());
  if (auto code = curl_multi_add_handle(multi_of(multi_), r->easy); code != CURLM_OK) {
    call_result out;
    out.error = std::string("transfer failed: ") + curl_multi_strerror(code);
    ready_.emplace_back(std::move(r->done), std::move(out));
    return;
  }
  void* key = r->easy;
  running_.emplace(key, std::move(r));
}

std::vector<std::pair<multi_caller::completion, call_result>> multi_caller::collect() {
  std::vector<std::pair<completion, call_result>> out;
  int left = 0;
  while (CURLMsg* msg = curl_multi_info_read(multi_of(multi_), &left)) {
    if (msg->msg != CURLMSG_DONE)
      continue;
    CURL* easy = msg->easy_handle;
    CURLcode code = msg->data.result; // read before the handle is removed
    auto it = running_.find(easy);
    if (it == running_.end())
      continue;
    curl_multi_remove_handle(multi_of(multi_), easy);
    auto& r = *it->second;
    out.emplace_back(std::move(r.done), r.t.finish(code));
    running_.erase(it);
  }
  return out;
}

std::size_t multi_caller::run(std::chrono::milliseconds max_wait) {
  auto finished = std::move(ready_);
  ready_.clear();
  int still = 0;
  if (!running_.empty()) {
    curl_multi_perform(multi_of(multi_), &still);
    auto more = collect();
    std::move(more.begin(), more.end(), std::back_inserter(finished));
  }
  if (finished.empty()) {
    // curl_multi_poll sleeps the whole timeout when there are no sockets, unlike curl_multi_wait.
    curl_multi_poll(multi_of(multi_), nullptr, 0, static_cast<int>(max_wait.count()), nullptr);
    if (!running_.empty()) {
      curl_multi_perform(multi_of(multi_), &still);
      finished = collect();
    }
  }
  // Completions may start new calls: they run after curl is done with its own bookkeeping.
  for (auto& [done, result] : finished)
    if (done)
      done(std::move(result));
  return finished.size();
}

void multi_caller::send() {
  int still = 0;
  if (!running_.empty())
    curl_multi_perform(multi_of(multi_), &still);
}

void multi_caller::cancel_all() {
  for (auto& [easy, r] : running_)
    curl_multi_remove_handle(multi_of(multi_), static_cast<CURL*>(easy));
  running_.clear(); // the easy handles are freed only after they left the multi handle
  ready_.clear();
}

} // namespace outboxd::client
