// ReadExposition, the client-side reader of `pier top`: what the registry writes reads back
// exactly (names, escaped label values, special values), and bad lines are skipped and
// counted without hiding the good ones, whatever bytes come in.
#include "metrics/exposition_reader.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "metrics/registry.h"

namespace pier::metrics {
namespace {

TEST(ExpositionReaderTest, ReadsBackWhatTheRegistryWrites) {
  Registry r;
  r.AddGauge("pier_g", "A gauge.", {"model", "note"})
      .WithLabels({{"model", "m"}, {"note", "a \"quoted\" \\ back\nslash"}})
      .Set(0.25);
  r.AddCounter("pier_c_total", "A counter.").WithLabels({}).Increment(3);
  r.AddGauge("pier_inf", "Infinite.").WithLabels({}).Set(INFINITY);
  r.AddHistogram("pier_h_seconds", "A histogram.", {"model"}, {0.1, 1})
      .WithLabels({{"model", "m"}})
      .Observe(0.5);
  const ExpositionRead read = ReadExposition(r.Render());
  EXPECT_EQ(read.bad_lines, 0u);
  ASSERT_EQ(read.samples.size(), 3u + 5u);  // 3 plain + 3 buckets, _sum, _count
  EXPECT_EQ(read.samples[0].name, "pier_g");
  EXPECT_EQ(read.samples[0].Label("model"), "m");
  EXPECT_EQ(read.samples[0].Label("note"), "a \"quoted\" \\ back\nslash");
  EXPECT_EQ(read.samples[0].Label("absent"), "");
  EXPECT_DOUBLE_EQ(read.samples[0].value, 0.25);
  EXPECT_EQ(read.samples[1].name, "pier_c_total");
  EXPECT_TRUE(read.samples[1].labels.empty());
  EXPECT_EQ(read.samples[1].value, 3);
  EXPECT_TRUE(std::isinf(read.samples[2].value));
  EXPECT_EQ(read.samples[3].name, "pier_h_seconds_bucket");
  EXPECT_EQ(read.samples[3].Label("le"), "0.1");
  EXPECT_EQ(read.samples[7].name, "pier_h_seconds_count");
  EXPECT_EQ(read.samples[7].value, 1);
}

TEST(ExpositionReaderTest, BadLinesAreSkippedAndCounted) {
  const ExpositionRead read = ReadExposition(
      "ok 1\n"
      "no_value\n"
      "bad{label=\"unterminated} 1\n"
      "bad{=\"x\"} 1\n"
      "bad 1x\n"
      "9starts_with_digit 1\n"
      "with_timestamp{a=\"b\"} 2 1700000000000\r\n"
      "nan NaN\n"
      "# HELP comment lines are skipped\n"
      "\n"
      "last -Inf");
  EXPECT_EQ(read.bad_lines, 5u);
  ASSERT_EQ(read.samples.size(), 4u);
  EXPECT_EQ(read.samples[0].name, "ok");
  EXPECT_EQ(read.samples[1].value, 2);
  EXPECT_TRUE(std::isnan(read.samples[2].value));
  EXPECT_EQ(read.samples[3].value, -INFINITY);
}

TEST(ExpositionReaderTest, RandomBytesNeverCrashAndGoodLinesSurvive) {
  std::mt19937 rng(7);
  const std::string alphabet = "ab_:{}=\",\\ \n\t#0123456789.-+eInfNa\r\xff";
  for (int round = 0; round < 2000; ++round) {
    std::string junk;
    const int n = static_cast<int>(rng() % 200);
    for (int i = 0; i < n; ++i) junk.push_back(alphabet[rng() % alphabet.size()]);
    const ExpositionRead read = ReadExposition(junk + "\ngood_line{x=\"y\"} 42\n");
    ASSERT_FALSE(read.samples.empty());
    EXPECT_EQ(read.samples.back().name, "good_line");
    EXPECT_EQ(read.samples.back().value, 42);
  }
}

}  // namespace
}  // namespace pier::metrics
