// The attempt rows of one processor's runs, written together: a run co_awaits record(row) and is
// resumed once its row is committed; the call driver flushes what its runs handed over (one
// multi-row INSERT, one transaction) each time it has resumed runs, before it waits on calls. With
// a database_lane the flush only sends the INSERT (one at a time), and the runs resume when the
// driver reads its result.
#pragma once

#include "actors/call_driver.hpp"
#include "actors/database_lane.hpp"
#include "persistence/outbox_repository.hpp"
#include "persistence/worker_connections.hpp"

#include <coroutine>
#include <exception>
#include <string>
#include <vector>

namespace outboxd::actors {

class attempt_writer final : public call_driver::batch {
public:
  /// Attaches itself to `driver` (which must outlive it); statements run on `db` under `who`,
  /// or, when given, on `lane` (which must outlive it), falling back to `db` to tell the rows
  /// of a statement the database refused apart.
  attempt_writer(persistence::worker_connections& db, std::string who, call_driver& driver,
                 database_lane* lane = nullptr);
  ~attempt_writer() override;
  attempt_writer(const attempt_writer&) = delete;
  attempt_writer& operator=(const attempt_writer&) = delete;

  /// Awaitable: suspends the run until the next flush has committed `row` (which must stay
  /// valid until then); rethrows, in the run, what failed the flush: a lost connection fails
  /// every run of the flush, a row the database refuses only its own run.
  auto record(const persistence::attempt_row& row) {
    struct awaiter {
      attempt_writer& w;
      const persistence::attempt_row& row;
      std::exception_ptr error;
      bool await_ready() noexcept { return false; }
      void await_suspend(std::coroutine_handle<> h) { w.pending_.push_back({&row, h, &error}); }
      void await_resume() {
        if (error)
          std::rethrow_exception(error);
      }
    };
    return awaiter{*this, row, {}};
  }

  /// Rows handed over and not yet written.
  std::size_t pending() const override { return pending_.size(); }

  std::size_t flush() override;
  void drop() override;

  /// A row handed over, with the run waiting for it.
  struct waiting {
    const persistence::attempt_row* row;
    std::coroutine_handle<> run;
    std::exception_ptr* error; // in the run's awaiter
  };
  /// Up to `most` of the rows waiting (the oldest), for a statement of another writer that
  /// writes them with its own (they ride on it); that writer then hands each to settle() or
  /// give_back().
  std::vector<waiting> take(std::size_t most);
  /// Resumes the runs of taken rows: their statement committed them (`error` null) or failed
  /// with `error` (which each run rethrows).
  static void settle(const std::vector<waiting>& taken, const std::exception_ptr& error);
  /// Taken rows whose statement the database refused (nothing of it committed) wait again, for
  /// the next flush, where each is written with this writer's own rows.
  void give_back(std::vector<waiting> taken);

private:
  /// Writes `batch`'s rows; what failed them, per row (null when written).
  std::vector<std::exception_ptr> write(const std::vector<waiting>& batch);
  /// Sends the oldest rows on the lane; how many runs it resumed (those of rows it could not send).
  std::size_t send();
  /// The lane's statement ended: its rows' runs go on (or, refused, are written on `db`).
  std::size_t landed(std::exception_ptr error);

  persistence::worker_connections& db_;
  std::string who_;
  call_driver& driver_;
  database_lane* lane_;
  std::vector<waiting> pending_;
  std::vector<waiting> in_flight_; // on the lane
};

} // namespace outboxd::actors
