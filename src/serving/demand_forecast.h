// DemandForecast: a short-horizon forecast of one demand series -- a model's requests, or its
// tokens -- for predictive scaling (issue #22). It answers "what rate (amount per second) will
// this model see `horizon_seconds` from now?", so that capacity can be started before a ramp
// or a daily peak arrives rather than after the queue shows it.
//
// Events are recorded with explicit timestamps (seconds on any monotonic clock the caller
// chooses; tests drive a synthetic one) and summed into fixed buckets of `bucket_seconds`,
// aligned to multiples of it. The last `history_seconds` of buckets are kept. A bucket with no
// event counts as zero demand, and so does every bucket between the newest event and `now`:
// an idle model forecasts idle, not its last busy rate. Only completed buckets (those ending at
// or before `now`) are read; the bucket in progress would read low.
//
// Method, in two parts over the series of bucket rates:
//
// 1. Trend: Holt's double exponential smoothing (a level and a trend, each an exponentially
//    weighted average; the forecast h buckets ahead is level + trend * h). It follows a ramp
//    without the lag of a moving average and forgets old history at a fixed rate.
//
// 2. Seasonality: a load that repeats (a batch job every 20 minutes, a cycle of clients) is
//    recognised by autocorrelation of the linearly detrended history at lags from 3 horizons
//    up to half the history. Each lag L is scored by the mean autocorrelation at L, 2L, 3L...
//    within that range: next to a period P, the autocorrelations at P and P + 1 bucket differ
//    by less than their noise, but at the k-th multiple the wrong lag is k buckets out of
//    phase, so the score peaks sharply at P. A lag is accepted as the period when its score is
//    at least 0.6 and a local peak, and the autocorrelation dipped to zero or below between
//    half the lag and the lag (a slow drift correlates at every lag without ever dipping; a
//    repeating load decorrelates and then recorrelates). Half the history as the longest lag
//    guarantees two periods of history. Multiples of the period score about as well as the
//    period; the shortest lag within 0.1 of the best is taken. The period is then refined to
//    a fraction of a bucket at its last multiple in range (a period need not be a whole
//    number of buckets, and an error of a fraction of a bucket accumulates over the periods
//    of history). The lower bound of 3 horizons keeps the target's phase in the past with
//    room to spare.
//
//    With a period P, the forecast is a classical additive decomposition plus Holt: the
//    seasonal profile (one value per bucket of the period, summing to zero) is the average,
//    over every period of history, of each bucket's departure from a centred moving average
//    over one period (which cancels the cycle and keeps the trend); Holt runs
//    on the series minus that profile; the forecast is Holt's plus the profile at the target
//    bucket. This was chosen over Holt-Winters' recursive seasonal indices because the
//    history holds only a few periods (2 hours of a 20-minute cycle is 6): Holt-Winters'
//    indices stay dominated by their one-period initialisation, or by the last period's
//    noise when smoothed fast, while an average over k periods cuts per-bucket noise by
//    sqrt(k). Level and trend still adapt bucket by bucket, so a seasonal load that also
//    ramps is followed. The profile is additive: a cycle whose amplitude grows with the level
//    is forecast with its average amplitude.
//
// No forecast (nullopt) until the history spans at least one horizon (at least 3 buckets):
// a trend projected further ahead than it was measured is mostly noise. If nothing was
// recorded over the last horizon, the forecast is 0 -- when an idle model comes back is not in
// its history. Forecasts are never negative.
//
// Cost: ForecastRate reads at most history/bucket buckets (720 by default) in a few linear
// passes (about 20 us by default). Period detection is quadratic in that (0.2M multiply-adds,
// about 0.1 ms by default; 20 ms at the 10000-bucket limit) and is cached: it runs once per
// completed bucket, on the first read after it (twice if two reads race).
//
// Thread-safety: internally synchronized. Record (the HTTP threads, per request or per
// response) and the reads (a metrics scrape) may be called from any thread. The lock is held
// only to add to a bucket or to copy the buckets out; the forecast is computed outside it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"

namespace pier::serving {

class DemandForecast {
 public:
  struct Options {
    double bucket_seconds = 10;     // > 0
    double history_seconds = 7200;  // 1 to 10000 buckets; rounded up to whole buckets
    double horizon_seconds = 300;   // in [0, history_seconds]: how far ahead ForecastRate looks
    // Off: trend only (Holt), for loads known to have no cycle, and for the tests that show
    // what the seasonal part is worth.
    bool detect_seasonality = true;
  };

  // INVALID_ARGUMENT naming the field when `options` is outside the ranges above (10000
  // buckets bounds the quadratic period detection to about 20 ms per bucket). For callers
  // whose options come from a configuration file.
  [[nodiscard]] static Status Validate(const Options& options);

  // `options` must pass Validate (PIER_CHECK).
  DemandForecast();
  explicit DemandForecast(const Options& options);

  // Adds `amount` (1 per request, or a response's token count) at time `t_seconds`. A time
  // before the newest bucket (clocks of several threads racing) is counted in the newest
  // bucket. Non-finite or out-of-range times and negative or non-finite amounts are ignored.
  void Record(double t_seconds, double amount = 1);

  // The predicted rate (amount per second) at now_seconds + horizon_seconds; nullopt until the
  // completed history spans a horizon (see above).
  [[nodiscard]] std::optional<double> ForecastRate(double now_seconds) const;

  // The observed rate over the last minute of completed buckets (fewer when the history is
  // shorter); 0 before any.
  [[nodiscard]] double CurrentRate(double now_seconds) const;

  // The seasonal period in seconds detected at now_seconds, if any (for tests and logs).
  [[nodiscard]] std::optional<double> PeriodSeconds(double now_seconds) const;

 private:
  // The completed buckets at some `now`, copied under the lock: the arithmetic runs outside
  // it, so that Record never waits for a forecast.
  struct Window {
    std::vector<double> rates;  // [n <= capacity_]: amount per second, oldest first
    int64_t first_index = 0;    // absolute bucket index of rates[0]
  };
  Window CompletedBuckets(double now_seconds) const PIER_EXCLUDES(mutex_);
  // The period of `window` in buckets, fractional (0: none), cached per window end.
  double PeriodBuckets(const Window& window) const PIER_EXCLUDES(mutex_);

  const Options options_;
  const int64_t capacity_;         // buckets kept: ceil(history / bucket)
  const int64_t horizon_buckets_;  // ceil(horizon / bucket)

  mutable Mutex mutex_;
  std::vector<double> sums_ PIER_GUARDED_BY(mutex_);  // [capacity_] ring, by index % capacity_
  bool has_data_ PIER_GUARDED_BY(mutex_) = false;
  int64_t first_index_ PIER_GUARDED_BY(mutex_) = 0;   // bucket of the first event recorded
  int64_t newest_index_ PIER_GUARDED_BY(mutex_) = 0;  // bucket of the newest event
  // Period detection cache: the completed-bucket end it was computed for, and its result.
  mutable std::optional<int64_t> period_end_index_ PIER_GUARDED_BY(mutex_);
  mutable double period_buckets_ PIER_GUARDED_BY(mutex_) = 0;
};

}  // namespace pier::serving
