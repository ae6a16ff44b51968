// PipelineSpec: a pipeline as models.yaml declares it (issue #46), and ParsePipelines, which
// reads the `pipelines:` list and checks everything that needs no model: names, keys, that
// every value a step reads is a pipeline input or another step's output, that no value has
// two producers, that the steps form no cycle (the steps are returned in an order that runs),
// and that every pipeline output is produced. What the models take and give is checked when
// the pipeline is built against them (pipeline.h), still before the server listens.
//
//   pipelines:
//     - name: id-card
//       inputs:  [{name: image, datatype: BYTES}]
//       outputs: [{name: lines, datatype: BYTES}, {name: fields, datatype: BYTES}]
//       max_inflight: 8          # requests inside the pipeline at once (default 32)
//       steps:
//         - name: decode
//           processor: image     # a built-in processor (processors.h), or
//           inputs:  {bytes: image}       # the step's port -> a value's name
//           outputs: {image: page}
//         - name: detect
//           model: ocr-det       # a served model (ONNX, LLM)
//           inputs:  {x: det_in}
//           outputs: {sigmoid_0.tmp_0: det_map}
//           max_inflight: 4      # requests in this stage at once (default: two batches)
//
// Every other key of a step is the processor's or model step's own (`settings`), checked by
// it. Thread-safety: plain data and a pure function.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tensor/host_tensor.h"

namespace pier::pipelines {

// One declared input or output of the pipeline: a tensor clients send or receive.
struct PipelineTensor {
  std::string name;
  ElementType type = ElementType::kBytes;
  std::vector<int64_t> shape = {-1};  // -1: any size
};

struct StepSpec {
  std::string name;
  std::string model;                           // a served model's name, or
  std::string processor;                       // a built-in processor's
  std::map<std::string, std::string> inputs;   // port -> value
  std::map<std::string, std::string> outputs;  // port -> value
  int64_t max_inflight = 0;                    // 0: the default (two batches)
  // The step's other keys: scalars typed as YAML reads them (numbers, booleans, strings).
  nlohmann::ordered_json settings = nlohmann::ordered_json::object();
  std::string source;  // "serve.yaml: pipelines[0] (id-card): steps[2] (detect)"
  std::string folder;  // the configuration's folder: relative file keys start there
};

struct PipelineSpec {
  std::string name;
  std::vector<PipelineTensor> inputs;
  std::vector<PipelineTensor> outputs;
  std::vector<StepSpec> steps;  // in an order that runs (every value produced before it is read)
  int64_t max_inflight = 32;    // requests inside the pipeline at once
  int64_t max_queue = 256;      // requests waiting to enter; more: RESOURCE_EXHAUSTED
  int64_t threads = 1;          // the processors' threads
  std::string source;           // "serve.yaml: pipelines[0] (id-card)"
};

// The `pipelines:` list of a configuration (a YAML sequence; a null node: none). Each error
// is INVALID_ARGUMENT naming `source`, the pipeline, the step and the key.
[[nodiscard]] Result<std::vector<PipelineSpec>> ParsePipelines(const YAML::Node& list,
                                                               std::string_view source,
                                                               std::string_view folder = {});

// YAML as JSON with plain scalars typed (true/false, null, integers, decimals) and quoted ones
// kept as strings: a JSON schema written in YAML reads as it would in JSON.
nlohmann::ordered_json TypedYamlToJson(const YAML::Node& node);

}  // namespace pier::pipelines
