// domain::order_store on PostgreSQL: each state change writes the order row and its outbox event
// in one transaction.
#pragma once

#include "domain/ports.hpp"
#include "persistence/connection_pool.hpp"
#include "persistence/intake_notifier.hpp"
#include "persistence/write_batcher.hpp"

#include <chrono>
#include <functional>
#include <span>
#include <vector>

namespace outboxd::persistence {

class order_repository final : public domain::order_store {
public:
  /// Creates that arrive together are written together, one transaction of at most
  /// max_intake_batch orders at a time. A second one (each on a connection of the pool) starts
  /// only while the first has taken longer than intake_overlap_after.
  static constexpr int intake_writers = 2;
  static constexpr std::size_t max_intake_batch = 64;
  static constexpr std::chrono::milliseconds intake_overlap_after{50};

  /// With a `notifier`, the pool's sessions must run intake_notifier::session_setup: the
  /// repository then announces its events through the notifier instead of the insert trigger.
  /// `on_batch` learns the size of each batch of creates written (a batch that one bad order
  /// failed is written again an order at a time: those count as batches of one).
  explicit order_repository(connection_pool& pool, intake_notifier* notifier = nullptr,
                            std::function<void(std::size_t orders)> on_batch = {});

  /// The statements this repository runs; give them to the pool it uses.
  static std::vector<statement> statements();

  domain::create_outcome create(const domain::new_order& request,
                                const std::optional<std::string>& request_key) override;
  domain::command_outcome execute(std::int64_t order_id, domain::order_command command,
                                  const std::string& reason) override;
  std::vector<domain::order> list(std::optional<domain::order_status> status,
                                  std::optional<std::int64_t> before_id, int limit) override;
  std::optional<domain::order_timeline> timeline(std::int64_t order_id,
                                                 std::int64_t after_attempt) override;

  struct create_request {
    const domain::new_order& order;
    const std::optional<std::string>& key;
  };
  using create_batch = write_batcher<create_request, domain::create_outcome>;
  /// Creates waiting for a writer now, and the batches and orders written so far.
  create_batch::stats intake() const { return creates_.snapshot(); }

private:
  struct written_batch {
    std::vector<domain::create_outcome> outcomes; // one per request, in order
    std::int64_t last_event_id = 0;               // 0: no event (every request a replay)
  };

  /// Writes `batch` in one transaction. Should a statement fail (a row the database refuses, a
  /// lock or statement timeout), each request alone, so that only the one at fault fails; a lost
  /// connection fails them all.
  void write_creates(std::span<create_batch::entry*> batch);
  written_batch insert_batch(pqxx::connection& c, std::span<create_batch::entry*> batch);
  void announce(std::int64_t event_id) const {
    if (notifier_ && event_id)
      notifier_->committed(event_id);
  }

  connection_pool& pool_;
  intake_notifier* notifier_;
  std::function<void(std::size_t orders)> on_batch_;
  create_batch creates_;
};

} // namespace outboxd::persistence
