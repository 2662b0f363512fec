// The completions of one processor's runs, committed together: a run co_awaits complete(...) and
// is resumed with whether its event was completed (its lease still held); the call driver
// flushes what its runs handed over, one statement (one synchronous commit) per aggregate type,
// outcome and reason, each event fenced by its own lease token. While the calls are fast (the
// processor's thread sets the pace), the attempt rows the other runs handed over meanwhile ride
// on the first of those statements: one round trip and one commit where there were two (the
// driver flushes this writer before the rows' own). With slow calls they do not, and go first:
// a row's own statement commits without waiting for the disk, so its run calls again sooner (its
// call goes out before the completions' statement), and the thread has time to spare. With a
// database_lane the flush only sends the statement (one kind at a time), and the runs resume when
// the driver reads its result.
#pragma once

#include "actors/attempt_writer.hpp"
#include "actors/call_driver.hpp"
#include "persistence/outbox_repository.hpp"
#include "persistence/worker_connections.hpp"

#include <coroutine>
#include <exception>
#include <optional>
#include <string>
#include <vector>

namespace outboxd::actors {

class completion_writer final : public call_driver::batch {
public:
  /// Attaches itself to `driver` (which must outlive it), ahead of the batches there; statements
  /// run on `db` under `who`. `rows`, when given, is the writer of the same runs' attempt rows
  /// (attached to the same driver, outliving this writer), some of whose rows ride on the
  /// completions' statements.
  completion_writer(persistence::worker_connections& db, std::string who, call_driver& driver,
                    attempt_writer* rows = nullptr, database_lane* lane = nullptr,
                    persistence::hooks_by_type hooks = {});
  ~completion_writer() override;
  completion_writer(const completion_writer&) = delete;
  completion_writer& operator=(const completion_writer&) = delete;

  /// Awaitable: outbox_repository::complete() of `e` at the next flush (`e`, `reason` and
  /// `last_attempt` must stay valid until then); the run resumes with its answer, or with the
  /// exception that failed it: a lost connection fails every completion of the flush, a
  /// statement the database refuses only its own event's.
  auto complete(const persistence::claimed_event& e, std::optional<domain::engine_outcome> outcome,
                const std::string& reason, const persistence::attempt_row* last_attempt) {
    struct awaiter {
      completion_writer& w;
      waiting entry;
      bool await_ready() noexcept { return false; }
      void await_suspend(std::coroutine_handle<> h) {
        entry.run = h;
        w.pending_.push_back(&entry);
      }
      bool await_resume() {
        if (entry.error)
          std::rethrow_exception(entry.error);
        return entry.completed;
      }
    };
    return awaiter{*this, {&e, outcome, &reason, last_attempt, {}, {}, false}};
  }

  /// Completions handed over and not yet written.
  std::size_t pending() const override { return pending_.size(); }
  /// Runs waiting for their completion: handed over, or in a statement not yet answered.
  std::size_t finishing() const { return pending_.size() + in_flight_.size(); }

  std::size_t flush() override;
  void drop() override;

private:
  struct waiting {
    const persistence::claimed_event* event;
    std::optional<domain::engine_outcome> outcome;
    const std::string* reason;
    const persistence::attempt_row* last_attempt;
    std::coroutine_handle<> run;
    std::exception_ptr error;
    bool completed;
  };
  /// Completes `group` (same aggregate type, outcome and reason), filling in each answer; the
  /// rows in `riders` (emptied) go with its first statement. How many riders it resumed.
  std::size_t write(const std::vector<waiting*>& group,
                    std::vector<attempt_writer::waiting>& riders);

  /// Sends the oldest completions of one kind (with riders when `ride`) on the lane; how many
  /// runs it resumed (those it could not send).
  std::size_t send(bool ride);
  /// The lane's statement ended (`rows`: the ids completed): resumes its runs and riders, as
  /// write() would have; a refused statement is written again by write(), without its riders.
  std::size_t landed(const persistence::text_rows& rows, std::exception_ptr error);

  /// Rows ride only on a flush of at most this many completions, at most this many of them: the
  /// statements prepared per connection stay few (one per number of events and rows), and a
  /// large flush of rows is a statement of its own anyway.
  static constexpr std::size_t ride_limit = 8;

  persistence::worker_connections& db_;
  std::string who_;
  call_driver& driver_;
  attempt_writer* rows_;
  database_lane* lane_;
  persistence::hooks_by_type hooks_; // the transitions of the completions it sends on the lane
  std::vector<waiting*> pending_;    // in the runs' awaiters
  std::vector<waiting*> in_flight_;
  std::vector<attempt_writer::waiting> riding_;
};

} // namespace outboxd::actors
