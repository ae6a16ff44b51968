// The one parser of device names (device/device_name.h) that configs, flags and the worker
// protocol share.
#include "device/device_name.h"

#include <gtest/gtest.h>

namespace pier {
namespace {

TEST(DeviceNameTest, CudaOrdinalsAreOneToThreeDigits) {
  EXPECT_EQ(CudaOrdinalOf("cuda:0"), 0);
  EXPECT_EQ(CudaOrdinalOf("cuda:7"), 7);
  EXPECT_EQ(CudaOrdinalOf("cuda:123"), 123);
  for (const char* bad : {"cuda:", "cuda:x", "cuda:1x", "cuda:-1", "cuda:1234", "cuda", "cpu",
                          "CUDA:0", " cuda:0", "GPU-1"}) {
    EXPECT_EQ(CudaOrdinalOf(bad), -1) << bad;
  }
}

TEST(DeviceNameTest, NamesAreCpuOrdinalsAndUuids) {
  for (const char* good : {"cpu", "cuda:0", "GPU-e2e", "MIG-4b6b1a2c"}) {
    EXPECT_TRUE(IsDeviceName(good)) << good;
  }
  for (const char* bad : {"", "gpu0", "tpu", "GPU-", "MIG-", "cuda:x", "Cpu"}) {
    EXPECT_FALSE(IsDeviceName(bad)) << bad;
  }
}

}  // namespace
}  // namespace pier
