// One round trip for the rows of many runs; a failure is handed to each run it concerns, so
// that a run goes on only once its own row is committed, exactly as with one INSERT per row.
#include "actors/attempt_writer.hpp"

#include "actors/statement_chunks.hpp"

#include <algorithm>

namespace outboxd::actors {

attempt_writer::attempt_writer(persistence::worker_connections& db, std::string who,
                               call_driver& driver)
    : db_(db), who_(std::move(who)), driver_(driver) {
  driver_.attach(this);
}

attempt_writer::~attempt_writer() {
  driver_.detach(this);
}

std::vector<std::exception_ptr> attempt_writer::write(const std::vector<waiting>& batch) {
  std::vector<std::exception_ptr> errors(batch.size());
  write_in_statements(
      batch.size(),
      [&](std::size_t first, std::size_t last) {
        std::vector<const persistence::attempt_row*> rows;
        rows.reserve(last - first);
        for (auto i = first; i < last; ++i)
          rows.push_back(batch[i].row);
        db_.outbox(who_)->record_attempts(rows);
      },
      [&](std::size_t i) { db_.outbox(who_)->record_attempt(*batch[i].row); },
      [&](std::size_t i, std::exception_ptr error) { errors[i] = std::move(error); });
  return errors;
}

std::size_t attempt_writer::flush() {
  if (pending_.empty())
    return 0;
  auto batch = std::move(pending_);
  pending_.clear();
  auto errors = write(batch);
  // Resumed runs may hand over new rows: they go to the next flush.
  for (std::size_t i = 0; i < batch.size(); ++i) {
    *batch[i].error = errors[i];
    batch[i].run.resume();
  }
  return batch.size();
}

std::vector<attempt_writer::waiting> attempt_writer::take(std::size_t most) {
  const auto n = std::min(most, pending_.size());
  std::vector<waiting> taken(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(n));
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(n));
  return taken;
}

void attempt_writer::settle(const std::vector<waiting>& taken, const std::exception_ptr& error) {
  for (const auto& w : taken) {
    *w.error = error;
    w.run.resume();
  }
}

void attempt_writer::give_back(std::vector<waiting> taken) {
  pending_.insert(pending_.begin(), taken.begin(), taken.end());
}

} // namespace outboxd::actors
