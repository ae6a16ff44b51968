#include "serving/demand_forecast.h"

#include <algorithm>
#include <cmath>

#include "common/check.h"

namespace pier::serving {
namespace {

// Holt's smoothing constants, per bucket. The level follows a change within about 1/kLevelAlpha
// buckets (50 s by default), so an idle gap or a step shows within a minute; the trend averages
// slopes over about 1/kTrendBeta buckets (8 minutes), because it is multiplied by the horizon
// (30 buckets) and its noise with it. Chosen on the tests' synthetic traces (5% noise): a
// larger beta follows the start of a surge sooner but scatters a flat load's forecast more
// (beta 0.04: flat worst error 10%, surge MAPE 8.5%; 0.01: 6%, 13%); a smaller alpha smooths
// more but lags a step.
constexpr double kLevelAlpha = 0.2;
constexpr double kTrendBeta = 0.02;

// Period detection (see the header): accept at this autocorrelation, and prefer the shortest
// accepted lag within kPeriodTolerance of the best one.
constexpr double kPeriodMinCorrelation = 0.6;
constexpr double kPeriodTolerance = 0.1;

// Bucket indices stay exact in a double and far from int64's limits.
constexpr double kMaxAbsIndex = 9007199254740992.0;  // 2^53

// The most buckets of history (Validate): period detection is quadratic in them.
constexpr double kMaxBuckets = 10000;

// The CurrentRate window.
constexpr double kCurrentWindowSeconds = 60;

// The least-squares line through (i, y[i]), i in [0, n): {value at i = 0, slope per bucket}.
struct Line {
  double intercept = 0;
  double slope = 0;
};
Line FitLine(const std::vector<double>& y, size_t n) {
  if (n == 0) return {};
  if (n == 1) return {y[0], 0};
  const double mean_i = (static_cast<double>(n) - 1) / 2;
  double mean_y = 0;
  for (size_t i = 0; i < n; ++i) mean_y += y[i];
  mean_y /= static_cast<double>(n);
  double cov = 0;
  double var = 0;
  for (size_t i = 0; i < n; ++i) {
    const double di = static_cast<double>(i) - mean_i;
    cov += di * (y[i] - mean_y);
    var += di * di;
  }
  const double slope = cov / var;
  return {mean_y - slope * mean_i, slope};
}

// The seasonal period of `y` in buckets (fractional), or 0: the shortest well-correlated repeat
// at a lag in [min_lag, y.size() / 2] (the rules are in the header).
double DetectPeriod(const std::vector<double>& y, int64_t min_lag) {
  const auto n = static_cast<int64_t>(y.size());
  const int64_t max_lag = n / 2;
  if (max_lag < min_lag) return 0;
  // Detrended, so that a ramp (which correlates with itself at every lag) is not a cycle.
  const Line line = FitLine(y, y.size());
  std::vector<double> x(y.size());  // [n]
  double energy = 0;
  double scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = y[i] - (line.intercept + line.slope * static_cast<double>(i));
    energy += x[i] * x[i];
    scale += y[i] * y[i];
  }
  // A series that is a straight line (to rounding) has no cycle to find.
  if (energy <= 1e-12 * scale || energy <= 0) return 0;
  const double variance = energy / static_cast<double>(n);
  // r[k]: the normalised autocorrelation at lag k, for k in [lo, max_lag + 1] (the peak test
  // reads one past the last candidate, and the dip test from half the first).
  const int64_t lo = std::max<int64_t>(1, min_lag / 2);
  std::vector<double> r(max_lag + 2, 0.0);  // [max_lag + 2], read from lo
  for (int64_t k = lo; k <= max_lag + 1; ++k) {
    double sum = 0;
    for (int64_t i = 0; i + k < n; ++i) sum += x[i] * x[i + k];
    r[k] = sum / static_cast<double>(n - k) / variance;
  }
  // comb[L]: the mean of r at L, 2L, 3L... up to max_lag + 1. Next to a period P, r(P) and
  // r(P + 1) differ by less than their noise, but at the k-th multiple the wrong lag is k
  // buckets out of phase: the comb peaks sharply at P where r alone might peak at P + 1.
  std::vector<double> comb(max_lag + 2, 0.0);  // [max_lag + 2], read from min_lag
  for (int64_t lag = min_lag; lag <= max_lag + 1; ++lag) {
    double sum = 0;
    int64_t count = 0;
    for (int64_t m = lag; m <= max_lag + 1; m += lag, ++count) sum += r[m];
    comb[lag] = sum / static_cast<double>(count);
  }
  double best = -1;
  std::vector<int64_t> candidates;
  for (int64_t lag = min_lag; lag <= max_lag; ++lag) {
    if (comb[lag] < kPeriodMinCorrelation || comb[lag] < comb[lag + 1]) continue;
    if (lag > min_lag && comb[lag] < comb[lag - 1]) continue;
    const double dip = *std::min_element(r.begin() + (lag + 1) / 2, r.begin() + lag);
    if (dip > 0) continue;
    candidates.push_back(lag);
    best = std::max(best, comb[lag]);
  }
  const auto chosen = std::find_if(candidates.begin(), candidates.end(), [&](int64_t lag) {
    return comb[lag] >= best - kPeriodTolerance;
  });
  if (chosen == candidates.end()) return 0;
  // A period need not be a whole number of buckets. Refined at its last multiple k * L in
  // range, where a fraction of a bucket is k times larger: the peak of r within k buckets of
  // it, to a fraction of a bucket by a parabola through the peak and its neighbours.
  const int64_t lag = *chosen;
  const int64_t k = max_lag / lag;
  int64_t peak = k * lag;
  for (int64_t m = std::max(lo + 1, k * lag - k); m <= std::min(max_lag, k * lag + k); ++m) {
    if (r[m] > r[peak]) peak = m;
  }
  double offset = 0;
  if (peak > lo && peak <= max_lag) {
    const double curvature = r[peak - 1] - 2 * r[peak] + r[peak + 1];
    if (curvature < 0)
      offset = std::clamp(0.5 * (r[peak - 1] - r[peak + 1]) / curvature, -0.5, 0.5);
  }
  return (static_cast<double>(peak) + offset) / static_cast<double>(k);
}

// An additive seasonal profile: `bins` values over one period of `period` buckets (fractional),
// summing to zero, read at any position by linear interpolation between bins.
struct SeasonalProfile {
  double period = 0;
  std::vector<double> bins;  // [round(period)]

  // Bin coordinate of bucket position x (x >= 0): in [0, bins.size()).
  double BinOf(double x) const {
    return std::fmod(x, period) * static_cast<double>(bins.size()) / period;
  }
  double At(double x) const {
    const double u = BinOf(x);
    const auto below = static_cast<size_t>(u);
    const double frac = u - static_cast<double>(below);
    return (1 - frac) * bins[below % bins.size()] + frac * bins[(below + 1) % bins.size()];
  }
};

// The profile of `y` for `period` (y.size() >= 2 * period): each bucket's departure from the
// centred moving average over round(period) buckets (a 2xp average when that is even, so that
// it stays centred), averaged per phase over the history. A bucket between two bins counts in
// both, weighted as At reads them.
SeasonalProfile FitSeasonalProfile(const std::vector<double>& y, double period) {
  const auto n = static_cast<int64_t>(y.size());
  const auto p = static_cast<int64_t>(std::lround(period));
  SeasonalProfile profile{period, std::vector<double>(p, 0.0)};
  std::vector<double> prefix(n + 1, 0.0);  // [n + 1]: prefix[i] = y[0] + ... + y[i - 1]
  for (int64_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + y[i];
  const int64_t half = p / 2;
  std::vector<double> weight(p, 0.0);  // [p]
  for (int64_t i = half; i + half < n; ++i) {
    double average;
    if (p % 2 == 1) {
      average = (prefix[i + half + 1] - prefix[i - half]) / static_cast<double>(p);
    } else {
      const double inner = prefix[i + half] - prefix[i - half + 1];
      average = (inner + 0.5 * (y[i - half] + y[i + half])) / static_cast<double>(p);
    }
    const double u = profile.BinOf(static_cast<double>(i));
    const auto below = static_cast<int64_t>(u);
    const double frac = u - static_cast<double>(below);
    profile.bins[below % p] += (1 - frac) * (y[i] - average);
    weight[below % p] += 1 - frac;
    profile.bins[(below + 1) % p] += frac * (y[i] - average);
    weight[(below + 1) % p] += frac;
  }
  double mean = 0;
  for (int64_t b = 0; b < p; ++b) {
    profile.bins[b] = weight[b] > 0 ? profile.bins[b] / weight[b] : 0;
    mean += profile.bins[b];
  }
  mean /= static_cast<double>(p);
  for (double& v : profile.bins) v -= mean;
  return profile;
}

// Holt's double exponential smoothing over `d`, forecast `steps` buckets past its last one.
// Started from the least-squares line through the first `warmup` buckets.
double HoltForecast(const std::vector<double>& d, size_t warmup, double steps) {
  const Line line = FitLine(d, std::min(warmup, d.size()));
  double trend = line.slope;
  double level = line.intercept - trend;  // so that the first prediction is the line's value
  for (double value : d) {
    const double previous = level;
    level = kLevelAlpha * value + (1 - kLevelAlpha) * (level + trend);
    trend = kTrendBeta * (level - previous) + (1 - kTrendBeta) * trend;
  }
  return level + trend * steps;
}

int64_t Modulo(int64_t a, int64_t m) {
  const int64_t r = a % m;
  return r < 0 ? r + m : r;
}

}  // namespace

Status DemandForecast::Validate(const Options& options) {
  if (!(options.bucket_seconds > 0) || !std::isfinite(options.bucket_seconds)) {
    return InvalidArgumentError("demand forecast: bucket_seconds must be a positive number");
  }
  const double buckets = options.history_seconds / options.bucket_seconds;
  if (!(buckets >= 1 && buckets <= kMaxBuckets)) {
    return InvalidArgumentError(
        "demand forecast: history_seconds must hold 1 to 10000 buckets of bucket_seconds");
  }
  if (!(options.horizon_seconds >= 0 && options.horizon_seconds <= options.history_seconds)) {
    return InvalidArgumentError(
        "demand forecast: horizon_seconds must be between 0 and history_seconds");
  }
  return Status::Ok();
}

namespace {
// Whole buckets in `seconds`, rounded up (a hair of rounding error does not add one).
int64_t BucketsIn(double seconds, double bucket_seconds) {
  return static_cast<int64_t>(std::ceil(seconds / bucket_seconds - 1e-9));
}
const DemandForecast::Options& Checked(const DemandForecast::Options& options) {
  const Status valid = DemandForecast::Validate(options);
  PIER_CHECK(valid.ok(), valid.message());
  return options;
}
}  // namespace

DemandForecast::DemandForecast() : DemandForecast(Options{}) {}

DemandForecast::DemandForecast(const Options& options)
    : options_(Checked(options)),
      capacity_(BucketsIn(options_.history_seconds, options_.bucket_seconds)),
      horizon_buckets_(BucketsIn(options_.horizon_seconds, options_.bucket_seconds)) {
  MutexLock lock(mutex_);
  sums_.assign(static_cast<size_t>(capacity_), 0.0);
}

void DemandForecast::Record(double t_seconds, double amount) {
  const double index_real = std::floor(t_seconds / options_.bucket_seconds);
  if (!std::isfinite(index_real) || std::abs(index_real) >= kMaxAbsIndex) return;
  if (!std::isfinite(amount) || amount < 0) return;
  const auto index = static_cast<int64_t>(index_real);
  MutexLock lock(mutex_);
  if (!has_data_) {
    has_data_ = true;
    first_index_ = index;
    newest_index_ = index;
  } else if (index > newest_index_) {
    // Buckets skipped since the newest event held nothing; clear what they reuse in the ring.
    const int64_t skipped = std::min(index - newest_index_, capacity_);
    for (int64_t k = 0; k < skipped; ++k) sums_[Modulo(index - k, capacity_)] = 0;
    newest_index_ = index;
  }
  sums_[Modulo(newest_index_, capacity_)] += amount;
}

DemandForecast::Window DemandForecast::CompletedBuckets(double now_seconds) const {
  const double end_real = std::floor(now_seconds / options_.bucket_seconds);
  if (!std::isfinite(end_real) || std::abs(end_real) >= kMaxAbsIndex) return {};
  const auto end = static_cast<int64_t>(end_real);  // the bucket in progress, excluded
  MutexLock lock(mutex_);
  if (!has_data_) return {};
  const int64_t start = std::max({first_index_, end - capacity_, newest_index_ - capacity_ + 1});
  if (end <= start) return {};
  Window window{std::vector<double>(static_cast<size_t>(end - start), 0.0), start};
  for (int64_t i = start; i < std::min(end, newest_index_ + 1); ++i) {
    window.rates[i - start] = sums_[Modulo(i, capacity_)] / options_.bucket_seconds;
  }
  return window;
}

double DemandForecast::PeriodBuckets(const Window& window) const {
  if (!options_.detect_seasonality) return 0;
  const int64_t end = window.first_index + static_cast<int64_t>(window.rates.size());
  {
    MutexLock lock(mutex_);
    if (period_end_index_ == end) return period_buckets_;
  }
  const double period = DetectPeriod(window.rates, std::max<int64_t>(3 * horizon_buckets_, 4));
  MutexLock lock(mutex_);
  period_end_index_ = end;
  period_buckets_ = period;
  return period;
}

std::optional<double> DemandForecast::ForecastRate(double now_seconds) const {
  const Window window = CompletedBuckets(now_seconds);
  const std::vector<double>& rates = window.rates;  // [n]
  const auto n = static_cast<int64_t>(rates.size());
  if (n < std::max<int64_t>(3, horizon_buckets_)) return std::nullopt;

  // Nothing over the last horizon: idle, whatever came before.
  const int64_t recent = std::max<int64_t>(1, horizon_buckets_);
  if (std::all_of(rates.end() - recent, rates.end(), [](double r) { return r == 0; })) return 0.0;

  // Positions in bucket-centre units from the first bucket's centre: the last bucket is at
  // n - 1, the target instant at `target`.
  const double target = (now_seconds + options_.horizon_seconds) / options_.bucket_seconds - 0.5 -
                        static_cast<double>(window.first_index);
  const double steps = target - static_cast<double>(n - 1);
  const auto warmup = static_cast<size_t>(std::max<int64_t>(3, horizon_buckets_));

  const double period = PeriodBuckets(window);
  if (period == 0) return std::max(0.0, HoltForecast(rates, warmup, steps));

  const SeasonalProfile profile = FitSeasonalProfile(rates, period);
  std::vector<double> adjusted(rates.size());  // [n]
  for (int64_t i = 0; i < n; ++i) adjusted[i] = rates[i] - profile.At(static_cast<double>(i));
  return std::max(0.0, HoltForecast(adjusted, warmup, steps) + profile.At(target));
}

double DemandForecast::CurrentRate(double now_seconds) const {
  const std::vector<double> rates = CompletedBuckets(now_seconds).rates;
  if (rates.empty()) return 0;
  const auto window = static_cast<size_t>(
      std::max(1.0, std::round(kCurrentWindowSeconds / options_.bucket_seconds)));
  const size_t count = std::min(window, rates.size());
  double sum = 0;
  for (size_t i = rates.size() - count; i < rates.size(); ++i) sum += rates[i];
  return sum / static_cast<double>(count);
}

std::optional<double> DemandForecast::PeriodSeconds(double now_seconds) const {
  const double period = PeriodBuckets(CompletedBuckets(now_seconds));
  if (period == 0) return std::nullopt;
  return period * options_.bucket_seconds;
}

}  // namespace pier::serving
