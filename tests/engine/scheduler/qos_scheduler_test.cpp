// The scheduler's QoS (issue #16): weighted fair share of tokens between tenants within a class,
// no credit banked while idle, the top class's reserve, demotion past a queue deadline, and
// the first-come-first-served mode with QoS off.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "engine/scheduler/fair_share.h"
#include "engine/scheduler/scheduler.h"

namespace pier::engine {
namespace {

// Drives a Scheduler without a model: every sequence that reaches its last token "samples"
// token 5 and is removed after `generate` tokens. Counts the tokens computed per tenant.
class QosHarness {
 public:
  QosHarness(SchedulerOptions options, int64_t n_blocks, int64_t block_size = 16)
      : blocks_(n_blocks, block_size), scheduler_(options, &blocks_) {}

  void Add(const std::string& tenant, double weight, int64_t prompt, int64_t generate,
           Priority priority = Priority::kNormal) {
    const int64_t id = next_id_++;
    std::vector<int32_t> tokens(static_cast<size_t>(prompt));
    // Distinct prompts: no prefix-cache hits between sequences.
    std::iota(tokens.begin(), tokens.end(), static_cast<int32_t>(id * 1000));
    scheduler_.Add({.id = id,
                    .tokens = std::move(tokens),
                    .priority = priority,
                    .deadline_us = std::nullopt,
                    .arrival_us = 0,
                    .prompt_logits = false,
                    .tenant = tenant,
                    .tenant_weight = weight});
    tenant_of_[id] = tenant;
    class_of_[id] = priority;
    prompt_of_[id] = prompt;
    generate_of_[id] = generate;
    added_step_[id] = scheduler_.step();
  }

  StepPlan Step() {
    StepPlan plan = scheduler_.Plan();
    (void)scheduler_.Apply(plan);
    for (const ScheduledSequence& s : plan.sequences) {
      tokens_[tenant_of_[s.id]] += s.n_tokens;
      class_tokens_[{tenant_of_[s.id], class_of_[s.id]}] += s.n_tokens;
      if (s.admit && !admitted_step_.contains(s.id)) admitted_step_[s.id] = scheduler_.step();
    }
    for (const StepResult& r : scheduler_.Commit(plan)) {
      if (!r.samples) continue;
      const auto generated =
          static_cast<int64_t>(scheduler_.Tokens(r.id).size()) - prompt_of_[r.id] + 1;
      if (generated >= generate_of_[r.id]) {
        scheduler_.Remove(r.id);
      } else {
        scheduler_.AppendToken(r.id, 5);
      }
    }
    EXPECT_TRUE(blocks_.CheckConsistency().ok());
    return plan;
  }

  // Waiting sequences of `tenant`.
  int64_t Waiting(const std::string& tenant) const {
    int64_t n = 0;
    for (const auto& [id, t] : tenant_of_) {
      if (t == tenant && scheduler_.Contains(id) && !scheduler_.IsRunning(id)) ++n;
    }
    return n;
  }

  Scheduler& scheduler() { return scheduler_; }
  std::map<std::string, int64_t>& tokens() { return tokens_; }
  int64_t ClassTokens(const std::string& tenant, Priority p) { return class_tokens_[{tenant, p}]; }
  const std::map<int64_t, int64_t>& admitted_step() const { return admitted_step_; }
  const std::map<int64_t, int64_t>& added_step() const { return added_step_; }

 private:
  BlockManager blocks_;
  Scheduler scheduler_;
  int64_t next_id_ = 1;
  std::map<int64_t, std::string> tenant_of_;
  std::map<int64_t, int64_t> prompt_of_, generate_of_, added_step_, admitted_step_;
  std::map<std::string, int64_t> tokens_;
  std::map<int64_t, Priority> class_of_;
  std::map<std::pair<std::string, Priority>, int64_t> class_tokens_;
};

// Runs until one tenant has nothing waiting; returns a's share of the tokens computed.
double ShareWhileBothBacklogged(QosHarness& h) {
  for (int i = 0; i < 100000 && h.Waiting("a") > 0 && h.Waiting("b") > 0; ++i) h.Step();
  const double a = static_cast<double>(h.tokens()["a"]);
  const double b = static_cast<double>(h.tokens()["b"]);
  EXPECT_GT(a + b, 2000) << "too short a run to measure a share";
  return a / (a + b);
}

TEST(QosSchedulerTest, EqualTenantsShareTokensWhatEverTheirRequestRates) {
  // Tenant a sends ten times as many requests as b, all queued before b's.
  QosHarness h({.max_batched_tokens = 64, .max_seqs = 4, .aging_steps = 0}, 4096);
  for (int i = 0; i < 400; ++i) h.Add("a", 1, 12, 20);
  for (int i = 0; i < 40; ++i) h.Add("b", 1, 12, 20);
  const double share = ShareWhileBothBacklogged(h);
  EXPECT_NEAR(share, 0.5, 0.05);
}

TEST(QosSchedulerTest, WeightsTwoToOneGiveTokensTwoToOne) {
  QosHarness h({.max_batched_tokens = 64, .max_seqs = 6, .aging_steps = 0}, 4096);
  for (int i = 0; i < 150; ++i) {
    h.Add("a", 2, 10, 24);
    h.Add("b", 1, 10, 24);
  }
  const double share = ShareWhileBothBacklogged(h);
  const double ratio = share / (1 - share);
  EXPECT_NEAR(ratio, 2.0, 0.2);
}

TEST(QosSchedulerTest, FairShareIsWithinAClass) {
  // Tenant a also sends high requests; within normal it still gets half, as b does.
  QosHarness h({.max_batched_tokens = 64, .max_seqs = 4, .aging_steps = 0}, 4096);
  for (int i = 0; i < 150; ++i) {
    h.Add("a", 1, 10, 20);
    h.Add("b", 1, 10, 20);
  }
  for (int i = 0; i < 40; ++i) h.Add("a", 1, 10, 20, Priority::kHigh);
  for (int i = 0; i < 100000 && h.Waiting("a") > 0 && h.Waiting("b") > 0; ++i) h.Step();
  const double a = static_cast<double>(h.ClassTokens("a", Priority::kNormal));
  const double b = static_cast<double>(h.ClassTokens("b", Priority::kNormal));
  EXPECT_GT(h.ClassTokens("a", Priority::kHigh), 1000);
  ASSERT_GT(a + b, 2000);
  EXPECT_NEAR(a / (a + b), 0.5, 0.05);
}

TEST(QosSchedulerTest, ClassesComeBeforeFairShare) {
  // Tenant b's normal requests wait for tenant a's high ones however many tokens a has had.
  QosHarness h({.max_batched_tokens = 64, .max_seqs = 2, .aging_steps = 0}, 1024);
  for (int i = 0; i < 10; ++i) h.Add("a", 1, 8, 8, Priority::kHigh);
  for (int i = 0; i < 3; ++i) h.Add("b", 1, 8, 8, Priority::kNormal);
  for (int i = 0; i < 40; ++i) h.Step();
  EXPECT_EQ(h.tokens()["b"], 0);
  EXPECT_GT(h.tokens()["a"], 100);
}

TEST(QosSchedulerTest, AnIdleTenantBanksNoCredit) {
  QosHarness h({.max_batched_tokens = 64, .max_seqs = 2, .aging_steps = 0}, 2048);
  // a runs alone for a long while...
  for (int i = 0; i < 40; ++i) h.Add("a", 1, 8, 16);
  for (int i = 0; i < 150; ++i) h.Step();
  ASSERT_GT(h.tokens()["a"], 400);
  // ...then b arrives with a backlog: it starts at the clock, not at zero, so the two share
  // from here on instead of b taking everything until it has caught up.
  const int64_t a_before = h.tokens()["a"];
  for (int i = 0; i < 40; ++i) h.Add("b", 1, 8, 16);
  for (int i = 0; i < 60; ++i) h.Step();
  const int64_t a_after = h.tokens()["a"] - a_before;
  const int64_t b_after = h.tokens()["b"];
  EXPECT_GT(a_after, b_after / 2) << "b took " << b_after << " tokens, a " << a_after;
  EXPECT_GT(b_after, a_after / 2);
}

TEST(QosSchedulerTest, TheReserveLetsACriticalRequestStartAtOnceWithoutPreemption) {
  // 20 slots with a 5% reserve: 19 for low, 1 kept for critical.
  QosHarness h(
      {.max_batched_tokens = 256, .max_seqs = 20, .aging_steps = 0, .reserved_share = 0.05}, 4096);
  for (int i = 0; i < 200; ++i) h.Add("bulk", 1, 12, 40, Priority::kLow);
  std::vector<int64_t> critical;
  for (int step = 0; step < 300; ++step) {
    if (step % 25 == 10) {
      h.Add("vip", 1, 12, 8, Priority::kCritical);
      critical.push_back(static_cast<int64_t>(h.added_step().size()));
    }
    h.Step();
    EXPECT_LE(h.scheduler().Stats().running - h.scheduler().Stats().running_critical, 19);
  }
  ASSERT_EQ(critical.size(), 12u);
  for (int64_t id : critical) {
    ASSERT_TRUE(h.admitted_step().contains(id)) << id;
    EXPECT_EQ(h.admitted_step().at(id), h.added_step().at(id)) << "critical " << id;
  }
  EXPECT_EQ(h.scheduler().Stats().preemptions, 0);
  EXPECT_EQ(h.scheduler().Stats().reserved_seqs, 1);
}

TEST(QosSchedulerTest, WithoutTheReserveACriticalRequestPreempts) {
  QosHarness h({.max_batched_tokens = 256, .max_seqs = 20, .aging_steps = 0}, 4096);
  for (int i = 0; i < 200; ++i) h.Add("bulk", 1, 12, 40, Priority::kLow);
  for (int step = 0; step < 5; ++step) h.Step();
  h.Add("vip", 1, 12, 8, Priority::kCritical);
  h.Step();
  EXPECT_EQ(h.scheduler().Stats().preemptions, 1);
}

TEST(QosSchedulerTest, TheReserveDoesNotStarveALoneRequest) {
  // 10 blocks with a 20% reserve (2 blocks): a normal request needing all 10 still runs alone.
  QosHarness h({.max_batched_tokens = 256, .max_seqs = 8, .aging_steps = 0, .reserved_share = 0.2},
               10, 4);
  h.Add("t", 1, 30, 10);
  for (int i = 0; i < 30 && h.scheduler().HasWork(); ++i) h.Step();
  EXPECT_FALSE(h.scheduler().HasWork());
}

TEST(QosSchedulerTest, ACriticalPromptIsReadWholeWhileOtherPromptsWait) {
  QosHarness h({.max_batched_tokens = 256,
                .max_seqs = 8,
                .prefill_chunk_while_decoding = 16,
                .aging_steps = 0},
               1024);
  h.Add("t", 1, 8, 100);  // 1: decodes from the second step on
  h.Step();
  h.Add("t", 1, 100, 10);  // 2: a long prompt, read 16 tokens a step beside the decode
  StepPlan plan = h.Step();
  ASSERT_EQ(plan.sequences.size(), 2u);
  EXPECT_EQ(plan.sequences[1].n_tokens, 16);
  h.Add("vip", 1, 60, 4, Priority::kCritical);  // 3
  // A latency-leaning step budget (adaptive batching) holds other classes back, not this one.
  h.scheduler().SetStepLimits(24, 16);
  plan = h.Step();
  std::map<int64_t, int64_t> tokens;
  for (const ScheduledSequence& s : plan.sequences) tokens[s.id] = s.n_tokens;
  EXPECT_EQ(tokens[3], 60) << "the critical prompt whole, in one step";
  EXPECT_EQ(tokens[1], 1) << "decodes go on";
  EXPECT_EQ(tokens.count(2), 0u) << "the other prompt waits one step";
  plan = h.Step();
  tokens.clear();
  for (const ScheduledSequence& s : plan.sequences) tokens[s.id] = s.n_tokens;
  EXPECT_EQ(tokens[2], 16);
}

TEST(QosSchedulerTest, ACriticalPromptThatCannotStartBlocksNobody) {
  // 8 blocks of 4: a normal prompt of 28 tokens (7 blocks) read 8 a step, aged to class 0 at
  // once, so a critical request needing 3 blocks can neither fit nor preempt it. The normal
  // prompt must go on (not wait for the critical one), finish, and then the critical starts.
  QosHarness h({.max_batched_tokens = 8, .max_seqs = 4, .aging_steps = 1}, 8, 4);
  h.Add("t", 1, 28, 2);  // 1
  h.Step();
  h.Step();
  h.Add("vip", 1, 12, 2, Priority::kCritical);  // 2
  int steps = 0;
  for (; steps < 100 && h.scheduler().HasWork(); ++steps) {
    const StepPlan plan = h.Step();
    EXPECT_FALSE(plan.sequences.empty()) << "an empty step at " << steps;
  }
  EXPECT_FALSE(h.scheduler().HasWork()) << "stuck";
  EXPECT_TRUE(h.admitted_step().contains(2));
}

TEST(QosSchedulerTest, ADemotedSequenceRanksAfterEveryClass) {
  QosHarness h({.max_batched_tokens = 64, .max_seqs = 1, .aging_steps = 0}, 256);
  h.Add("t", 1, 4, 1, Priority::kCritical);  // 1: demoted past its deadline
  h.Add("t", 1, 4, 1, Priority::kLow);       // 2
  h.scheduler().Demote(1);
  h.Step();
  EXPECT_EQ(h.admitted_step().count(2), 1u);
  EXPECT_EQ(h.admitted_step().count(1), 0u);
  for (int i = 0; i < 5; ++i) h.Step();
  EXPECT_EQ(h.admitted_step().count(1), 1u);
}

TEST(QosSchedulerTest, QosOffServesFirstComeFirstServed) {
  QosHarness h({.max_batched_tokens = 64, .max_seqs = 1, .aging_steps = 0, .qos = false}, 256);
  h.Add("a", 1, 4, 1, Priority::kLow);
  h.Add("b", 1, 4, 1, Priority::kCritical);
  h.Step();
  EXPECT_EQ(h.admitted_step().count(1), 1u);
  EXPECT_EQ(h.admitted_step().count(2), 0u);
}

TEST(FairShareTest, TheClockFollowsTheSlowestLiveTenantAndNeverGoesBack) {
  FairShare f;
  f.Join("a", 1);
  f.Join("b", 2);
  f.Charge("a", 100);
  f.Charge("b", 100);
  f.AdvanceClock();
  EXPECT_DOUBLE_EQ(f.VirtualTime("a"), 100);
  EXPECT_DOUBLE_EQ(f.VirtualTime("b"), 50);
  EXPECT_DOUBLE_EQ(f.clock(), 50);
  f.Leave("b");
  f.AdvanceClock();
  EXPECT_DOUBLE_EQ(f.clock(), 100);
  f.Leave("a");
  f.AdvanceClock();
  EXPECT_DOUBLE_EQ(f.clock(), 100);
  f.Join("c", 0);  // a weight of 0 counts as 1
  EXPECT_DOUBLE_EQ(f.VirtualTime("c"), 100);
  f.Charge("c", 10);
  EXPECT_DOUBLE_EQ(f.VirtualTime("c"), 110);
}

TEST(FairShareTest, ATenantWithNothingWaitingDoesNotHoldTheClockBack) {
  FairShare f;
  f.Join("slow", 1);  // one long stream, nothing waiting
  f.Join("busy", 1);  // a backlog
  f.Charge("slow", 10);
  f.Charge("busy", 5000);
  f.AdvanceClock({"busy"});
  EXPECT_DOUBLE_EQ(f.clock(), 5000);
  f.Join("new", 1);  // starts level with the backlogged tenant, not 4990 tokens ahead of it
  EXPECT_DOUBLE_EQ(f.VirtualTime("new"), 5000);
}

}  // namespace
}  // namespace pier::engine
