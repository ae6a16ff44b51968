// The engine's QoS steps (issue #16): adaptive batching's step limits, queue deadlines that end
// or demote waiting requests, and the drain rate predicted waits divide by. See engine.h.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/core/engine.h"
#include "engine/core/engine_state.h"

namespace pier::engine {

void Engine::AdaptStepLimits() {
  const AdaptiveBatching& a = options_.adaptive;
  const SchedulerOptions& base = options_.scheduler;
  if (!a.enabled) return;
  const SchedulerStats s = scheduler_.Stats();
  // Latency-leaning by default: the running streams' decodes, the reserve, and one prompt chunk
  // (the shortest step that still admits work).
  const int64_t lo_budget = std::min(
      base.max_batched_tokens, a.min_batched_tokens > 0
                                   ? a.min_batched_tokens
                                   : s.running + s.reserved_tokens +
                                         std::max<int64_t>(base.prefill_chunk_while_decoding, 16));
  const int64_t lo_chunk = base.prefill_chunk_while_decoding;
  // 0 is "no cap": the throughput setting never adds one.
  const int64_t hi_chunk = lo_chunk == 0 ? 0 : std::max(lo_chunk, a.max_prefill_chunk);
  if (!scheduler_.AnyDecoding()) {
    // No stream to keep on time: a prompt gets the whole budget.
    scheduler_.SetStepLimits(base.max_batched_tokens, lo_chunk);
    return;
  }
  // Urgent work live, or seen in the last few seconds (its next request must not find a long
  // step in the way).
  constexpr TimestampUs kUrgentMemoryUs = 5'000'000;
  const bool urgent = s.waiting_by_class[0] + s.waiting_by_class[1] > 0 ||
                      scheduler_.MostUrgentRunning().value_or(Priority::kLow) <= Priority::kHigh ||
                      (last_urgent_us_ > 0 && NowUs() - last_urgent_us_ < kUrgentMemoryUs);
  // 0: latency-leaning .. 1: throughput-leaning, by the queue's depth.
  const double t = urgent ? 0.0
                          : std::clamp(static_cast<double>(s.waiting + s.swapped) /
                                           static_cast<double>(std::max<int64_t>(1, base.max_seqs)),
                                       0.0, 1.0);
  auto mix = [t](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(std::llround(t * static_cast<double>(hi - lo)));
  };
  // Never so small that running streams miss their decode (or the reserve its tokens).
  const int64_t floor = std::min(base.max_batched_tokens,
                                 s.running + s.reserved_tokens + std::max<int64_t>(lo_chunk, 1));
  scheduler_.SetStepLimits(std::max(floor, mix(lo_budget, base.max_batched_tokens)),
                           mix(lo_chunk, hi_chunk));
}

void Engine::ExpireOverdue(TimestampUs now) {
  std::vector<std::string> expired;
  for (auto& [id, live] : live_) {
    const Request& r = live->request;
    if (!r.deadline_us.has_value() || now < *r.deadline_us || live->scheduled_us != 0 ||
        live->demoted) {
      continue;
    }
    const Choice& first = live->choices[0];
    if (!first.started || first.done || scheduler_.EverAdmitted(first.sequence_id)) continue;
    if (r.on_deadline == Request::DeadlineAction::kDelay) {
      scheduler_.Demote(first.sequence_id);
      live->demoted = true;
      ++queue_delayed_;
      continue;
    }
    expired.push_back(id);
  }
  for (const std::string& id : expired) {
    Live& live = *live_.at(id);
    const int64_t waited_ms = (now - live.request.arrival_us) / 1000;
    for (Choice& c : live.choices) {
      if (c.done) continue;
      Event event;
      event.queue_expired = true;
      event.error = "it waited " + std::to_string(waited_ms) +
                    " ms in the queue and its queue deadline passed before it could start";
      FinishChoice(live, c, std::move(event), FinishReason::kAbort);
    }
    ++queue_expired_;
    FinishRequestIfDone(id);
  }
}

double Engine::MeasureDrainRate(int64_t step_us, int64_t admitted, bool backlogged) {
  // The last 10 s of backlogged steps: long enough to smooth one step's burst, short enough to
  // follow a change of load; at least 200 ms of them before any figure.
  constexpr int64_t kWindowUs = 10'000'000;
  constexpr int64_t kMinSpanUs = 200'000;
  if (backlogged && step_us > 0) {
    drain_samples_.emplace_back(step_us, admitted);
    drain_us_ += step_us;
    drain_admitted_ += admitted;
    while (drain_us_ - drain_samples_.front().first >= kWindowUs) {
      drain_us_ -= drain_samples_.front().first;
      drain_admitted_ -= drain_samples_.front().second;
      drain_samples_.pop_front();
    }
  }
  if (drain_us_ < kMinSpanUs) return 0;
  return static_cast<double>(drain_admitted_) * 1e6 / static_cast<double>(drain_us_);
}

}  // namespace pier::engine
