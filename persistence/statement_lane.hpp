// A database connection of one worker whose statements do not block its thread: a statement is
// sent, the worker goes on with its calls, and its result is read when the connection's socket
// (in the worker's wait set, next to the calls' sockets) says it arrived. One statement at a time.
// libpq directly (libpqxx 6 sends only blocking statements); errors come out as libpqxx's
// exceptions so that the one connection-loss rule applies. Not thread-safe.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

struct pg_conn;

namespace outboxd::persistence {

/// A statement parameter in text form; nullopt is NULL.
using param = std::optional<std::string>;

/// A prepared statement to send: its name, its SQL (prepared on a connection's first use of the
/// name) and its parameters.
struct bound_statement {
  std::string name;
  std::string sql;
  std::vector<param> params;
};

/// The rows of a statement's result, as text (nullopt: NULL).
using text_rows = std::vector<std::vector<std::optional<std::string>>>;

class statement_lane {
public:
  /// Its result, or the exception that failed it (libpqxx's types: broken_connection for a lost
  /// connection, sql_error with the SQLSTATE for a refusal).
  using completion = std::function<void(text_rows rows, std::exception_ptr error)>;

  /// Connects at the first statement, with `conninfo`, and runs `setup` (SQL, optional) then.
  statement_lane(std::string conninfo, std::string setup);
  ~statement_lane();
  statement_lane(const statement_lane&) = delete;
  statement_lane& operator=(const statement_lane&) = delete;

  /// Sends `s` (connecting first when needed, which blocks); `done` is called from a later
  /// on_readable() with its result. A statement that fails closes the connection, and the next
  /// one opens a new connection. Throws (broken_connection) when it cannot be sent; then
  /// `done` is never called.
  void send(const bound_statement& s, completion done);
  /// Sends `sql` (text, no parameters; it may hold several statements: the last one's rows are
  /// the result) as send() does.
  void send_text(const std::string& sql, completion done);

  /// Connections opened so far: a new one may reuse the last one's socket number.
  std::uint64_t connections() const { return connections_; }

  /// A statement is in flight.
  bool busy() const { return static_cast<bool>(done_); }
  /// The socket to wait on for the result (-1 when not connected).
  int socket() const;
  /// The socket is readable: reads what arrived; once the whole result is in, calls its
  /// completion. Returns whether it did. With nothing in flight, a connection the server closed
  /// is closed here.
  bool on_readable();
  /// Closes the connection (a statement in flight is dropped, its completion never called).
  void close();

private:
  void connect();
  void sent(completion done);
  pg_conn* conn_ = nullptr;
  std::uint64_t connections_ = 0;
  std::string conninfo_;
  std::string setup_;
  std::set<std::string> prepared_;
  completion done_;
  text_rows rows_;
  std::exception_ptr error_;
};

} // namespace outboxd::persistence
