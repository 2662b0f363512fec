// The Prometheus text rendering of counters, histograms and gauges.
#include "metrics/metrics.hpp"

#include <doctest/doctest.h>

using namespace outboxd::metrics;

TEST_CASE("counters render one line per label set with escaped values") {
  counter c("outboxd_test_total", "A test counter.");
  c.inc({{"destination", "billing"}, {"outcome", "success"}});
  c.inc({{"destination", "billing"}, {"outcome", "success"}}, 2);
  c.inc({{"destination", "quote\"d\\"}, {"outcome", "retryable"}});
  std::string out;
  c.render(out);
  CHECK(out.find(
            "# HELP outboxd_test_total A test counter.\n# TYPE outboxd_test_total counter\n") == 0);
  CHECK(out.find("outboxd_test_total{destination=\"billing\",outcome=\"success\"} 3\n") !=
        std::string::npos);
  CHECK(out.find("destination=\"quote\\\"d\\\\\"") != std::string::npos);
  CHECK(c.value({{"destination", "billing"}, {"outcome", "success"}}) == 3);
  CHECK(c.value({{"destination", "nowhere"}}) == 0);
}

TEST_CASE("a counter without labels shows 0 before its first increment; one with labels nothing") {
  counter single("outboxd_test_lost_total", "Lost.", true);
  counter by_label("outboxd_test_calls_total", "Calls.");
  std::string out;
  single.render(out);
  by_label.render(out);
  CHECK(out.find("\noutboxd_test_lost_total 0\n") != std::string::npos);
  CHECK(out.find("\noutboxd_test_calls_total") == std::string::npos);
  single.inc();
  out.clear();
  single.render(out);
  CHECK(out.find("\noutboxd_test_lost_total 1\n") != std::string::npos);
}

TEST_CASE("histograms count observations into cumulative buckets with sum and count") {
  histogram h("outboxd_test_seconds", "A test histogram.", {0.01, 0.1, 1});
  h.observe({{"destination", "inventory"}}, 0.005);
  h.observe({{"destination", "inventory"}}, 0.05);
  h.observe({{"destination", "inventory"}}, 5);
  std::string out;
  h.render(out);
  CHECK(out.find("outboxd_test_seconds_bucket{destination=\"inventory\",le=\"0.01\"} 1\n") !=
        std::string::npos);
  CHECK(out.find("outboxd_test_seconds_bucket{destination=\"inventory\",le=\"0.1\"} 2\n") !=
        std::string::npos);
  CHECK(out.find("outboxd_test_seconds_bucket{destination=\"inventory\",le=\"1\"} 2\n") !=
        std::string::npos);
  CHECK(out.find("outboxd_test_seconds_bucket{destination=\"inventory\",le=\"+Inf\"} 3\n") !=
        std::string::npos);
  CHECK(out.find("outboxd_test_seconds_count{destination=\"inventory\"} 3\n") != std::string::npos);
  CHECK(out.find("outboxd_test_seconds_sum{destination=\"inventory\"} 5.055\n") !=
        std::string::npos);
}

TEST_CASE("gauges render with and without labels") {
  std::string out;
  render_gauge(out, "outboxd_test_depth", "A test gauge.", {{{{"status", "PENDING"}}, 4}, {{}, 1}});
  CHECK(out.find("# TYPE outboxd_test_depth gauge\n") != std::string::npos);
  CHECK(out.find("outboxd_test_depth{status=\"PENDING\"} 4\n") != std::string::npos);
  CHECK(out.find("outboxd_test_depth 1\n") != std::string::npos);
}
