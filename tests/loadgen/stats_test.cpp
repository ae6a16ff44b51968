// Statistics, SLO parsing and run metrics against values worked out by hand.
#include "loadgen/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "loadgen/run_metrics.h"

namespace pier::loadgen {
namespace {

TEST(StatsTest, PercentilesInterpolateBetweenRanksLikeNumpy) {
  // Unsorted on purpose: 1..10.
  const std::vector<double> values = {7, 3, 10, 1, 5, 9, 2, 8, 4, 6};
  EXPECT_DOUBLE_EQ(Percentile(values, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(values, 100), 10);
  EXPECT_DOUBLE_EQ(Percentile(values, 50), 5.5);     // rank 4.5
  EXPECT_NEAR(Percentile(values, 90), 9.1, 1e-12);   // rank 8.1
  EXPECT_NEAR(Percentile(values, 99), 9.91, 1e-12);  // rank 8.91
  EXPECT_DOUBLE_EQ(Percentile(std::vector<double>{1, 3}, 25), 1.5);
  EXPECT_DOUBLE_EQ(Percentile(std::vector<double>{42}, 99), 42);
}

TEST(StatsTest, MeanAndPopulationStdDev) {
  const std::vector<double> values = {2, 4, 4, 4, 5, 5, 7, 9};
  EXPECT_DOUBLE_EQ(Mean(values), 5);
  EXPECT_DOUBLE_EQ(StdDev(values), 2);  // the textbook population example
}

TEST(StatsTest, EmptyInputsGiveZero) {
  const std::vector<double> none;
  EXPECT_EQ(Mean(none), 0);
  EXPECT_EQ(StdDev(none), 0);
  EXPECT_EQ(Percentile(none, 99), 0);
  const std::vector<double> ps = {99};
  const MetricSummary s = Summarize(none, ps);
  EXPECT_EQ(s.count, 0u);
  ASSERT_EQ(s.percentiles.size(), 1u);
  EXPECT_EQ(s.percentiles[0].second, 0);
}

TEST(StatsTest, SummaryKeepsPercentileOrder) {
  const std::vector<double> values = {10, 20, 30, 40, 50};
  const std::vector<double> ps = {99, 50, 90};
  const MetricSummary s = Summarize(values, ps);
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.mean, 30);
  EXPECT_DOUBLE_EQ(s.median, 30);
  EXPECT_NEAR(s.std_dev, std::sqrt(200.0), 1e-12);
  ASSERT_EQ(s.percentiles.size(), 3u);
  EXPECT_EQ(s.percentiles[0].first, 99);
  EXPECT_NEAR(s.percentiles[0].second, 49.6, 1e-12);  // rank 3.96
  EXPECT_DOUBLE_EQ(s.percentiles[1].second, 30);
  EXPECT_NEAR(s.percentiles[2].second, 46, 1e-12);  // rank 3.6
}

TEST(SloTargetsTest, ParsesKeysInSeparateOrCommaSeparatedItems) {
  auto slos = ParseSloTargets({"ttft:500", "tpot:50.5,e2el:2000"});
  ASSERT_TRUE(slos.ok()) << slos.status().ToString();
  EXPECT_EQ(*slos->ttft_ms, 500);
  EXPECT_EQ(*slos->tpot_ms, 50.5);
  EXPECT_EQ(*slos->e2el_ms, 2000);
  EXPECT_TRUE(ParseSloTargets({})->empty());
}

TEST(SloTargetsTest, RejectsUnknownKeysAndBadValues) {
  EXPECT_FALSE(ParseSloTargets({"itl:5"}).ok());
  EXPECT_FALSE(ParseSloTargets({"ttft"}).ok());
  EXPECT_FALSE(ParseSloTargets({"ttft:"}).ok());
  EXPECT_FALSE(ParseSloTargets({"ttft:-1"}).ok());
  EXPECT_FALSE(ParseSloTargets({"ttft:5ms"}).ok());
}

RequestResult Success(double ttft, double latency, int output, std::vector<double> itl,
                      int input_len, int prompt_tokens) {
  RequestResult r;
  r.success = true;
  r.ttft_s = ttft;
  r.latency_s = latency;
  r.output_tokens = output;
  r.usage_reported = true;
  r.itl_s = std::move(itl);
  r.input_len = input_len;
  r.prompt_tokens = prompt_tokens;
  return r;
}

TEST(MetricsTest, ComputesThroughputLatenciesAndGoodputByHand) {
  std::vector<RequestResult> requests;
  // TPOT (1.0 - 0.1) / 9 = 0.1 s; (0.5 - 0.3) / 4 = 0.05 s; one token: no TPOT sample.
  requests.push_back(Success(0.1, 1.0, 10, {0.1, 0.1}, 100, 103));
  requests.push_back(Success(0.3, 0.5, 5, {0.05}, 50, -1));  // no usage.prompt_tokens
  requests.push_back(Success(0.2, 0.2, 1, {}, 20, 20));
  RequestResult failed;
  failed.error = "HTTP 500: boom";
  failed.input_len = 999;
  failed.output_tokens = 999;
  requests.push_back(failed);

  SloTargets slos;
  slos.ttft_ms = 250;  // request 2 misses (300 ms)
  slos.tpot_ms = 100;  // request 1 is exactly at the limit: met
  const BenchmarkMetrics m = ComputeMetrics(requests, 2, 2.0, slos, {50, 99});
  EXPECT_EQ(m.completed, 3u);
  EXPECT_EQ(m.failed, 1u);
  EXPECT_EQ(m.not_sent, 2u);
  EXPECT_EQ(m.total_input_tokens, 103 + 50 + 20);
  EXPECT_EQ(m.total_output_tokens, 16);
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(m.output_throughput, 8);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, (173 + 16) / 2.0);
  EXPECT_EQ(m.good_requests, 2u);
  ASSERT_TRUE(m.request_goodput.has_value());
  EXPECT_DOUBLE_EQ(*m.request_goodput, 1.0);
  EXPECT_NEAR(m.ttft_ms.mean, 200, 1e-9);
  EXPECT_NEAR(m.ttft_ms.median, 200, 1e-9);
  EXPECT_EQ(m.tpot_ms.count, 2u);
  EXPECT_NEAR(m.tpot_ms.mean, 75, 1e-9);
  EXPECT_EQ(m.itl_ms.count, 3u);
  EXPECT_NEAR(m.itl_ms.mean, 250.0 / 3.0, 1e-9);
  EXPECT_NEAR(m.e2el_ms.mean, 1700.0 / 3.0, 1e-9);
  EXPECT_NEAR(m.e2el_ms.percentiles[0].second, 500, 1e-9);
  EXPECT_NEAR(m.e2el_ms.percentiles[1].second, 990, 1e-9);  // rank 1.98 of {200, 500, 1000}
}

TEST(MetricsTest, NoSlosMeansNoGoodput) {
  const BenchmarkMetrics m =
      ComputeMetrics({Success(0.1, 0.2, 2, {0.1}, 1, 1)}, 0, 1.0, SloTargets(), {99});
  EXPECT_FALSE(m.request_goodput.has_value());
  EXPECT_TRUE(m.all_usage_reported);
}

}  // namespace
}  // namespace pier::loadgen
