// Leases expire by the database's clock; a run keeps its lease by its own steady clock. When the
// database's clock steps forward (an NTP step, a virtual machine resumed after a pause), every
// lease looks older by the step at once, live runs' included, and those runs would go on calling
// their destinations while the reaper hands their events to other workers. The reaper therefore
// watches the database's clock against its own: after a step, it reaps nothing for one lease,
// which is long enough for every live run to renew its lease under the new time or to finish.
// Pure: the caller reads both clocks.
#pragma once

#include <chrono>
#include <optional>
#include <utility>

namespace outboxd::domain {

class lease_clock {
public:
  using database_time = std::chrono::system_clock::time_point;
  using local_time = std::chrono::steady_clock::time_point;

  /// `lease` is the lease length. A step is a database clock that ran ahead of the local one by
  /// more than an eighth of it: a run renews its lease while a quarter of it is left beyond its
  /// next call, so a smaller step cannot expire a live lease.
  explicit lease_clock(std::chrono::milliseconds lease);

  struct verdict {
    bool may_reap = true;
    /// How far the database's clock ran ahead, when this reading found a step.
    std::optional<std::chrono::milliseconds> step;
  };

  /// One reading: the database's `now()` at `database_now`, taken at `local_now`. Says whether
  /// leases that look expired at `database_now` may be reaped. A first reading has nothing to be
  /// compared with and allows reaping; a clock that stepped back only makes leases last longer.
  verdict read(database_time database_now, local_time local_now);

private:
  std::chrono::milliseconds lease_;
  std::optional<std::pair<database_time, local_time>> last_;
  std::optional<local_time> hold_until_;
};

} // namespace outboxd::domain
