// GPU benchmark: Q4_1 -> f32 dequantization bandwidth and pinned host<->device copy
// bandwidth, timed with CUDA events through the plugin. Self-contained (no Google
// Benchmark) so that it runs as-is on a GPU machine; scripts/gpu-check runs it.
//
// Output: one "RESULT <name> <value> <unit>" line per measurement, or one "SKIP <reason>"
// line (exit 0) when no GPU is usable.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "bench/cuda_bench_util.h"
#include "device/cuda/cuda_device.h"
#include "device/cuda/cuda_plugin.h"

namespace {

using pier::Event;
using pier::Result;
using pier::Status;
using pier::Stream;
using pier::cuda::CudaDevice;

using pier::cuda::bench::Check;
using pier::cuda::bench::TimeMedianMs;

}  // namespace

int main() {
  int exit_code = 0;
  const std::unique_ptr<CudaDevice> opened = pier::cuda::bench::OpenBenchDevice(&exit_code);
  if (opened == nullptr) return exit_code;
  CudaDevice& device = *opened;
  const Stream stream = device.DefaultStream();

  // 2^22 blocks = 128M elements: 80 MiB of Q4_1 in, 512 MiB of f32 out.
  const uint64_t n_blocks = uint64_t{1} << 22;
  const size_t src_bytes = n_blocks * 20;
  const size_t dst_bytes = n_blocks * 32 * sizeof(float);
  Result<void*> src = device.AllocateRaw(src_bytes, 256);
  Result<void*> dst = device.AllocateRaw(dst_bytes, 256);
  if (!src.ok() || !dst.ok()) {
    std::fprintf(stderr, "FAIL allocate\n");
    return 1;
  }
  std::vector<uint8_t> host(src_bytes);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  for (uint64_t b = 0; b < n_blocks; ++b) {  // finite scales: d = 0.5, m = -1
    host[b * 20 + 0] = 0x00;
    host[b * 20 + 1] = 0x38;
    host[b * 20 + 2] = 0x00;
    host[b * 20 + 3] = 0xbc;
  }
  if (!Check(device.CopyHostToDevice(*src, host.data(), src_bytes, stream), "upload")) return 1;

  auto* out = static_cast<float*>(*dst);
  const double dequant_ms = TimeMedianMs(device, stream, [&] {
    return Check(device.DequantizeQ4_1(*src, out, n_blocks, stream), "dequantize");
  });
  if (dequant_ms <= 0) return 1;
  const double moved = static_cast<double>(src_bytes + dst_bytes);
  std::printf("RESULT dequant_q4_1_ms %.4f ms\n", dequant_ms);
  std::printf("RESULT dequant_q4_1_bandwidth %.1f GB/s\n", moved / dequant_ms / 1e6);
  std::printf("RESULT dequant_q4_1_elements %.1f Gelem/s\n",
              static_cast<double>(n_blocks) * 32 / dequant_ms / 1e6);

  Result<pier::HostAllocation> pinned = device.AllocatePinnedHost(dst_bytes);
  if (pinned.ok() && pinned->locked) {
    const double h2d_ms = TimeMedianMs(device, stream, [&] {
      return Check(device.CopyHostToDevice(*dst, pinned->ptr, dst_bytes, stream), "h2d");
    });
    const double d2h_ms = TimeMedianMs(device, stream, [&] {
      return Check(device.CopyDeviceToHost(pinned->ptr, *dst, dst_bytes, stream), "d2h");
    });
    std::printf("RESULT pinned_h2d_bandwidth %.1f GB/s\n", dst_bytes / h2d_ms / 1e6);
    std::printf("RESULT pinned_d2h_bandwidth %.1f GB/s\n", dst_bytes / d2h_ms / 1e6);
    device.FreePinnedHost(*pinned);
  }
  device.FreeRaw(*src, src_bytes);
  device.FreeRaw(*dst, dst_bytes);
  return 0;
}
