// libFuzzer target: any bytes as a KServe v2 infer request for a tensor model
// (api/kserve/tensor_infer_request.h), then as what the model checks next (CheckTensorRequest,
// tensor_models/tensor_request.h) and what the batcher does with an accepted request
// (batch_tensors.h). The input's first byte is the length of the binary data at its end (what
// follows the JSON header, as Inference-Header-Content-Length splits an HTTP body); the bytes
// between are the JSON header, which must pass CheckJsonShape and parse, as the HTTP route
// asks, or the input is skipped.
//
// A refusal is INVALID_ARGUMENT with a message. An accepted request holds what it claims: one
// tensor per input, each's bytes exactly its shape's (element count x size; BYTES: that many
// whole length-prefixed elements), the binary inputs' bytes adding up to the binary data, a
// JSON input's elements written back to JSON and read again unchanged, classification within
// [0, 2^30]. Against two fixed models (one batching, one not) CheckTensorRequest refuses with
// INVALID_ARGUMENT or accepts tensors whose batch rows split and join back to the same bytes.
// Built only with -DPIER_FUZZ=ON and clang:
//   build-fuzz/tests/fuzz/kserve_tensor_fuzzer -max_total_time=90 -rss_limit_mb=2048 CORPUS
// (seed CORPUS with a few requests: {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1,
// 3], "data": [1, 2, 3]}]} behind a 0 byte, or one with binary_data_size behind its length).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "api/json_shape.h"
#include "api/kserve/kserve_api.h"
#include "api/kserve/tensor_infer_request.h"
#include "api/kserve/tensor_json.h"
#include "tensor_models/batch_tensors.h"
#include "tensor_models/tensor_request.h"

namespace pier::api {

// tensor_json.cpp writes BYTES back to JSON with this, which lives in kserve_api.cpp with the
// routes (and their dependencies, which clang 14 does not build): a copy of it here.
bool ParseBinaryStrings(std::string_view bytes, std::vector<std::string>* out, size_t max_count) {
  while (!bytes.empty()) {
    if (bytes.size() < 4 || out->size() >= max_count) return false;
    uint32_t length = 0;
    for (int i = 0; i < 4; ++i) {
      length |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
    }
    bytes.remove_prefix(4);
    if (length > bytes.size()) return false;
    out->emplace_back(bytes.substr(0, length));
    bytes.remove_prefix(length);
  }
  return true;
}

}  // namespace pier::api

namespace {

using pier::ElementType;
using pier::HostTensor;
using pier::StatusCode;
using pier::TensorSpec;
using pier::tensor_models::TensorModelInfo;

void Require(bool ok) {
  if (!ok) std::abort();
}

// x: FP32 [batch, 3]; s: BYTES [batch]; i: INT64 [batch, any], batches up to 8.
const TensorModelInfo& Batching() {
  static const TensorModelInfo* info =
      new TensorModelInfo{.inputs = {TensorSpec{"x", ElementType::kFp32, {-1, 3}},
                                     TensorSpec{"s", ElementType::kBytes, {-1}},
                                     TensorSpec{"i", ElementType::kInt64, {-1, -1}}},
                          .outputs = {TensorSpec{"y", ElementType::kFp32, {-1, 3}},
                                      TensorSpec{"label", ElementType::kBytes, {-1}}},
                          .max_batch_size = 8,
                          .preferred_batch_sizes = {4}};
  return *info;
}

// x: FP16 [2, 3] exactly, once at a time.
const TensorModelInfo& Fixed() {
  static const TensorModelInfo* info =
      new TensorModelInfo{.inputs = {TensorSpec{"x", ElementType::kFp16, {2, 3}}},
                          .outputs = {TensorSpec{"y", ElementType::kFp16, {2, 3}}}};
  return *info;
}

// An accepted input of a batching model: its rows, sliced one by one and joined again, are
// its bytes (what the batcher does with requests and with a run's outputs).
void CheckRows(const HostTensor& input) {
  pier::Result<pier::tensor_models::BatchRows> rows = pier::tensor_models::BatchRows::Of(input);
  Require(rows.ok() && rows->rows() == input.shape[0]);
  std::vector<HostTensor> parts;
  for (int64_t r = 0; r < rows->rows(); ++r) parts.push_back(rows->Slice(r, 1));
  std::vector<const HostTensor*> views;
  for (const HostTensor& part : parts) {
    Require(pier::tensor_models::CheckTensorData(part).ok());
    views.push_back(&part);
  }
  const HostTensor joined = pier::tensor_models::ConcatenateBatch(views);
  Require(joined.shape == input.shape && joined.bytes == input.bytes);
}

void CheckAgainst(const TensorModelInfo& info, const pier::api::TensorInferRequest& read) {
  pier::tensor_models::TensorRequest request;
  request.inputs = read.inputs;
  for (const pier::api::TensorOutputRequest& output : read.outputs) {
    request.outputs.push_back(output.name);
  }
  const pier::Status status = pier::tensor_models::CheckTensorRequest("m", info, request);
  if (!status.ok()) {
    Require(status.code() == StatusCode::kInvalidArgument && !status.message().empty());
    return;
  }
  Require(request.inputs.size() == info.inputs.size());
  if (info.max_batch_size > 0) {
    for (const HostTensor& input : request.inputs) CheckRows(input);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t binary_size = std::min<size_t>(data[0], rest.size());
  // Exact-size copies, so that ASan reports any read past either part.
  const std::string header(rest.substr(0, rest.size() - binary_size));
  const std::string binary(rest.substr(rest.size() - binary_size));
  if (pier::api::CheckJsonShape(header).has_value()) return 0;
  const nlohmann::json json = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;

  pier::Result<pier::api::TensorInferRequest> read =
      pier::api::ReadTensorInferRequest("m", json, binary);
  if (!read.ok()) {
    Require(read.status().code() == StatusCode::kInvalidArgument &&
            !read.status().message().empty());
    return 0;
  }
  Require(json["inputs"].size() == read->inputs.size());
  size_t binary_taken = 0;
  for (size_t i = 0; i < read->inputs.size(); ++i) {
    const HostTensor& input = read->inputs[i];
    Require(!input.name.empty());
    Require(pier::tensor_models::CheckTensorData(input).ok());
    const int64_t count = pier::ElementCount(input.shape);
    Require(count >= 0);
    if (input.type != ElementType::kBytes) {
      const auto element_size = static_cast<uint64_t>(pier::ElementSize(input.type));
      Require(static_cast<uint64_t>(count) <= input.bytes.size() / element_size &&
              input.bytes.size() == static_cast<uint64_t>(count) * element_size);
    }
    if (json["inputs"][i].contains("data")) {
      // Values that came as JSON go back to JSON and are read again to the same bytes.
      const nlohmann::json again = pier::api::TensorBytesToJson(input);
      pier::Result<std::string> bytes =
          pier::api::TensorBytesFromJson(input.name, input.type, input.shape, again);
      Require(bytes.ok() && *bytes == input.bytes);
    } else {
      binary_taken += input.bytes.size();
    }
  }
  Require(binary_taken == binary.size());
  for (const pier::api::TensorOutputRequest& output : read->outputs) {
    Require(output.classification >= 0 && output.classification <= (int64_t{1} << 30));
  }
  CheckAgainst(Batching(), *read);
  CheckAgainst(Fixed(), *read);
  return 0;
}
