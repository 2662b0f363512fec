// One round trip for the rows of many runs; a failure is handed to each run it concerns, so
// that a run goes on only once its own row is committed, exactly as with one INSERT per row.
#include "actors/attempt_writer.hpp"

#include "persistence/connection_pool.hpp"

#include <algorithm>
#include <pqxx/except>

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
  constexpr auto chunk = persistence::outbox_repository::max_rows_per_insert;
  // One statement (one commit) per chunk: when one fails, those before it are in, and only its
  // own rows are written again.
  for (std::size_t first = 0; first < batch.size(); first += chunk) {
    const auto last = std::min(batch.size(), first + chunk);
    std::vector<const persistence::attempt_row*> rows;
    rows.reserve(last - first);
    for (auto i = first; i < last; ++i)
      rows.push_back(batch[i].row);
    try {
      db_.outbox(who_)->record_attempts(rows);
      continue;
    } catch (const pqxx::failure& e) {
      // A refused row fails the whole statement: written one by one, it fails only its run.
      if (persistence::is_connection_loss(e) || rows.size() == 1) {
        std::fill(errors.begin() + first, errors.end(), std::current_exception());
        return errors;
      }
    } catch (...) {
      std::fill(errors.begin() + first, errors.end(), std::current_exception());
      return errors;
    }
    for (auto i = first; i < last; ++i) {
      try {
        db_.outbox(who_)->record_attempt(*batch[i].row);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  }
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

} // namespace outboxd::actors
