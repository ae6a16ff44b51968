// KeyLimits and KeyUsage: the abuse limits of one API key (issue #16, "Abuse limits") and the
// live state they are checked against.
//
// In the keys file (api_keys.h), per key, all optional:
//   requests_per_second: 5       # a token bucket: bursts up to the rate, refilled continuously
//   max_concurrent: 4            # requests of this key in flight at once
//   max_prompt_tokens: 8192      # prompt tokens of one request (each prompt of a completion)
//   max_output_tokens: 4096      # n x max_tokens of one request (every choice's budget)
// A request over a size limit is a 400 naming the limit and its value; over the rate or the
// concurrency, a 429 (the rate's with Retry-After). A request refused for size takes nothing
// from the bucket.
//
// Thread-safety: KeyLimits is a value; KeyUsage is shared by every request of its key and
// guarded by its own mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "common/mutex.h"

namespace pier::http {

struct KeyLimits {
  double requests_per_second = 0;  // 0: no limit
  int64_t max_concurrent = 0;      // 0: no limit
  int64_t max_prompt_tokens = 0;   // 0: no limit
  int64_t max_output_tokens = 0;   // 0: no limit
  bool any() const {
    return requests_per_second > 0 || max_concurrent > 0 || max_prompt_tokens > 0 ||
           max_output_tokens > 0;
  }
};

class KeyUsage {
 public:
  using Clock = std::chrono::steady_clock;
  explicit KeyUsage(KeyLimits limits) : limits_(limits) {}

  const KeyLimits& limits() const { return limits_; }

  // Admits one request: takes a slot under max_concurrent and a token from the rate bucket.
  // On refusal nothing is taken, and `retry_after_s` (for the rate) says when a token will be
  // there. The caller gives the slot back with Release() once the request has ended.
  enum class Admission { kAdmitted, kTooManyInFlight, kRateLimited };
  Admission Admit(Clock::time_point now, double* retry_after_s);
  void Release();

  int64_t in_flight() const;

 private:
  const KeyLimits limits_;
  mutable Mutex mutex_;
  int64_t in_flight_ PIER_GUARDED_BY(mutex_) = 0;
  double tokens_ PIER_GUARDED_BY(mutex_) = -1;  // the bucket; -1: full, not yet used
  Clock::time_point refilled_at_ PIER_GUARDED_BY(mutex_);
};

// Holds one admitted request's slot; gives it back when destroyed (kept by the response
// stream, so the slot is held until the response has ended).
class KeySlot {
 public:
  explicit KeySlot(std::shared_ptr<KeyUsage> usage) : usage_(std::move(usage)) {}
  ~KeySlot() {
    if (usage_ != nullptr) usage_->Release();
  }
  KeySlot(const KeySlot&) = delete;
  KeySlot& operator=(const KeySlot&) = delete;

 private:
  std::shared_ptr<KeyUsage> usage_;
};

}  // namespace pier::http
