// The simulated external services: inventory, fraud check, domestic and international shipping,
// billing, high-value processing and notifications, with the reference's routes and response
// shapes (table: simulator/endpoints.cpp, bodies: simulator/responses.json), run-time fault
// knobs, Idempotency-Key, and the side-effect ledger.
//
// Routes (every forward endpoint also has deterministic `/succeed` and `/fail` siblings that
// ignore the knobs; revert siblings are `.../release|refund|cancel/succeed|fail`):
//   POST   /api/inventory/reserve                 inventory.reserve        RES-<agg>-<ms>-<n>
//   DELETE /api/inventory/{id}/release            inventory.release
//   POST   /api/fraud/check                       fraudCheck.check         FRAUD-... (checkId)
//   POST   /api/domestic-shipping                 shipping.domestic.create SHIP-DOM-...
//   POST   /api/domestic-shipping/{id}/cancel     shipping.domestic.cancel
//   POST   /api/international-shipping            shipping.international.create  SHIP-INTL-...
//   POST   /api/international-shipping/{id}/cancel  shipping.international.cancel
//   POST   /api/billing                           billing.charge           TXN-...
//   POST   /api/billing/{id}/refund               billing.refund           (refund RFD-...)
//   POST   /api/high-value-processing             highValue.process        HV-...
//   POST   /api/high-value-processing/{id}/cancel highValue.cancel         (refund RFD-...)
//   POST   /api/notifications/shipping-confirmation|review-request|status-update
//          notifications.send (one knob for all three)   NOTIF-... (notificationId)
//   GET    /api/simulator/config, PUT /api/simulator/config (admin), POST /api/simulator/reset
//   (admin), GET /api/simulator/ledger[?aggregateId=]
// The aggregate is the X-Aggregate-Id header (reverts: X-Revert-Aggregate-Id), "unknown" when
// absent. Fraud riskScore is 25 when it is an even integer, else 75.
//
// Idempotency-Key (per operation; a /succeed sibling shares its operation's keys): a repeated key
// with the same request (path and body) answers the stored response with `Idempotent-Replayed:
// true` and applies nothing; with a different request it is 422. Failures are not stored. At
// most 200 000 keys and 64 MiB of stored responses are remembered, oldest evicted first.
//
// A revert of an id never issued (or issued by another operation) is 404; a revert of an already
// reverted id is 200 again and counted in the ledger's revertRequests. A `/succeed` revert sibling
// reverts the aggregate's newest active entry of that operation, or answers with the reference's
// `...-TEST` id when there is none.
#pragma once

#include "conf/settings.hpp"
#include "http/listener.hpp"
#include "simulator/ledger_entry.hpp"

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace outboxd::simulator {

/// Who may call the simulated partner services.
enum class partner_callers {
  anyone,      ///< the standalone simulator: the outside world, open like a partner's sandbox
  this_machine ///< inside outboxd: only loopback peers (outboxd's own calls), so that a client
               ///< of an exposed API cannot use up the Idempotency-Keys outboxd will send (they
               ///< are event ids, which are predictable) or write into the ledger
};

/// Whether a peer address, as the HTTP library gives it, is this machine's loopback.
bool is_loopback_peer(std::string_view address);

/// The longest X-Aggregate-Id the simulated services take (the database's aggregate ids are
/// VARCHAR(255)); a longer one is 422.
inline constexpr std::size_t max_aggregate_id_bytes = 255;

class simulator {
public:
  /// Knobs and seed from `settings.services` and `settings.seed`; the ledger starts now.
  explicit simulator(const conf::simulator_settings& settings);
  ~simulator();
  simulator(const simulator&) = delete;
  simulator& operator=(const simulator&) = delete;

  /// Registers every simulator route on `routes` (whose server must be stopped before the
  /// simulator is destroyed): the partner services as `route_kind::simulated_service`, the
  /// /api/simulator/... control routes as `route_kind::api`. Handlers throw api_error, which the
  /// listener renders. The listener's access policy guards them: the partner services are open,
  /// reading config and ledger needs `read`, changing knobs and reset need `admin`.
  void install(http::listener& routes, partner_callers callers = partner_callers::anyone);

  /// The ledger JSON of GET /api/simulator/ledger, for every aggregate or one (format in
  /// simulator/ledger_entry.hpp).
  std::string ledger_json(const std::optional<std::string>& aggregate_id) const;

  /// The ledger's entries and start time, for the in-process consistency check.
  ledger_snapshot ledger() const;

  /// The knob configuration JSON of GET /api/simulator/config.
  std::string config_json() const;

  /// What POST /api/simulator/reset does: initial knobs and seed, empty ledger (its clock
  /// restarts) and empty Idempotency-Key store.
  void reset();

  /// Ends every latency or late-answer wait at once, and skips later ones, so that the server
  /// can stop promptly. Call before stopping the server at shutdown.
  void stop();

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace outboxd::simulator
