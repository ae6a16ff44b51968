// What an .onnx file says about itself before ONNX Runtime reads it: the IR version, the
// default domain's opset, the producer, and the bytes of its initializers (the parameters).
// Read from the protobuf wire format directly (a ModelProto's few top-level fields and its
// graph's initializers), so `pier inspect` and admission can describe a model without a
// session, and a file that is not an ONNX model at all is refused with a plain reason.
//
// The parameter bytes count initializers only: a graph that builds its weights from constants
// at load (a Constant or ConstantOfShape folded by ONNX Runtime) holds more than they say, which
// is why a session's memory is measured, not estimated from the file.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace pier::tensor_models {

struct OnnxFileInfo {
  int64_t ir_version = 0;
  int64_t opset = 0;     // the default ("" or "ai.onnx") domain's version; 0 when not imported
  std::string producer;  // "pytorch 2.1": producer_name and producer_version
  int64_t initializers = 0;
  uint64_t parameter_bytes = 0;  // the initializers' elements times their sizes
  int64_t nodes = 0;             // in the main graph
  // Graph inputs (initializers excluded) with an open dimension past the first one (a
  // symbolic or absent size): their shapes vary per request beyond the batch.
  std::vector<std::string> inputs_with_open_inner_dims;
  uint64_t file_bytes = 0;
  // The model's metadata_props (key -> value), e.g. a classifier's class names.
  std::map<std::string, std::string> metadata;
};

// Parses `bytes` (a whole .onnx file). DATA_LOSS ("not an ONNX model: ...") when the
// protobuf is malformed or truncated, or there is no graph.
[[nodiscard]] Result<OnnxFileInfo> ParseOnnxFileInfo(std::string_view bytes);
// Reads and parses the file at `path` (NOT_FOUND when it cannot be read).
[[nodiscard]] Result<OnnxFileInfo> ReadOnnxFileInfo(const std::string& path);

}  // namespace pier::tensor_models
