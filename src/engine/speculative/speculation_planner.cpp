#include "engine/speculative/speculation_planner.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace pier::engine {
namespace {

// Weight of the newest step time in its count's average: quick to follow a changed machine,
// slow enough to smooth one noisy step.
constexpr double kCostSmoothing = 0.2;
// The acceptance prior and its weight in checked positions, and how much of the evidence a
// step keeps (0.97: about 30 steps for the prior to count as much as it again).
constexpr double kPriorAcceptance = 0.5;
constexpr double kPriorWeight = 2.0;
constexpr double kEvidenceKeptPerStep = 0.97;
// A total must beat none by this share of expected throughput to be worth its risk (the cost
// model's noise).
constexpr double kMinGain = 0.03;

}  // namespace

void StepCostModel::Observe(int64_t tokens, double us) {
  if (tokens < 1 || !(us > 0)) return;
  auto [it, inserted] = us_.try_emplace(tokens, us);
  if (!inserted) it->second += kCostSmoothing * (us - it->second);
}

double StepCostModel::Cost(int64_t tokens) const {
  if (us_.empty()) return 0;
  auto above = us_.lower_bound(tokens);
  if (above != us_.end() && above->first == tokens) return above->second;
  if (above == us_.begin()) {
    // Below every measurement: no cheaper than the smallest one measured (a step of fewer
    // tokens is not slower), scaled down no further.
    return above->second;
  }
  auto below = std::prev(above);
  if (above == us_.end()) {
    // Past every measurement: linear in tokens from the largest one (cost per token of the
    // largest measured step), the arithmetic-bound regime.
    const double per_token = below->second / static_cast<double>(below->first);
    return below->second + per_token * static_cast<double>(tokens - below->first);
  }
  const double t =
      static_cast<double>(tokens - below->first) / static_cast<double>(above->first - below->first);
  return below->second + t * (above->second - below->second);
}

std::vector<int32_t> SpeculationPlanner::Choose(int64_t base_tokens, int64_t base_outputs,
                                                std::span<const DraftCandidate> candidates) const {
  std::vector<int32_t> lengths(candidates.size(), 0);
  if (candidates.empty() || cost_.empty() || base_tokens < 1) return lengths;
  std::vector<double> accept(candidates.size());
  std::vector<double> next_gain(candidates.size());  // acceptance^(k+1) of its next token
  for (size_t i = 0; i < candidates.size(); ++i) {
    accept[i] = Acceptance(candidates[i].sequence_id);
    next_gain[i] = accept[i];
  }
  const double base_cost = cost_.Cost(base_tokens);
  double expected = static_cast<double>(base_outputs);
  const double best_none = expected / base_cost;
  double best_rate = best_none;
  std::vector<int32_t> current(candidates.size(), 0);
  int64_t added = 0;
  for (;;) {
    // The candidate whose next proposed token is likeliest kept.
    size_t pick = candidates.size();
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (current[i] >= std::min(candidates[i].max_tokens, max_tokens_)) continue;
      if (pick == candidates.size() || next_gain[i] > next_gain[pick]) pick = i;
    }
    if (pick == candidates.size()) break;
    ++current[pick];
    ++added;
    expected += next_gain[pick];
    next_gain[pick] *= accept[pick];
    const double rate = expected / cost_.Cost(base_tokens + added);
    if (rate > best_rate) {
      best_rate = rate;
      lengths = current;
    }
  }
  if (best_rate < best_none * (1 + kMinGain)) std::fill(lengths.begin(), lengths.end(), 0);
  return lengths;
}

void SpeculationPlanner::Record(int64_t sequence_id, int32_t proposed, int32_t accepted) {
  if (proposed <= 0) return;
  Evidence& e = acceptance_[sequence_id];
  e.kept += accepted;
  // Checked positions: the kept ones and the first refused one (none after it was checked).
  e.checked += accepted < proposed ? accepted + 1 : accepted;
}

void SpeculationPlanner::EndStep() {
  for (auto& [id, e] : acceptance_) {
    e.kept *= kEvidenceKeptPerStep;
    e.checked *= kEvidenceKeptPerStep;
  }
}

double SpeculationPlanner::Acceptance(int64_t sequence_id) const {
  auto it = acceptance_.find(sequence_id);
  const Evidence e = it == acceptance_.end() ? Evidence{} : it->second;
  return (e.kept + kPriorAcceptance * kPriorWeight) / (e.checked + kPriorWeight);
}

}  // namespace pier::engine
