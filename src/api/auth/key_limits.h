// KeyLimits and KeyUsage: the abuse limits of one API key (issue #16, "Abuse limits") and the
// live state they are checked against.
//
// In the keys file (api_keys.h), per key, all optional:
//   requests_per_second: 5       # a token bucket: bursts up to the rate, refilled continuously
//   tokens_per_minute: 100000    # a bucket of a minute's tokens; a request is charged its
//                                #   prompt tokens plus n x max_tokens when admitted (what it
//                                #   may cost at most, as Azure OpenAI counts), never refunded
//   max_concurrent: 4            # requests of this key in flight at once
//   max_prompt_tokens: 8192      # prompt tokens of one request (each prompt of a completion)
//   max_output_tokens: 4096      # n x max_tokens of one request (every choice's budget)
// and per priority class, under `class_limits` (the same fields, each at most the key's own):
//   class_limits:
//     critical: {requests_per_second: 1, max_concurrent: 2}
//     low: {tokens_per_minute: 20000}
// A request is checked against the key's limits and those of its class (the class it runs
// at, after the key's ceiling), and takes from both or from neither.
// A request over a size limit (or costing more than a whole minute's tokens) is a 400 naming
// the limit and its value; over a rate or the concurrency, a 429 (a rate's with Retry-After). A
// request refused for size takes nothing from the bucket.
//
// Thread-safety: KeyLimits is a value; KeyUsage is shared by every request of its key and
// guarded by its own mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/mutex.h"

namespace pier::api {

struct KeyLimits {
  double requests_per_second = 0;  // 0: no limit
  int64_t tokens_per_minute = 0;   // 0: no limit
  int64_t max_concurrent = 0;      // 0: no limit
  int64_t max_prompt_tokens = 0;   // 0: no limit
  int64_t max_output_tokens = 0;   // 0: no limit
  bool any() const {
    return requests_per_second > 0 || tokens_per_minute > 0 || max_concurrent > 0 ||
           max_prompt_tokens > 0 || max_output_tokens > 0;
  }
};

class KeyUsage {
 public:
  using Clock = std::chrono::steady_clock;
  explicit KeyUsage(KeyLimits limits) : limits_(limits) {}

  const KeyLimits& limits() const { return limits_; }

  // Admits one request that may cost `tokens` (prompt + n x max_tokens): takes a slot under
  // max_concurrent, a token from the request bucket and `tokens` from the token bucket. On
  // refusal nothing is taken, and `retry_after_s` (for a rate) says when there will be
  // enough. kTooLarge: `tokens` is more than a whole minute's, so waiting cannot help. The
  // caller gives the slot back with Release() once the request has ended.
  enum class Admission { kAdmitted, kTooManyInFlight, kRateLimited, kTokenRateLimited, kTooLarge };
  Admission Admit(Clock::time_point now, int64_t tokens, double* retry_after_s);
  void Release();
  // Undoes an Admit whose request did not go ahead (another limit refused it): gives back
  // its request token, its `tokens` and its slot.
  void Refund(int64_t tokens);

  int64_t in_flight() const;

 private:
  const KeyLimits limits_;
  mutable Mutex mutex_;
  int64_t in_flight_ PIER_GUARDED_BY(mutex_) = 0;
  // The buckets (-1: full, not yet used) and when they were last refilled.
  double requests_ PIER_GUARDED_BY(mutex_) = -1;
  double tokens_ PIER_GUARDED_BY(mutex_) = -1;
  Clock::time_point refilled_at_ PIER_GUARDED_BY(mutex_);
};

// Holds one admitted request's slots (the key's, its class's); gives them back when
// destroyed (kept by the response stream, so they are held until the response has ended).
class KeySlot {
 public:
  explicit KeySlot(std::vector<std::shared_ptr<KeyUsage>> usages) : usages_(std::move(usages)) {}
  ~KeySlot() {
    for (const auto& usage : usages_) usage->Release();
  }
  KeySlot(const KeySlot&) = delete;
  KeySlot& operator=(const KeySlot&) = delete;

 private:
  std::vector<std::shared_ptr<KeyUsage>> usages_;
};

}  // namespace pier::api
