// GPU benchmark of the forward pass's kernels: the quantized matrix product
// (kernels/cuda/quant_matmul.h), time and achieved bandwidth per matrix at 1, 8 and 64
// tokens against the device's own device-to-device copy bandwidth (the ceiling a
// memory-bound product can reach), for the default model's matrices and 7B-shaped ones;
// and paged attention (kernels/cuda/attention.h) per layer for decode batches at several
// context lengths. Random weights and K/V. Self-contained so that it runs as-is on a GPU
// machine; scripts/gpu-check runs it.
//
// Output: "RESULT <name> <value> <unit>" lines, or one "SKIP <reason>" line (exit 0) when
// no GPU is usable. Bandwidth counts the weight (or K/V) bytes read once per launch.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/cuda_bench_util.h"
#include "device/cuda/cuda_device.h"
#include "device/cuda/cuda_plugin.h"
#include "kernels/cuda/quant_dot.h"
#include "kernels/cuda/quant_pack.h"
#include "tests/kernels/random_gguf.h"
#include "tests/kernels/random_kv.h"

namespace {

using pier::Event;
using pier::Result;
using pier::Status;
using pier::Stream;
using pier::cuda::CudaDevice;
using pier::cuda::quant::QuantType;

using pier::cuda::bench::Check;
using pier::cuda::bench::TimeMedianMs;

struct Buffer {
  CudaDevice& device;
  size_t bytes;
  void* ptr = nullptr;
  Buffer(CudaDevice& d, size_t n) : device(d), bytes(n) {
    Result<void*> p = device.AllocateRaw(n, 256);
    if (p.ok()) ptr = *p;
  }
  ~Buffer() {
    if (ptr != nullptr) device.FreeRaw(ptr, bytes);
  }
};

struct Shape {
  const char* model;
  const char* matrix;
  QuantType type;
  int64_t rows;
  int64_t cols;
};

// One layer's decode attention: `batch` sequences of `context` positions, one query each.
bool BenchAttention(CudaDevice& device, Stream stream, double copy_gbs) {
  struct Case {
    const char* model;
    int64_t n_head, n_kv_head, head_dim, batch, context;
  };
  // Host-made random K/V: the 7B cases stay at 64-134 MB.
  const Case cases[] = {
      {"135m", 9, 3, 64, 1, 512},   {"135m", 9, 3, 64, 64, 512},  {"135m", 9, 3, 64, 1, 4096},
      {"7b", 32, 32, 128, 1, 512},  {"7b", 32, 32, 128, 1, 4096}, {"7b", 32, 32, 128, 8, 1024},
      {"7b", 32, 32, 128, 64, 128},
  };
  for (const Case& c : cases) {
    const std::vector<int64_t> lengths(static_cast<size_t>(c.batch), c.context);
    const pier::cuda::testing::RandomKvCache kv(1, 0, c.n_kv_head, c.head_dim, lengths, 3);
    std::vector<int32_t> positions(c.batch, static_cast<int32_t>(c.context - 1));
    const int64_t row = c.n_head * c.head_dim;
    const std::vector<float> q = pier::cuda::testing::RandomQueries(c.batch * row, 4);
    std::vector<int32_t> split_first(positions.size());
    std::vector<int32_t> split_query(static_cast<size_t>(
        pier::cuda::attn::IndexSplits(positions.data(), c.batch, split_first.data(), nullptr)));
    const int64_t total_splits = pier::cuda::attn::IndexSplits(
        positions.data(), c.batch, split_first.data(), split_query.data());
    Buffer d_kv(device, kv.bytes.size()), d_tables(device, kv.tables.size() * 4),
        d_offsets(device, c.batch * 4), d_positions(device, c.batch * 4), d_q(device, q.size() * 4),
        d_out(device, q.size() * 4), d_first(device, c.batch * 4),
        d_split_query(device, split_query.size() * 4),
        d_scratch(device, pier::cuda::attn::ScratchFloats(total_splits, c.n_head, c.head_dim) * 4);
    auto up = [&](Buffer& dst, const void* src, size_t bytes) {
      return dst.ptr != nullptr &&
             Check(device.CopyHostToDevice(dst.ptr, src, bytes, stream), "upload");
    };
    if (!d_out.ptr || !d_scratch.ptr || !up(d_kv, kv.bytes.data(), kv.bytes.size()) ||
        !up(d_tables, kv.tables.data(), kv.tables.size() * 4) ||
        !up(d_offsets, kv.table_offsets.data(), c.batch * 4) ||
        !up(d_positions, positions.data(), c.batch * 4) || !up(d_q, q.data(), q.size() * 4) ||
        !up(d_first, split_first.data(), c.batch * 4) ||
        !up(d_split_query, split_query.data(), split_query.size() * 4)) {
      return false;
    }
    PierCudaAttentionArgs args{};
    args.q = static_cast<const float*>(d_q.ptr);
    args.out = static_cast<float*>(d_out.ptr);
    args.n_queries = c.batch;
    args.n_head = c.n_head;
    args.positions = static_cast<const int32_t*>(d_positions.ptr);
    args.table_offsets = static_cast<const int32_t*>(d_offsets.ptr);
    args.block_tables = static_cast<const int32_t*>(d_tables.ptr);
    args.kv_base = d_kv.ptr;
    args.geometry = {kv.geometry.bytes_per_block, kv.geometry.key_offset, kv.geometry.value_offset,
                     kv.geometry.n_kv_head, kv.geometry.head_dim};
    args.split_first = static_cast<const int32_t*>(d_first.ptr);
    args.split_query = static_cast<const int32_t*>(d_split_query.ptr);
    args.total_splits = total_splits;
    args.scratch = static_cast<float*>(d_scratch.ptr);
    const double ms = TimeMedianMs(
        device, stream, [&] { return Check(device.PagedAttention(args, stream), "attention"); });
    if (ms <= 0) return false;
    const double kv_bytes =
        static_cast<double>(c.batch) * c.context * c.n_kv_head * c.head_dim * 2 * 2;
    const std::string name = std::string(c.model) + "_attention_b" + std::to_string(c.batch) +
                             "_ctx" + std::to_string(c.context);
    std::printf("RESULT %s_us %.1f us\n", name.c_str(), ms * 1e3);
    std::printf("RESULT %s_bandwidth %.1f GB/s (%.0f%% of copy)\n", name.c_str(),
                kv_bytes / ms / 1e6, 100.0 * kv_bytes / ms / 1e6 / copy_gbs);
  }
  return true;
}

}  // namespace

int main() {
  int exit_code = 0;
  const std::unique_ptr<CudaDevice> opened = pier::cuda::bench::OpenBenchDevice(&exit_code);
  if (opened == nullptr) return exit_code;
  CudaDevice& device = *opened;
  const Stream stream = device.DefaultStream();

  // The ceiling: a 1 GiB device-to-device copy reads and writes every byte.
  const size_t copy_bytes = size_t{1} << 30;
  Buffer copy_src(device, copy_bytes), copy_dst(device, copy_bytes);
  if (copy_src.ptr == nullptr || copy_dst.ptr == nullptr) return 1;
  const double copy_ms = TimeMedianMs(device, stream, [&] {
    return Check(device.CopyDeviceToDevice(copy_dst.ptr, copy_src.ptr, copy_bytes, stream), "copy");
  });
  if (copy_ms <= 0) return 1;
  const double copy_gbs = 2.0 * copy_bytes / copy_ms / 1e6;
  std::printf("RESULT d2d_copy_bandwidth %.1f GB/s\n", copy_gbs);

  const Shape shapes[] = {
      {"135m", "attn_q", QuantType::kQ4_1, 576, 576},
      {"135m", "ffn_up", QuantType::kQ4_1, 1536, 576},
      {"135m", "ffn_down", QuantType::kQ4_1, 576, 1536},
      {"135m", "output_q8_0", QuantType::kQ8_0, 49152, 576},
      {"7b", "attn_q", QuantType::kQ4_0, 4096, 4096},
      {"7b", "ffn_up", QuantType::kQ4_0, 11008, 4096},
      {"7b", "ffn_down", QuantType::kQ4_0, 4096, 11008},
      {"7b", "ffn_down_q6_k", QuantType::kQ6_K, 4096, 11008},
      {"7b", "ffn_up_q4_k", QuantType::kQ4_K, 11008, 4096},
  };
  const int64_t token_counts[] = {1, 8, 64};
  for (const Shape& s : shapes) {
    const std::vector<uint8_t> w =
        pier::cuda::testing::RandomGgufMatrix(s.type, s.rows, s.cols, 17);
    const std::vector<float> x = pier::cuda::testing::RandomActivations(64, s.cols, 19, false);
    const size_t xq_bytes = pier::cuda::quant::ActivationRowBytes(s.cols) * 64;
    Buffer dw(device, w.size()), dx(device, x.size() * 4), dxq(device, xq_bytes),
        dy(device, s.rows * 64 * 4);
    if (!dw.ptr || !dx.ptr || !dxq.ptr || !dy.ptr) return 1;
    if (!Check(device.CopyHostToDevice(dw.ptr, w.data(), w.size(), stream), "upload") ||
        !Check(device.CopyHostToDevice(dx.ptr, x.data(), x.size() * 4, stream), "upload") ||
        !Check(device.QuantizeActivations(static_cast<const float*>(dx.ptr), 64, s.cols, dxq.ptr,
                                          stream),
               "quantize")) {
      return 1;
    }
    for (int64_t n : token_counts) {
      const double ms = TimeMedianMs(device, stream, [&] {
        return Check(device.QuantMatMul(static_cast<int32_t>(s.type), dw.ptr, s.rows, s.cols,
                                        dxq.ptr, n, static_cast<float*>(dy.ptr), s.rows, stream),
                     "matmul");
      });
      if (ms <= 0) return 1;
      const double gbs = static_cast<double>(w.size()) / ms / 1e6;
      const std::string name = std::string(s.model) + "_" + s.matrix + "_" +
                               pier::cuda::testing::QuantTypeName(s.type) + "_b" +
                               std::to_string(n);
      std::printf("RESULT %s_us %.1f us\n", name.c_str(), ms * 1e3);
      std::printf("RESULT %s_bandwidth %.1f GB/s (%.0f%% of copy)\n", name.c_str(), gbs,
                  100.0 * gbs / copy_gbs);
    }
    if (s.type != QuantType::kQ6_K) {  // the tensor-core product at 8 and 64 tokens
      for (int64_t n : {int64_t{8}, int64_t{64}}) {
        const double ms = TimeMedianMs(device, stream, [&] {
          return Check(device.MmaMatMul(static_cast<int32_t>(s.type), dw.ptr, s.rows, s.cols,
                                        dxq.ptr, n, static_cast<float*>(dy.ptr), s.rows, stream),
                       "mma matmul");
        });
        if (ms <= 0) return 1;
        const std::string name = std::string(s.model) + "_" + s.matrix + "_" +
                                 pier::cuda::testing::QuantTypeName(s.type) + "_mma_b" +
                                 std::to_string(n);
        std::printf("RESULT %s_us %.1f us\n", name.c_str(), ms * 1e3);
        std::printf("RESULT %s_tops %.1f TOPS\n", name.c_str(),
                    2.0 * s.rows * s.cols * n / ms / 1e9);
      }
    }
    if (pier::cuda::quant::HasPackedLayout32(s.type)) {  // the packed GPU layout, same shapes
      std::vector<uint8_t> packed(pier::cuda::quant::PackedBytes(s.type, s.rows, s.cols));
      pier::cuda::quant::PackRows32(s.type, w.data(), 0, s.rows, s.rows, s.cols, packed.data());
      Buffer dp(device, packed.size());
      if (!dp.ptr ||
          !Check(device.CopyHostToDevice(dp.ptr, packed.data(), packed.size(), stream), "upload")) {
        return 1;
      }
      for (int64_t n : token_counts) {
        const double ms = TimeMedianMs(device, stream, [&] {
          return Check(device.PackedMatMul(static_cast<int32_t>(s.type), dp.ptr, s.rows, s.cols,
                                           dxq.ptr, n, static_cast<float*>(dy.ptr), s.rows, stream),
                       "packed matmul");
        });
        if (ms <= 0) return 1;
        const double gbs = static_cast<double>(packed.size()) / ms / 1e6;
        const std::string name = std::string(s.model) + "_" + s.matrix + "_" +
                                 pier::cuda::testing::QuantTypeName(s.type) + "_packed_b" +
                                 std::to_string(n);
        std::printf("RESULT %s_us %.1f us\n", name.c_str(), ms * 1e3);
        std::printf("RESULT %s_bandwidth %.1f GB/s (%.0f%% of copy)\n", name.c_str(), gbs,
                    100.0 * gbs / copy_gbs);
      }
    }
    const double quantize_ms = TimeMedianMs(device, stream, [&] {
      return Check(device.QuantizeActivations(static_cast<const float*>(dx.ptr), 64, s.cols,
                                              dxq.ptr, stream),
                   "quantize");
    });
    std::printf("RESULT %s_%s_quantize_64_tokens_us %.1f us\n", s.model, s.matrix,
                quantize_ms * 1e3);
  }
  return BenchAttention(device, stream, copy_gbs) ? 0 : 1;
}
