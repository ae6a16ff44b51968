// SpeculationPlanner: how many proposed tokens each decoding sequence gets in the next step.
//
// A step's proposals are worth computing only while they are nearly free: decode of a small
// batch is bound by reading the weights, and a step of a few more tokens costs little more
// (measured on the 2-core AVX2 machine: 2 tokens 1.12x one, 4 tokens 1.36x, 8 tokens 2.4x);
// a large batch is bound by arithmetic, and every proposed token costs as much as any other.
// So the planner keeps:
//   - a cost model of the device: the time of a step by its token count, measured at start
//     (Engine calibration) and kept current from every step's own time (a moving average per
//     count, read between measured counts by linear interpolation);
//   - each sequence's acceptance: the chance that its next proposal is kept, estimated from
//     its latest verifications (kept / checked positions) and drawn back to a prior (0.5) as
//     steps pass without a check, so a sequence that stopped proposing may start again;
// and gives proposals where they raise the step's expected tokens per second: with
// acceptance a, proposing k tokens yields 1 + a + a^2 + ... + a^k tokens in expectation.
// Tokens go one at a time to the sequence whose next proposal is likeliest kept; of every
// total so reached, the one with the most expected tokens per second of step wins (the
// measured costs are not smooth, so the best total is searched, not the first local one).
// Under load (a step already full of decodes or prompt chunks) no total beats none: the
// planner turns speculation off by itself.
//
// Thread-safety: engine thread only.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

namespace pier::engine {

// Step time by token count.
class StepCostModel {
 public:
  // A step of `tokens` tokens took `us` microseconds.
  void Observe(int64_t tokens, double us);
  // The expected time of a step of `tokens` (>= 1) tokens; 0 while nothing was observed.
  double Cost(int64_t tokens) const;
  bool empty() const { return us_.empty(); }
  // The measured counts and their times (for stats and tests).
  const std::map<int64_t, double>& points() const { return us_; }

 private:
  std::map<int64_t, double> us_;  // moving average per token count
};

struct DraftCandidate {
  int64_t sequence_id = 0;
  int32_t max_tokens = 0;  // the most it may get (the configured most, its tokens left)
};

class SpeculationPlanner {
 public:
  explicit SpeculationPlanner(int32_t max_tokens) : max_tokens_(max_tokens) {}

  StepCostModel& cost() { return cost_; }
  const StepCostModel& cost() const { return cost_; }

  // Proposal lengths for `candidates` (same order) in a step that computes `base_tokens`
  // tokens without proposals, `base_outputs` of them sampled ones.
  std::vector<int32_t> Choose(int64_t base_tokens, int64_t base_outputs,
                              std::span<const DraftCandidate> candidates) const;

  // A verification of `proposed` tokens kept `accepted` of them.
  void Record(int64_t sequence_id, int32_t proposed, int32_t accepted);
  // One step passed: every estimate drifts back toward the prior.
  void EndStep();
  void Forget(int64_t sequence_id) { acceptance_.erase(sequence_id); }
  // The sequence's estimated chance that its next proposal is kept.
  double Acceptance(int64_t sequence_id) const;

 private:
  struct Evidence {
    double kept = 0;
    double checked = 0;
  };
  int32_t max_tokens_;
  StepCostModel cost_;
  std::map<int64_t, Evidence> acceptance_;
};

}  // namespace pier::engine
