// A tensor model's types (tensor_models/tensor_request.h) as worker.proto's messages and back.
// Decoding checks what a peer could get wrong (an unknown datatype, a negative dimension, a
// shape the data does not fill) and answers INVALID_ARGUMENT naming the tensor, as convert.h
// does for the engine's types.
//
// ToProto overwrites all of `out`. Thread-safety: plain functions on values.
#pragma once

#include "common/status.h"
#include "ipc/worker.pb.h"
#include "tensor/host_tensor.h"
#include "tensor_models/tensor_request.h"

namespace pier::ipc {

void ToProto(const HostTensor& tensor, proto::Tensor* out);
[[nodiscard]] Result<HostTensor> FromProto(const proto::Tensor& tensor);

// The model's inputs and outputs, batching and opset (the measured memory fields are the
// caller's to fill).
void ToProto(const tensor_models::TensorModelInfo& info, proto::TensorModel* out);
[[nodiscard]] Result<tensor_models::TensorModelInfo> FromProto(const proto::TensorModel& model);

void ToProto(const tensor_models::TensorRunnerStats& stats, proto::TensorStats* out);
tensor_models::TensorRunnerStats FromProto(const proto::TensorStats& stats);

// A result (its status as code and message) and back; an unknown code reads INTERNAL.
void ToProto(const tensor_models::TensorResult& result, uint64_t id, proto::TensorResult* out);
[[nodiscard]] tensor_models::TensorResult FromProto(const proto::TensorResult& result);

}  // namespace pier::ipc
