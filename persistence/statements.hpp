// The prepared statements of every pool-based repository, for the pool that serves them.
#pragma once

#include "persistence/connection_pool.hpp"

#include <vector>

namespace outboxd::persistence {

/// Statements of order_repository, dead_letter_admin, audit_repository and outbox_admin.
std::vector<statement> pooled_statements();

} // namespace outboxd::persistence
