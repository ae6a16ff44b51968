// The requests and answers of a tensor model (an ONNX graph) and what the model declares:
// its inputs and outputs, whether it batches. Shared by the batcher (tensor_batcher.h), the
// ONNX Runtime session (onnx_session.h) and, through serving/tensor_runner.h, the front end.
//
// A batchable model (max_batch_size > 0) declares its inputs and outputs with the batch as
// their first dimension (-1); a request brings every input with the same first dimension (its
// batch, 1..max_batch_size) and gets every output with that first dimension. A model with
// max_batch_size 0 takes its inputs exactly as declared, one request at a time.
//
// Plain data and pure functions; thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/buckets.h"
#include "common/status.h"
#include "tensor/host_tensor.h"

namespace pier::tensor_models {

struct TensorModelInfo {
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  int64_t max_batch_size = 0;                  // 0: no batch dimension
  std::vector<int64_t> preferred_batch_sizes;  // ascending; each <= max_batch_size
  std::string platform = "onnxruntime_onnx";   // KServe metadata's "platform"
  int64_t opset = 0;                           // the default domain's opset
  std::string producer;                        // e.g. "pytorch 2.1"
  uint64_t parameter_bytes = 0;                // the graph's initializers
  // Class names per output (models.yaml `labels:`): a classification answer's i-th class is
  // labels[output][i]. Set by the front end (serving/tensor_front.h); empty otherwise.
  std::map<std::string, std::vector<std::string>> labels;
  // The most one element of a BYTES input may hold, where known (an image input's
  // max_image_bytes): requests' body limits are sized from it.
  std::map<std::string, int64_t> max_element_bytes;
};

struct TensorRequest {
  std::vector<HostTensor> inputs;    // every input of the model, once
  std::vector<std::string> outputs;  // the outputs wanted, by name; empty: all
  int priority = 0;                  // 3 critical .. 0 low; higher first
  // Not started by then: fails with RESOURCE_EXHAUSTED. Default: no deadline.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // Set by the caller when nobody waits for the answer any more (client gone): a request that
  // has not started is dropped; one that runs alone is stopped. May be null.
  std::shared_ptr<const std::atomic<bool>> cancelled;
};

struct TensorResult {
  Status status = Status::Ok();
  std::vector<HostTensor> outputs;  // in the order asked (or the model's), when ok
  int64_t batch_size = 0;           // the batch it ran in (items of every request in it)
  double queue_seconds = 0;
  double compute_seconds = 0;
  double decode_seconds = 0;  // images decoded in the front end (serving/tensor_front.h)
};

struct TensorRunnerStats {
  int64_t queued_items = 0;
  int64_t running_items = 0;
  int64_t batches = 0;
  int64_t items = 0;
  int64_t requests = 0;
  int64_t expired = 0;        // requests refused past their deadline
  int64_t cancelled = 0;      // requests dropped or stopped because nobody waited
  double window_seconds = 0;  // the batching window in use
  Buckets batch_items;        // items per batch
  Buckets queue_seconds;      // per request: from Submit to its batch's start
  Buckets compute_seconds;    // per batch
  // An image input's decoding in the front end (serving/tensor_front.h): images waiting and
  // decoded, images refused (not an image, too large, corrupt), seconds per request.
  int64_t queued_images = 0;
  int64_t images = 0;
  int64_t images_refused = 0;
  Buckets decode_seconds;
};

// Checks `request` against `info` before anything runs: every input named once and known,
// its type, its rank and each fixed dimension, the batch (1..max_batch_size, the same in every
// input), the bytes' length against the shape (BYTES: a whole number of length-prefixed
// elements, as many as the shape holds), and the outputs asked for. INVALID_ARGUMENT naming
// the model, the input, what was expected and what came.
[[nodiscard]] Status CheckTensorRequest(std::string_view model, const TensorModelInfo& info,
                                        const TensorRequest& request);

}  // namespace pier::tensor_models
