// One list of the pool-based repositories' statements.
#include "persistence/statements.hpp"

#include "persistence/audit_repository.hpp"
#include "persistence/dead_letter_admin.hpp"
#include "persistence/order_repository.hpp"
#include "persistence/outbox_admin.hpp"

namespace outboxd::persistence {

std::vector<statement> pooled_statements() {
  std::vector<statement> all;
  for (auto part : {order_repository::statements(), dead_letter_admin::statements(),
                    audit_repository::statements(), outbox_admin::statements()})
    all.insert(all.end(), part.begin(), part.end());
  return all;
}

} // namespace outboxd::persistence
