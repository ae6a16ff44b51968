// GPU telemetry through a stand-in libnvidia-ml.so.1 (fake_nvml.cpp), loaded by the same
// dlopen("libnvidia-ml.so.1") as NVIDIA's (ctest puts its folder on LD_LIBRARY_PATH): every
// reading of every GPU and MIG instance, refused readings absent while the others stay, the
// period following the load, per-process memory, XID events, the DCGM names and units, and a
// missing, too old or failing library.
#include "metrics/gpu_telemetry.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "metrics/exposition_parser.h"

namespace pier::metrics {
namespace {

constexpr uint64_t kGiB = 1024ull * 1024 * 1024;

class GpuTelemetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::temp_directory_path() /
            ("pier-fake-nvml-" + std::to_string(getpid()) + ".txt");
    setenv("PIER_FAKE_NVML_SCRIPT", path_.c_str(), 1);
  }
  void TearDown() override { std::filesystem::remove(path_); }
  void Script(const std::string& text) {
    std::ofstream out(path_);
    out << text;
  }
  static GpuTelemetryOptions Manual() {
    GpuTelemetryOptions o;
    o.start_threads = false;
    o.min_period = std::chrono::milliseconds(1000);
    o.max_period = std::chrono::milliseconds(9000);
    return o;
  }
  std::filesystem::path path_;
};

const std::string kTwoGpus = R"(
driver=550.54.15
devices=2
gpu0.name=NVIDIA H100 80GB HBM3
gpu0.uuid=GPU-aaaa
gpu0.util=35
gpu0.mem_util=20
gpu0.mem_total=85899345920
gpu0.mem_used=21474836480
gpu0.temperature=51
gpu0.power_mw=250500
gpu0.sm_clock=1980
gpu0.mem_clock=2619
gpu0.pcie_tx=1000
gpu0.pcie_rx=2000
gpu0.ecc_corrected=3
gpu0.ecc_uncorrected=0
gpu0.processes=4242:1073741824,77:2147483648
gpu1.name=NVIDIA A100-SXM4-40GB
gpu1.uuid=GPU-bbbb
gpu1.util=0
gpu1.mem_total=42949672960
gpu1.mem_used=1073741824
gpu1.temperature=error:15
gpu1.processes=4242:536870912
gpu1.mig_devices=2
gpu1.mig0.uuid=MIG-cccc
gpu1.mig0.gi=3
gpu1.mig0.mem_total=10737418240
gpu1.mig0.mem_used=536870912
gpu1.mig1.uuid=MIG-dddd
gpu1.mig1.gi=5
gpu1.mig1.mem_total=10737418240
gpu1.mig1.mem_used=0
)";

TEST_F(GpuTelemetryTest, ReadsEveryGpuAndMigInstanceAndLeavesRefusedReadingsOut) {
  Script(kTwoGpus);
  GpuTelemetry t(Manual());
  ASSERT_TRUE(t.available()) << t.unavailable_reason();
  const GpuTelemetrySnapshot s = t.Snapshot();
  EXPECT_EQ(s.driver_version, "550.54.15");
  ASSERT_EQ(s.gpus.size(), 4u);  // GPU 0, GPU 1 and its two MIG instances (a third slot empty)
  const GpuReading& g0 = s.gpus[0];
  EXPECT_EQ(g0.uuid, "GPU-aaaa");
  EXPECT_EQ(g0.name, "NVIDIA H100 80GB HBM3");
  EXPECT_DOUBLE_EQ(*g0.utilization, 0.35);
  EXPECT_DOUBLE_EQ(*g0.memory_utilization, 0.20);
  EXPECT_EQ(*g0.memory_used_bytes, 20 * kGiB);
  EXPECT_EQ(*g0.memory_total_bytes, 80 * kGiB);
  EXPECT_DOUBLE_EQ(*g0.temperature_celsius, 51);
  EXPECT_DOUBLE_EQ(*g0.power_watts, 250.5);
  EXPECT_DOUBLE_EQ(*g0.sm_clock_hertz, 1980e6);
  EXPECT_DOUBLE_EQ(*g0.memory_clock_hertz, 2619e6);
  EXPECT_DOUBLE_EQ(*g0.pcie_tx_bytes_per_second, 1000 * 1024.0);
  EXPECT_DOUBLE_EQ(*g0.pcie_rx_bytes_per_second, 2000 * 1024.0);
  EXPECT_EQ(*g0.ecc_corrected, 3u);
  EXPECT_EQ(*g0.ecc_uncorrected, 0u);
  ASSERT_TRUE(g0.processes.has_value());
  EXPECT_EQ(g0.processes->size(), 2u);
  // GPU 1: the temperature is refused ("GPU is lost"), power is not supported; the rest stays.
  const GpuReading& g1 = s.gpus[1];
  EXPECT_FALSE(g1.temperature_celsius.has_value());
  EXPECT_FALSE(g1.power_watts.has_value());
  EXPECT_DOUBLE_EQ(*g1.utilization, 0);
  EXPECT_EQ(*g1.memory_used_bytes, kGiB);
  EXPECT_EQ(s.read_errors, 1u) << "Not Supported is not an error; GPU is lost is";
  // MIG instances carry their parent's index and their own UUID and instance id.
  EXPECT_EQ(s.gpus[2].gpu, 1u);
  EXPECT_EQ(s.gpus[2].mig, 0);
  EXPECT_EQ(s.gpus[2].uuid, "MIG-cccc");
  EXPECT_EQ(s.gpus[2].gpu_instance_id, 3u);
  EXPECT_EQ(*s.gpus[2].memory_used_bytes, kGiB / 2);
  EXPECT_EQ(s.gpus[3].uuid, "MIG-dddd");
  // Per-process memory over every GPU; unknown pids hold nothing.
  EXPECT_EQ(t.ProcessDeviceMemory(4242), kGiB + kGiB / 2);
  EXPECT_EQ(t.ProcessDeviceMemory(77), 2 * kGiB);
  EXPECT_EQ(t.ProcessDeviceMemory(1), 0u);
}

TEST_F(GpuTelemetryTest, RendersPierAndDcgmNamesInTheirOwnUnits) {
  Script(kTwoGpus);
  GpuTelemetry t(Manual());
  std::string text;
  RenderGpuMetrics(t.Snapshot(), {{0, 3}}, &text);
  const testing::Exposition e = testing::ParseExposition(text);
  ASSERT_TRUE(e.errors.empty()) << e.errors.front() << "\n" << text;
  auto at = [&](const std::string& series) {
    auto it = e.samples.find(series);
    EXPECT_NE(it, e.samples.end()) << series << " missing in\n" << text;
    return it == e.samples.end() ? -1.0 : it->second;
  };
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string dcgm0 =
      R"({gpu="0",UUID="GPU-aaaa",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname=")" +
      std::string(host) + R"(",GPU_I_ID=""})";
  // A MIG instance under DCGM's labels: its GPU's UUID and model, its GPU instance id.
  const std::string dcgm_mig =
      R"({gpu="1",UUID="GPU-bbbb",device="nvidia1",modelName="NVIDIA A100-SXM4-40GB",Hostname=")" +
      std::string(host) + R"(",GPU_I_ID="3"})";
  EXPECT_DOUBLE_EQ(at("DCGM_FI_DEV_FB_USED" + dcgm_mig), 512);
  EXPECT_DOUBLE_EQ(at(R"(pier_gpu_utilization_ratio{gpu="0",mig="",uuid="GPU-aaaa"})"), 0.35);
  EXPECT_DOUBLE_EQ(at("DCGM_FI_DEV_GPU_UTIL" + dcgm0), 35);
  EXPECT_DOUBLE_EQ(at(R"(pier_gpu_memory_used_bytes{gpu="0",mig="",uuid="GPU-aaaa"})"),
                   20.0 * kGiB);
  EXPECT_DOUBLE_EQ(at("DCGM_FI_DEV_FB_USED" + dcgm0), 20 * 1024);
  EXPECT_DOUBLE_EQ(at("DCGM_FI_DEV_FB_FREE" + dcgm0), 60 * 1024);
  EXPECT_DOUBLE_EQ(at("DCGM_FI_DEV_POWER_USAGE" + dcgm0), 250.5);
  EXPECT_DOUBLE_EQ(at("DCGM_FI_DEV_SM_CLOCK" + dcgm0), 1980);
  EXPECT_DOUBLE_EQ(at("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL" + dcgm0), 3);
  EXPECT_DOUBLE_EQ(at(R"(pier_gpu_ecc_errors_total{gpu="0",uuid="GPU-aaaa",type="corrected"})"), 3);
  EXPECT_DOUBLE_EQ(at(R"(pier_gpu_process_memory_bytes{gpu="0",uuid="GPU-aaaa",pid="4242"})"),
                   1.0 * kGiB);
  // used / total x waiting allocations: 0.25 x 3; GPU 1 has none waiting.
  EXPECT_DOUBLE_EQ(at(R"(pier_gpu_memory_pressure_index{gpu="0",uuid="GPU-aaaa"})"), 0.75);
  EXPECT_DOUBLE_EQ(at(R"(pier_gpu_memory_pressure_index{gpu="1",uuid="GPU-bbbb"})"), 0);
  EXPECT_DOUBLE_EQ(at(R"(pier_gpu_memory_used_bytes{gpu="1",mig="0",uuid="MIG-cccc"})"),
                   kGiB / 2.0);
  EXPECT_DOUBLE_EQ(at("pier_gpu_telemetry_period_seconds"), 1 + 8 * 0.35);
  // The refused temperature of GPU 1 is absent, GPU 0's is there.
  EXPECT_EQ(text.find(R"(pier_gpu_temperature_celsius{gpu="1")"), std::string::npos);
  EXPECT_DOUBLE_EQ(at(R"(pier_gpu_temperature_celsius{gpu="0",mig="",uuid="GPU-aaaa"})"), 51);
}

TEST_F(GpuTelemetryTest, ThePeriodIsShortWhenIdleAndLongUnderLoad) {
  Script("devices=1\ngpu0.util=0\ngpu0.mem_total=100\ngpu0.mem_used=1\n");
  GpuTelemetry t(Manual());
  EXPECT_EQ(t.period(), std::chrono::milliseconds(1000));
  Script("devices=1\ngpu0.util=100\ngpu0.mem_total=100\ngpu0.mem_used=1\n");
  t.SampleNow();
  EXPECT_EQ(t.period(), std::chrono::milliseconds(9000));
  Script("devices=1\ngpu0.util=50\ngpu0.mem_total=100\ngpu0.mem_used=1\n");
  t.SampleNow();
  EXPECT_EQ(t.period(), std::chrono::milliseconds(5000));
  EXPECT_EQ(t.Snapshot().samples, 3u);
}

TEST_F(GpuTelemetryTest, XidsAreCountedAndOnlyDeviceFatalOnesCountTowardRestarts) {
  // 79 (off the bus) device-wide, 79 on GPU instance 3, 48 (double-bit ECC) on instance 5,
  // 13 (an application's fault) device-wide.
  Script(kTwoGpus + "gpu1.xids=79,79@3,48@5,13\n");
  GpuTelemetry t(Manual());
  int events = 0;
  while (t.PollEvents(std::chrono::milliseconds(1))) ++events;
  EXPECT_EQ(events, 4);
  const GpuTelemetrySnapshot s = t.Snapshot();
  EXPECT_EQ((s.xid_errors.at({1, 79})), 2u);
  EXPECT_EQ((s.xid_errors.at({1, 48})), 1u);
  EXPECT_EQ((s.xid_errors.at({1, 13})), 1u);
  EXPECT_EQ(s.last_xid.at(1), 13u);
  EXPECT_EQ(t.DeviceFatalXids("1"), 3u) << "13 is counted, not acted on";
  EXPECT_EQ(t.DeviceFatalXids("GPU-bbbb"), 3u);
  // A MIG instance: its own instance's and the device-wide ones.
  EXPECT_EQ(t.DeviceFatalXids("MIG-cccc"), 2u);  // gi 3: 79 device-wide + 79@3
  EXPECT_EQ(t.DeviceFatalXids("MIG-dddd"), 2u);  // gi 5: 79 device-wide + 48@5
  EXPECT_EQ(t.DeviceFatalXids("0"), 0u);
  EXPECT_EQ(t.DeviceFatalXids("GPU-none"), 0u);
  EXPECT_TRUE(IsDeviceFatalXid(79));
  EXPECT_FALSE(IsDeviceFatalXid(31));
  std::string text;
  RenderGpuMetrics(s, {}, &text);
  EXPECT_NE(text.find(R"(pier_gpu_xid_errors_total{gpu="1",xid="79"} 2)"), std::string::npos);
  EXPECT_NE(text.find(R"(pier_gpu_xid_errors_total{gpu="1",xid="13"} 1)"), std::string::npos);
  EXPECT_NE(text.find(R"(DCGM_FI_DEV_XID_ERRORS{gpu="1"} 13)"), std::string::npos);
}

TEST_F(GpuTelemetryTest, AMigGpusInstancesListsReplaceItsOwnAndUnknownMemoryIsUnknown) {
  // GPU 1's instance 0 lists 4242 with 100 bytes: that replaces the GPU's own list (512 MiB),
  // never adds to it.
  Script(kTwoGpus + "gpu1.mig0.processes=4242:100\n");
  GpuTelemetry t(Manual());
  EXPECT_EQ(t.ProcessDeviceMemory(4242), kGiB + 100);
  // Listed without its memory (NVML_VALUE_NOT_AVAILABLE): unknown, not 0.
  Script(kTwoGpus + "gpu1.mig0.processes=4242:18446744073709551615\n");
  t.SampleNow();
  EXPECT_FALSE(t.ProcessDeviceMemory(4242).has_value());
  EXPECT_EQ(t.ProcessDeviceMemory(77), 2 * kGiB);
  std::string text;
  RenderGpuMetrics(t.Snapshot(), {}, &text);
  EXPECT_EQ(text.find(R"(pier_gpu_process_memory_bytes{gpu="1",uuid="MIG-cccc")"),
            std::string::npos)
      << "an entry without its memory is not shown as 0\n"
      << text;
  // A MIG instance is read for its memory only: no utilisation of its own.
  EXPECT_FALSE(t.Snapshot().gpus[2].utilization.has_value());
}

TEST_F(GpuTelemetryTest, ProcessMemoryIsUnknownWhenNvmlDoesNotListProcesses) {
  Script("devices=1\ngpu0.mem_total=100\ngpu0.mem_used=1\n");
  GpuTelemetry t(Manual());
  EXPECT_FALSE(t.ProcessDeviceMemory(getpid()).has_value());
}

TEST_F(GpuTelemetryTest, WithoutNvmlNothingIsRenderedAndTheReasonIsKept) {
  Script(kTwoGpus);
  GpuTelemetryOptions missing = Manual();
  missing.library = "libnvidia-ml-absent.so.1";
  GpuTelemetry absent(missing);
  EXPECT_FALSE(absent.available());
  EXPECT_NE(absent.unavailable_reason().find("NVML is not available"), std::string::npos);
  std::string text;
  RenderGpuMetrics(absent.Snapshot(), {}, &text);
  EXPECT_TRUE(text.empty());
  EXPECT_FALSE(absent.ProcessDeviceMemory(1).has_value());

  GpuTelemetryOptions old = Manual();
  old.library = FAKE_NVML_OLD_PATH;
  GpuTelemetry too_old(old);
  EXPECT_FALSE(too_old.available());
  EXPECT_NE(too_old.unavailable_reason().find("too old"), std::string::npos)
      << too_old.unavailable_reason();
  EXPECT_NE(too_old.unavailable_reason().find("nvmlInit_v2"), std::string::npos);

  Script("init=error:9\n");
  GpuTelemetry failing(Manual());
  EXPECT_FALSE(failing.available());
  EXPECT_NE(failing.unavailable_reason().find("Driver Not Loaded"), std::string::npos)
      << failing.unavailable_reason();
}

TEST_F(GpuTelemetryTest, TheBackgroundThreadsSampleAndCountXidsUntilDestroyed) {
  Script("devices=1\ngpu0.util=0\ngpu0.mem_total=100\ngpu0.mem_used=1\ngpu0.xids=79\n");
  GpuTelemetryOptions o;
  o.min_period = std::chrono::milliseconds(5);
  o.max_period = std::chrono::milliseconds(50);
  const auto start = std::chrono::steady_clock::now();
  {
    GpuTelemetry t(o);
    for (int i = 0; i < 400 && (t.Snapshot().samples < 4 || t.DeviceFatalXids("0") < 1); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_GE(t.Snapshot().samples, 4u);
    EXPECT_EQ(t.DeviceFatalXids("0"), 1u);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace pier::metrics
