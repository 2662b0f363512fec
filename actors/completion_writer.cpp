// One commit for the completions of many runs. A failure reaches each run it concerns, so that a
// run learns its event's fate from its own statement's outcome, exactly as with one per event.
#include "actors/completion_writer.hpp"

#include "actors/statement_chunks.hpp"
#include "persistence/connection_pool.hpp"

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

namespace outboxd::actors {

completion_writer::completion_writer(persistence::worker_connections& db, std::string who,
                                     call_driver& driver, attempt_writer* rows, database_lane* lane,
                                     persistence::hooks_by_type hooks)
    : db_(db), who_(std::move(who)), driver_(driver), rows_(rows), lane_(lane),
      hooks_(std::move(hooks)) {
  driver_.attach(this, true);
}

completion_writer::~completion_writer() {
  driver_.detach(this);
}

std::size_t completion_writer::write(const std::vector<waiting*>& group,
                                     std::vector<attempt_writer::waiting>& riders) {
  const auto& first = *group.front();
  std::size_t settled = 0;
  auto complete_all = [&](const auto& events,
                          const std::vector<const persistence::attempt_row*>& rows) {
    return db_.outbox(who_)->complete_all(first.event->aggregate_type, first.outcome, *first.reason,
                                          events, rows);
  };
  auto complete = [&](std::size_t from, std::size_t to) {
    std::vector<persistence::outbox_repository::completion> events;
    events.reserve(to - from);
    for (auto i = from; i < to; ++i)
      events.push_back({group[i]->event, group[i]->last_attempt});
    // The riders go with the first statement tried: committed with it, or resumed with the error
    // of a lost connection; when the database refuses it (nothing of it committed), they wait for
    // their own writer's flush and the completions are written without them, so that neither
    // fails for the other's fault.
    std::optional<std::vector<bool>> done;
    if (auto riding = std::exchange(riders, {}); !riding.empty()) {
      std::vector<const persistence::attempt_row*> rows;
      for (const auto& r : riding)
        rows.push_back(r.row);
      try {
        done = complete_all(events, rows);
      } catch (const pqxx::failure& e) {
        if (persistence::is_connection_loss(e)) {
          attempt_writer::settle(riding, std::current_exception());
          settled += riding.size();
          throw;
        }
        rows_->give_back(std::move(riding));
      } catch (...) {
        attempt_writer::settle(riding, std::current_exception());
        settled += riding.size();
        throw;
      }
      if (done) {
        attempt_writer::settle(riding, nullptr);
        settled += riding.size();
      }
    }
    if (!done)
      done = complete_all(events, {});
    for (auto i = from; i < to; ++i)
      group[i]->completed = (*done)[i - from];
  };
  write_in_statements(
      group.size(), complete, [&](std::size_t i) { complete(i, i + 1); },
      [&](std::size_t i, std::exception_ptr error) { group[i]->error = std::move(error); });
  return settled;
}

std::size_t completion_writer::send(bool ride) {
  const auto& first = *pending_.front();
  auto same = [&](const waiting* w) {
    return w->event->aggregate_type == first.event->aggregate_type && w->outcome == first.outcome &&
           *w->reason == *first.reason;
  };
  std::vector<waiting*> rest;
  for (auto* w : pending_)
    (same(w) && in_flight_.size() < persistence::outbox_repository::max_rows_per_insert ? in_flight_
                                                                                        : rest)
        .push_back(w);
  pending_ = std::move(rest);
  if (ride)
    riding_ = rows_->take(ride_limit);
  std::vector<persistence::outbox_repository::completion> events;
  for (auto* w : in_flight_)
    events.push_back({w->event, w->last_attempt});
  std::vector<const persistence::attempt_row*> rows;
  for (const auto& r : riding_)
    rows.push_back(r.row);
  try {
    lane_->send(persistence::outbox_statements::completions(hooks_, first.event->aggregate_type,
                                                            first.outcome, *first.reason, events,
                                                            rows),
                [this](persistence::text_rows result, std::exception_ptr error) {
                  return landed(result, error);
                });
  } catch (...) {
    return landed({}, std::current_exception()); // not sent: as a statement that failed
  }
  return 0;
}

std::size_t completion_writer::landed(const persistence::text_rows& result,
                                      std::exception_ptr error) {
  auto batch = std::exchange(in_flight_, {});
  auto riding = std::exchange(riding_, {});
  std::size_t resumed = batch.size();
  const bool lost = error && !refused(error);
  if (!error) {
    std::vector<std::int64_t> ids;
    for (const auto& r : result)
      ids.push_back(std::stoll(*r[0]));
    std::vector<persistence::outbox_repository::completion> events;
    for (auto* w : batch)
      events.push_back({w->event, w->last_attempt});
    auto done = persistence::outbox_statements::completed(ids, events);
    for (std::size_t i = 0; i < batch.size(); ++i)
      batch[i]->completed = done[i];
    attempt_writer::settle(riding, nullptr);
    resumed += riding.size();
  } else if (lost) {
    for (auto* w : batch)
      w->error = error;
    attempt_writer::settle(riding, error);
    resumed += riding.size();
  } else {
    // Refused, nothing of it committed: the riders wait for their own statement, the
    // completions are written on a borrowed connection, each on its own when they fail together.
    if (!riding.empty())
      rows_->give_back(std::move(riding));
    std::vector<attempt_writer::waiting> none;
    write(batch, none);
  }
  for (auto* w : batch)
    w->run.resume();
  return resumed;
}

void completion_writer::drop() {
  pending_.clear();
  if ((!in_flight_.empty() || !riding_.empty()) && lane_)
    lane_->drop();
  in_flight_.clear();
  riding_.clear();
}

std::size_t completion_writer::flush() {
  if (pending_.empty())
    return 0;
  // Riding, the rows' runs wait for the completions' commit to the disk. Otherwise their own
  // statement goes first (its commit does not wait for the disk) and their next calls go out
  // before the completions' statement: this writer declines the flush, the driver flushes the
  // rows, sends the calls and comes back here.
  const bool ride = rows_ && pending_.size() <= ride_limit && driver_.calls_are_fast();
  if (!ride && rows_ && rows_->pending() > 0)
    return 0;
  if (lane_)
    return lane_->idle() && in_flight_.empty() ? send(ride) : 0;
  auto batch = std::move(pending_);
  pending_.clear();
  std::vector<attempt_writer::waiting> riders;
  if (ride)
    riders = rows_->take(ride_limit);
  std::map<std::tuple<std::string, int, std::string>, std::vector<waiting*>> groups;
  for (auto* w : batch)
    groups[{w->event->aggregate_type, w->outcome ? static_cast<int>(*w->outcome) : -1, *w->reason}]
        .push_back(w);
  std::size_t resumed = batch.size();
  for (const auto& [key, group] : groups)
    resumed += write(group, riders);
  for (auto* w : batch)
    w->run.resume();
  return resumed;
}

} // namespace outboxd::actors
