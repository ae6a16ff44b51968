// OnnxSession: one ONNX graph opened in ONNX Runtime (ort_library.h) with its memory charged to
// a governor owner: what it takes and gives (TensorModelInfo), and Run of one batch.
//
// Open reads the file's own description (onnx_file_info.h), then makes the session with Pier's
// settings: the environment's allocator (ort_allocator.h; the CPU arena off, so every buffer is
// a governor block), `threads` intra-op threads that do not spin (spinning threads steal the
// cores a shared machine's other models need), one inter-op thread, and no per-shape memory
// pattern when an input has open dimensions past the batch (that cache grows with every new
// shape). A graph whose every input and output starts with an open dimension is batchable
// (up to `max_batch_size`); any other is served one request at a time as declared
// (max_batch_size 0).
//
// Memory: the allocator charges what passes through it; LoadFigures() adds what session
// creation took around it (the process's resident growth while it was made), which the host
// charges separately, since a small file can build large weights from constants.
//
// Thread-safety: Run from one thread at a time (the batcher's); StopRun from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "memory/memory_governor.h"
#include "tensor/host_tensor.h"
#include "tensor_models/onnx/onnx_file_info.h"
#include "tensor_models/onnx/ort_allocator.h"
#include "tensor_models/tensor_request.h"

namespace pier::tensor_models {

struct OnnxSessionOptions {
  std::string path;
  MemoryGovernor* governor = nullptr;          // required
  OwnerId owner;                               // pays for what making the session allocates
  OwnerId run_owner;                           // pays for each Run's buffers (none: `owner`)
  int threads = 1;                             // intra-op threads
  int64_t max_batch_size = 8;                  // for a batchable graph; 0 serves it unbatched
  std::vector<int64_t> preferred_batch_sizes;  // ascending, each <= max_batch_size
  // Fixed sizes for dimensions the graph leaves open (not the batch): input name -> shape
  // (with the batch dimension as the model declares it; -1 keeps a dimension open).
  std::map<std::string, std::vector<int64_t>> input_shapes;
};

struct OnnxLoadFigures {
  uint64_t charged_bytes = 0;   // held through the allocator after creation (the weights)
  uint64_t peak_bytes = 0;      // the most held through it while creating
  uint64_t resident_delta = 0;  // the process's resident growth while creating
};

class OnnxSession {
 public:
  // FAILED_PRECONDITION when ONNX Runtime is not available (OrtLibrary::Get's message);
  // NOT_FOUND / DATA_LOSS for a file that cannot be read or is not ONNX; INVALID_ARGUMENT for
  // a graph ONNX Runtime refuses (an unknown operator, an opset it lacks), an input_shapes
  // entry that names no input or contradicts a fixed dimension, or a preferred batch size above
  // max_batch_size; RESOURCE_EXHAUSTED with the
  // governor's refusal when its memory does not fit.
  [[nodiscard]] static Result<std::unique_ptr<OnnxSession>> Open(const OnnxSessionOptions& options);
  ~OnnxSession();
  OnnxSession(const OnnxSession&) = delete;
  OnnxSession& operator=(const OnnxSession&) = delete;

  const TensorModelInfo& info() const { return info_; }
  const OnnxFileInfo& file_info() const { return file_info_; }
  const OnnxLoadFigures& load_figures() const { return figures_; }
  // What the allocator holds for this session now, and its peak since ResetPeak.
  const OrtChargeCounter& memory() const { return *counter_; }
  void ResetPeak() { counter_->ResetPeak(); }

  // Runs the graph once: `inputs` hold every input (any order, by name) with their shapes;
  // returns every output in info().outputs order. RESOURCE_EXHAUSTED when the governor
  // refused its working memory; UNAVAILABLE ("stopped") after StopRun; INVALID_ARGUMENT or
  // INTERNAL with ONNX Runtime's message otherwise.
  [[nodiscard]] Result<std::vector<HostTensor>> Run(const std::vector<HostTensor>& inputs);
  // Asks the Run in progress to stop (ONNX Runtime checks between operators); no-op when none.
  void StopRun();

 private:
  struct Ort;
  OnnxSession() = default;

  OnnxSessionOptions options_;
  TensorModelInfo info_;
  OnnxFileInfo file_info_;
  OnnxLoadFigures figures_;
  std::shared_ptr<OrtChargeCounter> counter_ = std::make_shared<OrtChargeCounter>();
  std::unique_ptr<Ort> ort_;
  Mutex run_mutex_;
  void* running_options_ PIER_GUARDED_BY(run_mutex_) = nullptr;  // OrtRunOptions of the Run
  std::atomic<bool> stop_requested_{false};  // StopRun reached the Run in progress
};

// The resident bytes of this process (from /proc/self/statm); 0 when unreadable.
uint64_t ProcessResidentBytes();

}  // namespace pier::tensor_models
