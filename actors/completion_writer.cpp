// One commit for the completions of many runs. A failure reaches each run it concerns, so that a
// run learns its event's fate from its own statement's outcome, exactly as with one per event.
#include "actors/completion_writer.hpp"

#include "persistence/connection_pool.hpp"

#include <map>
#include <pqxx/except>
#include <tuple>

namespace outboxd::actors {

completion_writer::completion_writer(persistence::worker_connections& db, std::string who,
                                     call_driver& driver)
    : db_(db), who_(std::move(who)), driver_(driver) {
  driver_.attach(this);
}

completion_writer::~completion_writer() {
  driver_.detach(this);
}

void completion_writer::write(const std::vector<waiting*>& all) {
  // One statement (one commit) per chunk: when one fails, those before it are in, and only its
  // own events are completed again one by one.
  constexpr auto chunk = persistence::outbox_repository::max_rows_per_insert;
  for (std::size_t first = 0; first < all.size(); first += chunk)
    write_chunk({all.begin() + static_cast<std::ptrdiff_t>(first),
                 all.begin() + static_cast<std::ptrdiff_t>(std::min(all.size(), first + chunk))});
}

void completion_writer::write_chunk(const std::vector<waiting*>& group) {
  const auto& first = *group.front();
  auto complete_all = [&](const std::vector<waiting*>& some) {
    std::vector<persistence::outbox_repository::completion> events;
    events.reserve(some.size());
    for (auto* w : some)
      events.push_back({w->event, w->last_attempt});
    auto done = db_.outbox(who_)->complete_all(first.event->aggregate_type, first.outcome,
                                               *first.reason, events);
    for (std::size_t i = 0; i < some.size(); ++i)
      some[i]->completed = done[i];
  };
  try {
    complete_all(group);
    return;
  } catch (const pqxx::failure& e) {
    // A statement the database refuses for one event would fail them all: one by one, it
    // fails only that event's run.
    if (persistence::is_connection_loss(e) || group.size() == 1) {
      for (auto* w : group)
        w->error = std::current_exception();
      return;
    }
  } catch (...) {
    for (auto* w : group)
      w->error = std::current_exception();
    return;
  }
  for (auto* w : group) {
    try {
      complete_all({w});
    } catch (...) {
      w->error = std::current_exception();
    }
  }
}

std::size_t completion_writer::flush() {
  if (pending_.empty())
    return 0;
  auto batch = std::move(pending_);
  pending_.clear();
  std::map<std::tuple<std::string, int, std::string>, std::vector<waiting*>> groups;
  for (auto* w : batch)
    groups[{w->event->aggregate_type, w->outcome ? static_cast<int>(*w->outcome) : -1, *w->reason}]
        .push_back(w);
  for (const auto& [key, group] : groups)
    write(group);
  for (auto* w : batch)
    w->run.resume();
  return batch.size();
}

} // namespace outboxd::actors
