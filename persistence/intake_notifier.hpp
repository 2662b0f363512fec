// Coalesced wake-ups for the events the API commits. A NOTIFY in a committing transaction takes
// PostgreSQL's database-wide notification lock and holds it through the commit's WAL flush, so
// every order taken with a notification in its own transaction commits one after another. The
// API's connections therefore insert events without notifying (the trigger skips inserts on a
// session that says so), and after each commit tell this notifier, which sends one NOTIFY for
// all the events committed since its last one, from its own connection and thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <pqxx/pqxx>
#include <string>
#include <thread>

namespace outboxd::persistence {

class intake_notifier {
public:
  /// Run on every connection whose inserted outbox events this notifier announces: the insert
  /// trigger leaves their notification to it.
  static constexpr const char* session_setup = "SET outboxd.notify_inserts = 'coalesced'";

  explicit intake_notifier(std::string conninfo);
  /// Sends what is still owed (one attempt), then stops.
  ~intake_notifier();
  intake_notifier(const intake_notifier&) = delete;
  intake_notifier& operator=(const intake_notifier&) = delete;

  /// Event `id` was committed; never blocks on the database. The next notification carries the
  /// highest id committed since the previous one.
  void committed(std::int64_t id);

private:
  void run();
  /// One NOTIFY on a (re)opened connection; false when it failed.
  bool send(std::int64_t id);

  std::string conninfo_;
  std::unique_ptr<pqxx::connection> conn_;
  bool reported_ = false;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::int64_t owed_ = 0; // highest id not yet announced; 0 = none
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace outboxd::persistence
