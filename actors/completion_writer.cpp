// One commit for the completions of many runs. A failure reaches each run it concerns, so that a
// run learns its event's fate from its own statement's outcome, exactly as with one per event.
#include "actors/completion_writer.hpp"

#include "actors/statement_chunks.hpp"

#include <map>
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

void completion_writer::write(const std::vector<waiting*>& group) {
  const auto& first = *group.front();
  auto complete = [&](std::size_t from, std::size_t to) {
    std::vector<persistence::outbox_repository::completion> events;
    events.reserve(to - from);
    for (auto i = from; i < to; ++i)
      events.push_back({group[i]->event, group[i]->last_attempt});
    auto done = db_.outbox(who_)->complete_all(first.event->aggregate_type, first.outcome,
                                               *first.reason, events);
    for (auto i = from; i < to; ++i)
      group[i]->completed = done[i - from];
  };
  write_in_statements(
      group.size(), complete, [&](std::size_t i) { complete(i, i + 1); },
      [&](std::size_t i, std::exception_ptr error) { group[i]->error = std::move(error); });
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
