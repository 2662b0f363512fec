// Test database helpers over libpqxx.
#include "test/support/test_db.hpp"

#include "persistence/migrations.hpp"

#include <cstdio>
#include <cstdlib>
#include <pqxx/pqxx>

namespace outboxd::test {

std::string cluster_conninfo() {
  const char* url = std::getenv("TEST_DATABASE_URL");
  if (url == nullptr || *url == '\0') {
    std::fprintf(stderr, "TEST_DATABASE_URL is not set: run the tests with scripts/test.sh, "
                         "or point it at a PostgreSQL cluster you own (key=value form)\n");
    std::exit(2);
  }
  return url;
}

std::string fresh_database(const std::string& name, const std::string& cluster) {
  {
    pqxx::connection admin(cluster);
    pqxx::nontransaction tx(admin);
    tx.exec("DROP DATABASE IF EXISTS " + tx.quote_name(name) + " WITH (FORCE)");
    tx.exec("CREATE DATABASE " + tx.quote_name(name));
  }
  auto conninfo = cluster + " dbname=" + name;
  pqxx::connection c(conninfo);
  persistence::migrate(c);
  return conninfo;
}

const std::string& lazy_database::operator()() const {
  std::call_once(created_, [this] { conninfo_ = fresh_database(name_); });
  return conninfo_;
}

void truncate_all(const std::string& conninfo) {
  pqxx::connection c(conninfo);
  pqxx::work tx(c);
  tx.exec("TRUNCATE orders, aggregate_results, dead_letter_events, outbox_events RESTART IDENTITY");
  tx.commit();
}

std::string query_value(const std::string& conninfo, const std::string& sql) {
  pqxx::connection c(conninfo);
  pqxx::nontransaction tx(c);
  auto r = tx.exec(sql);
  if (r.empty() || r[0][0].is_null())
    return "";
  return r[0][0].as<std::string>();
}

long long count_rows(const std::string& conninfo, const std::string& table) {
  return std::stoll(query_value(conninfo, "SELECT count(*) FROM " + table));
}

} // namespace outboxd::test
