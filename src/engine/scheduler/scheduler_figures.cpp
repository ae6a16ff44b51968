// The scheduler's read-only figures: the most urgent classes, the tenants' shares, the step
// limits adaptive batching sets, and Stats().
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/scheduler/scheduler.h"

namespace pier::engine {

namespace {

// The most urgent class among sequences running (or not): a lower Priority value.
template <typename Sequences>
std::optional<Priority> MostUrgent(const Sequences& sequences, bool running) {
  std::optional<Priority> top;
  for (const auto& [id, s] : sequences) {
    if (s.running != running) continue;
    if (!top || s.spec.priority < *top) top = s.spec.priority;
  }
  return top;
}

}  // namespace

std::optional<Priority> Scheduler::MostUrgentRunning() const {
  return MostUrgent(sequences_, true);
}
std::optional<Priority> Scheduler::MostUrgentWaiting() const {
  return MostUrgent(sequences_, false);
}

std::vector<TenantShare> Scheduler::TenantShares() const {
  std::map<std::pair<Priority, std::string>, int64_t> waiting;
  for (const auto& [id, s] : sequences_) {
    if (!s.running) ++waiting[{s.spec.priority, s.spec.tenant}];
  }
  std::vector<TenantShare> shares;
  for (size_t c = 0; c < 4; ++c) {
    for (TenantShare& t : ledger_->Snapshot(static_cast<Priority>(c))) {
      t.priority = static_cast<Priority>(c);
      auto it = waiting.find({t.priority, t.tenant});
      if (it != waiting.end()) t.waiting = it->second;
      shares.push_back(std::move(t));
    }
  }
  return shares;
}

void Scheduler::SetStepLimits(int64_t max_batched_tokens, int64_t prefill_chunk_while_decoding) {
  PIER_CHECK(max_batched_tokens > 0 && prefill_chunk_while_decoding >= 0, "bad step limits");
  step_budget_ = std::min(max_batched_tokens, options_.max_batched_tokens);
  options_.prefill_chunk_while_decoding = prefill_chunk_while_decoding;
}

bool Scheduler::AnyDecoding() const {
  return std::any_of(sequences_.begin(), sequences_.end(), [](const auto& entry) {
    const Sequence& s = entry.second;
    return s.running && static_cast<int64_t>(s.tokens.size()) - s.num_computed == 1;
  });
}

void Scheduler::AppendToken(int64_t id, int32_t token, bool computed) {
  Sequence& s = Get(id);
  PIER_CHECK(!computed || (s.running && s.num_computed == static_cast<int64_t>(s.tokens.size())),
             "a verified token must follow computed ones");
  s.tokens.push_back(token);
  const int64_t bs = blocks_->block_size();
  ExtendBlockHashes(s.tokens, bs, static_cast<int64_t>(s.tokens.size()) / bs, &s.hashes);
  if (computed) {
    ++s.num_computed;
    RegisterFullBlocks(s);
    TrimToWindows(s);
  }
}

bool Scheduler::IsRunning(int64_t id) const { return Get(id).running; }
std::span<const int32_t> Scheduler::Tokens(int64_t id) const { return Get(id).tokens; }
int64_t Scheduler::NumComputed(int64_t id) const { return Get(id).num_computed; }
std::span<const int32_t> Scheduler::BlockTable(int64_t id) const { return Get(id).block_table; }
int64_t Scheduler::CachedTokens(int64_t id) const { return Get(id).cached_tokens; }

SchedulerStats Scheduler::Stats() const {
  SchedulerStats stats;
  for (const auto& [id, s] : sequences_) {
    (s.running ? stats.running : !s.host_slots.empty() ? stats.swapped : stats.waiting) += 1;
    if (!s.running) ++stats.waiting_by_class[static_cast<size_t>(s.spec.priority)];
    if (s.running && s.spec.priority == Priority::kCritical) ++stats.running_critical;
  }
  const Reserve reserve = ReserveNow();
  stats.reserved_seqs = reserve.seqs;
  stats.reserved_tokens = reserve.tokens;
  stats.reserved_blocks = reserve.blocks;
  stats.admissions = admissions_;
  stats.swap_outs = swap_outs_;
  stats.cow_copies = cow_copies_;
  stats.preemptions = preemptions_;
  stats.prompt_tokens_admitted = prompt_tokens_admitted_;
  stats.prompt_tokens_cached = prompt_tokens_cached_;
  return stats;
}

}  // namespace pier::engine
