// One commit for the completions of many runs. A failure reaches each run it concerns, so that a
// run learns its event's fate from its own statement's outcome, exactly as with one per event.
#include "actors/completion_writer.hpp"

#include "actors/statement_chunks.hpp"
#include "persistence/connection_pool.hpp"

#include <map>
#include <optional>
#include <tuple>
#include <utility>

namespace outboxd::actors {

completion_writer::completion_writer(persistence::worker_connections& db, std::string who,
                                     call_driver& driver, attempt_writer* rows)
    : db_(db), who_(std::move(who)), driver_(driver), rows_(rows) {
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
