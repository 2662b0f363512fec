// pg-listener: one dedicated connection with LISTEN on both channels. Notifications become
// wake-ups; a lost connection is noticed (a cheap query every few seconds catches half-open
// sockets), reopened with capped backoff, and followed by a sweep because notifications sent
// while it was down are gone.
#include "actors/workers.hpp"
#include "log/log.hpp"
#include "metrics/metrics.hpp"

#include <caf/all.hpp>
#include <pqxx/pqxx>

namespace outboxd::actors {
namespace {

using std::chrono::milliseconds;
constexpr long poll_usec = 200000;
constexpr auto health_check_every = std::chrono::seconds(5);
constexpr milliseconds max_backoff{10000};

/// Counts notifications on one channel between two polls.
struct flag_receiver : pqxx::notification_receiver {
  flag_receiver(pqxx::connection& c, const std::string& channel)
      : pqxx::notification_receiver(c, channel) {}
  void operator()(const std::string&, int) override { ++seen; }
  int seen = 0;
};

struct listener_state {
  context_ptr ctx;
  caf::actor supervisor;
  std::unique_ptr<pqxx::connection> conn;
  std::unique_ptr<flag_receiver> outbox;
  std::unique_ptr<flag_receiver> dlq;
  milliseconds backoff{250};
  int connects = 0;
  bool reported = false;
  std::chrono::steady_clock::time_point last_check;
  static inline const char* name = "pg_listener";
};

using listener = caf::stateful_actor<listener_state>;
constexpr const char* tag = "pg-listener";

void disconnect(listener* self, const std::exception& why) {
  auto& st = self->state;
  if (!st.reported)
    log::warn(tag, "connection lost, reconnecting in {}ms: {}", st.backoff.count(), why.what());
  st.reported = true;
  st.ctx->listener_connected = false;
  // Receivers must go before their connection.
  st.outbox.reset();
  st.dlq.reset();
  st.conn.reset();
  self->delayed_send(self, st.backoff, poll_atom::value);
  st.backoff = std::min(st.backoff * 2, max_backoff);
}

void connect(listener* self) {
  auto& st = self->state;
  st.conn = std::make_unique<pqxx::connection>(st.ctx->conninfo("listener"));
  st.outbox = std::make_unique<flag_receiver>(*st.conn, "outbox_events_channel");
  st.dlq = std::make_unique<flag_receiver>(*st.conn, "dlq_events_channel");
  // The receivers LISTEN lazily; a first (empty) wait makes sure they are registered.
  st.conn->await_notification(0, 0);
  st.ctx->listener_connected = true;
  st.backoff = milliseconds(250);
  st.reported = false;
  st.last_check = std::chrono::steady_clock::now();
  if (st.connects > 0)
    metrics::global().listener_reconnects.inc();
  log::info(tag, "{} on outbox_events_channel and dlq_events_channel",
            st.connects++ == 0 ? "listening" : "reconnected; listening");
  self->send(st.supervisor, sweep_atom::value);
}

void poll(listener* self) {
  auto& st = self->state;
  try {
    if (!st.conn)
      connect(self);
    st.outbox->seen = st.dlq->seen = 0;
    st.conn->await_notification(0, poll_usec);
    if (st.outbox->seen)
      self->send(st.supervisor, wake_atom::value);
    if (st.dlq->seen)
      self->send(st.supervisor, dlq_wake_atom::value);
    if (std::chrono::steady_clock::now() - st.last_check > health_check_every) {
      pqxx::nontransaction(*st.conn).exec("SELECT 1");
      st.last_check = std::chrono::steady_clock::now();
    }
  } catch (const pqxx::failure& e) {
    disconnect(self, e);
    return;
  }
  self->send(self, poll_atom::value);
}

caf::behavior pg_listener(listener* self, context_ptr ctx, caf::actor supervisor) {
  self->state.ctx = std::move(ctx);
  self->state.supervisor = std::move(supervisor);
  self->send(self, poll_atom::value);
  return {
      [self](poll_atom) { poll(self); },
      [self](stop_atom) {
        self->state.ctx->listener_connected = false;
        self->quit();
        return true;
      },
  };
}

} // namespace

caf::actor spawn_pg_listener(caf::event_based_actor* supervisor, context_ptr ctx) {
  return supervisor->spawn<caf::detached + caf::monitored>(pg_listener, std::move(ctx),
                                                           caf::actor_cast<caf::actor>(supervisor));
}

} // namespace outboxd::actors
