// PipelineSet: the server's pipelines (issue #46), built from the configuration's
// `pipelines:` over the registry's models, by name. A pipeline shares the models' namespace
// (its name may be no model's id or alias) and reaches each step's model through the registry
// at every request, so a model reloaded, unloaded or restarted in its worker is seen as it is.
//
// An on_demand model a step needs is not loaded by building the pipeline; the first request
// that reaches the step asks for its load and fails UNAVAILABLE (503), the ones after it find
// the model ready.
//
// Thread-safety: Find and All may be called from any thread; the set does not change after
// Create.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "memory/memory_governor.h"
#include "pipelines/pipeline.h"
#include "serving/model_registry.h"

namespace pier::serving {

// The models of `registry` as pipeline steps see them. `path_of` gives a model's file (for an
// ONNX model's metadata_props); may be null. While `*request_loads` is true (may be null:
// never), an on_demand model found unloaded has its load requested, and the step fails
// UNAVAILABLE saying so (a request after the load finds it ready).
pipelines::ModelResolver RegistryModels(const ModelRegistry* registry,
                                        std::function<std::string(const std::string& id)> path_of,
                                        std::shared_ptr<const std::atomic<bool>> request_loads);

class PipelineSet {
 public:
  // Builds every pipeline (pipelines::Pipeline::Create) against the models now in `registry`
  // (models not loaded yet are checked when a request reaches them). INVALID_ARGUMENT naming
  // the pipeline for a name that is also a model's id or alias, and the builds' own errors.
  // `governor` (may be null) is charged for the values in flight.
  [[nodiscard]] static Result<std::unique_ptr<PipelineSet>> Create(
      std::vector<pipelines::PipelineSpec> specs, const ModelRegistry* registry,
      MemoryGovernor* governor, std::function<std::string(const std::string& id)> path_of);
  ~PipelineSet();

  std::shared_ptr<pipelines::Pipeline> Find(std::string_view name) const;
  const std::vector<std::shared_ptr<pipelines::Pipeline>>& All() const { return pipelines_; }
  // Stops every pipeline (their requests end UNAVAILABLE).
  void StopAll();

 private:
  std::vector<std::shared_ptr<pipelines::Pipeline>> pipelines_;
};

}  // namespace pier::serving
