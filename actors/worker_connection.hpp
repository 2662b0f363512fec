// A detached worker's own database connection: opened on demand, dropped when it breaks,
// reopened after a capped exponential backoff.
#pragma once

#include <chrono>
#include <memory>
#include <pqxx/pqxx>
#include <string>

namespace outboxd::actors {

class worker_connection {
public:
  worker_connection(std::string conninfo, std::string owner)
      : conninfo_(std::move(conninfo)), owner_(std::move(owner)) {}

  /// The open connection, opening it if needed; nullptr while the database is unreachable
  /// (logged once per outage).
  pqxx::connection* get();

  /// Forgets a broken connection; `retry_in()` then says when to try again.
  void drop(const std::exception& why);

  bool open() const { return conn_ != nullptr; }
  /// Bumped on every (re)connect, so repositories prepared on the old connection are rebuilt.
  int generation() const { return generation_; }
  std::chrono::milliseconds retry_in() const { return backoff_; }

private:
  std::string conninfo_;
  std::string owner_;
  std::unique_ptr<pqxx::connection> conn_;
  std::chrono::milliseconds backoff_{250};
  bool reported_ = false;
  int generation_ = 0;
};

/// True for exceptions that mean "the connection is gone or the server is restarting".
bool is_connection_loss(const std::exception& e);

} // namespace outboxd::actors
