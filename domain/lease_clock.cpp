#include "domain/lease_clock.hpp"

namespace outboxd::domain {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

lease_clock::lease_clock(milliseconds lease) : lease_(lease) {}

lease_clock::verdict lease_clock::read(database_time database_now, local_time local_now) {
  verdict out;
  if (last_) {
    auto ahead = duration_cast<milliseconds>(database_now - last_->first) -
                 duration_cast<milliseconds>(local_now - last_->second);
    if (ahead > lease_ / 8) {
      out.step = ahead;
      hold_until_ = local_now + lease_;
    }
  }
  last_ = {database_now, local_now};
  out.may_reap = !hold_until_ || local_now >= *hold_until_;
  return out;
}

} // namespace outboxd::domain
