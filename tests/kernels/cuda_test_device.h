// Shared set-up of the GPU tests: opens CUDA device 0 through the plugin, or skips the test
// with the loader's reason (no plugin, no driver, no device) printed.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "device/cuda/cuda_device.h"
#include "device/cuda/cuda_plugin.h"

namespace pier::cuda {

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaStatus& status = GetCudaStatus();
    if (!status.usable()) GTEST_SKIP() << "no usable GPU, skipped: " << status.Summary();
    Result<std::unique_ptr<CudaDevice>> device = CudaDevice::Open(0);
    ASSERT_TRUE(device.ok()) << device.status().ToString();
    device_ = std::move(*device);
  }

  std::unique_ptr<CudaDevice> device_;
};

}  // namespace pier::cuda
