// libFuzzer target: any bytes as a configuration file's `pipelines:` list
// (pipelines/pipeline_spec.h), read as YAML first.
//
// A refusal is INVALID_ARGUMENT with a message that names where. An accepted list keeps its
// promises: names unique, each step with exactly one of model and processor and at least one
// output, its steps in an order that runs (every value a step reads is a pipeline input or an
// earlier step's output, every value produced once), and every pipeline output produced.
// Built only with -DPIER_FUZZ=ON and clang:
//   build-fuzz/tests/fuzz/pipeline_spec_fuzzer -max_total_time=60 CORPUS
// (seed CORPUS with examples/id-card.yaml).
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>

#include "pipelines/pipeline_spec.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const YAML::Exception&) {
    return 0;
  }
  const YAML::Node list = root.IsMap() ? root["pipelines"] : root;
  pier::Result<std::vector<pier::pipelines::PipelineSpec>> parsed =
      pier::pipelines::ParsePipelines(list, "fuzz.yaml");
  if (!parsed.ok()) {
    Check(parsed.status().code() == pier::StatusCode::kInvalidArgument);
    Check(parsed.status().message().rfind("fuzz.yaml", 0) == 0);
    return 0;
  }
  std::set<std::string> names;
  for (const pier::pipelines::PipelineSpec& spec : *parsed) {
    Check(names.insert(spec.name).second);
    std::set<std::string> available;
    for (const auto& in : spec.inputs) Check(available.insert(in.name).second);
    std::set<std::string> steps;
    for (const auto& step : spec.steps) {
      Check(steps.insert(step.name).second);
      Check(step.model.empty() != step.processor.empty());
      Check(!step.outputs.empty());
      for (const auto& [port, value] : step.inputs) Check(available.count(value) == 1);
      for (const auto& [port, value] : step.outputs) Check(available.insert(value).second);
    }
    for (const auto& out : spec.outputs) Check(available.count(out.name) == 1);
  }
  return 0;
}
