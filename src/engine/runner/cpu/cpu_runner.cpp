#include "engine/runner/cpu/cpu_runner.h"

#include <string>

#include "engine/runner/cpu/llama_model.h"
#include "kernels/cpu/packed_weights.h"
#include "model/model_info.h"

namespace pier::engine {

Result<KvGroups> KvGroupsFor(const model::GgufFile& file) {
  PIER_ASSIGN_OR_RETURN(model::ModelInfo info, model::ReadModelInfo(file));
  if (info.block_count < 1) return InvalidArgumentError(file.path() + ": no layers");
  const int64_t period = SlidingWindowPeriod(info.architecture);
  std::vector<int64_t> windows;
  for (int64_t il = 0; il < info.block_count; ++il) {
    const int64_t window = LayerWindow(period, info.sliding_window, il);
    // A window as long as the context frees nothing: such a layer keeps every position.
    windows.push_back(window < info.context_length ? window : 0);
  }
  return GroupLayersByWindow(windows);
}

Result<KvLayout> KvLayoutFor(const model::GgufFile& file, int64_t block_size) {
  PIER_ASSIGN_OR_RETURN(model::ModelInfo info, model::ReadModelInfo(file));
  if (block_size < 1) return InvalidArgumentError("KV block size must be positive");
  PIER_ASSIGN_OR_RETURN(const KvGroups groups, KvGroupsFor(file));
  KvLayout layout;
  layout.n_layer = groups.layers_per_block;
  layout.block_size = block_size;
  layout.n_kv_head = info.head_count_kv;
  layout.head_dim = info.head_dim;
  return layout;
}

namespace {
bool QuantizedAtLoad(const model::GgufTensorInfo& tensor, std::optional<DType> weights_dtype) {
  return weights_dtype.has_value() &&
         (tensor.type == DType::kF32 || tensor.type == DType::kF16 ||
          tensor.type == DType::kBF16) &&
         tensor.dims.size() == 2 && tensor.dims[0] % 32 == 0;
}
}  // namespace

bool CpuRunnerPacksTensor(const model::GgufFile& file, const model::GgufTensorInfo& tensor,
                          std::optional<DType> weights_dtype) {
  if (tensor.dims.size() != 2) return false;
  if (!kernels::HasPackedLayout(tensor.type) && !QuantizedAtLoad(tensor, weights_dtype)) {
    return false;
  }
  if (tensor.name == "token_embd.weight") return file.FindTensor("output.weight") == nullptr;
  return true;
}

size_t CpuRunnerPackedBytes(const model::GgufTensorInfo& tensor,
                            std::optional<DType> weights_dtype) {
  const kernels::WeightMatrix w{tensor.type, tensor.dims[1], tensor.dims[0], tensor.data,
                                static_cast<size_t>(*RowBytes(tensor.type, tensor.dims[0]))};
  if (QuantizedAtLoad(tensor, weights_dtype)) {
    return kernels::QuantizedPackedBytes(w, *weights_dtype);
  }
  return kernels::PackedWeightBytes(w);
}

Result<DType> ParseWeightsDtype(std::string_view name) {
  if (name == "q8_0") return DType::kQ8_0;
  if (name == "q4_0") return DType::kQ4_0;
  return InvalidArgumentError("unknown weights dtype '" + std::string(name) +
                              "' (expected q8_0 or q4_0)");
}

Result<std::unique_ptr<ModelRunner>> CreateCpuModelRunner(const model::GgufFile& file,
                                                          const CpuRunnerOptions& options) {
  PIER_ASSIGN_OR_RETURN(std::string_view arch, file.GetString("general.architecture"));
  if (arch == "llama") return CreateLlamaRunner(file, options);
  if (arch == "qwen2") return CreateQwen2Runner(file, options);
  if (arch == "qwen3") return CreateQwen3Runner(file, options);
  if (arch == "phi3") return CreatePhi3Runner(file, options);
  if (arch == "gemma2") return CreateGemma2Runner(file, options);
  if (arch == "gemma3") return CreateGemma3Runner(file, options);
  return UnsupportedError(file.path() + ": no CPU runner for architecture '" + std::string(arch) +
                          "' (supported: llama, qwen2, qwen3, phi3, gemma2, gemma3)");
}

}  // namespace pier::engine
