// A processor's connections of its own (persistence::statement_lane each), waited on with its
// calls: the call driver watches their sockets, and a statement's result resumes the runs that
// waited for it from the driver's wait, as a call's answer does. The processor's claims and its
// statement writers send on whichever connection is free; each writer keeps one statement in
// flight, and what its runs hand over meanwhile waits for the next.
#pragma once

#include "actors/call_driver.hpp"
#include "persistence/statement_lane.hpp"

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace outboxd::actors {

class database_lane {
public:
  /// What a statement's result does: resumes runs, and says how many.
  using completion = std::function<std::size_t(persistence::text_rows, std::exception_ptr)>;

  /// `count` connections (opened at their first statement) with `conninfo`, each running `setup`
  /// when opened; `driver` (which must outlive this) waits on them.
  database_lane(call_driver& driver, const std::string& conninfo, const std::string& setup,
                int count);
  ~database_lane();
  database_lane(const database_lane&) = delete;
  database_lane& operator=(const database_lane&) = delete;

  /// A connection has no statement in flight: send() may be called.
  bool idle() const;

  /// Sends `s` on a connection without a statement in flight; `done` runs from a later drive().
  /// Throws as statement_lane::send() (then `done` never runs).
  void send(const persistence::bound_statement& s, completion done);

  /// Drops the statements in flight (their runs are being destroyed): their connections are
  /// closed, their completions never run; the next statement opens a new connection.
  void drop();

private:
  struct connection {
    connection(const std::string& conninfo, const std::string& setup) : lane(conninfo, setup) {}
    persistence::statement_lane lane;
    completion done;
    int watched = -1;                  // the socket the driver waits on
    std::uint64_t watched_opening = 0; // of which opening of the connection
  };
  /// The driver found `c`'s socket readable: how many runs its result resumed.
  std::size_t readable(connection& c);
  /// Keeps the driver waiting on `c`'s current socket (none while it is closed).
  void follow(connection& c);
  void unwatch(connection& c);

  call_driver& driver_;
  std::vector<std::unique_ptr<connection>> connections_;
  std::size_t resumed_ = 0;
};

} // namespace outboxd::actors
