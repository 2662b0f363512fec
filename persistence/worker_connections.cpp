// The workers' shared connections. Reconnect policy: 250 ms, doubling (at most once per wait) up to
// 10 s while connecting fails; back to 250 ms once a connection opens.
#include "persistence/worker_connections.hpp"

#include "log/log.hpp"

#include <algorithm>

namespace outboxd::persistence {
namespace {
constexpr std::chrono::milliseconds first_backoff{250};
constexpr std::chrono::milliseconds max_backoff{10000};
} // namespace

worker_connections::worker_connections(std::function<std::string(int)> conninfo, int size,
                                       hooks_by_type hooks, std::string setup)
    : conninfo_(std::move(conninfo)), hooks_(std::move(hooks)), setup_(std::move(setup)),
      size_(size) {}

worker_connections::~worker_connections() = default;

std::unique_ptr<worker_connections::session> worker_connections::take(const std::string& who) {
  // A statement may block: the lines this worker holds (log::holder) go out before it.
  log::write_held();
  const auto me = std::this_thread::get_id();
  std::unique_lock lock(mutex_);
  available_.wait(lock, [this] { return !idle_.empty() || open_ < size_; });
  auto mine =
      std::find_if(idle_.begin(), idle_.end(), [me](const auto& s) { return s->last_user == me; });
  if (mine != idle_.end() || (open_ == size_ && !idle_.empty())) {
    auto it = mine != idle_.end() ? mine : idle_.end() - 1;
    auto s = std::move(*it);
    idle_.erase(it);
    s->last_user = me;
    busy_.push_back(s->pid);
    return s;
  }
  ++open_;
  auto n = ++opened_;
  lock.unlock();
  try {
    auto s = std::make_unique<session>(conninfo_(n), setup_, hooks_);
    s->last_user = me;
    lock.lock();
    busy_.push_back(s->pid);
    if (reported_)
      log::info(who, "database connection restored");
    reported_ = false;
    // A refused statement drops its session: the new one does not end the spell's waits.
    if (!refusing(std::chrono::steady_clock::now()))
      backoff_ = first_backoff;
    return s;
  } catch (const std::exception& e) {
    lock.lock();
    --open_;
    available_.notify_one();
    if (!reported_)
      log::warn(who, "cannot connect to the database, retrying: {}", e.what());
    reported_ = true;
    raise_backoff();
    throw;
  }
}

void worker_connections::give_back(std::unique_ptr<session> s, bool drop) {
  std::unique_ptr<session> dropped;
  std::lock_guard lock(mutex_);
  if (auto it = std::find(busy_.begin(), busy_.end(), s->pid); it != busy_.end())
    busy_.erase(it);
  if (drop) {
    dropped = std::move(s); // closed below, outside the lock
    --open_;
  } else {
    idle_.push_back(std::move(s));
  }
  available_.notify_one();
}

worker_connections::lease<outbox_repository> worker_connections::outbox(const std::string& who) {
  auto s = take(who);
  auto* repo = &s->outbox;
  return {this, std::move(s), repo};
}

worker_connections::lease<dlq_repository> worker_connections::dlq(const std::string& who) {
  auto s = take(who);
  auto* repo = &s->dlq;
  return {this, std::move(s), repo};
}

worker_connections::lease<retention_repository>
worker_connections::retention(const std::string& who) {
  auto s = take(who);
  auto* repo = &s->retention;
  return {this, std::move(s), repo};
}

void worker_connections::lost(const std::string& who, const std::exception& why) {
  std::vector<std::unique_ptr<session>> dropped;
  std::lock_guard lock(mutex_);
  if (!reported_)
    log::warn(who, "database connection lost, reconnecting: {}", why.what());
  reported_ = true;
  open_ -= static_cast<int>(idle_.size());
  dropped.swap(idle_);
  available_.notify_all();
}

int worker_connections::cancel_running() {
  std::string pids;
  int n = 0;
  {
    std::lock_guard lock(mutex_);
    for (int pid : busy_)
      pids += (n++ ? "," : "") + std::to_string(pid);
  }
  if (n == 0)
    return 0;
  try {
    pqxx::connection c(conninfo_(0));
    pqxx::nontransaction(c).exec_params("SELECT pg_cancel_backend(p) FROM unnest($1::int[]) p",
                                        "{" + pids + "}");
  } catch (const std::exception& e) {
    log::warn("supervisor", "could not cancel the statements still running: {}", e.what());
  }
  return n;
}

void worker_connections::raise_backoff() {
  auto now = std::chrono::steady_clock::now();
  if (now >= backoff_raised_ + backoff_) { // many workers failing at once raise it once
    backoff_ = std::min(backoff_ * 2, max_backoff);
    backoff_raised_ = now;
  }
}

bool worker_connections::refusing(std::chrono::steady_clock::time_point now) const {
  return refused_at_ && now - *refused_at_ < 2 * max_backoff;
}

void worker_connections::refused(const std::string& who, const std::exception& why) {
  std::lock_guard lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  if (refusing(now)) {
    log::debug(who, "the database refused for now, trying again later: {}", why.what());
  } else {
    log::warn(who,
              "the database refused for now, trying again with growing waits (up to {} s; the "
              "refusals that follow are logged at debug): {}",
              max_backoff.count() / 1000, why.what());
    backoff_ = first_backoff;
  }
  refused_at_ = now;
  raise_backoff();
}

std::chrono::milliseconds worker_connections::retry_in() const {
  std::lock_guard lock(mutex_);
  return backoff_;
}

} // namespace outboxd::persistence
