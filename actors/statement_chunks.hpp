// How the statement writers (attempt rows, completions) write what many runs handed them: in
// statements of at most max_rows_per_insert items, one commit each. When the database refuses a
// statement (one bad item fails all of it), that statement's items are written one by one, so a
// refused item fails only its own run; the statements before it are in and are not written again.
#pragma once

#include "persistence/connection_pool.hpp"
#include "persistence/outbox_repository.hpp"

#include <algorithm>
#include <cstddef>
#include <exception>
#include <pqxx/except>

namespace outboxd::actors {

/// Whether `error` (a statement's failure) is the database refusing it, nothing of it committed:
/// its items are then written again one by one. False for a lost connection or anything else.
inline bool refused(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const pqxx::failure& e) {
    return !persistence::is_connection_loss(e);
  } catch (...) {
    return false;
  }
}

/// Writes items [0, count): `together(first, last)` writes a range in one statement, `alone(i)`
/// writes one item, `fail(i, error)` records an item's failure. A lost connection (or any error
/// but the database refusing a statement) fails the items of its statement and of every one after.
template <class Together, class Alone, class Fail>
void write_in_statements(std::size_t count, Together together, Alone alone, Fail fail) {
  constexpr auto chunk = persistence::outbox_repository::max_rows_per_insert;
  for (std::size_t first = 0; first < count; first += chunk) {
    const auto last = std::min(count, first + chunk);
    auto fail_rest = [&] {
      for (auto i = first; i < count; ++i)
        fail(i, std::current_exception());
    };
    try {
      together(first, last);
      continue;
    } catch (const pqxx::failure& e) {
      if (persistence::is_connection_loss(e) || last - first == 1)
        return fail_rest();
    } catch (...) {
      return fail_rest();
    }
    for (auto i = first; i < last; ++i) {
      try {
        alone(i);
      } catch (...) {
        fail(i, std::current_exception());
      }
    }
  }
}

} // namespace outboxd::actors
