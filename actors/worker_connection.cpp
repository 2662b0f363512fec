// Reconnect policy for worker connections: 250 ms doubling up to 10 s.
#include "actors/worker_connection.hpp"

#include "log/log.hpp"

#include <algorithm>

namespace outboxd::actors {
namespace {
constexpr std::chrono::milliseconds max_backoff{10000};
}

bool is_connection_loss(const std::exception& e) {
  if (dynamic_cast<const pqxx::broken_connection*>(&e) ||
      dynamic_cast<const pqxx::in_doubt_error*>(&e))
    return true;
  if (auto* sql = dynamic_cast<const pqxx::sql_error*>(&e)) {
    const auto& state = sql->sqlstate();
    return state.rfind("08", 0) == 0 || state.rfind("57P", 0) == 0;
  }
  return false;
}

pqxx::connection* worker_connection::get() {
  if (conn_)
    return conn_.get();
  try {
    conn_ = std::make_unique<pqxx::connection>(conninfo_);
    if (reported_)
      log::info(owner_, "database connection restored");
    reported_ = false;
    backoff_ = std::chrono::milliseconds(250);
    ++generation_;
    return conn_.get();
  } catch (const std::exception& e) {
    if (!reported_)
      log::warn(owner_, "cannot connect to the database, retrying: {}", e.what());
    reported_ = true;
    backoff_ = std::min(backoff_ * 2, max_backoff);
    return nullptr;
  }
}

void worker_connection::drop(const std::exception& why) {
  if (conn_ && !reported_)
    log::warn(owner_, "database connection lost, reconnecting: {}", why.what());
  reported_ = true;
  conn_.reset();
}

} // namespace outboxd::actors
