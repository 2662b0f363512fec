// The intake notifier's thread: waits for commits, sends one NOTIFY per wake-up, and retries
// after a capped backoff while the database cannot be reached (the engine's polling and the
// listener's sweep after a reconnect cover what it could not announce meanwhile).
#include "persistence/intake_notifier.hpp"

#include "log/log.hpp"

#include <algorithm>

namespace outboxd::persistence {
namespace {

constexpr const char* tag = "intake-notifier";
constexpr std::chrono::milliseconds first_backoff{250};
constexpr std::chrono::milliseconds max_backoff{5000};

} // namespace

intake_notifier::intake_notifier(std::string conninfo)
    : conninfo_(std::move(conninfo)), thread_([this] { run(); }) {}

intake_notifier::~intake_notifier() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_one();
  thread_.join();
}

void intake_notifier::committed(std::int64_t id) {
  {
    std::lock_guard lock(mutex_);
    owed_ = std::max(owed_, id);
  }
  changed_.notify_one();
}

void intake_notifier::run() {
  auto backoff = first_backoff;
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return owed_ != 0 || stopping_; });
    if (owed_ == 0)
      return; // stopping, nothing owed
    auto id = owed_;
    owed_ = 0;
    lock.unlock();
    bool sent = send(id);
    lock.lock();
    if (sent) {
      backoff = first_backoff;
      continue;
    }
    owed_ = std::max(owed_, id);
    if (stopping_)
      return; // one attempt at the end; the engine's polling finds the rest
    changed_.wait_for(lock, backoff, [&] { return stopping_; });
    backoff = std::min(backoff * 2, max_backoff);
  }
}

bool intake_notifier::send(std::int64_t id) {
  try {
    if (!conn_) {
      conn_ = std::make_unique<pqxx::connection>(conninfo_);
      // Nothing depends on this transaction's durability, and without a flush to wait for it
      // holds the notification lock only for an instant.
      pqxx::nontransaction(*conn_).exec("SET synchronous_commit = off");
      if (reported_)
        log::info(tag, "database reachable again; notifying");
      reported_ = false;
    }
    pqxx::nontransaction(*conn_).exec_params("SELECT pg_notify('outbox_events_channel', $1)",
                                             std::to_string(id));
    return true;
  } catch (const std::exception& e) {
    conn_.reset();
    if (!reported_)
      log::warn(tag, "cannot notify the workers of event {} (they poll meanwhile): {}", id,
                e.what());
    reported_ = true;
    return false;
  }
}

} // namespace outboxd::persistence
