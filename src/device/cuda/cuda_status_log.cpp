// LogCudaStatusOnce (cuda_plugin.h). In its own file so that binaries which never log (the
// self-contained GPU test binaries) do not pull the logging library in.
#include <spdlog/spdlog.h>

#include <mutex>

#include "device/cuda/cuda_plugin.h"

namespace pier::cuda {

void LogCudaStatusOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    const CudaStatus& status = GetCudaStatus();
    if (status.usable()) {
      spdlog::info("{}", status.Summary());
    } else {
      spdlog::warn("{}", status.Summary());
    }
  });
}

}  // namespace pier::cuda
