// The engine's figures: the KV slots its running sequences fill and the snapshot Stats()
// returns, published after every step (engine.h's EngineStats).
#include <algorithm>
#include <map>

#include "engine/core/engine.h"

namespace pier::engine {

int64_t Engine::CountKvTokensUsed() const {
  const int64_t bs = blocks_.block_size();
  int64_t used = 0;
  // Blocks held by several tables (forks, shared prefixes): filled slots as the fullest
  // holder sees them, counted once.
  std::map<int32_t, int64_t> shared;
  for (const auto& [id, owner] : by_sequence_) {
    if (!scheduler_.Contains(id) || !scheduler_.IsRunning(id)) continue;
    const int64_t computed = scheduler_.NumComputed(id);
    const std::span<const int32_t> table = scheduler_.BlockTable(id);
    const auto G =
        static_cast<size_t>(std::max<int64_t>(1, scheduler_.options().kv_groups.n_groups()));
    for (size_t i = 0; i < table.size(); ++i) {
      if (table[i] == kNoBlock) continue;  // a sliding group's block before its window
      const int64_t filled =
          std::clamp<int64_t>(computed - static_cast<int64_t>(i / G) * bs, 0, bs);
      if (blocks_.ref_count(table[i]) > 1) {
        int64_t& f = shared[table[i]];
        f = std::max(f, filled);
      } else {
        used += filled;
      }
    }
  }
  for (const auto& [block, filled] : shared) used += filled;
  return used;
}

void Engine::PublishStats(int64_t tokens, int64_t step_us) {
  const SchedulerStats s = scheduler_.Stats();
  const int64_t kv_tokens_used = CountKvTokensUsed();
  MutexLock lock(mutex_);
  if (step_us > 0 || tokens > 0) {
    ++stats_.steps;
    total_tokens_ += tokens;
    stats_.tokens_last_step = tokens;
    stats_.tokens_per_step = static_cast<double>(total_tokens_) / static_cast<double>(stats_.steps);
    stats_.last_step_us = step_us;
  }
  const TimestampUs now = NowUs();
  stats_.last_step_at_us = now;
  unpublished_sequences_ -= taken_sequences_;
  taken_sequences_ = 0;
  for (size_t c = 0; c < taken_by_class_.size(); ++c) {
    unpublished_by_class_[c] -= taken_by_class_[c];
    taken_by_class_[c] = 0;
  }
  stats_.waiting_by_class = s.waiting_by_class;
  stats_.max_seqs = options_.scheduler.max_seqs;
  stats_.admissions = s.admissions;
  // Backlogged: sequences waited after this step (those admitted in it waited before it).
  stats_.admissions_per_s =
      MeasureDrainRate(step_us, s.admissions - admissions_published_,
                       s.waiting + s.swapped > 0 || s.admissions > admissions_published_);
  admissions_published_ = s.admissions;
  stats_.queue_expired = queue_expired_;
  stats_.queue_delayed = queue_delayed_;
  stats_.steps_stopped_early = steps_stopped_early_;
  stats_.kv_waiting_for_memory = kv_waiting_since_us_ != 0 ? s.waiting + s.swapped : 0;
  stats_.kv_waiting_since_us = kv_waiting_since_us_;
  stats_.kv_idle_releases = kv_idle_releases_;
  stats_.running_critical = s.running_critical;
  stats_.reserved_seqs = s.reserved_seqs;
  stats_.reserved_tokens = s.reserved_tokens;
  stats_.reserved_blocks = s.reserved_blocks;
  stats_.step_token_budget = scheduler_.step_budget();
  stats_.step_prefill_chunk = scheduler_.options().prefill_chunk_while_decoding;
  for (size_t c = 0; c < stats_.fair_share_clocks.size(); ++c) {
    stats_.fair_share_clocks[c] = scheduler_.FairShareClock(static_cast<Priority>(c));
  }
  stats_.tenants = scheduler_.TenantShares();
  stats_.spec_drafts = spec_drafts_;
  stats_.spec_draft_tokens = spec_draft_tokens_;
  stats_.spec_accepted_tokens = spec_accepted_tokens_;
  stats_.spec_accepted_per_position = spec_accepted_per_position_;
  stats_.spec_accepted_lengths = spec_accepted_lengths_;
  stats_.spec_skipped = spec_skipped_;
  stats_.running = s.running;
  stats_.waiting = s.waiting;
  stats_.swapped = s.swapped;
  stats_.swap_outs = s.swap_outs;
  stats_.cow_copies = s.cow_copies;
  stats_.kv_blocks_used = blocks_.num_used();
  stats_.kv_blocks_total = blocks_.capacity();
  stats_.kv_blocks_cached = blocks_.num_cached();
  stats_.kv_tokens_used = kv_tokens_used;
  stats_.preemptions = s.preemptions;
  stats_.prompt_tokens_cached = s.prompt_tokens_cached;
  stats_.prefix_hit_rate = s.prompt_tokens_admitted > 0
                               ? static_cast<double>(s.prompt_tokens_cached) /
                                     static_cast<double>(s.prompt_tokens_admitted)
                               : 0.0;
}

}  // namespace pier::engine
