// The worker process's side of a tensor (ONNX) model (worker.proto's TensorSubmit,
// TensorResult, TensorCancel): RunWorker (worker_main.h) hands over once the devices exist and
// the path names an .onnx file. The model is a TensorHost under the worker's own governor,
// whose budget is what the supervisor granted; its Ready carries the model's inputs, outputs
// and measured memory, each heartbeat its batcher's figures.
//
// Thread-safety: one process, its main thread serving frames; results are sent from the
// batcher's threads (ipc::Channel::Send is thread-safe).
#pragma once

#include <chrono>
#include <memory>

#include "ipc/frame.h"
#include "memory/memory_governor.h"
#include "serving/device_set.h"
#include "serving/model_loader.h"

namespace pier::serving {

// Loads the model, sends Ready (or Refused) and serves until Shutdown or the supervisor goes.
// The process's exit code: 0 after Shutdown, 2 for a protocol error, 3 for a failed load.
int ServeTensorWorker(ipc::Channel& channel, const ipc::proto::Hello& hello,
                      const ModelLoadOptions& load, std::unique_ptr<DeviceSet> devices,
                      MemoryGovernor* governor, std::chrono::steady_clock::time_point started);

}  // namespace pier::serving
