#include "api/auth/key_limits.h"

#include <algorithm>

namespace pier::api {

namespace {

// Refills `level` (-1: untouched, so full) at `rate` per second up to `capacity`.
double Refill(double level, double capacity, double rate, double elapsed_s) {
  if (level < 0) return capacity;
  return std::min(capacity, level + std::max(0.0, elapsed_s) * rate);
}

}  // namespace

KeyUsage::Admission KeyUsage::Admit(Clock::time_point now, int64_t tokens, double* retry_after_s) {
  MutexLock lock(mutex_);
  if (limits_.max_concurrent > 0 && in_flight_ >= limits_.max_concurrent) {
    return Admission::kTooManyInFlight;
  }
  const auto token_capacity = static_cast<double>(limits_.tokens_per_minute);
  if (limits_.tokens_per_minute > 0 && static_cast<double>(tokens) > token_capacity) {
    return Admission::kTooLarge;
  }
  const double elapsed = std::chrono::duration<double>(now - refilled_at_).count();
  refilled_at_ = now;
  // Requests: one second's worth (at least one). Tokens: one minute's.
  const double rps = limits_.requests_per_second;
  if (rps > 0) requests_ = Refill(requests_, std::max(1.0, rps), rps, elapsed);
  const double tps = token_capacity / 60.0;
  if (limits_.tokens_per_minute > 0) tokens_ = Refill(tokens_, token_capacity, tps, elapsed);
  // Both are checked before either is taken.
  if (rps > 0 && requests_ < 1.0) {
    if (retry_after_s != nullptr) *retry_after_s = (1.0 - requests_) / rps;
    return Admission::kRateLimited;
  }
  if (limits_.tokens_per_minute > 0 && tokens_ < static_cast<double>(tokens)) {
    if (retry_after_s != nullptr) *retry_after_s = (static_cast<double>(tokens) - tokens_) / tps;
    return Admission::kTokenRateLimited;
  }
  if (rps > 0) requests_ -= 1.0;
  if (limits_.tokens_per_minute > 0) tokens_ -= static_cast<double>(tokens);
  ++in_flight_;
  return Admission::kAdmitted;
}

void KeyUsage::Refund(int64_t tokens) {
  MutexLock lock(mutex_);
  if (in_flight_ > 0) --in_flight_;
  const double rps = limits_.requests_per_second;
  if (rps > 0 && requests_ >= 0) requests_ = std::min(std::max(1.0, rps), requests_ + 1.0);
  const auto capacity = static_cast<double>(limits_.tokens_per_minute);
  if (limits_.tokens_per_minute > 0 && tokens_ >= 0) {
    tokens_ = std::min(capacity, tokens_ + static_cast<double>(tokens));
  }
}

void KeyUsage::Release() {
  MutexLock lock(mutex_);
  if (in_flight_ > 0) --in_flight_;
}

int64_t KeyUsage::in_flight() const {
  MutexLock lock(mutex_);
  return in_flight_;
}

}  // namespace pier::api
