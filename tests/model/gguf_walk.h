// WalkGgufFile: touches everything an opened GgufFile exposes (test-only).
//
// Reads every metadata value through every accessor, renders it, reads the
// model info, and dequantizes the first row of each tensor whose type Pier
// decodes. Used by the corruption test and the libFuzzer target, so a bug in
// any accessor shows up under the sanitizers. Returns a checksum so the work
// cannot be optimized away.
#pragma once

#include <cstdint>
#include <vector>

#include "model/gguf_file.h"
#include "model/model_info.h"
#include "tensor/dequantize.h"

namespace pier::model::testing {

inline uint64_t WalkGgufFile(const GgufFile& file) {
  uint64_t sum = 0;
  for (const auto& [key, value] : file.metadata()) {
    sum += key.size() + value.ToDisplayString().size();
    sum += static_cast<uint64_t>(value.AsInt().value_or(0));
    sum += static_cast<uint64_t>(value.AsFloat().value_or(0) != 0);
    sum += value.AsBool().value_or(false);
    sum += value.AsString().value_or("").size();
    if (auto strings = value.AsStringArray()) {
      for (std::string_view s : *strings) sum += s.size();
    }
    if (auto ints = value.AsIntArray()) sum += ints->size();
    if (auto floats = value.AsFloatArray()) sum += floats->size();
    sum += file.Find(key) != nullptr;
  }
  Result<ModelInfo> info = ReadModelInfo(file);
  if (info.ok()) sum += info->kv_bytes_per_token + info->weight_bytes;
  std::vector<float> row;
  for (const GgufTensorInfo& tensor : file.tensors()) {
    sum += file.FindTensor(tensor.name) != nullptr;
    if (!CanDequantize(tensor.type) || tensor.row_length() > (int64_t{1} << 20)) continue;
    row.assign(static_cast<size_t>(tensor.row_length()), 0.0f);
    if (DequantizeRows(tensor, 0, 1, row.data()).ok()) {
      for (float v : row) sum += static_cast<uint64_t>(v == v);
    }
  }
  return sum;
}

}  // namespace pier::model::testing
