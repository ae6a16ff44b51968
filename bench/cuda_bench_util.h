// What the GPU benchmarks share: failure reporting and event timing through the plugin.
// Self-contained, like the benchmarks (they run on a GPU machine with nothing installed).
#pragma once

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "device/cuda/cuda_device.h"
#include "device/cuda/cuda_plugin.h"

namespace pier::cuda::bench {

inline constexpr int kWarmups = 3;
inline constexpr int kRepeats = 20;

// Prints "FAIL what: status" for a failed status; true when it succeeded.
inline bool Check(const Status& status, const char* what) {
  if (status.ok()) return true;
  std::fprintf(stderr, "FAIL %s: %s\n", what, status.ToString().c_str());
  return false;
}

// Runs `op` kWarmups + kRepeats times on `stream`; returns the median milliseconds, or -1 when
// an operation or the timing failed.
template <typename Op>
double TimeMedianMs(CudaDevice& device, Stream stream, Op op) {
  Result<Event> start = device.CreateEvent();
  Result<Event> stop = device.CreateEvent();
  if (!start.ok() || !stop.ok()) return -1;
  std::vector<double> times;
  for (int i = 0; i < kWarmups + kRepeats; ++i) {
    if (!Check(device.RecordEvent(*start, stream), "record") || !op() ||
        !Check(device.RecordEvent(*stop, stream), "record") ||
        !Check(device.SynchronizeEvent(*stop), "sync")) {
      return -1;
    }
    Result<float> ms = device.ElapsedMs(*start, *stop);
    if (!ms.ok()) return -1;
    if (i >= kWarmups) times.push_back(*ms);
  }
  device.DestroyEvent(*start);
  device.DestroyEvent(*stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// GPU 0, announced with "INFO <name>"; null when there is none to run on, with *exit_code
// set: 0 after "SKIP <reason>" (no usable GPU is not a failure), 1 after "FAIL open: ...".
inline std::unique_ptr<CudaDevice> OpenBenchDevice(int* exit_code) {
  const CudaStatus& status = GetCudaStatus();
  if (!status.usable()) {
    std::printf("SKIP %s\n", status.Summary().c_str());
    *exit_code = 0;
    return nullptr;
  }
  Result<std::unique_ptr<CudaDevice>> opened = CudaDevice::Open(0);
  if (!opened.ok()) {
    std::fprintf(stderr, "FAIL open: %s\n", opened.status().ToString().c_str());
    *exit_code = 1;
    return nullptr;
  }
  std::printf("INFO %s\n", (*opened)->name().c_str());
  return std::move(opened).value();
}

}  // namespace pier::cuda::bench
