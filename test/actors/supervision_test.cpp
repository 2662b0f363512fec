// Supervision of the engine's actors with a real actor system, a real PostgreSQL and a real
// loopback HTTP destination: crashed processors come back with one dead-letter child, a crashed
// dead-letter child comes back under its processor, restart waits grow and reset, and an orderly
// stop finishes the call in flight and hands the rest back.
#include "actors/engine.hpp"
#include "metrics/metrics.hpp"
#include "persistence/aggregate_hooks.hpp"
#include "test/support/test_db.hpp"

#include <atomic>
#include <caf/all.hpp>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <functional>
#include <future>
#include <httplib.h>
#include <pqxx/pqxx>
#include <stdexcept>
#include <thread>
#include <unistd.h>

using namespace outboxd;
using namespace outboxd::test;
using namespace std::chrono_literals;
using std::chrono::steady_clock;

namespace {

const lazy_database db("outboxd_actor_supervision");

/// Waits until `done()` holds; false when `deadline` passes first.
template <class F> bool eventually(F done, std::chrono::milliseconds deadline = 20s) {
  auto until = steady_clock::now() + deadline;
  while (!done()) {
    if (steady_clock::now() > until)
      return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

/// An aggregate whose every transition throws: completing one of its events (or resolving one of
/// its dead letters) crashes the worker that does it, as a bug in a domain's hooks would.
struct crashing_hooks final : persistence::aggregate_hooks {
  std::string transition_sql(domain::engine_outcome) const override {
    throw std::logic_error("test: this aggregate's hooks crash the worker");
  }
  std::string settled_sql(const std::string&) const override { return "false"; }
};

/// The loopback destination "sink": counts the calls and the most it had at once; while `hold` is
/// set, a call waits until `release()` says so (or 20 s pass).
class sink {
public:
  sink() {
    server_.Post("/sink(/[^/]+)?", [this](const httplib::Request&, httplib::Response& res) {
      ++entered_;
      std::unique_lock lock(mutex_);
      most_at_once_ = std::max(most_at_once_, entered_ - answered_);
      if (hold_)
        released_.wait_for(lock, 20s, [this] { return !hold_; });
      ++answered_;
      res.set_content(R"({"ok":true})", "application/json");
    });
    server_.new_task_queue = [] { return new httplib::ThreadPool(24); }; // 16 calls held at once
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    REQUIRE(eventually([this] { return server_.is_running(); }, 5s));
  }
  ~sink() {
    release();
    server_.stop();
    thread_.join();
  }
  std::string url() const { return fmt::format("http://127.0.0.1:{}/sink", port_); }
  void hold() {
    std::lock_guard lock(mutex_);
    hold_ = true;
  }
  void release() {
    {
      std::lock_guard lock(mutex_);
      hold_ = false;
    }
    released_.notify_all();
  }
  int entered() const { return entered_; }
  int answered() const { return answered_; }
  int most_at_once() {
    std::lock_guard lock(mutex_);
    return most_at_once_;
  }

private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable released_;
  bool hold_ = false;
  int most_at_once_ = 0;
  std::atomic<int> entered_{0};
  std::atomic<int> answered_{0};
};

conf::settings test_settings(const sink& destination) {
  conf::settings s;
  s.database.url = db();
  s.outbox.pool_size = 1;
  s.outbox.connections = 3;
  s.outbox.batch_size = 10;
  s.outbox.poll_interval = 200ms;
  s.outbox.lease_timeout = 60s; // a crashed worker's claim stays put for the whole test
  s.outbox.reaper_interval = 60s;
  s.outbox.shutdown_timeout = 5s;
  domain::destination d;
  d.name = "sink";
  d.routes.push_back({destination.url(), std::nullopt, std::nullopt});
  s.http.destinations["sink"] = d;
  s.http.fanout["Thing"] = {"sink"};
  return s;
}

/// Inserts an outbox event; "Thing" events call the sink, other types have nothing to deliver.
std::string insert_event(const std::string& aggregate_type, const std::string& aggregate_id,
                         const std::string& event_type = "Thing",
                         const std::string& status = "PENDING") {
  return query_value(db(),
                     fmt::format("INSERT INTO outbox_events (aggregate_type, aggregate_id, "
                                 "event_type, payloads, idempotency_key, status) VALUES "
                                 "('{0}', '{1}', '{2}', '{{\"sink\": {{\"payload\": {{}}}}}}',"
                                 " '{0}-{1}-' || gen_random_uuid(), '{3}') RETURNING id",
                                 aggregate_type, aggregate_id, event_type, status));
}

/// Inserts a pending dead letter (with its DEAD event) that has nothing to revert.
std::string insert_dead_letter(const std::string& aggregate_type, const std::string& aggregate_id) {
  auto event = insert_event(aggregate_type, aggregate_id, "Thing", "DEAD");
  return query_value(db(), fmt::format("INSERT INTO dead_letter_events (original_event_id, "
                                       "aggregate_type, aggregate_id, event_type, payloads, "
                                       "reason) SELECT id, aggregate_type, aggregate_id, "
                                       "event_type, payloads, 'NON_RETRYABLE_ERROR' FROM "
                                       "outbox_events WHERE id = {} RETURNING id",
                                       event));
}

std::string event_status(const std::string& id) {
  return query_value(db(), "SELECT status FROM outbox_events WHERE id = " + id);
}

std::string dead_letter_status(const std::string& id) {
  return query_value(db(), "SELECT status FROM dead_letter_events WHERE id = " + id);
}

/// A started engine (one processor) on a fresh database, with every "crash-N" aggregate type
/// crashing its worker, and a blocking actor of the test's own to watch and ask the supervisor.
struct engine_fixture {
  explicit engine_fixture(domain::restart_backoff backoff = {50ms, 30s, 60s},
                          const std::function<void(conf::settings&)>& tweak = nullptr)
      : eng((truncate_all(db()), tweaked(test_settings(destination), tweak)), crash_hooks()) {
    eng.context().restart_backoff = backoff;
    eng.start();
    self = std::make_unique<caf::scoped_actor>(eng.system());
    supervisor = caf::actor_cast<caf::actor>(eng.system().registry().get(caf::atom("supervisor")));
    REQUIRE(supervisor);
    REQUIRE(eventually([&] { return status().dlq_children.count(0) == 1; }));
    // Every actor of the engine plus the test's own.
    running = eng.system().registry().running();
  }
  ~engine_fixture() {
    self.reset();
    eng.stop();
  }

  static conf::settings tweaked(conf::settings s,
                                const std::function<void(conf::settings&)>& tweak) {
    if (tweak)
      tweak(s);
    return s;
  }

  persistence::hooks_by_type crash_hooks() {
    persistence::hooks_by_type out;
    for (int i = 0; i < 10; ++i)
      out[fmt::format("crash-{}", i)] = &crashing;
    return out;
  }

  actors::supervisor_status status() {
    actors::supervisor_status out;
    (*self)
        ->request(supervisor, 5s, actors::status_atom::value)
        .receive([&](actors::supervisor_status& s) { out = std::move(s); },
                 [&](caf::error& e) { FAIL("no status: " << eng.system().render(e)); });
    return out;
  }

  /// Waits until every actor in `who` has terminated; false after 20 s.
  bool terminated(std::vector<caf::actor> who) {
    for (auto& a : who)
      (*self)->monitor(a);
    bool ok = true;
    for (std::size_t n = 0; ok && n < who.size(); ++n)
      (*self)->receive([](const caf::down_msg&) {}, caf::after(20s) >> [&] { ok = false; });
    return ok;
  }

  /// True when the engine runs exactly the actors it ran at the start (no orphans, none missing).
  bool same_actor_count() { return eng.system().registry().running() == running; }

  sink destination;
  crashing_hooks crashing;
  actors::engine eng;
  std::unique_ptr<caf::scoped_actor> self;
  caf::actor supervisor;
  std::size_t running = 0;
};

} // namespace

TEST_CASE_FIXTURE(
    engine_fixture,
    "a crashed processor is restarted with one new dead-letter child, and work flows") {
  auto before = status();
  REQUIRE(before.processors.size() == 1);
  auto old_processor = before.processors[0];
  auto old_dlq = before.dlq_children.at(0);
  CHECK(before.processor_crashes == std::vector<int>{0});

  insert_event("crash-1", "c1", "Nothing");
  // The processor dies, and its dead-letter child with it: none is left running unsupervised.
  REQUIRE(terminated({old_processor, old_dlq}));
  actors::supervisor_status after;
  REQUIRE(eventually([&] {
    after = status();
    return after.processors[0] != old_processor && after.dlq_children.count(0) == 1 &&
           after.dlq_children.at(0) != old_dlq && same_actor_count();
  }));
  CHECK(after.dlq_children.size() == 1);
  CHECK(after.processor_crashes == std::vector<int>{1});
  CHECK(after.processor_delay_ms == std::vector<std::int64_t>{50});

  // The new processor does the work, and its new dead-letter child the compensations.
  auto event = insert_event("thing", "t1");
  CHECK(eventually([&] { return event_status(event) == "PROCESSED"; }));
  CHECK(destination.answered() == 1);
  auto dead = insert_dead_letter("thing", "t2");
  CHECK(eventually([&] { return dead_letter_status(dead) == "PROCESSED"; }));
  CHECK(same_actor_count());
}

TEST_CASE_FIXTURE(engine_fixture, "a crashed dead-letter child is restarted by its processor") {
  auto before = status();
  auto processor = before.processors[0];
  auto old_dlq = before.dlq_children.at(0);

  auto crashing_letter = insert_dead_letter("crash-1", "c1");
  REQUIRE(terminated({old_dlq}));
  actors::supervisor_status after;
  REQUIRE(eventually([&] {
    after = status();
    return after.dlq_children.count(0) == 1 && after.dlq_children.at(0) != old_dlq &&
           same_actor_count();
  }));
  // Its processor lived on and restarted it; the supervisor restarted nothing.
  CHECK(after.processors[0] == processor);
  CHECK(after.processor_crashes == std::vector<int>{0});
  // The crashed claim stays leased; the new child compensates other dead letters.
  CHECK(dead_letter_status(crashing_letter) == "PROCESSING");
  auto dead = insert_dead_letter("thing", "t1");
  CHECK(eventually([&] { return dead_letter_status(dead) == "PROCESSED"; }));
  auto event = insert_event("thing", "t2");
  CHECK(eventually([&] { return event_status(event) == "PROCESSED"; }));
}

namespace {
/// Short waits, and a healthy period the test can sit out.
struct short_backoff_fixture : engine_fixture {
  short_backoff_fixture() : engine_fixture({100ms, 250ms, 3s}) {}

  /// Crashes the processor with a new crashing event and waits for its restart.
  actors::supervisor_status crash_and_restart(int n) {
    auto old_processor = status().processors[0];
    insert_event(fmt::format("crash-{}", n), fmt::format("c{}", n), "Nothing");
    REQUIRE(terminated({old_processor}));
    actors::supervisor_status after;
    REQUIRE(eventually([&] {
      after = status();
      return after.processors[0] != old_processor && after.dlq_children.count(0) == 1 &&
             same_actor_count();
    }));
    return after;
  }
};

/// Stops `eng` while `destination` holds its calls, releasing them once the stop has begun;
/// how long the stop took.
steady_clock::duration stop_while_held(actors::engine& eng, sink& destination) {
  std::thread answer([&] {
    eventually([&] { return eng.context().stopping.load(); });
    destination.release();
  });
  auto begun = steady_clock::now();
  eng.stop();
  auto took = steady_clock::now() - begun;
  answer.join();
  return took;
}
} // namespace

TEST_CASE_FIXTURE(short_backoff_fixture,
                  "the restart wait grows with crashes in a row and resets after a healthy run") {
  auto s = crash_and_restart(1);
  CHECK(s.processor_crashes == std::vector<int>{1});
  CHECK(s.processor_delay_ms == std::vector<std::int64_t>{100});
  s = crash_and_restart(2);
  CHECK(s.processor_crashes == std::vector<int>{2});
  CHECK(s.processor_delay_ms == std::vector<std::int64_t>{200});
  s = crash_and_restart(3);
  CHECK(s.processor_crashes == std::vector<int>{3});
  CHECK(s.processor_delay_ms == std::vector<std::int64_t>{250}); // capped
  // The behaviour under test is a period of time: the restarted processor runs healthily for
  // longer than the healthy period (3 s) ...
  std::this_thread::sleep_for(3500ms);
  auto event = insert_event("thing", "t1");
  CHECK(eventually([&] { return event_status(event) == "PROCESSED"; }));
  // ... so its next crash is a first one again.
  s = crash_and_restart(4);
  CHECK(s.processor_crashes == std::vector<int>{1});
  CHECK(s.processor_delay_ms == std::vector<std::int64_t>{100});
}

TEST_CASE("an orderly stop finishes the call in flight, hands back unstarted claims, in time") {
  truncate_all(db());
  sink destination;
  destination.hold();
  // Queued before the start, so that the first claim takes all four.
  std::vector<std::string> events;
  for (int i = 1; i <= 4; ++i)
    events.push_back(insert_event("thing", fmt::format("t{}", i)));
  auto settings = test_settings(destination);
  settings.outbox.calls_in_flight = 1; // one run at a time: the other three claims wait unstarted
  actors::engine eng(settings, {});
  eng.start();
  REQUIRE(eventually([&] { return destination.entered() == 1; }));
  REQUIRE(query_value(db(), "SELECT count(*) FROM outbox_events WHERE status = 'PROCESSING'") ==
          "4");
  // The lease owner names the worker and the process among replicas: host name and pid.
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  CHECK(query_value(db(), "SELECT string_agg(DISTINCT lease_owner, ' ') FROM outbox_events") ==
        fmt::format("outbox-processor-1@{}:{}", host, ::getpid()));

  // The call in flight answers once the stop has begun.
  CHECK(stop_while_held(eng, destination) < settings.outbox.shutdown_timeout);

  CHECK(destination.entered() == 1);
  CHECK(destination.answered() == 1);
  CHECK(event_status(events[0]) == "PROCESSED");
  CHECK(query_value(db(), "SELECT count(*) FROM aggregate_results WHERE event_id = " + events[0] +
                              " AND outcome = 'success'") == "1");
  for (std::size_t i = 1; i < events.size(); ++i) {
    CAPTURE(i);
    CHECK(event_status(events[i]) == "PENDING");
    CHECK(query_value(db(), "SELECT count(*) FROM outbox_events WHERE id = " + events[i] +
                                " AND lease_owner IS NULL AND lease_token IS NULL"
                                " AND lease_expires_at IS NULL AND attempts = 0") == "1");
  }
  CHECK(query_value(db(), "SELECT count(*) FROM aggregate_results") == "1");
}

TEST_CASE("claims that wait unstarted for a third of their lease are handed back, not left to "
          "expire") {
  truncate_all(db());
  sink destination;
  destination.hold();
  std::vector<std::string> events;
  for (int i = 1; i <= 4; ++i)
    events.push_back(insert_event("thing", fmt::format("t{}", i)));
  auto settings = test_settings(destination);
  settings.outbox.calls_in_flight = 1; // one run at a time: the other three claims wait unstarted
  settings.outbox.lease_timeout = 6s;  // handed back after 2 s; the call's 5 s fit in the lease
  settings.outbox.reaper_interval = 100ms;
  actors::engine eng(settings, {});
  eng.start();
  REQUIRE(eventually([&] { return destination.entered() == 1; }));
  REQUIRE(query_value(db(), "SELECT count(*) FROM outbox_events WHERE status = 'PROCESSING'") ==
          "4");
  // The three waiting behind the held call go back as they were, the running one stays leased;
  // and the processor, busy, does not claim them again.
  REQUIRE(eventually(
      [&] {
        return query_value(db(), "SELECT count(*) FROM outbox_events WHERE status = 'PENDING' "
                                 "AND lease_token IS NULL AND attempts = 0") == "3";
      },
      5s));
  std::this_thread::sleep_for(300ms);
  CHECK(query_value(db(), "SELECT string_agg(status, ' ' ORDER BY id) FROM outbox_events") ==
        "PROCESSING PENDING PENDING PENDING");
  destination.release();
  REQUIRE(eventually([&] {
    return query_value(db(), "SELECT count(*) FROM outbox_events WHERE status = 'PROCESSED'") ==
           "4";
  }));
  eng.stop();
  // No lease expired: each event took one run and has one call.
  CHECK(query_value(db(), "SELECT count(*) FROM outbox_events WHERE attempts = 1 AND "
                          "last_error IS NULL") == "4");
  CHECK(query_value(db(), "SELECT count(*) FROM aggregate_results") == "4");
}

TEST_CASE("a destination's condition reads the response of an earlier one of the same event") {
  truncate_all(db());
  sink destination; // answers {"ok":true}
  auto settings = test_settings(destination);
  auto when_ok = [](bool ok) {
    auto path = domain::json_path::parse("$.ok");
    REQUIRE(path.ok());
    return domain::condition{path.value(), domain::condition_operator::eq, ok, "sink"};
  };
  for (const auto& [name, ok] : {std::pair{"confirmed", true}, std::pair{"refuted", false}}) {
    domain::destination d;
    d.name = name;
    d.routes.push_back({destination.url(), when_ok(ok), std::nullopt});
    settings.http.destinations[name] = d;
  }
  settings.http.fanout["Chain"] = {"sink", "confirmed", "refuted"};
  auto id = query_value(db(), "INSERT INTO outbox_events (aggregate_type, aggregate_id, "
                              "event_type, payloads, idempotency_key) VALUES ('thing', 'c1', "
                              "'Chain', '{\"sink\": {\"payload\": {}}, \"confirmed\": "
                              "{\"payload\": {}}, \"refuted\": {\"payload\": {}}}', "
                              "'chain-1') RETURNING id");
  actors::engine eng(settings, {});
  eng.start();
  REQUIRE(eventually([&] { return event_status(id) == "PROCESSED"; }));
  eng.stop();
  CHECK(destination.answered() == 2);
  CHECK(query_value(db(), "SELECT string_agg(destination || ' ' || outcome, ', ' ORDER BY id) "
                          "FROM aggregate_results") ==
        "sink success, confirmed success, refuted skipped");
}

/// Inserts `n` "Thing" events of aggregates `<prefix>1` ... `<prefix>n` in one transaction.
void insert_events(const std::string& prefix, int n) {
  query_value(db(), fmt::format("WITH i AS (INSERT INTO outbox_events (aggregate_type, "
                                "aggregate_id, event_type, payloads, idempotency_key) SELECT "
                                "'thing', '{0}' || i, 'Thing', '{{\"sink\": {{\"payload\": "
                                "{{}}}}}}', '{0}' || i || '-' || gen_random_uuid() FROM "
                                "generate_series(1, {1}) i RETURNING 1) SELECT count(*) FROM i",
                                prefix, n));
}

std::string count_events(const std::string& status) {
  return query_value(db(), "SELECT count(*) FROM outbox_events WHERE status = '" + status + "'");
}

TEST_CASE("an orderly stop lets every run in flight finish its call; nothing more is claimed") {
  truncate_all(db());
  sink destination;
  auto settings = test_settings(destination);
  settings.outbox.calls_in_flight = 16;
  actors::engine eng(settings, {});
  eng.start();
  // Quick runs first (answered at once): the processor's slots free up often, so its claims keep
  // a queue ahead of them. Three rounds: the first may wait for its connections (the sink's
  // listen backlog is five, and sixteen connect at once), the later ones reuse them.
  for (int round = 1; round <= 3; ++round) {
    insert_events(fmt::format("w{}-", round), 16);
    REQUIRE(eventually([&] { return count_events("PROCESSED") == std::to_string(16 * round); }));
  }
  destination.hold();
  insert_events("t", 23);
  // Sixteen calls at once on the processor's one thread; the claim took what fits and four more,
  // to start when slots free (the claims' batch: a quarter of the cap, at least two), and no more.
  REQUIRE(eventually([&] { return destination.entered() == 64; }));
  REQUIRE(count_events("PROCESSING") == "20");

  CHECK(stop_while_held(eng, destination) < settings.outbox.shutdown_timeout);

  CHECK(destination.entered() == 64);
  CHECK(destination.answered() == 64);
  CHECK(count_events("PROCESSED") == "64");
  CHECK(query_value(db(), "SELECT count(*) FROM aggregate_results WHERE outcome = 'success'") ==
        "64");
  // The four claimed ahead were handed back unstarted, with the three never claimed.
  CHECK(query_value(db(), "SELECT count(*) FROM outbox_events WHERE status = 'PENDING' AND "
                          "lease_token IS NULL AND attempts = 0") == "7");
}

TEST_CASE("a processor of four quick calls claims four at a time and keeps four ready") {
  truncate_all(db());
  sink destination;
  auto settings = test_settings(destination);
  settings.outbox.calls_in_flight = 4;
  actors::engine eng(settings, {});
  eng.start();
  // Quick runs (answered at once) time its slots, so that it claims ahead.
  for (int round = 1; round <= 3; ++round) {
    insert_events(fmt::format("q{}-", round), 4);
    REQUIRE(eventually([&] { return count_events("PROCESSED") == std::to_string(4 * round); }));
  }
  destination.hold();
  insert_events("h", 11);
  // Four calls at once, and four more claimed ahead (a quarter of the cap is one, the floor
  // four); the last three are left for a later claim.
  REQUIRE(eventually([&] { return destination.entered() == 16; }));
  CHECK(eventually([&] { return count_events("PROCESSING") == "8"; }, 2s));
  std::this_thread::sleep_for(100ms);
  CHECK(count_events("PROCESSING") == "8");
  CHECK(count_events("PENDING") == "3");
  destination.release();
  REQUIRE(eventually([&] { return count_events("PROCESSED") == "23"; }));
  CHECK(destination.entered() == 23);
  CHECK(destination.most_at_once() <= 4);
  eng.stop();
}

TEST_CASE("a processor whose runs are slow or not yet timed claims no events ahead of its free "
          "slots: they stay for processors with free slots") {
  truncate_all(db());
  sink destination;
  destination.hold();
  auto settings = test_settings(destination);
  settings.outbox.calls_in_flight = 4;
  actors::engine eng(settings, {});
  eng.start();
  insert_events("a", 6);
  // Not yet timed: four claimed, for its four slots.
  REQUIRE(eventually([&] { return destination.entered() == 4; }));
  CHECK(count_events("PROCESSING") == "4");
  CHECK(count_events("PENDING") == "2");
  // Its runs take 200 ms and more (50 ms per slot, against the 10 ms a queue ahead needs); the
  // last two are claimed one by one as slots free.
  std::this_thread::sleep_for(200ms);
  destination.release();
  REQUIRE(eventually([&] { return count_events("PROCESSED") == "6"; }));

  destination.hold();
  insert_events("b", 6);
  REQUIRE(eventually([&] { return destination.entered() == 10; }));
  CHECK(count_events("PROCESSING") == "4");
  CHECK(count_events("PENDING") == "2");
  destination.release();
  REQUIRE(eventually([&] { return count_events("PROCESSED") == "12"; }));
  eng.stop();
}

TEST_CASE("a run whose completion waits on the database frees its slot: the next event's call "
          "goes out meanwhile, and the calls in flight stay within the cap") {
  truncate_all(db());
  sink destination;
  destination.hold();
  auto settings = test_settings(destination);
  settings.outbox.calls_in_flight = 2;
  settings.outbox.connections = 5; // enough for the processor's own connections: the completions
                                   // go out without stopping its thread
  actors::engine eng(settings, {});
  eng.start();
  insert_events("f", 4);
  REQUIRE(eventually([&] { return destination.entered() == 2; }));
  auto first_two = query_value(db(), "SELECT string_agg(id::text, ',') FROM outbox_events "
                                     "WHERE status = 'PROCESSING'");
  {
    // Their completions (an UPDATE of each) wait for these locks; their attempt rows (whose
    // foreign key takes a weaker lock) do not.
    pqxx::connection locker(db());
    pqxx::work lock(locker);
    lock.exec("SELECT 1 FROM outbox_events WHERE id IN (" + first_two + ") FOR NO KEY UPDATE");
    destination.release();
    // Under a second (the workers' lock timeout): the other two events' calls are made while the
    // first two wait to be completed.
    CHECK(eventually([&] { return destination.entered() == 4; }, 900ms));
    CHECK(query_value(db(), "SELECT count(*) FROM outbox_events WHERE status = 'PROCESSING' AND "
                            "id IN (" +
                                first_two + ")") == "2");
    lock.abort();
  }
  REQUIRE(eventually([&] { return count_events("PROCESSED") == "4"; }));
  CHECK(destination.entered() == 4);
  CHECK(destination.most_at_once() <= 2);
  CHECK(query_value(db(), "SELECT count(*) FROM aggregate_results WHERE outcome = 'success'") ==
        "4");
  eng.stop();
}

TEST_CASE("the busy-slot counter grows with the runs in flight while they hold their slots, by "
          "no more than the slots allow, and not for an idle processor") {
  truncate_all(db());
  sink destination;
  destination.hold();
  auto settings = test_settings(destination);
  settings.outbox.calls_in_flight = 4;
  const auto counted = [](const char* queue) {
    return metrics::global().busy_slot_seconds.value({{"queue", queue}});
  };
  const auto outbox_before = counted("outbox");
  const auto dead_letter_before = counted("dead_letter");
  const auto started = std::chrono::steady_clock::now();
  actors::engine eng(settings, {});
  eng.start();
  insert_events("s", 3);
  REQUIRE(eventually([&] { return destination.entered() == 3; }));
  std::this_thread::sleep_for(300ms);
  // Three slots held for 300 ms at least: counted while the calls are still held, not only once
  // the runs end.
  CHECK(eventually([&] { return counted("outbox") - outbox_before >= 0.9; }, 2s));
  destination.release();
  REQUIRE(eventually([&] { return count_events("PROCESSED") == "3"; }));
  // Idle (its polls still pass through the loop): nothing more is counted.
  std::this_thread::sleep_for(200ms);
  const auto after_runs = counted("outbox");
  std::this_thread::sleep_for(500ms);
  CHECK(counted("outbox") == after_runs);
  eng.stop();
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - started;
  CHECK(counted("outbox") - outbox_before >= 0.9);
  CHECK(counted("outbox") - outbox_before <= 4 * elapsed.count());
  CHECK(counted("dead_letter") == dead_letter_before);
}

TEST_CASE("an idle processor woken for more events than it has room for wakes another one") {
  truncate_all(db());
  sink destination;
  destination.hold();
  auto settings = test_settings(destination);
  settings.outbox.pool_size = 2;
  settings.outbox.calls_in_flight = 4;
  settings.outbox.poll_interval = 60s; // no safety poll during the test: only wake-ups claim
  settings.http.destinations["sink"].timeout = 30s; // held calls do not time out and retry
  actors::engine eng(settings, {});
  eng.start();
  std::this_thread::sleep_for(1s); // both processors claimed nothing and went idle
  // One transaction, one notification: the processor it wakes (not yet timed) claims four, and
  // wakes the other for the last two.
  insert_events("c", 6);
  CHECK(eventually([&] { return destination.entered() == 6; }, 5s));
  CHECK(count_events("PROCESSING") == "6");
  destination.release();
  REQUIRE(eventually([&] { return count_events("PROCESSED") == "6"; }));
  eng.stop();
}

struct short_lock_timeout_fixture : engine_fixture {
  short_lock_timeout_fixture()
      : engine_fixture({50ms, 30s, 60s}, [](conf::settings& s) {
          s.database.lock_timeout = 200ms;
          s.outbox.poll_interval = 100ms;
        }) {}
};

TEST_CASE_FIXTURE(short_lock_timeout_fixture,
                  "claims cut short by the lock timeout are tried again later; nothing crashes") {
  const auto processor = status().processors[0];
  {
    pqxx::connection holder(db());
    pqxx::work held(holder);
    held.exec("LOCK TABLE outbox_events IN ACCESS EXCLUSIVE MODE");
    // Claims wait for the lock: each one is cut short after 200 ms, again and again.
    REQUIRE(eventually([&] {
      return query_value(db(), "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                               "'Lock' AND datname = current_database()") != "0";
    }));
    std::this_thread::sleep_for(1500ms);
  }
  auto event = insert_event("thing", "t1");
  CHECK(eventually([&] { return event_status(event) == "PROCESSED"; }));
  auto after = status();
  CHECK(after.processors[0] == processor); // never crashed, never restarted
  CHECK(after.processor_crashes == std::vector<int>{0});
  CHECK(after.dlq_children.count(0) == 1);
  CHECK(same_actor_count());
}

TEST_CASE("a stop does not hang on a statement that waits for a lock: it is cancelled") {
  truncate_all(db());
  sink destination;
  destination.hold();
  auto event = insert_event("thing", "t1");
  auto settings = test_settings(destination);
  settings.database.lock_timeout = 0ms; // the statement would wait for ever
  settings.database.statement_timeout = 0ms;
  settings.outbox.shutdown_timeout = 1s;
  actors::engine eng(settings, {});
  eng.start();
  REQUIRE(eventually([&] { return destination.entered() == 1; }));

  // The call's attempt row cannot be written while the test holds this lock.
  pqxx::connection holder(db());
  pqxx::work held(holder);
  held.exec("LOCK TABLE aggregate_results IN EXCLUSIVE MODE");
  destination.release();
  REQUIRE(eventually([&] {
    return query_value(db(), "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                             "'Lock' AND datname = current_database()") == "1";
  }));

  // Should the stop wait for the statement, the lock goes away after 20 s and the stop ends.
  std::atomic<bool> stopped{false}, lock_given_up{false};
  std::thread safety_net([&] {
    eventually([&] { return stopped.load(); }, 20s);
    lock_given_up = !stopped;
    held.abort();
  });
  eng.stop(); // on the thread that started it, as CAF wants
  stopped = true;
  safety_net.join();
  CHECK_FALSE(lock_given_up);
  // The call was made; its row was not written, so the event is not done: it is retried later.
  CHECK(destination.answered() == 1);
  CHECK(event_status(event) != "PROCESSED");
  CHECK(query_value(db(), "SELECT count(*) FROM aggregate_results") == "0");
}

TEST_CASE("a call still in flight at the shutdown timeout is abandoned, recorded and retried, not "
          "left to its lease") {
  truncate_all(db());
  sink destination;
  destination.hold(); // answers only after the stop has given up on it
  auto event = insert_event("thing", "t1");
  auto settings = test_settings(destination);
  settings.outbox.shutdown_timeout = 1s;
  actors::engine eng(settings, {});
  eng.start();
  REQUIRE(eventually([&] { return destination.entered() == 1; }));

  const auto begun = steady_clock::now();
  eng.stop();
  CHECK(steady_clock::now() - begun < settings.outbox.shutdown_timeout);
  destination.release();

  // One row for the call that was made, without an answer, saying why.
  CHECK(query_value(db(), "SELECT count(*) FROM aggregate_results WHERE event_id = " + event) ==
        "1");
  CHECK(query_value(db(), "SELECT outcome || ' ' || coalesce(response_status::text, 'none') || "
                          "' ' || attempt FROM aggregate_results WHERE event_id = " +
                              event) == "retryable none 1");
  CHECK(query_value(db(), "SELECT error_message FROM aggregate_results WHERE event_id = " + event)
            .find("abandoned without an answer: outboxd was stopping") != std::string::npos);
  // The event is due again like any retry (an attempt spent), its lease given up.
  CHECK(query_value(db(), "SELECT status || ' ' || attempts || ' ' || (lease_token IS NULL) || ' ' "
                          "|| (next_retry_at IS NOT NULL) FROM outbox_events WHERE id = " +
                              event) == "PENDING 1 true true");
}

TEST_CASE("a revert still in flight at the shutdown timeout is abandoned, recorded and retried") {
  truncate_all(db());
  sink destination;
  auto settings = test_settings(destination);
  settings.outbox.shutdown_timeout = 1s;
  domain::revert_template revert;
  revert.url = destination.url();
  revert.method = "POST";
  settings.http.destinations["sink"].routes[0].revert = revert;
  // A dead letter whose event called the sink once, successfully: its compensation reverts that.
  auto letter = insert_dead_letter("thing", "t1");
  auto event =
      query_value(db(), "SELECT original_event_id FROM dead_letter_events WHERE id = " + letter);
  query_value(db(),
              fmt::format("INSERT INTO aggregate_results (event_id, aggregate_type, aggregate_id, "
                          "event_type, destination, fanout_order, attempt, endpoint_url, "
                          "http_method, request_payload, response_status, response_payload, "
                          "outcome) VALUES ({}, 'thing', 't1', 'Thing', 'sink', 0, 1, '{}', "
                          "'POST', '{{}}', 200, '{{\"ok\": true}}', 'success') RETURNING id",
                          event, destination.url()));
  destination.hold();
  actors::engine eng(settings, {});
  eng.start();
  REQUIRE(eventually([&] { return destination.entered() == 1; }));

  eng.stop();
  destination.release();

  CHECK(query_value(db(), "SELECT outcome || ' ' || coalesce(response_status::text, 'none') "
                          "FROM aggregate_results WHERE destination = 'sink.revert'") ==
        "retryable none");
  CHECK(query_value(db(), "SELECT error_message FROM aggregate_results WHERE destination = "
                          "'sink.revert'")
            .find("abandoned without an answer") != std::string::npos);
  CHECK(query_value(db(), "SELECT status || ' ' || attempts || ' ' || (lease_token IS NULL) "
                          "FROM dead_letter_events WHERE id = " +
                              letter) == "PENDING 1 true");
}

TEST_CASE("a destination without a payload of its own gets the event's general one and its path "
          "parameters") {
  truncate_all(db());
  sink destination;
  auto settings = test_settings(destination);
  domain::destination own;
  own.name = "own";
  own.routes.push_back({destination.url() + "/{orderId}", std::nullopt, std::nullopt});
  settings.http.destinations["own"] = own;
  settings.http.fanout["Own"] = {"own"};
  auto event = query_value(
      db(), "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payloads, "
            "idempotency_key) VALUES ('thing', 't1', 'Own', '{\"sink\": {\"payload\": {}}, "
            "\"*\": {\"payload\": {\"x\": 1}, \"pathParams\": {\"orderId\": \"7\"}}}', "
            "'own-' || gen_random_uuid()) RETURNING id");
  actors::engine eng(settings, {});
  eng.start();
  CHECK(eventually([&] { return event_status(event) == "PROCESSED"; }));
  eng.stop();
  CHECK(query_value(db(), "SELECT endpoint_url || ' ' || request_payload::text FROM "
                          "aggregate_results WHERE event_id = " +
                              event) == destination.url() + "/7 {\"x\": 1}");
}

TEST_CASE("a worker waits for a lock a second at most, however long database.lockTimeout is, and "
          "holds its event back meanwhile") {
  auto lock_wait = [](std::chrono::milliseconds configured) {
    conf::database_settings d;
    d.lock_timeout = configured;
    return actors::worker_lock_timeout(d);
  };
  CHECK(lock_wait(10s) == 1s);
  CHECK(lock_wait(0ms) == 1s); // "no bound"
  CHECK(lock_wait(200ms) == 200ms);

  truncate_all(db());
  sink destination;
  auto event = insert_event("thing", "t1");
  auto settings = test_settings(destination);
  settings.database.lock_timeout = 60s; // longer than the wait below
  // The call's attempt row cannot be written while the test holds this lock.
  pqxx::connection holder(db());
  pqxx::work held(holder);
  held.exec("LOCK TABLE aggregate_results IN EXCLUSIVE MODE");
  actors::engine eng(settings, {});
  eng.start();
  CHECK(eventually([&] {
    return query_value(db(),
                       "SELECT coalesce(last_error, '') FROM outbox_events WHERE id = " + event)
               .rfind("held back: recording failed: canceling statement due to lock timeout", 0) ==
           0;
  }));
  CHECK(query_value(db(), "SELECT attempts FROM outbox_events WHERE id = " + event) == "0");
  held.abort();
  CHECK(eventually([&] { return event_status(event) == "PROCESSED"; }));
  eng.stop();
}
