// The multi driver: each transfer is added to one CURLM, whose sockets curl hands to an epoll
// set of ours (its socket callback) with the time of its next timeout (its timer callback); run()
// waits on that set and tells curl only about the sockets that are ready
// (curl_multi_socket_action), so a wake-up costs the calls that progressed, not every call in
// flight as curl_multi_poll and curl_multi_perform would. The connection cache of the multi handle
// keeps keep-alive connections between calls.
#include "client/multi_caller.hpp"

#include "client/transfer.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <curl/curl.h>
#include <iterator>
#include <stdexcept>
#include <string>
#include <sys/epoll.h>
#include <unistd.h>
#include <utility>

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

int multi_caller::on_socket(void*, int fd, int what, void* self, void* socket_data) {
  auto& caller = *static_cast<multi_caller*>(self);
  if (what == CURL_POLL_REMOVE) {
    // curl forgets the socket's data with it: the next socket with this number is added anew.
    ::epoll_ctl(caller.epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    return 0;
  }
  epoll_event e{};
  e.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u);
  e.data.fd = fd;
  // The socket's data (curl_multi_assign) says whether it is in the set already: one epoll_ctl
  // per change, not a failed MOD before each ADD. The other operation is the fallback should
  // the set disagree (a socket closed without REMOVE leaves the set by itself).
  const bool in_set = socket_data != nullptr;
  if (::epoll_ctl(caller.epoll_fd_, in_set ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &e) != 0)
    ::epoll_ctl(caller.epoll_fd_, in_set ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &e);
  if (!in_set)
    curl_multi_assign(multi_of(caller.multi_), fd, self);
  return 0;
}

int multi_caller::on_timer(void*, long timeout_ms, void* self) {
  static_cast<multi_caller*>(self)->timeout_ =
      timeout_ms < 0 ? clock::time_point::max()
                     : clock::now() + std::chrono::milliseconds(timeout_ms);
  return 0;
}

void multi_caller::act(int fd, int events) {
  int still = 0;
  curl_multi_socket_action(multi_of(multi_), fd, events, &still);
}

void multi_caller::on_timeout() {
  if (timeout_ > clock::now())
    return;
  timeout_ = clock::time_point::max(); // curl sets the next one while it acts
  act(CURL_SOCKET_TIMEOUT, 0);
}

multi_caller::multi_caller() {
  init_curl_once();
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0)
    throw std::runtime_error(std::string("cannot create the call driver's epoll set: ") +
                             std::strerror(errno));
  multi_ = curl_multi_init();
  curl_multi_setopt(multi_of(multi_), CURLMOPT_SOCKETFUNCTION, &multi_caller::on_socket);
  curl_multi_setopt(multi_of(multi_), CURLMOPT_SOCKETDATA, this);
  curl_multi_setopt(multi_of(multi_), CURLMOPT_TIMERFUNCTION, &multi_caller::on_timer);
  curl_multi_setopt(multi_of(multi_), CURLMOPT_TIMERDATA, this);
  CURLSH* share = curl_share_init();
  // One thread uses both handles, so no lock callbacks are needed. Connections are the multi
  // handle's own cache (shared by all its transfers); the share adds DNS and TLS sessions.
  curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
  curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  share_ = share;
}

multi_caller::~multi_caller() {
  cancel_all();
  for (void* easy : spare_)
    curl_easy_cleanup(static_cast<CURL*>(easy));
  curl_multi_cleanup(multi_of(multi_)); // may still call on_socket: the set is closed after it
  curl_share_cleanup(static_cast<CURLSH*>(share_));
  ::close(epoll_fd_);
}

void multi_caller::start(const call_request& request, completion done) {
  auto r = std::make_unique<running>(request);
  r->done = std::move(done);
  r->easy = take_easy();
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

void* multi_caller::take_easy() {
  if (spare_.empty()) {
    CURL* easy = curl_easy_init();
    // The share stays attached through curl_easy_reset (as do the handle's buffers).
    if (easy)
      curl_easy_setopt(easy, CURLOPT_SHARE, share_);
    return easy;
  }
  void* easy = spare_.back();
  spare_.pop_back();
  return easy;
}

void multi_caller::give_back(void* easy) {
  // As many as were ever in flight at once are kept: the next calls will want as many.
  curl_easy_reset(static_cast<CURL*>(easy));
  spare_.push_back(easy);
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
    give_back(std::exchange(r.easy, nullptr));
    running_.erase(it);
  }
  return out;
}

namespace {

/// epoll_wait with a timeout finer than a millisecond (epoll_pwait2, Linux 5.11); on an older
/// kernel epoll_wait, the timeout rounded up to whole milliseconds.
int wait_for_sockets(int epoll_fd, epoll_event* events, int max_events,
                     std::chrono::microseconds wait) {
  static std::atomic<bool> fine{true};
  if (fine.load(std::memory_order_relaxed)) {
    const auto secs = std::chrono::floor<std::chrono::seconds>(wait);
    timespec ts{static_cast<time_t>(secs.count()),
                static_cast<long>(std::chrono::nanoseconds(wait - secs).count())};
    int n = ::epoll_pwait2(epoll_fd, events, max_events, &ts, nullptr);
    if (n >= 0 || errno != ENOSYS)
      return n;
    fine.store(false, std::memory_order_relaxed);
  }
  return ::epoll_wait(epoll_fd, events, max_events,
                      static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wait).count()));
}

} // namespace

std::size_t multi_caller::run(std::chrono::microseconds max_wait) {
  auto finished = std::move(ready_);
  ready_.clear();
  if (!running_.empty()) {
    on_timeout();
    auto more = collect();
    std::move(more.begin(), more.end(), std::back_inserter(finished));
  }
  std::size_t others = 0; // what the watched sockets' callbacks finished
  if (finished.empty()) {
    auto wait = max_wait;
    if (timeout_ != clock::time_point::max())
      wait = std::clamp(std::chrono::ceil<std::chrono::microseconds>(timeout_ - clock::now()),
                        std::chrono::microseconds{0}, max_wait);
    epoll_event events[64];
    int n = wait_for_sockets(epoll_fd_, events, 64, wait);
    for (int i = 0; i < n; ++i) {
      auto e = events[i].events;
      if (auto w = watched_.find(events[i].data.fd); w != watched_.end()) {
        auto ready = w->second; // it may unwatch its socket
        others += ready();
        continue;
      }
      act(events[i].data.fd, ((e & (EPOLLIN | EPOLLHUP | EPOLLERR)) ? CURL_CSELECT_IN : 0) |
                                 ((e & EPOLLOUT) ? CURL_CSELECT_OUT : 0) |
                                 ((e & EPOLLERR) ? CURL_CSELECT_ERR : 0));
    }
    if (!running_.empty()) {
      on_timeout();
      finished = collect();
    }
  }
  // Completions may start new calls: they run after curl is done with its own bookkeeping.
  for (auto& [done, result] : finished)
    if (done)
      done(std::move(result));
  return finished.size() + others;
}

void multi_caller::watch(int fd, std::function<std::size_t()> ready) {
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.fd = fd;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &e) != 0)
    throw std::runtime_error(std::string("cannot wait on socket: ") + std::strerror(errno));
  watched_[fd] = std::move(ready);
}

void multi_caller::unwatch(int fd) {
  if (watched_.erase(fd))
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
}

void multi_caller::send() {
  // A transfer added since is due at once (curl's timer): acting on it connects and sends.
  if (!running_.empty())
    on_timeout();
}

std::size_t multi_caller::abandon_all(std::string_view why) {
  const auto n = running_.size();
  for (auto& [easy, r] : running_) {
    curl_multi_remove_handle(multi_of(multi_), static_cast<CURL*>(easy));
    auto result = r->t.finish(CURLE_ABORTED_BY_CALLBACK); // its duration so far, no answer
    result.error = why;
    ready_.emplace_back(std::move(r->done), std::move(result));
  }
  running_.clear();
  return n;
}

void multi_caller::cancel_all() {
  for (auto& [easy, r] : running_)
    curl_multi_remove_handle(multi_of(multi_), static_cast<CURL*>(easy));
  running_.clear(); // the easy handles are freed only after they left the multi handle
  ready_.clear();
}

} // namespace outboxd::client
