// Speculative decoding's parts without a model: prompt lookup's continuations, the planner's
// cost model and choices, and the scheduler's proposed positions (budget, blocks, what counts
// as computed, what is given back).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "engine/scheduler/scheduler.h"
#include "engine/speculative/ngram_proposer.h"
#include "engine/speculative/speculation_planner.h"

namespace pier::engine {
namespace {

TEST(NgramLookupTest, ContinuesTheLatestEarlierOccurrenceOfTheLongestSuffix) {
  //                             0  1  2  3  4  5  6  7  8  9 10 11
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 2, 3};
  // Suffix [2, 3] occurs at 1 and 6: the latest (6) goes on with 7, 8, 2, 3.
  EXPECT_EQ(LookupContinuation(t, 2, 4, 3), (std::vector<int32_t>{7, 8, 2}));
  // 8 tokens do not follow the latest: the earliest (1) has the longest continuation.
  EXPECT_EQ(LookupContinuation(t, 2, 4, 8), (std::vector<int32_t>{4, 5, 9, 2, 3, 7, 8, 2}));
  // 5 follow the one at 1 only.
  EXPECT_EQ(LookupContinuation(t, 2, 4, 5), (std::vector<int32_t>{4, 5, 9, 2, 3}));
  const std::vector<int32_t> u = {5, 1, 2, 3, 6, 6, 1, 2, 3};
  // [1, 2, 3] at 1 beats the shorter [2, 3] (also only at 2).
  EXPECT_EQ(LookupContinuation(u, 2, 3, 2), (std::vector<int32_t>{6, 6}));
  EXPECT_TRUE(LookupContinuation(u, 2, 3, 0).empty());
  EXPECT_TRUE(LookupContinuation(std::vector<int32_t>{1, 2, 3, 4}, 2, 4, 4).empty()) << "no match";
  EXPECT_TRUE(LookupContinuation(std::vector<int32_t>{1}, 1, 4, 4).empty());
  // A run repeats itself.
  EXPECT_EQ(LookupContinuation(std::vector<int32_t>{7, 7, 7}, 1, 2, 4), (std::vector<int32_t>{7}));
  NgramProposer proposer(2, 4);
  const std::vector<ProposalRequest> requests = {{.sequence_id = 1, .tokens = t, .max_tokens = 2},
                                                 {.sequence_id = 2, .tokens = u, .max_tokens = 0}};
  const auto proposals = proposer.Propose(requests);
  ASSERT_EQ(proposals.size(), 2u);
  EXPECT_EQ(proposals[0], (std::vector<int32_t>{7, 8}));
  EXPECT_TRUE(proposals[1].empty());
}

TEST(StepCostModelTest, InterpolatesBetweenAndExtrapolatesPastMeasurements) {
  StepCostModel cost;
  EXPECT_EQ(cost.Cost(3), 0);
  cost.Observe(1, 100);
  cost.Observe(5, 200);
  EXPECT_DOUBLE_EQ(cost.Cost(1), 100);
  EXPECT_DOUBLE_EQ(cost.Cost(3), 150);
  EXPECT_DOUBLE_EQ(cost.Cost(10), 200 + 40 * 5) << "linear per token past the largest";
  cost.Observe(1, 200);  // a moving average, not the latest alone
  EXPECT_GT(cost.Cost(1), 100);
  EXPECT_LT(cost.Cost(1), 200);
  cost.Observe(0, 50);
  cost.Observe(2, -1);
  EXPECT_EQ(cost.points().size(), 2u) << "nonsense ignored";
}

TEST(SpeculationPlannerTest, ProposesWhileTokensAreNearlyFreeAndStopsUnderLoad) {
  SpeculationPlanner planner(8);
  // Memory-bound: a step of up to 9 tokens costs hardly more than one.
  for (int64_t n = 1; n <= 64; ++n) planner.cost().Observe(n, n <= 9 ? 100 + n : 12.0 * n);
  const std::vector<DraftCandidate> one = {{.sequence_id = 1, .max_tokens = 8}};
  for (int i = 0; i < 20; ++i) planner.Record(1, 8, 8);  // it copies: everything kept
  EXPECT_EQ(planner.Choose(1, 1, one), (std::vector<int32_t>{8}));
  // Capped by the sequence's own limit.
  EXPECT_EQ(planner.Choose(1, 1, std::vector<DraftCandidate>{{.sequence_id = 1, .max_tokens = 3}}),
            (std::vector<int32_t>{3}));
  // A step already holding 40 tokens (arithmetic-bound): no proposal pays.
  EXPECT_EQ(planner.Choose(40, 40, one), (std::vector<int32_t>{0}));
  // A sequence whose proposals are refused gets none; the copying one keeps its own.
  for (int i = 0; i < 20; ++i) planner.Record(2, 4, 0);
  EXPECT_LT(planner.Acceptance(2), 0.1);
  const std::vector<DraftCandidate> two = {{.sequence_id = 1, .max_tokens = 8},
                                           {.sequence_id = 2, .max_tokens = 8}};
  const std::vector<int32_t> lengths = planner.Choose(2, 2, two);
  EXPECT_GT(lengths[0], 0);
  EXPECT_EQ(lengths[1], 0);
  // Without a cost model nothing is proposed.
  SpeculationPlanner blind(8);
  EXPECT_EQ(blind.Choose(1, 1, one), (std::vector<int32_t>{0}));
}

TEST(SpeculationPlannerTest, EvidenceFadesTowardThePrior) {
  SpeculationPlanner planner(8);
  EXPECT_DOUBLE_EQ(planner.Acceptance(9), 0.5);
  for (int i = 0; i < 10; ++i) planner.Record(9, 4, 0);
  const double low = planner.Acceptance(9);
  EXPECT_LT(low, 0.1);
  for (int i = 0; i < 200; ++i) planner.EndStep();
  EXPECT_GT(planner.Acceptance(9), 0.4) << "a sequence that stopped proposing may try again";
  planner.Forget(9);
  EXPECT_DOUBLE_EQ(planner.Acceptance(9), 0.5);
}

std::vector<int32_t> Iota(int64_t n, int32_t first = 1) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

SchedulerOptions Options(int64_t budget) {
  SchedulerOptions options;
  options.max_batched_tokens = budget;
  options.max_seqs = 4;
  return options;
}

// A sequence of 15 prompt tokens, decoded to 17 (16 computed): the next step is a decode.
struct Decoding {
  BlockManager blocks;
  Scheduler scheduler;
  explicit Decoding(int64_t n_blocks, int64_t budget = 64)
      : blocks(n_blocks, 4), scheduler(Options(budget), &blocks) {
    SequenceSpec spec;
    spec.id = 1;
    spec.tokens = Iota(15);
    scheduler.Add(std::move(spec));
    StepPlan plan = scheduler.Plan();
    (void)scheduler.Apply(plan);
    EXPECT_TRUE(scheduler.Commit(plan)[0].samples);
    scheduler.AppendToken(1, 100);  // position 15
    plan = scheduler.Plan();
    (void)scheduler.Apply(plan);
    (void)scheduler.Commit(plan);
    scheduler.AppendToken(1, 101);  // position 16: 17 tokens, 16 computed, 4 blocks of 4
  }
};

TEST(SchedulerDraftTest, ProposalsRideAlongAVerifiedDecode) {
  Decoding d(16);
  ASSERT_EQ(d.scheduler.NumComputed(1), 16);
  d.scheduler.SetDraft(1, {200, 201, 202, 203, 204});
  StepPlan plan = d.scheduler.Plan();
  ASSERT_EQ(plan.sequences.size(), 1u);
  EXPECT_EQ(plan.sequences[0].n_tokens, 6);
  EXPECT_EQ(plan.sequences[0].draft_tokens, 5);
  Batch batch = d.scheduler.Apply(plan);
  ASSERT_EQ(batch.sequences.size(), 1u);
  EXPECT_EQ(batch.sequences[0].tokens, (std::vector<int32_t>{101, 200, 201, 202, 203, 204}));
  EXPECT_EQ(batch.sequences[0].first_position, 16);
  EXPECT_EQ(batch.sequences[0].logits, LogitsWanted::kAll);
  EXPECT_EQ(batch.sequences[0].block_table.size(), 6u) << "positions up to 21: 6 blocks of 4";
  const std::vector<StepResult> results = d.scheduler.Commit(plan);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].samples);
  EXPECT_EQ(results[0].draft, (std::vector<int32_t>{200, 201, 202, 203, 204}));
  EXPECT_EQ(d.scheduler.NumComputed(1), 17) << "only the sequence's own token is computed";
  // Two proposals kept (their K/V are the tokens'), then a different token.
  d.scheduler.AppendToken(1, 200, /*computed=*/true);
  d.scheduler.AppendToken(1, 201, /*computed=*/true);
  d.scheduler.AppendToken(1, 999);
  EXPECT_EQ(d.scheduler.NumComputed(1), 19);
  EXPECT_EQ(d.scheduler.Tokens(1).size(), 20u);
  d.scheduler.ReleaseBlocksPastEnd(1);
  EXPECT_EQ(d.scheduler.BlockTable(1).size(), 5u) << "20 tokens: 5 blocks; the 6th went back";
  EXPECT_TRUE(d.blocks.CheckConsistency().ok());
  // The draft is gone after the step: the next plan is a plain decode.
  plan = d.scheduler.Plan();
  EXPECT_EQ(plan.sequences[0].n_tokens, 1);
  EXPECT_EQ(plan.sequences[0].draft_tokens, 0);
}

TEST(SchedulerDraftTest, ProposalsNeverExceedTheBudgetOrTakeBlocksOthersNeed) {
  {
    Decoding d(16);
    d.scheduler.SetStepLimits(3, 64);
    d.scheduler.SetDraft(1, {200, 201, 202, 203, 204});
    const StepPlan plan = d.scheduler.Plan();
    EXPECT_EQ(plan.sequences[0].n_tokens, 3);
    EXPECT_EQ(plan.sequences[0].draft_tokens, 2);
  }
  {
    // 5 blocks, 4 held (positions 0..15), the last one for position 16: proposals up to
    // position 19 only, in that block.
    Decoding d(5);
    ASSERT_EQ(d.blocks.num_available(), 1);
    d.scheduler.SetDraft(1, {200, 201, 202, 203, 204, 205});
    const StepPlan plan = d.scheduler.Plan();
    EXPECT_EQ(plan.sequences[0].draft_tokens, 3) << "positions 17..19, in its last block";
    EXPECT_TRUE(plan.preempted.empty());
  }
  {
    // A failed step forgets the proposals and computes nothing.
    Decoding d(16);
    d.scheduler.SetDraft(1, {200, 201});
    const StepPlan plan = d.scheduler.Plan();
    (void)d.scheduler.Apply(plan);
    d.scheduler.CommitFailed(plan);
    EXPECT_EQ(d.scheduler.NumComputed(1), 16);
    EXPECT_EQ(d.scheduler.Plan().sequences[0].draft_tokens, 0);
  }
}

}  // namespace
}  // namespace pier::engine
