// One round trip for the rows of many runs; a failure is handed to each run it concerns, so
// that a run goes on only once its own row is committed, exactly as with one INSERT per row.
#include "actors/attempt_writer.hpp"

#include "actors/statement_chunks.hpp"

#include <algorithm>
#include <utility>

namespace outboxd::actors {

attempt_writer::attempt_writer(persistence::worker_connections& db, std::string who,
                               call_driver& driver, database_lane* lane)
    : db_(db), who_(std::move(who)), driver_(driver), lane_(lane) {
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
  if (lane_)
    return lane_->idle() && in_flight_.empty() ? send() : 0;
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

std::size_t attempt_writer::send() {
  in_flight_ = take(persistence::outbox_repository::max_rows_per_insert);
  std::vector<const persistence::attempt_row*> rows;
  rows.reserve(in_flight_.size());
  for (const auto& w : in_flight_)
    rows.push_back(w.row);
  try {
    lane_->send(persistence::outbox_statements::attempts(rows),
                [this](persistence::text_rows, std::exception_ptr error) { return landed(error); });
  } catch (...) {
    // Not sent: the runs learn it as they would from a statement that failed.
    auto batch = std::exchange(in_flight_, {});
    settle(batch, std::current_exception());
    return batch.size();
  }
  return 0;
}

std::size_t attempt_writer::landed(std::exception_ptr error) {
  auto batch = std::exchange(in_flight_, {});
  std::vector<std::exception_ptr> errors(batch.size(), error);
  if (error && refused(error))
    errors = write(batch); // nothing of it committed: each row on its own tells the bad one
  for (std::size_t i = 0; i < batch.size(); ++i) {
    *batch[i].error = errors[i];
    batch[i].run.resume();
  }
  return batch.size();
}

void attempt_writer::drop() {
  pending_.clear();
  if (!in_flight_.empty() && lane_)
    lane_->drop();
  in_flight_.clear();
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
