#include "metrics/registry.h"

#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "metrics/exposition_parser.h"

namespace pier::metrics {
namespace {

using testing::ParseExposition;

TEST(RegistryTest, RendersCounterGaugeAndHistogramExactly) {
  Registry registry;
  Family<Counter>& requests =
      registry.AddCounter("req_total", "Requests served.", {"model", "code"});
  requests.WithLabels({{"model", "m"}, {"code", "429"}}).Increment();
  requests.WithLabels({{"model", "m"}, {"code", "200"}}).Increment(3);
  Family<Gauge>& temperature = registry.AddGauge("temperature", "Line one.\nBack\\slash.");
  temperature.WithLabels({}).Set(-1.5);
  Family<Histogram>& latency =
      registry.AddHistogram("lat_seconds", "Latency.", {"route"}, {0.5, 1, 2.5});
  Histogram& v1 = latency.WithLabels({{"route", "/v1"}});
  v1.Observe(0.25);
  v1.Observe(0.5);  // on a bound: counted in that bucket (le = "less or equal")
  v1.Observe(0.75);
  v1.Observe(3);

  const std::string expected =
      "# HELP req_total Requests served.\n"
      "# TYPE req_total counter\n"
      "req_total{model=\"m\",code=\"200\"} 3\n"
      "req_total{model=\"m\",code=\"429\"} 1\n"
      "# HELP temperature Line one.\\nBack\\\\slash.\n"
      "# TYPE temperature gauge\n"
      "temperature -1.5\n"
      "# HELP lat_seconds Latency.\n"
      "# TYPE lat_seconds histogram\n"
      "lat_seconds_bucket{route=\"/v1\",le=\"0.5\"} 2\n"
      "lat_seconds_bucket{route=\"/v1\",le=\"1\"} 3\n"
      "lat_seconds_bucket{route=\"/v1\",le=\"2.5\"} 3\n"
      "lat_seconds_bucket{route=\"/v1\",le=\"+Inf\"} 4\n"
      "lat_seconds_sum{route=\"/v1\"} 4.5\n"
      "lat_seconds_count{route=\"/v1\"} 4\n";
  EXPECT_EQ(registry.Render(), expected);
}

TEST(RegistryTest, FamilyWithoutLabelsShowsZeroAndLabelledFamilyShowsOnlyHeaders) {
  Registry registry;
  registry.AddCounter("plain_total", "Plain.");
  registry.AddCounter("labelled_total", "Labelled.", {"reason"});
  registry.AddHistogram("h", "H.", {}, {1});
  EXPECT_EQ(registry.Render(),
            "# HELP plain_total Plain.\n"
            "# TYPE plain_total counter\n"
            "plain_total 0\n"
            "# HELP labelled_total Labelled.\n"
            "# TYPE labelled_total counter\n"
            "# HELP h H.\n"
            "# TYPE h histogram\n"
            "h_bucket{le=\"1\"} 0\n"
            "h_bucket{le=\"+Inf\"} 0\n"
            "h_sum 0\n"
            "h_count 0\n");
}

TEST(RegistryTest, EscapesLabelValues) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(EscapeLabelValue("plain /v1/chat"), "plain /v1/chat");
  EXPECT_EQ(EscapeHelp("a\\b\"c\nd"), "a\\\\b\"c\\nd");  // quotes stay as they are in HELP

  Registry registry;
  registry.AddGauge("g", "G.", {"path"}).WithLabels({{"path", "C:\\dir \"x\"\nnext"}}).Set(1);
  const std::string text = registry.Render();
  EXPECT_NE(text.find("g{path=\"C:\\\\dir \\\"x\\\"\\nnext\"} 1\n"), std::string::npos) << text;
  testing::Exposition parsed = ParseExposition(text);
  EXPECT_TRUE(parsed.errors.empty()) << parsed.errors.front();
  // The parser unescapes: the series key is the text as written.
  EXPECT_EQ(parsed.samples.count("g{path=\"C:\\\\dir \\\"x\\\"\\nnext\"}"), 1u);
}

TEST(RegistryTest, FormatsValuesSoTheyRoundTrip) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(3), "3");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(-2.5), "-2.5");
  EXPECT_EQ(FormatValue(1e-5), "1e-05");
  EXPECT_EQ(FormatValue(123456789), "123456789");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> exponent(-300, 300);
  for (int i = 0; i < 2000; ++i) {
    const double value = std::pow(10.0, exponent(rng)) * (i % 2 == 0 ? 1 : -1);
    const std::string text = FormatValue(value);
    double back = 0;
    auto result = std::from_chars(text.data(), text.data() + text.size(), back);
    ASSERT_EQ(result.ec, std::errc()) << text;
    ASSERT_EQ(result.ptr, text.data() + text.size()) << text;
    ASSERT_EQ(back, value) << text;
    ASSERT_EQ(text.find(','), std::string::npos) << text;  // never a locale's decimal comma
  }
}

TEST(RegistryTest, ValidatesMetricAndLabelNames) {
  EXPECT_TRUE(IsValidMetricName("pier_requests_total"));
  EXPECT_TRUE(IsValidMetricName("vllm:num_requests_waiting"));
  EXPECT_TRUE(IsValidMetricName(":leading_colon"));
  EXPECT_TRUE(IsValidMetricName("_x9"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_FALSE(IsValidMetricName("9lives"));
  EXPECT_FALSE(IsValidMetricName("with-dash"));
  EXPECT_FALSE(IsValidMetricName("with space"));
  EXPECT_FALSE(IsValidMetricName("caf\xc3\xa9"));

  EXPECT_TRUE(IsValidLabelName("model"));
  EXPECT_TRUE(IsValidLabelName("_private"));
  EXPECT_FALSE(IsValidLabelName("__reserved"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName("1st"));
  EXPECT_FALSE(IsValidLabelName(""));
}

TEST(RegistryDeathTest, RefusesBadRegistrations) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Registry registry;
  Family<Counter>& counter = registry.AddCounter("ok_total", "Ok.", {"reason"});
  EXPECT_DEATH(registry.AddCounter("bad-name", "x"), "invalid Prometheus metric name");
  EXPECT_DEATH(registry.AddGauge("ok_total", "x"), "registered twice");
  EXPECT_DEATH(registry.AddGauge("g", "x", {"__name__"}), "invalid Prometheus label name");
  EXPECT_DEATH(registry.AddGauge("g", "x", {"a", "a"}), "duplicate label name");
  EXPECT_DEATH(registry.AddHistogram("h", "x", {"le"}, {1}), "label named le");
  EXPECT_DEATH(registry.AddHistogram("h", "x", {}, {1, 1}), "increase strictly");
  EXPECT_DEATH(counter.WithLabels({{"other", "x"}}), "label other where reason");
  EXPECT_DEATH(counter.WithLabels({}), "takes 1 labels");
  EXPECT_DEATH(counter.WithLabels({{"reason", "x"}}).Increment(-1), "only goes up");
  EXPECT_DEATH(registry.AddAlias(counter, "alias_total", "x", {}), "as many labels");
}

TEST(RegistryTest, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  Histogram histogram({1, 2, 5});
  for (double v : {0.5, 1.0, 1.5, 2.0, 4.0, 6.0, 100.0}) histogram.Observe(v);
  histogram.Observe(std::nan(""));  // ignored
  Histogram::Snapshot snapshot = histogram.Read();
  EXPECT_EQ(snapshot.cumulative_counts, (std::vector<uint64_t>{2, 4, 5, 7}));
  EXPECT_EQ(snapshot.count, 7u);
  EXPECT_DOUBLE_EQ(snapshot.sum, 115.0);
  histogram.Observe(std::numeric_limits<double>::infinity());
  snapshot = histogram.Read();
  EXPECT_EQ(snapshot.cumulative_counts.back(), 8u);
  EXPECT_EQ(snapshot.cumulative_counts[2], 5u);
  EXPECT_TRUE(std::isinf(snapshot.sum));
}

TEST(RegistryTest, AliasRendersTheSameValuesUnderOtherNames) {
  Registry registry;
  Family<Counter>& requests =
      registry.AddCounter("pier_requests_total", "Requests.", {"model", "finish_reason"});
  Family<Histogram>& ttft = registry.AddHistogram("pier_ttft_seconds", "TTFT.", {"model"}, {0.5});
  registry.AddAlias(requests, "vllm:request_success_total", "Success.",
                    {"model_name", "finished_reason"});
  registry.AddAlias(ttft, "vllm:time_to_first_token_seconds", "TTFT.", {"model_name"});
  requests.WithLabels({{"model", "m"}, {"finish_reason", "stop"}}).Increment(2);
  ttft.WithLabels({{"model", "m"}}).Observe(0.25);

  testing::Exposition parsed = ParseExposition(registry.Render());
  ASSERT_TRUE(parsed.errors.empty()) << parsed.errors.front();
  EXPECT_EQ(parsed.samples.at("pier_requests_total{model=\"m\",finish_reason=\"stop\"}"), 2);
  EXPECT_EQ(
      parsed.samples.at("vllm:request_success_total{model_name=\"m\",finished_reason=\"stop\"}"),
      2);
  EXPECT_EQ(
      parsed.samples.at("vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.5\"}"), 1);
  EXPECT_EQ(parsed.samples.at("vllm:time_to_first_token_seconds_sum{model_name=\"m\"}"), 0.25);
  EXPECT_EQ(parsed.types.at("vllm:request_success_total"), "counter");
  EXPECT_EQ(parsed.types.at("vllm:time_to_first_token_seconds"), "histogram");
}

TEST(RegistryTest, ConcurrentRecordingSumsCorrectly) {
  Registry registry;
  Family<Counter>& counter = registry.AddCounter("c_total", "C.", {"thread_group"});
  Gauge& gauge = registry.AddGauge("g", "G.").WithLabels({});
  Family<Histogram>& histogram = registry.AddHistogram("h", "H.", {}, {0.5, 1.5});
  constexpr int kThreads = 8;
  constexpr int kIterations = 20000;
  std::atomic<bool> stop_rendering{false};
  std::thread renderer([&] {
    while (!stop_rendering.load()) {
      testing::Exposition parsed = ParseExposition(registry.Render());
      ASSERT_TRUE(parsed.errors.empty()) << parsed.errors.front();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIterations; ++i) {
        // Children are looked up (and created) concurrently too.
        counter.WithLabels({{"thread_group", t % 2 == 0 ? "even" : "odd"}}).Increment();
        gauge.Increment(2);
        gauge.Decrement(1);
        histogram.WithLabels({}).Observe(i % 2 == 0 ? 1.0 : 0.25);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  stop_rendering = true;
  renderer.join();

  EXPECT_EQ(counter.WithLabels({{"thread_group", "even"}}).Value(), kThreads / 2 * kIterations);
  EXPECT_EQ(counter.WithLabels({{"thread_group", "odd"}}).Value(), kThreads / 2 * kIterations);
  EXPECT_EQ(gauge.Value(), kThreads * kIterations);
  Histogram::Snapshot snapshot = histogram.WithLabels({}).Read();
  EXPECT_EQ(snapshot.count, uint64_t{kThreads} * kIterations);
  EXPECT_EQ(snapshot.cumulative_counts[0], uint64_t{kThreads} * kIterations / 2);
  EXPECT_EQ(snapshot.sum, kThreads * (kIterations / 2) * 1.25);
}

TEST(RegistryTest, OneTwoFiveBuckets) {
  EXPECT_EQ(OneTwoFiveBuckets(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(OneTwoFiveBuckets(30), (std::vector<double>{1, 2, 5, 10, 20}));
}

TEST(ExpositionParserTest, RejectsMalformedText) {
  auto errors = [](std::string_view text) { return ParseExposition(text).errors.size(); };
  EXPECT_EQ(errors("# HELP a A.\n# TYPE a gauge\na 1\n"), 0u);
  EXPECT_GT(errors("a 1\n"), 0u);                                          // no HELP/TYPE
  EXPECT_GT(errors("# HELP a A.\n# TYPE a gauge\na{x=\"1} 1\n"), 0u);      // unterminated
  EXPECT_GT(errors("# HELP a A.\n# TYPE a gauge\na{x=\"\\t\"} 1\n"), 0u);  // bad escape
  EXPECT_GT(errors("# HELP a A.\n# TYPE a gauge\na 1,5\n"), 0u);           // bad value
  EXPECT_GT(errors("# HELP a A.\n# TYPE a gauge\nb 1\n"), 0u);             // other family
  EXPECT_GT(errors("# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\n"
                   "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n"),
            0u);  // not cumulative
  EXPECT_GT(errors("# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n"),
            0u);  // no +Inf
}

}  // namespace
}  // namespace pier::metrics
