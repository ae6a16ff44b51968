#include "engine/scheduler/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <unordered_map>

namespace pier::engine {
namespace {

// The plan's view of the block manager: reference counts and available blocks as they will be
// once the plan's releases and acquisitions are applied. Net effects do not depend on the order
// Apply performs them in (releases, then acquisitions, then allocations).
class SimulatedBlocks {
 public:
  explicit SimulatedBlocks(const BlockManager& blocks)
      : blocks_(blocks), available_(blocks.num_available()) {}

  int64_t available() const { return available_; }
  void Allocate(int64_t n) {
    PIER_CHECK(n <= available_, "plan allocates more blocks than available");
    available_ -= n;
  }
  void ReleaseAll(std::span<const int32_t> table) {
    for (int32_t b : table) {
      if (b != kNoBlock && --delta_[b] + blocks_.ref_count(b) == 0) ++available_;
    }
  }
  // Blocks of `table` that acquiring would take out of the available ones.
  int64_t AcquireCost(std::span<const int32_t> table) const {
    int64_t cost = 0;
    for (int32_t b : table) cost += b != kNoBlock && Ref(b) == 0 ? 1 : 0;
    return cost;
  }
  // A holder gives up its reference without freeing the block (copy-on-write).
  void Drop(int32_t b) { --delta_[b]; }
  int32_t RefNow(int32_t b) const { return Ref(b); }
  void AcquireAll(std::span<const int32_t> table) {
    for (int32_t b : table) {
      if (b == kNoBlock) continue;
      if (Ref(b) == 0) --available_;
      ++delta_[b];
    }
  }

 private:
  int32_t Ref(int32_t b) const {
    auto it = delta_.find(b);
    return blocks_.ref_count(b) + (it == delta_.end() ? 0 : it->second);
  }

  const BlockManager& blocks_;
  int64_t available_;
  std::unordered_map<int32_t, int32_t> delta_;
};

}  // namespace

int64_t StepPlan::num_tokens() const {
  int64_t n = 0;
  for (const ScheduledSequence& s : sequences) n += s.n_tokens;
  return n;
}

Scheduler::Scheduler(const SchedulerOptions& options, BlockManager* blocks, SwapSpace* swap,
                     BlockCopier* copier)
    : options_(options),
      blocks_(blocks),
      swap_(options.preempt_by_swap ? swap : nullptr),
      copier_(copier) {
  if (swap_ != nullptr) {
    for (int64_t slot = swap_->num_slots() - 1; slot >= 0; --slot) free_slots_.push_back(slot);
  }
  PIER_CHECK(blocks_ != nullptr, "scheduler needs a block manager");
  PIER_CHECK(options_.max_batched_tokens > 0 && options_.max_seqs > 0, "empty step limits");
  ledger_ = options_.fair_share_ledger != nullptr ? options_.fair_share_ledger
                                                  : std::make_shared<FairShareLedger>();
  ledger_id_ = ledger_->Register();
}

Scheduler::~Scheduler() {
  for (const auto& [id, s] : sequences_) ledger_->Leave(s.spec.priority, s.spec.tenant);
  ledger_->Unregister(ledger_id_);
}

void Scheduler::Add(SequenceSpec spec) {
  PIER_CHECK(!spec.tokens.empty(), "sequence without tokens");
  PIER_CHECK(!sequences_.contains(spec.id), "sequence id in use");
  Sequence s;
  s.tokens = std::move(spec.tokens);
  s.num_prompt = static_cast<int64_t>(s.tokens.size());
  s.spec = std::move(spec);
  s.arrival_order = next_arrival_++;
  s.arrival_step = step_;
  const int64_t bs = blocks_->block_size();
  ExtendBlockHashes(s.tokens, bs, static_cast<int64_t>(s.tokens.size()) / bs, &s.hashes);
  ledger_->Join(s.spec.priority, s.spec.tenant, s.spec.tenant_weight);
  const int64_t id = s.spec.id;
  sequences_.emplace(id, std::move(s));
}

void Scheduler::Fork(int64_t parent, int64_t child) {
  PIER_CHECK(!sequences_.contains(child), "sequence id in use");
  const Sequence& p = Get(parent);
  PIER_CHECK(p.running, "forking a sequence that is not running");
  Sequence s = p;
  s.spec.id = child;
  s.draft.clear();
  s.spec.prompt_logits = false;  // the parent's prompt logits are the ones reported
  s.arrival_order = next_arrival_++;
  blocks_->Fork(s.block_table);
  ledger_->Join(s.spec.priority, s.spec.tenant, s.spec.tenant_weight);
  sequences_.emplace(child, std::move(s));
}

void Scheduler::Remove(int64_t id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return;
  blocks_->ReleaseAll(it->second.block_table);
  for (int64_t slot : it->second.host_slots) {
    if (slot >= 0) free_slots_.push_back(slot);
  }
  ledger_->Leave(it->second.spec.priority, it->second.spec.tenant);
  sequences_.erase(it);
}

Scheduler::Sequence& Scheduler::Get(int64_t id) {
  auto it = sequences_.find(id);
  PIER_CHECK(it != sequences_.end(), "unknown sequence");
  return it->second;
}

const Scheduler::Sequence& Scheduler::Get(int64_t id) const {
  auto it = sequences_.find(id);
  PIER_CHECK(it != sequences_.end(), "unknown sequence");
  return it->second;
}

int Scheduler::EffectiveClass(const Sequence& s) const {
  int cls = static_cast<int>(s.spec.priority);
  if (options_.aging_steps > 0 && s.spec.priority != Priority::kCritical) {
    // Aging lifts a starved request up to high, never into the top class: a request that
    // waited long under overload must not rank as critical, or critical requests could no
    // longer preempt it and would wait for a stream to finish (seen under 3x overload: aged
    // normal streams held every slot while critical requests waited 200-450 ms).
    const int64_t raised = (step_ - s.arrival_step) / options_.aging_steps;
    cls = static_cast<int>(std::max<int64_t>(static_cast<int64_t>(Priority::kHigh), cls - raised));
  }
  return cls;
}

Scheduler::RankKey Scheduler::Rank(const Sequence& s) const {
  if (!options_.qos) return RankKey{0, 0, 0, 0, s.arrival_order};
  // A demoted sequence ranks after every class (aging does not raise it again).
  const int cls = s.demoted ? static_cast<int>(Priority::kLow) + 1 : EffectiveClass(s);
  return RankKey{cls, ledger_->VirtualTime(s.spec.priority, s.spec.tenant),
                 s.spec.deadline_us.value_or(std::numeric_limits<TimestampUs>::max()),
                 s.spec.arrival_us, s.arrival_order};
}

void Scheduler::Demote(int64_t id) {
  auto it = sequences_.find(id);
  if (it != sequences_.end()) it->second.demoted = true;
}

Scheduler::Reserve Scheduler::ReserveNow() const {
  if (!options_.qos || options_.reserved_share <= 0) return {};
  const double share = std::min(options_.reserved_share, 0.5);
  // At least one of each whenever there is more than one: a reserve that rounds down to
  // nothing (5% of 16 slots) would promise the critical class what it does not keep.
  auto part = [&](int64_t whole) {
    const auto floor = static_cast<int64_t>(std::floor(static_cast<double>(whole) * share));
    return std::max<int64_t>(whole > 1 ? 1 : 0, floor);
  };
  return Reserve{.seqs = part(options_.max_seqs),
                 .tokens = part(options_.max_batched_tokens),
                 .blocks = part(blocks_->capacity())};
}

int64_t Scheduler::BlocksFor(int64_t n_tokens) const {
  const int64_t bs = blocks_->block_size();
  return (n_tokens + bs - 1) / bs * n_groups();
}

int64_t Scheduler::SwapInBlocks(const Sequence& s, int64_t end) const {
  const auto held = static_cast<int64_t>(
      std::count_if(s.host_slots.begin(), s.host_slots.end(), [](int64_t h) { return h >= 0; }));
  return held + std::max<int64_t>(0, BlocksFor(end) - static_cast<int64_t>(s.host_slots.size()));
}

std::vector<int32_t> Scheduler::MatchCachedPrefix(const Sequence& s, int64_t max_blocks) const {
  const KvGroups& groups = options_.kv_groups;
  if (!groups.any_window() && n_groups() == 1) return blocks_->MatchPrefix(s.hashes, max_blocks);
  const int64_t bs = blocks_->block_size();
  const int64_t G = n_groups();
  int64_t k = std::min<int64_t>(max_blocks, static_cast<int64_t>(s.hashes.size()));
  // Group g's indexed block of positions [i bs, (i + 1) bs), looked up once (a cold cache
  // costs one lookup per group).
  std::vector<std::vector<std::optional<std::optional<int32_t>>>> memo(
      static_cast<size_t>(G), std::vector<std::optional<std::optional<int32_t>>>(k));
  auto find = [&](int64_t g, int64_t i) {
    auto& slot = memo[g][i];
    if (!slot) slot = blocks_->Find(GroupBlockHash(s.hashes[i], g));
    return *slot;
  };
  // Full groups need every block up to the resume point.
  for (int64_t g = 0; g < G; ++g) {
    if (groups.windows[g] > 0) continue;
    for (int64_t i = 0; i < k; ++i) {
      if (!find(g, i)) {
        k = i;
        break;
      }
    }
  }
  // A sliding group only the ones it reads from there. A block missing at i rules out every
  // resume point past it whose window reaches back to i: the next to try is i.
  for (bool resumable = false; k > 0 && !resumable;) {
    resumable = true;
    for (int64_t g = 0; g < G && resumable; ++g) {
      if (groups.windows[g] <= 0) continue;
      for (int64_t i = k - 1; i >= groups.BlocksBefore(g, k * bs, bs); --i) {
        if (!find(g, i)) {
          k = i;
          resumable = false;
          break;
        }
      }
    }
  }
  std::vector<int32_t> table;
  table.reserve(static_cast<size_t>(k * G));
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t g = 0; g < G; ++g) {
      const bool read = groups.windows[g] <= 0 || i >= groups.BlocksBefore(g, k * bs, bs);
      table.push_back(read ? *find(g, i) : kNoBlock);
    }
  }
  return table;
}

void Scheduler::TrimToWindows(Sequence& s) {
  const KvGroups& groups = options_.kv_groups;
  if (!groups.any_window()) return;
  const int64_t bs = blocks_->block_size();
  const int64_t G = n_groups();
  int64_t trimmed = std::numeric_limits<int64_t>::max();
  for (int64_t g = 0; g < G; ++g) {
    if (groups.windows[g] <= 0) continue;
    const int64_t before = groups.BlocksBefore(g, s.num_computed, bs);
    for (int64_t i = s.num_trimmed; i < before; ++i) {
      int32_t& entry = s.block_table[static_cast<size_t>(i * G + g)];
      if (entry == kNoBlock) continue;
      blocks_->Release(entry);
      entry = kNoBlock;
    }
    trimmed = std::min(trimmed, before);
  }
  s.num_trimmed = std::max(s.num_trimmed, trimmed);
}

StepPlan Scheduler::Plan() const {
  StepPlan plan;
  plan.step = step_;
  std::vector<const Sequence*> order;
  order.reserve(sequences_.size());
  for (const auto& [id, s] : sequences_) order.push_back(&s);
  std::vector<RankKey> keys(order.size());
  std::vector<size_t> idx(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    keys[i] = Rank(*order[i]);
    idx[i] = i;
  }
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });

  SimulatedBlocks sim(*blocks_);
  // Host slots left for swap-outs planned in this step (slots freed by this step's swap-ins
  // are not reused before the next step).
  auto host_free = static_cast<int64_t>(free_slots_.size());
  std::vector<bool> victim(order.size(), false);
  std::vector<bool> scheduled(order.size(), false);
  int64_t running = 0;
  for (const Sequence* s : order) running += s->running ? 1 : 0;
  // The configured budget; the step's (adaptive batching) holds the difference back from every
  // class but the top one, whose prompt is read whole as on an idle server.
  int64_t budget = options_.max_batched_tokens;
  int64_t others_budget = step_budget();  // what every class but the top one may still take
  const int64_t bs = blocks_->block_size();
  // The top class's reserve: what sequences of other classes may not take.
  const Reserve reserve = ReserveNow();
  // A demoted critical sequence (past its deadline, delay action) no longer counts as one.
  auto top = [&](const Sequence& s) {
    return s.spec.priority == Priority::kCritical && !s.demoted;
  };

  auto preempt = [&](size_t k) {
    const Sequence& v = *order[k];
    victim[k] = true;
    sim.ReleaseAll(v.block_table);
    --running;
    const auto n_blocks = static_cast<int64_t>(std::count_if(
        v.block_table.begin(), v.block_table.end(), [](int32_t b) { return b != kNoBlock; }));
    if (swap_ != nullptr && n_blocks > 0 && n_blocks <= host_free) {
      host_free -= n_blocks;
      plan.swapped_out.push_back(v.spec.id);
    } else {
      plan.preempted.push_back(v.spec.id);
    }
  };
  // Preempts the lowest-ranked running sequence ranked after position `pos`, of an effective
  // class above `min_class` (pass -1 for any). False when there is none.
  auto preempt_one = [&](size_t pos, int min_class) {
    for (size_t j = idx.size(); j-- > pos + 1;) {
      const size_t k = idx[j];
      if (!order[k]->running || victim[k] || scheduled[k]) continue;
      if (keys[k].effective_class <= min_class) continue;
      preempt(k);
      return true;
    }
    return false;
  };
  // Whether some running sequence decodes this step (its prompt is in the cache).
  bool decoding = false;
  for (const Sequence* s : order) {
    if (s->running && static_cast<int64_t>(s->tokens.size()) - s->num_computed == 1) {
      decoding = true;
    }
  }
  // The top class's prompt is the latency that matters most: it is not held to the chunk
  // beside decodes, and once one has been placed in this plan no other class's prompt ranked
  // after it is read this step (decodes go on), so the critical request's first token comes
  // after one step like an idle server's. Only a prompt actually placed counts: one that cannot
  // start blocks nobody.
  bool top_prompt = false;
  // A sequence of another class failed only for the reserve: lower-ranked ones of other
  // classes may not overtake it, critical ones still may.
  bool closed_to_non_top = false;
  auto chunk = [&](int64_t remaining, int64_t usable_budget, bool is_top) {
    int64_t n = std::min(remaining, usable_budget);
    if (options_.max_prefill_chunk > 0 && remaining > 1)
      n = std::min(n, options_.max_prefill_chunk);
    if (decoding && options_.prefill_chunk_while_decoding > 0 && remaining > 1 &&
        !(options_.qos && is_top)) {
      n = std::min(n, options_.prefill_chunk_while_decoding);
    }
    return n;
  };

  bool admission_closed = false;
  for (size_t pos = 0; pos < idx.size() && budget > 0; ++pos) {
    const size_t k = idx[pos];
    if (victim[k]) continue;
    const Sequence& s = *order[k];
    const int64_t len = static_cast<int64_t>(s.tokens.size());
    const int64_t usable_budget =
        top(s) ? budget : std::min(budget, others_budget) - reserve.tokens;
    if (usable_budget <= 0) continue;  // the rest of the budget is the top class's
    if (top_prompt && !top(s) && (!s.running || len - s.num_computed > 1)) continue;
    if (s.running) {
      const int64_t n = chunk(len - s.num_computed, usable_budget, top(s));
      if (options_.qos && top(s) && len - s.num_computed > 1) top_prompt = true;
      const auto table_size = static_cast<int64_t>(s.block_table.size());
      // Shared blocks a step computing up to `end` writes (copied first: one new block each).
      auto shared_written = [&](int64_t end) {
        int64_t shared = 0;
        for (int64_t i = s.num_computed / bs * n_groups(); i < BlocksFor(end) && i < table_size;
             ++i) {
          shared += s.block_table[i] != kNoBlock && sim.RefNow(s.block_table[i]) > 1 ? 1 : 0;
        }
        return shared;
      };
      auto blocks_needed = [&](int64_t end) {
        return shared_written(end) + std::max<int64_t>(0, BlocksFor(end) - table_size);
      };
      // A decode's proposed tokens ride along only within the budget left and the blocks free
      // now beyond what its own token needs: speculation never preempts anyone.
      int64_t drafts = 0;
      if (len - s.num_computed == 1 && !s.draft.empty()) {
        drafts = std::min<int64_t>(static_cast<int64_t>(s.draft.size()),
                                   std::max<int64_t>(0, usable_budget - n));
        // Every other running sequence may need a new block for its own next token.
        const int64_t kept = std::max<int64_t>(0, running - 1) * n_groups();
        const int64_t base = blocks_needed(s.num_computed + n);
        while (drafts > 0 && blocks_needed(s.num_computed + n + drafts) - base >
                                 std::max<int64_t>(0, sim.available() - base - kept)) {
          --drafts;
        }
      }
      const int64_t end = s.num_computed + n + drafts;
      int64_t cow = 0;
      for (int64_t i = s.num_computed / bs * n_groups(); i < BlocksFor(end) && i < table_size;
           ++i) {
        if (s.block_table[i] != kNoBlock && sim.RefNow(s.block_table[i]) > 1) {
          sim.Drop(s.block_table[i]);
          ++cow;
        }
      }
      const int64_t need = cow + std::max<int64_t>(0, BlocksFor(end) - table_size);
      while (sim.available() < need && preempt_one(pos, -1)) {
      }
      if (sim.available() < need) {  // nobody below it: it yields itself
        preempt(k);
        continue;
      }
      sim.Allocate(need);
      scheduled[k] = true;
      budget -= n + drafts;
      if (!top(s)) others_budget -= n + drafts;
      plan.sequences.push_back({.id = s.spec.id,
                                .n_tokens = n + drafts,
                                .draft_tokens = drafts,
                                .admit = false,
                                .swap_in = false,
                                .cached_blocks = {},
                                .new_blocks = need - cow});
      continue;
    }
    if (admission_closed || (closed_to_non_top && !top(s))) continue;
    // A sequence whose table is larger than every block the cache holds now can only start
    // once an elastic cache grows (Submit refused what it could never reach): admitted now, it
    // would outgrow the cache and preempt itself over and over. It waits for the growth
    // without holding back the sequences ranked below it: the blocks it lacks are not theirs
    // to free, so they do not delay it.
    if (BlocksFor(len) > blocks_->capacity()) continue;
    const int cls = keys[k].effective_class;
    const int64_t slot_limit = top(s) ? options_.max_seqs : options_.max_seqs - reserve.seqs;
    while (running >= slot_limit && preempt_one(pos, cls)) {
    }
    if (running >= slot_limit) {
      // Only the reserve is left: a critical sequence ranked below may still take it.
      if (slot_limit == options_.max_seqs) admission_closed = true;
      closed_to_non_top = true;
      continue;
    }
    // The reserved blocks stay free for the top class, unless this sequence would run alone.
    const int64_t kept_blocks = top(s) || running == 0 ? 0 : reserve.blocks;
    const bool swap_in = !s.host_slots.empty();
    std::vector<int32_t> cached;
    if (options_.enable_prefix_caching && !s.spec.prompt_logits && !swap_in)
      cached = MatchCachedPrefix(s, (len - 1) / bs);
    const int64_t start =
        swap_in ? s.num_computed : static_cast<int64_t>(cached.size()) / n_groups() * bs;
    const int64_t n = chunk(len - start, usable_budget, top(s));
    const int64_t need = swap_in ? SwapInBlocks(s, start + n)
                                 : BlocksFor(start + n) - static_cast<int64_t>(cached.size());
    while (sim.available() < need + sim.AcquireCost(cached) + kept_blocks &&
           preempt_one(pos, cls)) {
    }
    if (sim.available() < need + sim.AcquireCost(cached) + kept_blocks) {
      // Strict order: nothing ranked below it is admitted ahead of it (a critical sequence
      // may still take the reserve).
      if (kept_blocks == 0) admission_closed = true;
      closed_to_non_top = true;
      continue;
    }
    if (options_.qos && top(s) && len - start > 1) top_prompt = true;
    sim.AcquireAll(cached);
    sim.Allocate(need);
    scheduled[k] = true;
    ++running;
    budget -= n;
    if (!top(s)) others_budget -= n;
    plan.sequences.push_back({.id = s.spec.id,
                              .n_tokens = n,
                              .admit = true,
                              .swap_in = swap_in,
                              .cached_blocks = std::move(cached),
                              .new_blocks = need});
  }
  return plan;
}

void Scheduler::SwapOut(Sequence& s) {
  PIER_CHECK(swap_ != nullptr, "no swap room");
  for (int32_t block : s.block_table) {
    if (block == kNoBlock) {
      s.host_slots.push_back(-1);
      continue;
    }
    PIER_CHECK(!free_slots_.empty(), "no swap room");
    const int64_t slot = free_slots_.back();
    free_slots_.pop_back();
    swap_->CopyOut(block, slot);
    s.host_slots.push_back(slot);
  }
  blocks_->ReleaseAll(s.block_table);
  s.block_table.clear();
  s.num_registered = 0;
  s.running = false;
  ++preemptions_;
  ++swap_outs_;
}

void Scheduler::Preempt(Sequence& s) {
  s.draft.clear();
  blocks_->ReleaseAll(s.block_table);
  s.block_table.clear();
  s.num_computed = 0;
  s.num_registered = 0;
  s.num_trimmed = 0;
  s.running = false;
  ++preemptions_;
}

Batch Scheduler::Apply(const StepPlan& plan) {
  PIER_CHECK(plan.step == step_, "applying a stale plan");
  bool swapped = !plan.swapped_out.empty();
  for (int64_t id : plan.swapped_out) SwapOut(Get(id));
  for (int64_t id : plan.preempted) Preempt(Get(id));
  for (const ScheduledSequence& ss : plan.sequences) {
    if (!ss.admit) continue;
    Sequence& s = Get(ss.id);
    PIER_CHECK(!s.running && s.block_table.empty(), "admitting a running sequence");
    if (ss.swap_in) {  // its blocks are allocated and filled below
      s.running = true;
      continue;
    }
    if (!s.ever_admitted) ++admissions_;
    s.ever_admitted = true;
    s.demoted = false;                // delayed past its deadline, it now runs as its class again
    blocks_->Fork(ss.cached_blocks);  // a reference on each (kNoBlock entries skipped)
    s.block_table = ss.cached_blocks;
    s.num_registered = static_cast<int64_t>(ss.cached_blocks.size()) / n_groups();
    s.num_computed = s.num_registered * blocks_->block_size();
    s.num_trimmed = 0;
    s.cached_tokens = s.num_computed;
    s.running = true;
    prompt_tokens_admitted_ += static_cast<int64_t>(s.tokens.size());
    prompt_tokens_cached_ += s.cached_tokens;
  }
  Batch batch;
  batch.sequences.reserve(plan.sequences.size());
  for (const ScheduledSequence& ss : plan.sequences) {
    Sequence& s = Get(ss.id);
    int64_t new_blocks = ss.new_blocks;
    if (ss.swap_in) {
      // Back from the host slots, released entries staying released.
      PIER_CHECK(s.block_table.empty(), "swap-in without room");
      swapped = true;
      for (const int64_t slot : s.host_slots) {
        if (slot < 0) {
          s.block_table.push_back(kNoBlock);
          continue;
        }
        Result<int32_t> block = blocks_->Allocate();
        PIER_CHECK(block.ok(), "the plan promised a block");
        swap_->CopyIn(slot, *block);
        free_slots_.push_back(slot);
        s.block_table.push_back(*block);
        --new_blocks;
      }
      s.host_slots.clear();
    }
    const auto table_size = static_cast<int64_t>(s.block_table.size());
    const int64_t bs = blocks_->block_size();
    for (int64_t i = s.num_computed / bs * n_groups();
         i < BlocksFor(s.num_computed + ss.n_tokens) && i < table_size; ++i) {
      int32_t& block = s.block_table[static_cast<size_t>(i)];
      if (block == kNoBlock || blocks_->ref_count(block) == 1) continue;
      Result<CopyOnWrite> w = blocks_->PrepareWrite(block);
      PIER_CHECK(w.ok() && w->copy_from >= 0 && copier_ != nullptr, "the plan promised a block");
      copier_->CopyBlock(w->copy_from, w->block);
      block = w->block;
      ++cow_copies_;
    }
    for (int64_t i = 0; i < new_blocks; ++i) {
      Result<int32_t> block = blocks_->Allocate();
      PIER_CHECK(block.ok(), "the plan promised a block");
      s.block_table.push_back(*block);
    }
    SequenceSpan span;
    span.sequence_id = ss.id;
    span.first_position = s.num_computed;
    const int64_t own = ss.n_tokens - ss.draft_tokens;
    span.tokens.assign(s.tokens.begin() + s.num_computed, s.tokens.begin() + s.num_computed + own);
    span.tokens.insert(span.tokens.end(), s.draft.begin(), s.draft.begin() + ss.draft_tokens);
    span.block_table = s.block_table;
    const bool ends = s.num_computed + own == static_cast<int64_t>(s.tokens.size());
    span.logits = ends ? LogitsWanted::kLast : LogitsWanted::kNone;
    if (s.spec.prompt_logits && s.num_computed < s.num_prompt - 1) span.logits = LogitsWanted::kAll;
    if (ss.draft_tokens > 0) span.logits = LogitsWanted::kAll;  // one row per proposal
    batch.sequences.push_back(std::move(span));
  }
  if (swapped) swap_->Wait();  // one wait for the step's swaps, before the runner sees them
  return batch;
}

void Scheduler::CommitFailed(const StepPlan& plan) {
  PIER_CHECK(plan.step == step_, "committing a stale plan");
  for (auto& [id, s] : sequences_) s.draft.clear();
  EndStep();
}

bool Scheduler::MayStopForTopClass(const StepPlan& plan) const {
  if (!options_.qos || plan.sequences.empty()) return false;
  auto top = [](const Sequence& s) { return s.spec.priority == Priority::kCritical && !s.demoted; };
  // Stop only if a newcomer could start next step: a free slot, or a running sequence of
  // another class to preempt (aging never lifts one into the top class). A critical sequence
  // still waiting after this plan was applied means the top class has no room either (and a
  // flood of critical requests must not stop every step: the running ones would never finish
  // one). KV blocks are not checked: the reserve keeps some for the top class.
  int64_t running = 0;
  bool preemptable = false;
  for (const auto& [id, s] : sequences_) {
    if (!s.running && top(s)) return false;
    running += s.running ? 1 : 0;
    preemptable = preemptable || (s.running && !top(s));
  }
  if (running >= options_.max_seqs && !preemptable) return false;
  for (const ScheduledSequence& ss : plan.sequences) {
    auto it = sequences_.find(ss.id);
    if (it == sequences_.end() || ss.n_tokens - ss.draft_tokens <= 1) continue;
    if (top(it->second)) return false;
  }
  return true;
}

void Scheduler::EndStep() {
  FairShareLedger::Backlog backlogged;
  for (const auto& [id, s] : sequences_) {
    if (!s.running) backlogged[static_cast<size_t>(s.spec.priority)].insert(s.spec.tenant);
  }
  ledger_->AdvanceClocks(ledger_id_, backlogged);
  ++step_;
}

std::vector<StepResult> Scheduler::Commit(const StepPlan& plan) {
  PIER_CHECK(plan.step == step_, "committing a stale plan");
  std::vector<StepResult> results;
  results.reserve(plan.sequences.size());
  for (const ScheduledSequence& ss : plan.sequences) {
    auto it = sequences_.find(ss.id);
    if (it == sequences_.end()) continue;
    Sequence& s = it->second;
    // Proposed tokens' K/V are not computed until verified (AppendToken with `computed`).
    s.num_computed += ss.n_tokens - ss.draft_tokens;
    ledger_->Charge(s.spec.priority, s.spec.tenant, ss.n_tokens);
    RegisterFullBlocks(s);
    TrimToWindows(s);
    StepResult result{.id = ss.id,
                      .samples = s.num_computed == static_cast<int64_t>(s.tokens.size()),
                      .draft = {}};
    if (ss.draft_tokens > 0) {
      result.draft.assign(s.draft.begin(), s.draft.begin() + ss.draft_tokens);
    }
    results.push_back(std::move(result));
  }
  for (auto& [id, s] : sequences_) s.draft.clear();
  EndStep();
  return results;
}

void Scheduler::RegisterFullBlocks(Sequence& s) {
  const int64_t full = s.num_computed / blocks_->block_size();
  const int64_t G = n_groups();
  for (; s.num_registered < full; ++s.num_registered) {
    for (int64_t g = 0; g < G; ++g) {
      const int32_t block = s.block_table[static_cast<size_t>(s.num_registered * G + g)];
      if (block == kNoBlock) continue;
      blocks_->Register(block, GroupBlockHash(s.hashes[s.num_registered], g));
    }
  }
}

void Scheduler::SetDraft(int64_t id, std::vector<int32_t> draft) {
  Sequence& s = Get(id);
  s.draft = std::move(draft);
}

void Scheduler::ReleaseBlocksPastEnd(int64_t id) {
  Sequence& s = Get(id);
  if (!s.running) return;
  const auto keep = static_cast<size_t>(BlocksFor(static_cast<int64_t>(s.tokens.size())));
  while (s.block_table.size() > keep) {
    const int32_t block = s.block_table.back();
    if (block != kNoBlock) blocks_->Release(block);
    s.block_table.pop_back();
  }
}

std::vector<int64_t> Scheduler::PreemptHoldingBlocksFrom(int32_t first_block) {
  std::vector<int64_t> ids;
  for (auto& [id, s] : sequences_) {
    if (std::any_of(s.block_table.begin(), s.block_table.end(),
                    [&](int32_t b) { return b >= first_block; })) {
      Preempt(s);
      ids.push_back(id);
    }
  }
  return ids;
}

int64_t Scheduler::BlocksLackedByFirstWaiting() const {
  const Sequence* first = nullptr;
  RankKey first_key{};
  for (const auto& [id, s] : sequences_) {
    if (s.running) continue;
    const RankKey key = Rank(s);
    if (first == nullptr || key < first_key) {
      first = &s;
      first_key = key;
    }
  }
  if (first == nullptr) return 0;
  const int64_t need = BlocksFor(static_cast<int64_t>(first->tokens.size()));
  return std::max<int64_t>(0, need - blocks_->num_available());
}

int64_t Scheduler::NumWaiting() const {
  int64_t n = 0;
  for (const auto& [id, s] : sequences_) n += s.running ? 0 : 1;
  return n;
}

}  // namespace pier::engine
