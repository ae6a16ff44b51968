// Shared set-up of the GPU tests: opens CUDA device 0 through the plugin, or skips the test
// with the loader's reason (no plugin, no driver, no device) printed.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

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

// A CudaTest whose device buffers (copies of host vectors) are freed when the test ends.
class CudaBuffersTest : public CudaTest {
 protected:
  void TearDown() override {
    for (auto& [ptr, bytes] : buffers_) device_->FreeRaw(ptr, bytes);
  }
  Stream stream() { return device_->DefaultStream(); }

  // A device copy of `host` (at least 16 bytes; first filled with 0xff bytes).
  template <typename T>
  T* Put(const std::vector<T>& host) {
    const size_t bytes = std::max<size_t>(host.size() * sizeof(T), 16);
    Result<void*> p = device_->AllocateRaw(bytes, 256);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (!p.ok()) return nullptr;
    buffers_.emplace_back(*p, bytes);
    EXPECT_TRUE(device_->Memset(*p, 0xff, bytes, stream()).ok());
    if (!host.empty()) {
      EXPECT_TRUE(
          device_->CopyHostToDevice(*p, host.data(), host.size() * sizeof(T), stream()).ok());
    }
    return static_cast<T*>(*p);
  }
  // `count` elements of 0xff bytes: NaN floats, -1 ints.
  template <typename T>
  T* Blank(size_t count) {
    return Put(std::vector<T>(count, FilledWithOnes<T>()));
  }
  template <typename T>
  std::vector<T> Get(const T* device_ptr, size_t count) {
    std::vector<T> out(count);
    EXPECT_TRUE(
        device_->CopyDeviceToHost(out.data(), device_ptr, count * sizeof(T), stream()).ok());
    const Status sync = device_->Synchronize(stream());
    EXPECT_TRUE(sync.ok()) << sync.ToString();
    return out;
  }

 private:
  template <typename T>
  static T FilledWithOnes() {
    T value;
    std::memset(&value, 0xff, sizeof(T));
    return value;
  }
  std::vector<std::pair<void*, size_t>> buffers_;
};

}  // namespace pier::cuda
