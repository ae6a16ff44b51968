// NVIDIA's own libnvidia-ml.so.1 through Pier's declarations (metrics/nvml_library.h), on a
// GPU machine (scripts/gpu-check): the library loads, and every reading Pier takes comes back
// in range, which it would not if a struct's layout or an enum value were declared wrong.
// Without NVML or a GPU it skips, saying so. Self-contained (no spdlog, no Pier libraries
// beyond the loader and Status) so that gpu-check can carry it to a bare GPU machine.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "metrics/nvml_library.h"

namespace pier::metrics::nvml {
namespace {

constexpr unsigned long long kGiB = 1ull << 30;

TEST(NvmlGpuTest, EveryReadingPierTakesIsInRangeOnARealGpu) {
  Result<std::unique_ptr<Library>> lib = Library::Load("libnvidia-ml.so.1");
  if (!lib.ok()) GTEST_SKIP() << "no usable GPU, skipped: " << lib.status().message();
  const Api& api = (*lib)->api();
  if (Return r = api.init(); r != kSuccess) {
    GTEST_SKIP() << "no usable GPU, skipped: nvmlInit_v2: " << (*lib)->ErrorText(r);
  }
  unsigned count = 0;
  ASSERT_EQ(api.device_count(&count), kSuccess);
  if (count == 0) GTEST_SKIP() << "no usable GPU, skipped: NVML counts none";
  for (unsigned i = 0; i < count; ++i) {
    SCOPED_TRACE("GPU " + std::to_string(i));
    Device d = nullptr;
    ASSERT_EQ(api.device_handle(i, &d), kSuccess);
    char text[kStringBuffer] = {};
    ASSERT_NE(api.uuid, nullptr);
    ASSERT_EQ(api.uuid(d, text, sizeof text), kSuccess);
    EXPECT_EQ(std::string(text).rfind("GPU-", 0), 0u) << text;
    ASSERT_EQ(api.name(d, text, sizeof text), kSuccess);
    EXPECT_FALSE(std::string(text).empty());
    std::printf("GPU %u: %s\n", i, text);
    Memory memory{};
    ASSERT_EQ(api.memory_info(d, &memory), kSuccess);
    EXPECT_GE(memory.total, kGiB);
    EXPECT_LE(memory.used, memory.total);
    EXPECT_LE(memory.free, memory.total);
    Utilization util{};
    ASSERT_EQ(api.utilization(d, &util), kSuccess);
    EXPECT_LE(util.gpu, 100u);
    EXPECT_LE(util.memory, 100u);
    unsigned value = 0;
    ASSERT_EQ(api.temperature(d, kTemperatureGpu, &value), kSuccess);
    EXPECT_GT(value, 5u);
    EXPECT_LT(value, 110u);
    if (api.power_usage(d, &value) == kSuccess) {
      EXPECT_GT(value, 1000u) << "milliwatts";
      EXPECT_LT(value, 2'000'000u);
    }
    ASSERT_EQ(api.clock_info(d, kClockSm, &value), kSuccess);
    EXPECT_GT(value, 50u) << "MHz";
    EXPECT_LT(value, 5000u);
    ASSERT_EQ(api.clock_info(d, kClockMemory, &value), kSuccess);
    EXPECT_GT(value, 50u);
    unsigned long long ecc = 0;
    const Return ecc_r = api.total_ecc_errors(d, kEccCorrected, kEccVolatile, &ecc);
    EXPECT_TRUE(ecc_r == kSuccess || ecc_r == kErrorNotSupported) << (*lib)->ErrorText(ecc_r);
    // The process list: the buffer-size protocol, and entries whose pids exist.
    std::vector<ProcessInfo> infos(64);
    unsigned n = static_cast<unsigned>(infos.size());
    ASSERT_NE(api.compute_processes, nullptr);
    const Return p = api.compute_processes(d, &n, infos.data());
    ASSERT_TRUE(p == kSuccess || p == kErrorNotSupported) << (*lib)->ErrorText(p);
    if (p == kSuccess) {
      for (unsigned k = 0; k < n; ++k) {
        EXPECT_GT(infos[k].pid, 0u);
        if (infos[k].used_gpu_memory != ~0ull) {
          EXPECT_LE(infos[k].used_gpu_memory, memory.total);
        }
      }
    }
    unsigned current = 0, pending = 0;
    if (api.mig_mode != nullptr && api.mig_mode(d, &current, &pending) == kSuccess) {
      std::printf("GPU %u: MIG mode %u\n", i, current);
    }
  }
  EventSet set = nullptr;
  ASSERT_EQ(api.event_set_create(&set), kSuccess);
  EventData data{};
  const Return w = api.event_set_wait(set, &data, 10);
  EXPECT_TRUE(w == kErrorTimeout || w == kSuccess) << (*lib)->ErrorText(w);
  api.event_set_free(set);
  EXPECT_EQ(api.shutdown(), kSuccess);
}

}  // namespace
}  // namespace pier::metrics::nvml
