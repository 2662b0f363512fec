// A result is read inside the driver's wait (multi_caller::run), and the runs it resumes go on
// from there: their next calls start and their next rows wait for the driver's flush.
#include "actors/database_lane.hpp"

#include <algorithm>
#include <stdexcept>

namespace outboxd::actors {

database_lane::database_lane(call_driver& driver, const std::string& conninfo,
                             const std::string& setup, int count)
    : driver_(driver) {
  for (int i = 0; i < count; ++i)
    connections_.push_back(std::make_unique<connection>(conninfo, setup));
}

database_lane::~database_lane() {
  for (auto& c : connections_)
    unwatch(*c);
}

bool database_lane::idle() const {
  return std::any_of(connections_.begin(), connections_.end(),
                     [](const auto& c) { return !c->lane.busy(); });
}

void database_lane::send(const persistence::bound_statement& s, completion done) {
  auto free = std::find_if(connections_.begin(), connections_.end(),
                           [](const auto& c) { return !c->lane.busy(); });
  if (free == connections_.end())
    throw std::logic_error("database_lane: every connection has a statement in flight");
  auto& c = **free;
  try {
    c.lane.send(s, [this, &c](persistence::text_rows rows, std::exception_ptr error) {
      auto finished = std::move(c.done);
      c.done = nullptr;
      resumed_ += finished(std::move(rows), std::move(error));
    });
  } catch (...) {
    follow(c); // a failed connection attempt closed it
    throw;
  }
  c.done = std::move(done);
  follow(c);
}

void database_lane::drop() {
  for (auto& c : connections_) {
    if (c->lane.busy())
      c->lane.close();
    c->done = nullptr;
    follow(*c);
  }
}

std::size_t database_lane::readable(connection& c) {
  resumed_ = 0;
  c.lane.on_readable();
  follow(c);
  return resumed_;
}

void database_lane::follow(connection& c) {
  const int fd = c.lane.socket();
  if (fd == c.watched && c.lane.connections() == c.watched_opening)
    return;
  unwatch(c);
  if (fd < 0)
    return;
  driver_.watch(fd, [this, &c] { return readable(c); });
  c.watched = fd;
  c.watched_opening = c.lane.connections();
}

void database_lane::unwatch(connection& c) {
  if (c.watched >= 0)
    driver_.unwatch(c.watched);
  c.watched = -1;
}

} // namespace outboxd::actors
