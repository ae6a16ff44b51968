#include "http/key_limits.h"

#include <algorithm>

namespace pier::http {

KeyUsage::Admission KeyUsage::Admit(Clock::time_point now, double* retry_after_s) {
  MutexLock lock(mutex_);
  if (limits_.max_concurrent > 0 && in_flight_ >= limits_.max_concurrent) {
    return Admission::kTooManyInFlight;
  }
  if (limits_.requests_per_second > 0) {
    // Capacity: one second's worth (at least one request).
    const double capacity = std::max(1.0, limits_.requests_per_second);
    if (tokens_ < 0) {
      tokens_ = capacity;
    } else {
      const double elapsed = std::chrono::duration<double>(now - refilled_at_).count();
      tokens_ = std::min(capacity, tokens_ + std::max(0.0, elapsed) * limits_.requests_per_second);
    }
    refilled_at_ = now;
    if (tokens_ < 1.0) {
      if (retry_after_s != nullptr) {
        *retry_after_s = (1.0 - tokens_) / limits_.requests_per_second;
      }
      return Admission::kRateLimited;
    }
    tokens_ -= 1.0;
  }
  ++in_flight_;
  return Admission::kAdmitted;
}

void KeyUsage::Release() {
  MutexLock lock(mutex_);
  if (in_flight_ > 0) --in_flight_;
}

int64_t KeyUsage::in_flight() const {
  MutexLock lock(mutex_);
  return in_flight_;
}

}  // namespace pier::http
