// Sending is blocking (libpq writes the whole statement before PQsend* returns); reading is not:
// PQconsumeInput takes what the socket has, PQisBusy says whether a whole result is in.
#include "persistence/statement_lane.hpp"

#include <libpq-fe.h>
#include <pqxx/except>
#include <stdexcept>
#include <utility>

namespace outboxd::persistence {
namespace {

std::string message_of(const PGconn* c) {
  std::string m = ::PQerrorMessage(c);
  while (!m.empty() && (m.back() == '\n' || m.back() == ' '))
    m.pop_back();
  return m.empty() ? "the database connection failed" : m;
}

/// The exception of a failed result: a refusal with its SQLSTATE, or a lost connection.
std::exception_ptr error_of(const PGconn* c, const PGresult* r, const std::string& what) {
  const char* state = r ? ::PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
  std::string message = r ? ::PQresultErrorMessage(r) : message_of(c);
  if (::PQstatus(c) == CONNECTION_BAD || !state)
    return std::make_exception_ptr(pqxx::broken_connection(message));
  return std::make_exception_ptr(pqxx::sql_error(message, what, state));
}

} // namespace

statement_lane::statement_lane(std::string conninfo, std::string setup)
    : conninfo_(std::move(conninfo)), setup_(std::move(setup)) {}

statement_lane::~statement_lane() {
  close();
}

void statement_lane::close() {
  if (conn_)
    ::PQfinish(conn_);
  conn_ = nullptr;
  prepared_.clear();
  done_ = nullptr;
  rows_.clear();
  error_ = nullptr;
}

int statement_lane::socket() const {
  return conn_ ? ::PQsocket(conn_) : -1;
}

void statement_lane::connect() {
  if (conn_ && ::PQstatus(conn_) == CONNECTION_OK)
    return;
  close();
  conn_ = ::PQconnectdb(conninfo_.c_str());
  ++connections_;
  if (::PQstatus(conn_) != CONNECTION_OK) {
    auto why = message_of(conn_);
    close();
    throw pqxx::broken_connection(why);
  }
  // libpq would print the server's notices on stderr; the worker's statements send none it needs.
  ::PQsetNoticeProcessor(
      conn_, [](void*, const char*) {}, nullptr);
  if (!setup_.empty()) {
    PGresult* r = ::PQexec(conn_, setup_.c_str());
    const bool ok =
        ::PQresultStatus(r) == PGRES_COMMAND_OK || ::PQresultStatus(r) == PGRES_TUPLES_OK;
    auto error = ok ? nullptr : error_of(conn_, r, "session setup");
    ::PQclear(r);
    if (error) {
      close();
      std::rethrow_exception(error);
    }
  }
}

void statement_lane::send(const bound_statement& s, completion done) {
  if (busy())
    throw std::logic_error("statement_lane: a statement is in flight already");
  connect();
  if (!prepared_.count(s.name)) {
    PGresult* r = ::PQprepare(conn_, s.name.c_str(), s.sql.c_str(), 0, nullptr);
    auto error = ::PQresultStatus(r) == PGRES_COMMAND_OK ? nullptr : error_of(conn_, r, s.name);
    ::PQclear(r);
    if (error) {
      close(); // see on_readable()
      std::rethrow_exception(error);
    }
    prepared_.insert(s.name);
  }
  std::vector<const char*> values;
  values.reserve(s.params.size());
  for (const auto& p : s.params)
    values.push_back(p ? p->c_str() : nullptr);
  if (!::PQsendQueryPrepared(conn_, s.name.c_str(), static_cast<int>(values.size()), values.data(),
                             nullptr, nullptr, 0)) {
    auto why = message_of(conn_);
    close();
    throw pqxx::broken_connection(why);
  }
  sent(std::move(done));
}

void statement_lane::send_text(const std::string& sql, completion done) {
  if (busy())
    throw std::logic_error("statement_lane: a statement is in flight already");
  connect();
  if (!::PQsendQuery(conn_, sql.c_str())) {
    auto why = message_of(conn_);
    close();
    throw pqxx::broken_connection(why);
  }
  sent(std::move(done));
}

void statement_lane::sent(completion done) {
  done_ = std::move(done);
  rows_.clear();
  error_ = nullptr;
}

bool statement_lane::on_readable() {
  if (!busy()) {
    if (conn_ && (!::PQconsumeInput(conn_) || ::PQstatus(conn_) == CONNECTION_BAD))
      close();
    return false;
  }
  if (!::PQconsumeInput(conn_)) {
    auto done = std::move(done_);
    auto error = std::make_exception_ptr(pqxx::broken_connection(message_of(conn_)));
    close();
    done({}, error);
    return true;
  }
  while (!::PQisBusy(conn_)) {
    PGresult* r = ::PQgetResult(conn_);
    if (!r) {
      auto done = std::move(done_);
      done_ = nullptr;
      auto rows = std::move(rows_);
      rows_.clear();
      auto error = std::exchange(error_, nullptr);
      // As a shared connection is after any failed statement, this one is replaced: a session
      // opened while the database was read-only (a standby, say) stays read-only after it takes
      // writes again, and would refuse every statement for ever.
      if (error)
        close();
      done(std::move(rows), error);
      return true;
    }
    const auto status = ::PQresultStatus(r);
    if (status == PGRES_TUPLES_OK) {
      rows_.clear(); // the last statement's rows are the result
      const int n = ::PQntuples(r), cols = ::PQnfields(r);
      rows_.reserve(n);
      for (int i = 0; i < n; ++i) {
        auto& row = rows_.emplace_back();
        row.reserve(cols);
        for (int c = 0; c < cols; ++c)
          row.push_back(::PQgetisnull(r, i, c)
                            ? std::nullopt
                            : std::optional<std::string>(
                                  std::string(::PQgetvalue(r, i, c), ::PQgetlength(r, i, c))));
      }
    } else if (status != PGRES_COMMAND_OK && !error_) {
      error_ = error_of(conn_, r, "statement");
    }
    ::PQclear(r);
  }
  return false;
}

} // namespace outboxd::persistence
