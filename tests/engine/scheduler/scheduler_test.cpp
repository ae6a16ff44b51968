// Scheduler: plans under the token budget and sequence limit, chunked prefill beside decodes,
// admission order (class, deadline, arrival), aging, preemption and prefix-cache reuse.
#include "engine/scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <vector>

namespace pier::engine {
namespace {

std::vector<int32_t> Tokens(int64_t n, int32_t first = 1) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Drives a Scheduler without a model: every sequence that reaches its last token "samples"
// token 5; a sequence is removed once it has `finish_after` generated tokens.
class Harness {
 public:
  Harness(SchedulerOptions options, int64_t n_blocks, int64_t block_size, SwapSpace* swap = nullptr)
      : blocks_(n_blocks, block_size), scheduler_(options, &blocks_, swap) {}

  void Add(int64_t id, int64_t n_tokens, Priority p = Priority::kNormal, int finish_after = 1000,
           std::optional<TimestampUs> deadline = std::nullopt, int32_t first_token = 1) {
    SequenceSpec spec{.id = id,
                      .tokens = Tokens(n_tokens, first_token),
                      .priority = p,
                      .deadline_us = deadline,
                      .arrival_us = 0};
    prompt_len_[id] = n_tokens;
    finish_after_[id] = finish_after;
    scheduler_.Add(std::move(spec));
  }

  StepPlan Step() {
    StepPlan plan = scheduler_.Plan();
    Batch batch = scheduler_.Apply(plan);
    EXPECT_EQ(batch.sequences.size(), plan.sequences.size());
    for (const ScheduledSequence& s : plan.sequences) {
      if (s.admit) admitted_.push_back(s.id);
    }
    for (const StepResult& r : scheduler_.Commit(plan)) {
      if (!r.samples) continue;
      const int64_t generated =
          static_cast<int64_t>(scheduler_.Tokens(r.id).size()) - prompt_len_[r.id] + 1;
      if (generated >= finish_after_[r.id]) {
        scheduler_.Remove(r.id);
        finished_.push_back(r.id);
      } else {
        scheduler_.AppendToken(r.id, 5);
      }
    }
    EXPECT_TRUE(blocks_.CheckConsistency().ok());
    return plan;
  }

  Scheduler& scheduler() { return scheduler_; }
  BlockManager& blocks() { return blocks_; }
  const std::vector<int64_t>& admitted() const { return admitted_; }
  const std::vector<int64_t>& finished() const { return finished_; }

 private:
  BlockManager blocks_;
  Scheduler scheduler_;
  std::map<int64_t, int64_t> prompt_len_;
  std::map<int64_t, int> finish_after_;
  std::vector<int64_t> admitted_;
  std::vector<int64_t> finished_;
};

const ScheduledSequence* Find(const StepPlan& plan, int64_t id) {
  for (const ScheduledSequence& s : plan.sequences) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

TEST(SchedulerTest, RespectsTokenBudgetAndSequenceLimit) {
  Harness h({.max_batched_tokens = 8, .max_seqs = 3}, 64, 4);
  for (int64_t id = 1; id <= 6; ++id) h.Add(id, 3 * id, Priority::kNormal, 4);
  int steps = 0;
  while (h.scheduler().HasWork() && steps < 200) {
    StepPlan plan = h.Step();
    EXPECT_LE(plan.num_tokens(), 8);
    EXPECT_LE(h.scheduler().Stats().running, 3);
    ++steps;
  }
  EXPECT_EQ(h.finished().size(), 6u);
  EXPECT_EQ(h.blocks().num_used(), 0);
}

TEST(SchedulerTest, ChunkedPrefillSharesStepsWithDecodes) {
  Harness h({.max_batched_tokens = 8, .max_seqs = 8}, 64, 4);
  h.Add(1, 3);
  h.Add(2, 3);
  StepPlan first = h.Step();  // both prompts in one step
  EXPECT_EQ(first.num_tokens(), 6);
  h.Add(3, 40);
  int64_t ingested = 0;
  int steps = 0;
  while (ingested < 40) {
    StepPlan plan = h.Step();
    ++steps;
    // The two running streams decode one token every step while the long prompt is read.
    ASSERT_NE(Find(plan, 1), nullptr);
    ASSERT_NE(Find(plan, 2), nullptr);
    EXPECT_EQ(Find(plan, 1)->n_tokens, 1);
    EXPECT_EQ(Find(plan, 2)->n_tokens, 1);
    const ScheduledSequence* long_one = Find(plan, 3);
    ASSERT_NE(long_one, nullptr);
    EXPECT_LE(long_one->n_tokens, 6);
    ingested += long_one->n_tokens;
  }
  EXPECT_EQ(ingested, 40);
  EXPECT_EQ(steps, 7);  // ceil(40 / 6)
  EXPECT_EQ(h.scheduler().NumComputed(3), 40);
}

TEST(SchedulerTest, APromptNextToDecodingStreamsIsReadInSmallerChunks) {
  Harness h({.max_batched_tokens = 64, .max_seqs = 8, .prefill_chunk_while_decoding = 12}, 64, 4);
  h.Add(1, 3);
  h.Step();  // sequence 1's prompt: it decodes from now on
  h.Add(2, 40);
  h.Add(3, 20);
  const StepPlan plan = h.Step();
  ASSERT_NE(Find(plan, 1), nullptr);
  EXPECT_EQ(Find(plan, 1)->n_tokens, 1);
  // Each prompt is capped, not the step: both are read at once.
  ASSERT_NE(Find(plan, 2), nullptr);
  ASSERT_NE(Find(plan, 3), nullptr);
  EXPECT_EQ(Find(plan, 2)->n_tokens, 12);
  EXPECT_EQ(Find(plan, 3)->n_tokens, 12);
  // A prompt alone gets the whole budget.
  Harness alone({.max_batched_tokens = 64, .max_seqs = 8, .prefill_chunk_while_decoding = 12}, 64,
                4);
  alone.Add(1, 50);
  EXPECT_EQ(alone.Step().num_tokens(), 50);
}

TEST(SchedulerTest, MaxPrefillChunkCapsOnePromptPerStep) {
  Harness h({.max_batched_tokens = 64, .max_seqs = 8, .max_prefill_chunk = 10}, 64, 4);
  h.Add(1, 25);
  EXPECT_EQ(h.Step().num_tokens(), 10);
  EXPECT_EQ(h.Step().num_tokens(), 10);
  EXPECT_EQ(h.Step().num_tokens(), 5);
}

TEST(SchedulerTest, AdmitsByClassThenDeadlineThenArrival) {
  Harness h({.max_batched_tokens = 64, .max_seqs = 1, .aging_steps = 0}, 64, 4);
  h.Add(1, 4, Priority::kLow, 1);
  h.Add(2, 4, Priority::kNormal, 1);
  h.Add(3, 4, Priority::kNormal, 1, TimestampUs{500});
  h.Add(4, 4, Priority::kHigh, 1);
  h.Add(5, 4, Priority::kCritical, 1);
  h.Add(6, 4, Priority::kNormal, 1);
  h.Add(7, 4, Priority::kNormal, 1, TimestampUs{100});
  for (int i = 0; i < 20 && h.scheduler().HasWork(); ++i) h.Step();
  EXPECT_EQ(h.admitted(), (std::vector<int64_t>{5, 4, 7, 3, 2, 6, 1}));
}

TEST(SchedulerTest, AgingAdmitsAStarvedLowRequest) {
  for (int64_t aging : {0, 3}) {
    Harness h({.max_batched_tokens = 64, .max_seqs = 1, .aging_steps = aging}, 64, 4);
    h.Add(1, 4, Priority::kLow, 1);
    int64_t next = 2;
    bool low_admitted = false;
    for (int step = 0; step < 30; ++step) {
      h.Add(next++, 4, Priority::kNormal, 1);  // a saturating stream of normal requests
      h.Step();
      const auto& a = h.admitted();
      if (std::find(a.begin(), a.end(), 1) != a.end()) low_admitted = true;
    }
    EXPECT_EQ(low_admitted, aging > 0) << "aging_steps " << aging;
  }
}

TEST(SchedulerTest, CriticalRequestPreemptsALowerClassWithinOneStep) {
  // 4 blocks of 4: the low request's 13-token prompt fills the whole cache.
  Harness h({.max_batched_tokens = 64, .max_seqs = 4, .aging_steps = 0}, 4, 4);
  h.Add(1, 13, Priority::kLow, 3);
  h.Step();
  EXPECT_EQ(h.blocks().num_available(), 0);
  h.Add(2, 3, Priority::kCritical, 2);
  StepPlan plan = h.Step();
  EXPECT_EQ(plan.preempted, std::vector<int64_t>{1});
  ASSERT_NE(Find(plan, 2), nullptr);
  EXPECT_TRUE(Find(plan, 2)->admit);
  for (int i = 0; i < 20 && h.scheduler().HasWork(); ++i) h.Step();
  EXPECT_EQ(h.finished(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(h.scheduler().Stats().preemptions, 1);
}

TEST(SchedulerTest, AgingNeverLiftsARequestIntoTheCriticalClass) {
  // Aging every step: the low request has aged far past high when the critical one arrives,
  // and is still preempted for it.
  Harness h({.max_batched_tokens = 64, .max_seqs = 1, .aging_steps = 1}, 64, 4);
  h.Add(1, 4, Priority::kLow, 40);
  for (int i = 0; i < 10; ++i) h.Step();
  h.Add(2, 3, Priority::kCritical, 2);
  StepPlan plan = h.Step();
  EXPECT_EQ(plan.preempted, std::vector<int64_t>{1});
  ASSERT_NE(Find(plan, 2), nullptr);
  EXPECT_TRUE(Find(plan, 2)->admit);
}

TEST(SchedulerTest, EqualClassWaitingDoesNotPreemptRunning) {
  // A waiting request of the same class never preempts, even one ranked ahead by its deadline:
  // neither for a sequence slot nor for blocks (no thrashing between equals).
  Harness slots({.max_batched_tokens = 64, .max_seqs = 1}, 16, 4);
  Harness blocks({.max_batched_tokens = 64, .max_seqs = 4}, 2, 4);
  for (Harness* h : {&slots, &blocks}) {
    h->Add(1, 5, Priority::kNormal, 3);
    h->Step();
    h->Add(2, 3, Priority::kNormal, 1, TimestampUs{10});
    for (int i = 0; i < 2; ++i) {
      StepPlan plan = h->Step();
      EXPECT_TRUE(plan.preempted.empty());
      EXPECT_EQ(Find(plan, 2), nullptr);
    }
    // Once the running one finishes, the waiting one runs.
    h->Step();
    EXPECT_EQ(h->finished(), (std::vector<int64_t>{1, 2}));
  }
}

TEST(SchedulerTest, PreemptsTheLatestArrivalWhenBlocksRunOut) {
  // 4 blocks of 2 tokens; two 3-token prompts take 2 blocks each.
  Harness h({.max_batched_tokens = 64, .max_seqs = 4}, 4, 2);
  h.Add(1, 3, Priority::kNormal, 4);
  h.Add(2, 3, Priority::kNormal, 4);
  h.Step();  // prompts; both sample a token (length 4)
  h.Step();  // position 3: still in each sequence's 2nd block
  EXPECT_EQ(h.blocks().num_available(), 0);
  StepPlan plan = h.Step();  // position 4 needs a 3rd block for both
  EXPECT_EQ(plan.preempted, std::vector<int64_t>{2});
  ASSERT_NE(Find(plan, 1), nullptr);
  EXPECT_FALSE(h.scheduler().IsRunning(2));
  EXPECT_EQ(h.scheduler().NumComputed(2), 0);
  // Its tokens (prompt and sampled ones) are kept for the recompute.
  EXPECT_EQ(h.scheduler().Tokens(2).size(), 5u);
  for (int i = 0; i < 20 && h.scheduler().HasWork(); ++i) h.Step();
  EXPECT_EQ(h.finished(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(h.blocks().num_used(), 0);
}

// Records which block each host slot holds, and the copies not yet waited for (queued on a
// copy stream: the runner must not see the step's blocks before Wait).
class RecordingSwap final : public SwapSpace {
 public:
  explicit RecordingSwap(int64_t slots) : slots_(slots) {}
  int64_t num_slots() const override { return slots_; }
  void CopyOut(int32_t block, int64_t slot) override {
    EXPECT_FALSE(held_.contains(slot)) << "slot " << slot << " overwritten";
    held_[slot] = block;
    ++outs_;
    ++pending_;
  }
  void CopyIn(int64_t slot, int32_t block) override {
    EXPECT_TRUE(held_.contains(slot));
    held_.erase(slot);
    ins_.push_back(block);
    ++pending_;
  }
  void Wait() override {
    EXPECT_GT(pending_, 0) << "a wait without copies";
    pending_ = 0;
    ++waits_;
  }
  int outs_ = 0;
  int pending_ = 0;  // copies queued since the last Wait
  int waits_ = 0;
  std::vector<int32_t> ins_;
  std::map<int64_t, int32_t> held_;

 private:
  int64_t slots_;
};

TEST(SchedulerTest, SwapPreemptionKeepsComputedTokensAndResumesWithoutRecompute) {
  RecordingSwap swap(8);
  Harness h({.max_batched_tokens = 64, .max_seqs = 4, .preempt_by_swap = true}, 4, 2, &swap);
  h.Add(1, 3, Priority::kNormal, 4);
  h.Add(2, 3, Priority::kNormal, 4);
  h.Step();
  h.Step();
  StepPlan plan = h.Step();  // position 4 needs a 3rd block for both
  EXPECT_EQ(plan.swapped_out, std::vector<int64_t>{2});
  EXPECT_TRUE(plan.preempted.empty());
  EXPECT_EQ(swap.outs_, 2);
  EXPECT_EQ(swap.pending_, 0) << "the step's batch went out before its swap-outs were done";
  EXPECT_EQ(swap.waits_, 1) << "one wait for the step's two copies";
  EXPECT_EQ(h.scheduler().NumComputed(2), 4);
  EXPECT_EQ(h.scheduler().Stats().swapped, 1);
  for (int i = 0; i < 5 && Find(plan, 2) == nullptr; ++i) plan = h.Step();  // 1 finishes first
  ASSERT_NE(Find(plan, 2), nullptr);
  EXPECT_TRUE(Find(plan, 2)->swap_in);
  EXPECT_EQ(Find(plan, 2)->n_tokens, 1);  // only the token not yet computed
  EXPECT_EQ(swap.ins_.size(), 2u);
  EXPECT_EQ(swap.pending_, 0) << "the step's batch went out before its swap-ins were done";
  EXPECT_EQ(swap.waits_, 2);
  EXPECT_TRUE(swap.held_.empty());
  std::span<const int32_t> table = h.scheduler().BlockTable(2);
  EXPECT_EQ(std::vector<int32_t>(table.begin(), table.begin() + 2), swap.ins_);
  for (int i = 0; i < 10 && h.scheduler().HasWork(); ++i) h.Step();
  EXPECT_EQ(h.finished(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(h.scheduler().Stats().swap_outs, 1);
  EXPECT_EQ(h.blocks().num_used(), 0);
}

TEST(SchedulerTest, SwapFallsBackToRecomputeWhenHostSlotsRunShort) {
  RecordingSwap swap(1);
  Harness h({.max_batched_tokens = 64, .max_seqs = 4, .preempt_by_swap = true}, 4, 2, &swap);
  h.Add(1, 3, Priority::kNormal, 4);
  h.Add(2, 3, Priority::kNormal, 4);
  h.Step();
  h.Step();
  StepPlan plan = h.Step();
  EXPECT_EQ(plan.preempted, std::vector<int64_t>{2});
  EXPECT_TRUE(plan.swapped_out.empty());
  EXPECT_EQ(swap.outs_, 0);
}

TEST(SchedulerTest, PrefixCacheSkipsCachedBlocksOnAdmission) {
  Harness h({.max_batched_tokens = 64, .max_seqs = 4}, 32, 4);
  h.Add(1, 10, Priority::kNormal, 1);
  h.Step();
  ASSERT_EQ(h.finished(), std::vector<int64_t>{1});
  EXPECT_EQ(h.blocks().num_cached(), 2);  // the two full blocks of its prompt

  h.Add(2, 11, Priority::kNormal, 1);  // same first 8 tokens (1..8), then 9, 10, 11
  StepPlan plan = h.Step();
  const ScheduledSequence* s = Find(plan, 2);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->cached_blocks.size(), 2u);
  EXPECT_EQ(s->n_tokens, 3);

  // An 8-token prompt equal to the cached blocks still computes its last block's last token.
  h.Add(3, 8, Priority::kNormal, 1);
  plan = h.Step();
  s = Find(plan, 3);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->cached_blocks.size(), 1u);
  EXPECT_EQ(s->n_tokens, 4);

  // Other first tokens: no hit.
  h.Add(4, 8, Priority::kNormal, 1, std::nullopt, 100);
  plan = h.Step();
  ASSERT_NE(Find(plan, 4), nullptr);
  EXPECT_TRUE(Find(plan, 4)->cached_blocks.empty());
  const SchedulerStats stats = h.scheduler().Stats();
  EXPECT_EQ(stats.prompt_tokens_cached, 8 + 4);
  EXPECT_EQ(stats.prompt_tokens_admitted, 10 + 11 + 8 + 8);
}

TEST(SchedulerTest, RemoveFreesEveryBlockInAnyState) {
  Harness h({.max_batched_tokens = 4, .max_seqs = 4}, 32, 4);
  h.Add(1, 20);  // mid-prefill after one step
  h.Add(2, 3);
  h.Step();
  EXPECT_GT(h.scheduler().BlockTable(1).size(), 0u);
  h.scheduler().Remove(1);
  h.scheduler().Remove(2);
  EXPECT_EQ(h.blocks().num_used(), 0);
  EXPECT_FALSE(h.scheduler().HasWork());
  EXPECT_TRUE(h.blocks().CheckConsistency().ok());
}

}  // namespace
}  // namespace pier::engine
