// The connections of the plain-HTTP listener. One thread accepts them and reads them without
// blocking (epoll) until a whole request has arrived; only then does a worker thread run it, and
// between requests the worker arms a keep-alive connection in that thread's epoll again (armed
// for one event at a time, a connection is owned by one thread at a time). Answers are written
// without waiting: what the client does not take at once, the gate thread writes as it reads
// (the next request on that connection waits for it). A slow, dribbling, idle or non-reading
// client therefore costs a buffer, never one of the threads that serve everyone else:
// - a request (headers and body) must arrive whole within `request_timeout` of its first byte,
//   else 408; an idle connection is closed after `keep_alive_timeout`;
// - connections are capped in all and per client address; over a cap the oldest idle
//   connection is closed to make room, and when none is idle the newcomer gets an immediate 503;
// - an answer not taken whole within `write_timeout` closes its connection; answers waiting so
//   are bounded in all (past that, a worker waits for its client, at most `write_timeout`);
// - when the workers are behind (the request first in line has waited half a second for one), a
//   new request gets an immediate 503 rather than a wait;
// - a handler may answer later without holding its thread meanwhile (defer_answer): the gate
//   keeps the request and runs it again when its time comes;
// - a request the owner calls quick (short, never waiting on its thread) runs on the gate thread
//   itself, sparing the two thread hand-offs a worker costs (wake-up and hand-back).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

struct epoll_event;

namespace httplib {
class Stream;
}

namespace outboxd::http {

/// For a route handler: answer the request running on this thread `delay` from now, without
/// holding the thread meanwhile. The handler returns at once and whatever it answered is dropped;
/// when the delay has passed, the gate runs the same request again (from its routing on), and
/// resumed_state() then returns `state`. Call it last: an exception after it is dropped too.
/// Returns false, and changes nothing, when the request is not served by a connection gate (an
/// HTTPS listener) or the gate is stopping: the handler must then answer now (waiting on its
/// thread if it must wait).
bool defer_answer(std::chrono::milliseconds delay, std::shared_ptr<void> state);

/// The state given to defer_answer() when this run of the request is its resumption; null on
/// its first run (and outside a gate).
std::shared_ptr<void> resumed_state();

/// Whether the handler of the request running on this thread deferred its answer: what this run
/// answered is not sent (for a request logger).
bool answer_deferred();

/// When the request running on this thread first started, if this run is a resumption of it.
std::optional<std::chrono::steady_clock::time_point> deferred_since();

/// For an error handler: close the connection of the request running on this thread once its
/// answer is sent (after a request that could not be read, whatever follows it on the connection
/// cannot be trusted to start a request). Does nothing outside a gate.
void close_after_answer();

struct gate_limits {
  std::chrono::milliseconds request_timeout{10000};
  std::chrono::milliseconds keep_alive_timeout{5000};
  std::chrono::milliseconds write_timeout{5000};
  std::size_t max_header_bytes = 64 * 1024;
  std::size_t max_body_bytes = 1 << 20;
  int max_connections = 512;
  int max_connections_per_client = 256;
  int workers = 32;
};

class connection_gate {
public:
  /// Runs one whole request read from `stream` and writes its answer there; sets
  /// `connection_closed` when the connection must not serve another. (httplib's request
  /// processing.)
  using process =
      std::function<void(httplib::Stream& stream, bool close_connection, bool& connection_closed)>;
  /// Whether a request, by its method and target (the path, with any query), runs on the gate
  /// thread: its handler takes microseconds and never waits on its thread (it defers instead).
  /// A pipelined request after it, or one larger than 16 KiB, goes to a worker.
  using quick_request = std::function<bool(std::string_view method, std::string_view target)>;

  /// `component` tags log lines; without `quick`, every request runs on a worker.
  connection_gate(gate_limits limits, process run, std::string component, quick_request quick = {});
  ~connection_gate();
  connection_gate(const connection_gate&) = delete;
  connection_gate& operator=(const connection_gate&) = delete;

  /// Serves the connections of `listen_fd` (bound and listening; made non-blocking here) on its
  /// own threads until stop().
  void start(int listen_fd);
  /// Stops accepting, finishes the requests that have arrived whole, closes every connection and
  /// joins the threads. Idempotent.
  void stop();

  struct connection;

private:
  struct ready_request {
    connection* conn = nullptr;
    std::size_t length = 0;
    bool resumed = false;                            // a deferred answer whose time came
    std::shared_ptr<void> state{};                   // for resumed_state()
    std::chrono::steady_clock::time_point started{}; // of the request's first run
    std::chrono::steady_clock::time_point queued{};  // since when it waits for a worker
    bool quick = false;       // runs on the gate thread (and so does its resumption)
    std::string unsent{};     // for a worker: the rest of a quick answer, to write before all else
    bool close_after = false; // ... and then close the connection
  };
  /// What one run of a request came to.
  struct run_outcome {
    bool deferred = false;
    std::chrono::milliseconds delay{0};
    bool close = false; // the connection must not serve another request
  };
  struct deferred_request {
    std::chrono::steady_clock::time_point due;
    ready_request request;
    bool operator>(const deferred_request& o) const { return due > o.due; }
  };

  void gate_loop();
  void accept_all(std::chrono::steady_clock::time_point now);
  void on_readable(connection& c, std::chrono::steady_clock::time_point now);
  /// Writes what `c` takes of the rest of its answer; once all is sent, serves what follows.
  void on_writable(connection& c, std::chrono::steady_clock::time_point now);
  /// After an answer sent whole: the next request on `c`, or a wait for it.
  void answered(connection& c, std::chrono::steady_clock::time_point now);
  enum class sent { all, parked, over_budget, failed };
  /// Sends what `c` takes of `out` now and keeps the rest in `c.unsent` (counted against the
  /// budget of unsent answers, unless over it).
  sent send_or_park(connection& c, const std::string& out);
  /// Over that budget: this worker waits for `c`'s client to take `data` (at most
  /// server.writeTimeout), unless a quarter of the workers wait so already; then nothing is sent
  /// and the connection is to be closed, so that clients that do not read cannot hold every
  /// worker. False when the connection must close.
  bool send_waiting(connection& c, std::string_view data);
  void try_dispatch(connection& c, bool quick_allowed = true);
  void sweep(std::chrono::steady_clock::time_point now);
  void take_back(std::chrono::steady_clock::time_point now);
  bool make_room(const std::string& client);
  void refuse(int fd, int status, const std::string& message, const char* reason);
  void refuse(connection& c, int status, const std::string& message, const char* reason);
  void close_connection(connection& c);
  void worker_loop();
  /// Runs `r` once on this thread, its answer buffered in `out`; a deferral leaves its state in
  /// `r`.
  run_outcome run_once(ready_request& r, std::string& out);
  void serve(ready_request r);
  void serve_on_gate(ready_request r);
  bool linger(connection& c);
  void hand_back(connection& c);
  void give_back(connection* c, bool close);
  /// Keeps `r` (moved from) until `delay` has passed; false, and `r` untouched, once the gate
  /// stops: the request must then run again at once (and answer without waiting).
  bool defer(ready_request& r, std::chrono::milliseconds delay);
  void release_due(std::chrono::steady_clock::time_point now);
  int wait_events(::epoll_event* events, int max);
  void arm(connection& c, int op, bool for_writing = false);
  void wake();

  gate_limits limits_;
  process run_;
  std::string component_;
  quick_request quick_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  bool accept_paused_ = false;
  bool precise_wait_ = true; // epoll_pwait2 is there
  std::chrono::steady_clock::time_point accept_resume_;

  // The gate thread's own: every open connection and the count per client address.
  std::unordered_map<int, std::unique_ptr<connection>> connections_;
  std::map<std::string, int> per_client_;

  std::mutex mutex_; // guards what follows
  std::condition_variable ready_cv_;
  std::deque<ready_request> ready_;
  // Deferred answers by due time (a min-heap), and when the gate thread wakes next on its own.
  std::vector<deferred_request> deferred_;
  std::chrono::steady_clock::time_point gate_wakes_at_;
  std::atomic<std::size_t> waiting_ = 0;               // ready_.size(), read without the mutex
  std::atomic<std::size_t> unsent_bytes_ = 0;          // of every connection's unsent answer
  std::atomic<int> writing_workers_ = 0;               // in send_waiting()
  std::vector<std::pair<connection*, bool>> returned_; // from the workers: (connection, close)
  bool stopping_ = false;
  std::atomic<bool> workers_done_ = false; // stop() joined the workers: the gate thread ends

  std::thread gate_thread_;
  std::vector<std::thread> workers_;
};

} // namespace outboxd::http
