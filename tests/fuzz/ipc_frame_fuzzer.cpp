// libFuzzer target: any byte stream as what a worker (or the supervisor) receives
// (ipc/frame.h), fed in pieces whose sizes come from the input's first byte. The decoder must
// return frames with a known body or a DATA_LOSS error (after which it stays failed), and
// every accepted frame's events and requests must convert or be refused by name, never crash.
// A tensor model's messages (tensor_convert.h: TensorSubmit's inputs, TensorResult,
// Ready.tensor_model, Stats.tensor) convert too: a tensor taken holds its shape's bytes (BYTES
// aside, which CheckTensorRequest judges later), a model taken has inputs, outputs and a batch
// size >= 0, a histogram taken has one count more than its bounds, and what is taken converts
// back and again to the same values.
// Built only with -DPIER_FUZZ=ON and clang:
//   build-fuzz/tests/fuzz/ipc_frame_fuzzer -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/buckets.h"
#include "ipc/convert.h"
#include "ipc/frame.h"
#include "ipc/tensor_convert.h"
#include "tensor_models/batch_tensors.h"

namespace {

using pier::HostTensor;
namespace proto = pier::ipc::proto;

void Require(bool ok) {
  if (!ok) std::abort();
}

bool Same(const HostTensor& a, const HostTensor& b) {
  return a.name == b.name && a.type == b.type && a.shape == b.shape && a.bytes == b.bytes;
}

bool Same(const pier::TensorSpec& a, const pier::TensorSpec& b) {
  return a.name == b.name && a.type == b.type && a.shape == b.shape;
}

void CheckTensor(const proto::Tensor& wire) {
  pier::Result<HostTensor> tensor = pier::ipc::FromProto(wire);
  if (!tensor.ok()) {
    Require(tensor.status().code() == pier::StatusCode::kInvalidArgument);
    return;
  }
  Require(pier::ElementCount(tensor->shape) >= 0);
  if (tensor->type != pier::ElementType::kBytes) {
    Require(pier::tensor_models::CheckTensorData(*tensor).ok());
  }
  proto::Tensor again;
  pier::ipc::ToProto(*tensor, &again);
  pier::Result<HostTensor> back = pier::ipc::FromProto(again);
  Require(back.ok() && Same(*back, *tensor));
}

void CheckTensorResult(const proto::TensorResult& wire) {
  const pier::tensor_models::TensorResult result = pier::ipc::FromProto(wire);
  if (!result.status.ok()) {
    Require(result.outputs.empty());
    return;
  }
  for (const proto::Tensor& output : wire.outputs()) CheckTensor(output);
  proto::TensorResult again;
  pier::ipc::ToProto(result, wire.id(), &again);
  const pier::tensor_models::TensorResult back = pier::ipc::FromProto(again);
  Require(back.status.ok() && back.outputs.size() == result.outputs.size());
  for (size_t i = 0; i < back.outputs.size(); ++i) {
    Require(Same(back.outputs[i], result.outputs[i]));
  }
}

void CheckTensorModel(const proto::TensorModel& wire) {
  pier::Result<pier::tensor_models::TensorModelInfo> info = pier::ipc::FromProto(wire);
  if (!info.ok()) {
    Require(info.status().code() == pier::StatusCode::kInvalidArgument);
    return;
  }
  Require(!info->inputs.empty() && !info->outputs.empty() && info->max_batch_size >= 0);
  proto::TensorModel again;
  pier::ipc::ToProto(*info, &again);
  pier::Result<pier::tensor_models::TensorModelInfo> back = pier::ipc::FromProto(again);
  Require(back.ok() && back->inputs.size() == info->inputs.size() &&
          back->outputs.size() == info->outputs.size() &&
          back->max_batch_size == info->max_batch_size &&
          back->preferred_batch_sizes == info->preferred_batch_sizes);
  for (size_t i = 0; i < back->inputs.size(); ++i) Require(Same(back->inputs[i], info->inputs[i]));
  for (size_t i = 0; i < back->outputs.size(); ++i) {
    Require(Same(back->outputs[i], info->outputs[i]));
  }
}

void CheckBuckets(pier::Buckets buckets) {
  Require(buckets.counts.size() == buckets.bounds.size() + 1);
  buckets.Observe(1.0);  // what a reader may do with it: never indexed past
}

void CheckTensorStats(const proto::TensorStats& wire) {
  const pier::tensor_models::TensorRunnerStats stats = pier::ipc::FromProto(wire);
  CheckBuckets(stats.batch_items);
  CheckBuckets(stats.queue_seconds);
  CheckBuckets(stats.compute_seconds);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 64;
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  pier::ipc::FrameDecoder decoder;
  bool failed = false;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    decoder.Append(bytes.substr(at, piece));
    while (true) {
      auto next = decoder.Next();
      if (!next.ok()) {
        if (next.status().code() != pier::StatusCode::kDataLoss) std::abort();
        failed = true;
        break;
      }
      if (failed) std::abort();  // a failed decoder never yields a frame again
      if (!next->has_value()) break;
      const pier::ipc::proto::Frame& frame = **next;
      if (frame.body_case() == pier::ipc::proto::Frame::BODY_NOT_SET) std::abort();
      if (frame.has_submit()) (void)pier::ipc::FromProto(frame.submit().request());
      for (const auto& event : frame.events().events()) (void)pier::ipc::FromProto(event);
      (void)pier::ipc::FromProto(frame.stats());
      (void)pier::ipc::FromProto(frame.submit_reply());
      for (const proto::Tensor& input : frame.tensor_submit().inputs()) CheckTensor(input);
      if (frame.has_tensor_result()) CheckTensorResult(frame.tensor_result());
      if (frame.ready().has_tensor_model()) CheckTensorModel(frame.ready().tensor_model());
      CheckTensorStats(frame.stats().tensor());
    }
    if (failed) break;
  }
  return 0;
}
