// TensorInstancePool: one TensorRunner over a tensor model's instances (`instances: N`), each
// with its own session, batcher and governor owners (in this process, or each in its own
// worker). A request goes to the instance with the fewest items waiting and running (the
// first on a tie), so a burst spreads over them and an instance stuck on a long batch gets
// nothing more. Its figures are the instances' together: counters and histograms summed, the
// widest window; its measured memory summed.
//
// Ownership: borrows the instances, which must outlive it. Thread-safety: as TensorRunner.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "serving/tensor_runner.h"

namespace pier::serving {

class TensorInstancePool final : public TensorRunner {
 public:
  // `instances` is not empty; they serve the same model (the first's info is the pool's).
  explicit TensorInstancePool(std::vector<TensorRunner*> instances);

  const TensorModelInfo& info() const override { return instances_.front()->info(); }
  Status Submit(TensorRequest request, std::function<void(TensorResult)> done) override;
  TensorRunnerStats Stats() const override;
  std::optional<TensorRunnerMemory> Memory() const override;

  // The instance Submit would pick now.
  size_t PickInstance() const;

 private:
  std::vector<TensorRunner*> instances_;  // not owned
};

}  // namespace pier::serving
