// DemandForecast on synthetic traces (issue #22's acceptance bar): each trace is a known rate
// function; every 10 s bucket receives that rate times the bucket, with 5% relative Gaussian
// noise (one ramp run: Poisson-sized noise) from a seeded generator. Every minute after a warm-up,
// the forecast made at `now` for now + 300 s is compared with the trace's true (noise-free) rate at
// that instant, and the mean absolute percentage error (MAPE) is asserted: at most 10% on a ramp,
// 15% on periodic loads.
#include "serving/demand_forecast.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <numbers>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace pier::serving {
namespace {

constexpr double kBucket = 10;
constexpr double kHorizon = 300;

// Standard normal draws from a seeded mt19937_64 through Box-Muller, written out so that the
// sequence is the same under every standard library (std::normal_distribution is not).
class Gaussian {
 public:
  explicit Gaussian(uint64_t seed) : engine_(seed) {}
  double Next() {
    const double u1 = Uniform();
    const double u2 = Uniform();
    return std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
  }

 private:
  double Uniform() {  // in (0, 1]
    return (static_cast<double>(engine_() >> 11) + 1) * 0x1.0p-53;
  }
  std::mt19937_64 engine_;
};

using Trace = std::function<double(double t_seconds)>;  // the true rate, per second

enum class Noise {
  kRelative,     // 5% of the count: Gaussian, standard deviation 0.05 * count
  kPoissonLike,  // Gaussian with the Poisson variance: standard deviation sqrt(count)
};

// Records bucket [t, t + kBucket) of `trace` as one event at its middle: the rate there times
// the bucket, with noise.
void RecordBucket(DemandForecast& forecast, const Trace& trace, double t, Gaussian& gaussian,
                  Noise noise = Noise::kRelative) {
  const double mid = t + kBucket / 2;
  const double mean = trace(mid) * kBucket;
  const double sd = noise == Noise::kRelative ? 0.05 * mean : std::sqrt(mean);
  forecast.Record(mid, std::max(0.0, mean + sd * gaussian.Next()));
}

struct Score {
  double mape = 0;    // mean of |forecast - truth| / truth
  int forecasts = 0;  // how many were scored
};

// Feeds `trace` from 0 to `end_s`; from `warmup_s` on, every minute, scores the forecast for
// now + kHorizon against the true rate there.
Score Evaluate(const Trace& trace, double warmup_s, double end_s, uint64_t seed,
               bool detect_seasonality = true, Noise noise = Noise::kRelative) {
  DemandForecast forecast({.detect_seasonality = detect_seasonality});
  Gaussian gaussian(seed);
  Score score;
  double error_sum = 0;
  for (double t = 0; t < end_s; t += kBucket) {
    RecordBucket(forecast, trace, t, gaussian, noise);
    const double now = t + kBucket;  // the bucket just recorded is complete
    const auto bucket = static_cast<int64_t>(now / kBucket);
    if (now < warmup_s || bucket % 6 != 0) continue;
    const std::optional<double> predicted = forecast.ForecastRate(now);
    EXPECT_TRUE(predicted.has_value()) << "no forecast at " << now;
    if (!predicted) continue;
    const double truth = trace(now + kHorizon);
    error_sum += std::abs(*predicted - truth) / truth;
    ++score.forecasts;
  }
  score.mape = score.forecasts > 0 ? error_sum / score.forecasts : 1;
  return score;
}

// 5 -> 100 per second, linearly over two hours.
double Ramp(double t) { return 5 + 95 * std::min(t, 7200.0) / 7200; }

double Flat(double) { return 40; }

// Mean 40, amplitude 25 per second, with the given period.
Trace Sinusoid(double period_s) {
  return [period_s](double t) { return 40 + 25 * std::sin(2 * std::numbers::pi * t / period_s); };
}

TEST(DemandForecastTest, FollowsARampWithinTenPercent) {
  // Scored from 10 minutes in until the target reaches the ramp's end.
  const Score score = Evaluate(Ramp, 600, 7200 - kHorizon, 1);
  std::printf("ramp 5->100/s over 2 h: MAPE %.2f%% over %d forecasts\n", 100 * score.mape,
              score.forecasts);
  EXPECT_GT(score.forecasts, 90);
  EXPECT_LE(score.mape, 0.10);
  // Counting noise instead: 14% per bucket at 5/s, 3% at 100/s.
  const Score poisson = Evaluate(Ramp, 600, 7200 - kHorizon, 1, true, Noise::kPoissonLike);
  std::printf("ramp, Poisson-like noise: MAPE %.2f%%\n", 100 * poisson.mape);
  EXPECT_LE(poisson.mape, 0.10);
}

TEST(DemandForecastTest, FollowsASurgeAfterAFlatHour) {
  // 20/s for an hour, then 20 -> 80 over 30 minutes, then 80. Scored from five minutes before
  // the surge to its end: the first forecasts into the surge cannot know it (the target 300 s
  // ahead is already rising while the history is flat), the trend must pick it up quickly.
  const Trace surge = [](double t) {
    if (t < 3600) return 20.0;
    return 20 + 60 * std::min(t - 3600, 1800.0) / 1800;
  };
  const Score score = Evaluate(surge, 3600 - kHorizon, 5400, 9);
  std::printf("surge 20->80/s over 30 min: MAPE %.2f%% over %d forecasts\n", 100 * score.mape,
              score.forecasts);
  EXPECT_LE(score.mape, 0.15);
}

TEST(DemandForecastTest, FollowsATwentyMinuteCycleWithinFifteenPercent) {
  // Scored once two periods (and a horizon) have been seen, over three hours: the last hour
  // runs with the history window full and sliding.
  const Score score = Evaluate(Sinusoid(1200), 2 * 1200 + kHorizon, 3 * 3600, 2);
  std::printf("20 min cycle 40+-25/s: MAPE %.2f%% over %d forecasts\n", 100 * score.mape,
              score.forecasts);
  EXPECT_GT(score.forecasts, 100);
  EXPECT_LE(score.mape, 0.15);
}

TEST(DemandForecastTest, FollowsAFifteenMinuteCycleWithinFifteenPercent) {
  // A period of exactly three horizons: the shortest the detector looks for.
  const Score score = Evaluate(Sinusoid(900), 2 * 900 + kHorizon, 3 * 3600, 3);
  std::printf("15 min cycle 40+-25/s: MAPE %.2f%% over %d forecasts\n", 100 * score.mape,
              score.forecasts);
  EXPECT_GT(score.forecasts, 100);
  EXPECT_LE(score.mape, 0.15);
}

TEST(DemandForecastTest, FollowsACycleOnARamp) {
  // 20 minute cycle of amplitude 10 on a ramp 20 -> 80 over three hours.
  const Trace trace = [](double t) {
    return 20 + 60 * t / 10800 + 10 * std::sin(2 * std::numbers::pi * t / 1200);
  };
  const Score score = Evaluate(trace, 2 * 1200 + kHorizon, 10800 - kHorizon, 4);
  std::printf("20 min cycle on a ramp: MAPE %.2f%% over %d forecasts\n", 100 * score.mape,
              score.forecasts);
  EXPECT_LE(score.mape, 0.10);
}

TEST(DemandForecastTest, FollowsACycleOfAFractionalNumberOfBuckets) {
  // 1234 s is 123.4 buckets: a whole-bucket period would drift by 0.4 bucket per cycle.
  const Score score = Evaluate(Sinusoid(1234), 2 * 1234 + kHorizon, 3 * 3600, 10);
  std::printf("20.6 min cycle: MAPE %.2f%% over %d forecasts\n", 100 * score.mape, score.forecasts);
  EXPECT_LE(score.mape, 0.15);
}

TEST(DemandForecastTest, SeasonalityBeatsTrendOnlyOnACycle) {
  // The same trace and noise with the seasonal part off: Holt alone extrapolates the current
  // slope of the cycle and misses the target phase.
  const Score seasonal = Evaluate(Sinusoid(1200), 2 * 1200 + kHorizon, 3 * 3600, 2);
  const Score trend_only = Evaluate(Sinusoid(1200), 2 * 1200 + kHorizon, 3 * 3600, 2, false);
  std::printf("20 min cycle: MAPE %.2f%% seasonal, %.2f%% trend only\n", 100 * seasonal.mape,
              100 * trend_only.mape);
  EXPECT_GT(trend_only.mape, 0.15);
  EXPECT_LT(seasonal.mape * 2, trend_only.mape);
}

TEST(DemandForecastTest, DetectsThePeriodAndNoneOnRampOrFlatLoads) {
  Gaussian noise(5);
  DemandForecast cycle;
  DemandForecast ramp;
  DemandForecast flat;
  for (double t = 0; t < 7200; t += kBucket) {
    RecordBucket(cycle, Sinusoid(1200), t, noise);
    RecordBucket(ramp, Ramp, t, noise);
    RecordBucket(flat, Flat, t, noise);
  }
  const std::optional<double> period = cycle.PeriodSeconds(7200);
  ASSERT_TRUE(period.has_value());
  EXPECT_NEAR(*period, 1200, 2 * kBucket);
  EXPECT_FALSE(ramp.PeriodSeconds(7200).has_value());
  EXPECT_FALSE(flat.PeriodSeconds(7200).has_value());
  // A period that is not a whole number of buckets is found to a fraction of one.
  DemandForecast fractional;
  for (double t = 0; t < 7200; t += kBucket) RecordBucket(fractional, Sinusoid(1234), t, noise);
  ASSERT_TRUE(fractional.PeriodSeconds(7200).has_value());
  EXPECT_NEAR(*fractional.PeriodSeconds(7200), 1234, kBucket);
  // Off: never a period.
  DemandForecast off({.detect_seasonality = false});
  for (double t = 0; t < 7200; t += kBucket) RecordBucket(off, Sinusoid(1200), t, noise);
  EXPECT_FALSE(off.PeriodSeconds(7200).has_value());
}

TEST(DemandForecastTest, AFlatLoadForecastsTheFlatRate) {
  DemandForecast forecast;
  Gaussian noise(6);
  double worst = 0;
  double sum = 0;
  int count = 0;
  for (double t = 0; t < 7200; t += kBucket) {
    RecordBucket(forecast, Flat, t, noise);
    if (const auto predicted = forecast.ForecastRate(t + kBucket); predicted && t >= 600) {
      worst = std::max(worst, std::abs(*predicted - 40) / 40);
      sum += std::abs(*predicted - 40) / 40;
      ++count;
    }
  }
  std::printf("flat 40/s: MAPE %.2f%%, worst %.2f%% (every bucket)\n", 100 * sum / count,
              100 * worst);
  EXPECT_LE(sum / count, 0.03);
  // The worst single forecast: the trend's noise, times the 30-bucket horizon.
  EXPECT_LE(worst, 0.15);
  EXPECT_NEAR(forecast.CurrentRate(7200), 40, 3);
}

TEST(DemandForecastTest, NoForecastBeforeAHorizonOfHistory) {
  DemandForecast forecast;
  EXPECT_FALSE(forecast.ForecastRate(0).has_value());
  EXPECT_FALSE(forecast.ForecastRate(1000).has_value());
  EXPECT_EQ(forecast.CurrentRate(1000), 0);
  // Buckets 100..128 complete at 1290 s: 29 buckets, one short of the 300 s horizon.
  for (double t = 1000; t < 1290; t += kBucket) forecast.Record(t, 100);
  EXPECT_FALSE(forecast.ForecastRate(1290).has_value());
  // The 30th bucket completes at 1300 s.
  forecast.Record(1295, 100);
  EXPECT_FALSE(forecast.ForecastRate(1299).has_value());
  const std::optional<double> predicted = forecast.ForecastRate(1300);
  ASSERT_TRUE(predicted.has_value());
  EXPECT_NEAR(*predicted, 10, 0.5);
  EXPECT_NEAR(forecast.CurrentRate(1300), 10, 1e-9);
}

TEST(DemandForecastTest, AnIdleGapForecastsNearZero) {
  for (const bool detect : {true, false}) {
    for (const Trace& trace : {Trace(Flat), Sinusoid(1200), Trace(Ramp)}) {
      DemandForecast forecast({.detect_seasonality = detect});
      Gaussian noise(7);
      for (double t = 0; t < 3600; t += kBucket) RecordBucket(forecast, trace, t, noise);
      ASSERT_GT(forecast.ForecastRate(3600).value_or(0), 5);
      // Ten minutes without an event: no Record, the clock moves on.
      const std::optional<double> predicted = forecast.ForecastRate(3600 + 600);
      ASSERT_TRUE(predicted.has_value());
      EXPECT_LT(*predicted, 0.5) << "detect_seasonality " << detect;
      EXPECT_EQ(forecast.CurrentRate(3600 + 600), 0);
    }
  }
}

TEST(DemandForecastTest, TrafficAfterAGapIsFollowed) {
  // The idle answer does not stick: an hour at 40/s, ten idle minutes, then two minutes at
  // 40/s again bring the forecast most of the way back.
  DemandForecast forecast;
  Gaussian noise(8);
  for (double t = 0; t < 3600; t += kBucket) RecordBucket(forecast, Flat, t, noise);
  for (double t = 4200; t < 4320; t += kBucket) RecordBucket(forecast, Flat, t, noise);
  const std::optional<double> predicted = forecast.ForecastRate(4320);
  ASSERT_TRUE(predicted.has_value());
  EXPECT_GT(*predicted, 20);
}

TEST(DemandForecastTest, TimeGoingBackwardsCountsInTheNewestBucket) {
  DemandForecast forecast;
  for (double t = 0; t < 600; t += kBucket) forecast.Record(t, 10);  // 1/s
  forecast.Record(595, 60);  // the newest bucket, [590, 600)
  forecast.Record(5, 60);    // long past: also the newest bucket
  forecast.Record(-1e6, 60);
  // The last minute held 6 * 10 + 180.
  EXPECT_NEAR(forecast.CurrentRate(600), (60 + 180) / 60.0, 1e-9);
  // Values that are not times or amounts are ignored.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  forecast.Record(nan, 1);
  forecast.Record(inf, 1);
  forecast.Record(1e300, 1);
  forecast.Record(599, nan);
  forecast.Record(599, -5);
  EXPECT_NEAR(forecast.CurrentRate(600), (60 + 180) / 60.0, 1e-9);
  EXPECT_TRUE(forecast.ForecastRate(600).has_value());
  EXPECT_FALSE(forecast.ForecastRate(nan).has_value());
  EXPECT_EQ(forecast.CurrentRate(inf), 0);
}

TEST(DemandForecastTest, AGapLongerThanTheHistoryForgetsIt) {
  DemandForecast forecast({.history_seconds = 600});
  for (double t = 0; t < 600; t += kBucket) forecast.Record(t, 1000);      // 100/s
  for (double t = 10000; t < 10300; t += kBucket) forecast.Record(t, 10);  // then 1/s
  // The history is five idle minutes and five at 1/s (a step up, so a little above 1).
  const std::optional<double> predicted = forecast.ForecastRate(10300);
  ASSERT_TRUE(predicted.has_value());
  EXPECT_GT(*predicted, 0.9);
  EXPECT_LT(*predicted, 2);
  EXPECT_NEAR(forecast.CurrentRate(10300), 1, 1e-9);
}

TEST(DemandForecastTest, ValidateNamesTheFieldOutOfRange) {
  using Options = DemandForecast::Options;
  EXPECT_TRUE(DemandForecast::Validate(Options{}).ok());
  EXPECT_TRUE(DemandForecast::Validate({.horizon_seconds = 0}).ok());
  const Status zero_bucket = DemandForecast::Validate({.bucket_seconds = 0});
  EXPECT_EQ(zero_bucket.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(zero_bucket.message().find("bucket_seconds"), std::string::npos);
  EXPECT_NE(DemandForecast::Validate({.history_seconds = 5}).message().find("history_seconds"),
            std::string::npos);
  EXPECT_FALSE(DemandForecast::Validate({.bucket_seconds = 1, .history_seconds = 86400}).ok());
  EXPECT_NE(DemandForecast::Validate({.horizon_seconds = 9000}).message().find("horizon_seconds"),
            std::string::npos);
  EXPECT_FALSE(DemandForecast::Validate({.horizon_seconds = -1}).ok());
}

TEST(DemandForecastTest, RecordAndReadFromSeveralThreads) {
  // Two recording threads (as the HTTP handlers) and a reading one (as a scrape).
  DemandForecast forecast;
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&forecast] {
      for (int i = 0; i < 20000; ++i) forecast.Record(1005);
    });
  }
  for (int i = 0; i < 200; ++i) {
    (void)forecast.ForecastRate(1010 + i);
    (void)forecast.CurrentRate(1010 + i);
  }
  for (std::thread& w : writers) w.join();
  EXPECT_EQ(forecast.CurrentRate(1010), 40000 / kBucket);
}

}  // namespace
}  // namespace pier::serving
