// The CUDA plugin loader, without a GPU: a fake plugin (fake_cuda_plugin.cpp) plays each way
// a machine can lack CUDA, and the real plugin, when this build has one, must load and
// explain itself on any machine.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <string>

#include "device/cuda/cuda_plugin.h"

namespace pier::cuda {
namespace {

class FakeMode {
 public:
  explicit FakeMode(const char* mode) { setenv("PIER_FAKE_CUDA_MODE", mode, 1); }
  ~FakeMode() { unsetenv("PIER_FAKE_CUDA_MODE"); }
};

TEST(CudaPluginLoaderTest, MissingFileIsNotFoundAndNamesThePath) {
  const std::string path = "/nonexistent/dir/libpier_cuda.so";
  Result<std::unique_ptr<CudaPlugin>> plugin = CudaPlugin::Load(path);
  ASSERT_FALSE(plugin.ok());
  EXPECT_EQ(plugin.status().code(), StatusCode::kNotFound);
  EXPECT_NE(plugin.status().message().find(path), std::string::npos);

  const CudaStatus status = ProbeCudaPluginAt(path);
  EXPECT_EQ(status.availability, CudaAvailability::kNoPlugin);
  EXPECT_FALSE(status.usable());
  EXPECT_NE(status.Summary().find("running on the CPU"), std::string::npos);
}

TEST(CudaPluginLoaderTest, LibraryWithoutEntrySymbolIsRejected) {
  Result<std::unique_ptr<CudaPlugin>> plugin = CudaPlugin::Load("libm.so.6");
  ASSERT_FALSE(plugin.ok());
  EXPECT_EQ(plugin.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(plugin.status().message().find("pier_cuda_plugin_api"), std::string::npos);
}

TEST(CudaPluginLoaderTest, PluginForAnotherAbiIsABadPlugin) {
  FakeMode mode("other_abi");
  const CudaStatus status = ProbeCudaPluginAt(PIER_FAKE_CUDA_PLUGIN);
  EXPECT_EQ(status.availability, CudaAvailability::kBadPlugin);
  EXPECT_NE(status.reason.find("another plugin ABI"), std::string::npos) << status.reason;
}

TEST(CudaPluginLoaderTest, NoDriverIsReportedWithTheRuntimeMessage) {
  FakeMode mode("no_driver");
  const CudaStatus status = ProbeCudaPluginAt(PIER_FAKE_CUDA_PLUGIN);
  EXPECT_EQ(status.availability, CudaAvailability::kNoDriver);
  EXPECT_EQ(status.driver_version, 0);
  EXPECT_NE(status.reason.find("no CUDA driver"), std::string::npos) << status.reason;
  EXPECT_NE(status.reason.find("insufficient"), std::string::npos) << status.reason;
  EXPECT_EQ(CudaAvailabilityName(status.availability), "no_driver");
}

TEST(CudaPluginLoaderTest, OldDriverNamesBothVersions) {
  FakeMode mode("old_driver");
  const CudaStatus status = ProbeCudaPluginAt(PIER_FAKE_CUDA_PLUGIN);
  EXPECT_EQ(status.availability, CudaAvailability::kNoDriver);
  EXPECT_NE(status.reason.find("supports CUDA 12.0"), std::string::npos) << status.reason;
  EXPECT_NE(status.reason.find("needs CUDA 13.0"), std::string::npos) << status.reason;
}

TEST(CudaPluginLoaderTest, NoDeviceIsReported) {
  FakeMode mode("no_device");
  const CudaStatus status = ProbeCudaPluginAt(PIER_FAKE_CUDA_PLUGIN);
  EXPECT_EQ(status.availability, CudaAvailability::kNoDevice);
  EXPECT_NE(status.reason.find("no CUDA device"), std::string::npos) << status.reason;
}

TEST(CudaPluginLoaderTest, UsablePluginCountsDevicesAndConvertsErrors) {
  FakeMode mode("usable");
  Result<std::unique_ptr<CudaPlugin>> plugin = CudaPlugin::Load(PIER_FAKE_CUDA_PLUGIN);
  ASSERT_TRUE(plugin.ok()) << plugin.status().ToString();
  const CudaStatus status = (*plugin)->Probe();
  ASSERT_TRUE(status.usable()) << status.reason;
  EXPECT_EQ(status.device_count, 1);
  EXPECT_TRUE(status.reason.empty());
  EXPECT_NE(status.Summary().find("1 device(s)"), std::string::npos) << status.Summary();
  EXPECT_NE(status.Summary().find("fake CUDA plugin"), std::string::npos) << status.Summary();

  const Status oom = (*plugin)->ToStatus(PIER_CUDA_ERROR_OUT_OF_MEMORY, "allocating");
  EXPECT_EQ(oom.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(oom.message(), "allocating: fake: out of memory");
  EXPECT_EQ((*plugin)->ToStatus(PIER_CUDA_ERROR_INVALID_ARGUMENT, "x").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*plugin)->ToStatus(PIER_CUDA_ERROR_UNSUPPORTED, "x").code(), StatusCode::kUnsupported);
  EXPECT_EQ((*plugin)->ToStatus(PIER_CUDA_ERROR_NO_DEVICE, "x").code(), StatusCode::kUnavailable);
  EXPECT_EQ((*plugin)->ToStatus(PIER_CUDA_ERROR_FAILED, "x").code(), StatusCode::kInternal);
  EXPECT_TRUE((*plugin)->ToStatus(PIER_CUDA_OK, "x").ok());
}

TEST(CudaPluginLoaderTest, SearchPathsHonourTheEnvironment) {
  setenv("PIER_CUDA_PLUGIN", "/opt/x/libpier_cuda.so", 1);
  EXPECT_EQ(CudaPluginSearchPaths(), std::vector<std::string>{"/opt/x/libpier_cuda.so"});
  unsetenv("PIER_CUDA_PLUGIN");
  const std::vector<std::string> paths = CudaPluginSearchPaths();
  ASSERT_GE(paths.size(), 2u);
  EXPECT_EQ(paths.front().find('/'), 0u) << "first candidate is beside the executable";
  EXPECT_EQ(paths.back(), "libpier_cuda.so") << "last resort is the linker's search path";
}

// The only test that touches the process-wide state, so its outcome is fixed.
TEST(CudaPluginLoaderTest, ProcessWideLoaderCanBeDisabled) {
  setenv("PIER_CUDA_PLUGIN", "none", 1);
  const CudaStatus& status = GetCudaStatus();
  unsetenv("PIER_CUDA_PLUGIN");
  EXPECT_EQ(status.availability, CudaAvailability::kDisabled);
  EXPECT_EQ(GetCudaPlugin(), nullptr);
  EXPECT_NE(status.Summary().find("PIER_CUDA_PLUGIN=none"), std::string::npos);
}

#ifdef PIER_REAL_CUDA_PLUGIN
// Runs on every machine of a build with nvcc: the real plugin loads without a GPU or driver
// and either finds a device or says which of the three things is missing.
TEST(CudaPluginLoaderTest, RealPluginLoadsAndExplainsItself) {
  const CudaStatus status = ProbeCudaPluginAt(PIER_REAL_CUDA_PLUGIN);
  ASSERT_NE(status.availability, CudaAvailability::kBadPlugin) << status.reason;
  ASSERT_NE(status.availability, CudaAvailability::kNoPlugin) << status.reason;
  EXPECT_NE(status.build_info.find("built for sm_"), std::string::npos) << status.build_info;
  EXPECT_GE(status.runtime_version, 13000);
  if (status.usable()) {
    EXPECT_GT(status.device_count, 0);
  } else {
    EXPECT_TRUE(status.availability == CudaAvailability::kNoDriver ||
                status.availability == CudaAvailability::kNoDevice)
        << CudaAvailabilityName(status.availability) << ": " << status.reason;
    EXPECT_FALSE(status.reason.empty());
  }
  std::printf("real plugin: %s\n", status.Summary().c_str());
}
#endif

}  // namespace
}  // namespace pier::cuda
