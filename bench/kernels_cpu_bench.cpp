// CPU kernel benchmarks: MatMul on SmolLM2-135M's shapes, and ThreadPool overhead.
//
// Weights are random bytes in the real layout (with sane f16 scales). For
// n_tokens = 1 every iteration reads a different copy of the matrix, cycling
// through more than the last-level cache holds, so GB/s is a memory figure, as
// in decode. Counters: GFLOP/s (2 * rows * cols * tokens) and weight GB/s.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/packed_weights.h"
#include "tensor/float16.h"

namespace pier::kernels {
namespace {

constexpr size_t kColdBytes = size_t{192} << 20;  // > L3, so n_tokens = 1 reads DRAM

struct Matrices {
  std::vector<uint8_t> bytes;
  std::vector<std::byte> packed;  // the copies packed (PackWeights), when asked for
  std::vector<WeightMatrix> copies;
};

Matrices MakeMatrices(DType type, int64_t n_rows, int64_t n_cols, bool cold, bool packed = false) {
  Matrices m;
  const size_t row_bytes = *RowBytes(type, n_cols);
  const size_t matrix_bytes = row_bytes * n_rows;
  const size_t n_copies = cold ? std::max<size_t>(1, kColdBytes / matrix_bytes) : 1;
  m.bytes.resize(matrix_bytes * n_copies);
  std::mt19937 rng(1);
  for (uint8_t& b : m.bytes) b = static_cast<uint8_t>(rng());
  // Q4_1: f16 d, f16 m at the start of each 20-byte block; Q8_0: f16 d per 34 bytes.
  const int64_t block_bytes = Traits(type).type_size;
  const uint16_t d = Fp32ToFp16(0.01f), mn = Fp32ToFp16(-0.05f);
  for (size_t off = 0; off + block_bytes <= m.bytes.size(); off += block_bytes) {
    std::memcpy(&m.bytes[off], &d, 2);
    if (type == DType::kQ4_1) std::memcpy(&m.bytes[off + 2], &mn, 2);
  }
  for (size_t c = 0; c < n_copies; ++c) {
    m.copies.push_back(
        WeightMatrix{type, n_rows, n_cols, m.bytes.data() + c * matrix_bytes, row_bytes});
  }
  if (packed && HasPackedLayout(type)) {
    const size_t packed_bytes = PackedWeightBytes(m.copies[0]);
    m.packed.resize(packed_bytes * n_copies + 64);
    std::byte* base =
        reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(m.packed.data()) + 63) / 64 * 64);
    for (size_t c = 0; c < n_copies; ++c) {
      m.copies[c] = *PackWeights(m.copies[c], std::span(base + c * packed_bytes, packed_bytes));
    }
    m.bytes.clear();
    m.bytes.shrink_to_fit();
  }
  return m;
}

// Args: n_rows, n_cols, n_tokens, threads, type, isa (-1: default), packed (0/1).
void BM_MatMul(benchmark::State& state) {
  const int64_t n_rows = state.range(0), n_cols = state.range(1), n_tokens = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  const DType type = static_cast<DType>(state.range(4));
  const Isa isa = state.range(5) < 0 ? BestIsa() : static_cast<Isa>(state.range(5));
  if (!IsaSupported(isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  const bool packed = state.range(6) != 0;
  const Matrices m = MakeMatrices(type, n_rows, n_cols, n_tokens == 1, packed);
  std::vector<float> x(n_tokens * n_cols);
  std::mt19937 rng(2);
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(rng);
  std::vector<float> y(n_tokens * n_rows);
  std::vector<std::byte> scratch(MatMulScratchBytes(m.copies[0], n_tokens));
  ThreadPool pool(threads);
  size_t c = 0;
  for (auto _ : state) {
    const WeightMatrix& w = m.copies[c];
    c = (c + 1) % m.copies.size();
    if (!internal::MatMulWithIsa(isa, w, x.data(), n_tokens, y.data(), n_rows, scratch, pool)
             .ok()) {
      state.SkipWithError("MatMul failed");
      return;
    }
    benchmark::DoNotOptimize(y.data());
  }
  const double flops = 2.0 * n_rows * n_cols * n_tokens;
  const double weight_bytes = static_cast<double>(m.copies[0].row_bytes) * n_rows;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["GB/s"] =
      benchmark::Counter(weight_bytes * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
  state.SetLabel(std::string(DTypeName(type)) + " " + IsaName(isa) +
                 (packed ? " packed" : " gguf"));
}

void ModelShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "cols", "tokens", "threads", "type", "isa", "packed"});
  const int64_t q41 = static_cast<int64_t>(DType::kQ4_1);
  const int64_t q80 = static_cast<int64_t>(DType::kQ8_0);
  for (int64_t tokens : {1, 16, 64, 512}) {
    for (int64_t threads : {1, 2}) {
      b->Args({576, 576, tokens, threads, q41, -1, 1});
      b->Args({192, 576, tokens, threads, q41, -1, 1});
      b->Args({1536, 576, tokens, threads, q41, -1, 1});
      b->Args({576, 1536, tokens, threads, q41, -1, 1});
      if (tokens <= 16) b->Args({49152, 576, tokens, threads, q80, -1, 1});
    }
  }
  // Packed on the fly from the GGUF layout, and the portable AVX2 path, on one layer.
  for (int64_t tokens : {1, 16, 512}) {
    b->Args({1536, 576, tokens, 1, q41, -1, 0});
    b->Args({1536, 576, tokens, 1, q41, static_cast<int64_t>(Isa::kAvx2), 1});
  }
  // The AVX2 path at a decode batch of 64, and its tied Q8_0 output head.
  b->Args({1536, 576, 64, 1, q41, static_cast<int64_t>(Isa::kAvx2), 1});
  b->Args({49152, 576, 16, 1, q80, static_cast<int64_t>(Isa::kAvx2), 1});
}
BENCHMARK(BM_MatMul)->Apply(ModelShapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

// All matrix products of one decode step of SmolLM2-135M (30 layers of q, k, v,
// o, gate, up, down in Q4_1, and the tied Q8_0 output), each layer its own copy
// of the weights so that the step streams ~96 MB, as a real one does.
void BM_DecodeStepMatMuls(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const int64_t n_tokens = state.range(1);
  const bool packed = state.range(2) != 0;
  struct Shape {
    int64_t rows, cols;
  };
  const Shape layer[] = {{576, 576},  {192, 576},  {192, 576}, {576, 576},
                         {1536, 576}, {1536, 576}, {576, 1536}};
  std::vector<Matrices> mats;
  for (int l = 0; l < 30; ++l) {
    for (const Shape& s : layer) {
      mats.push_back(MakeMatrices(DType::kQ4_1, s.rows, s.cols, false, packed));
    }
  }
  mats.push_back(MakeMatrices(DType::kQ8_0, 49152, 576, false, packed));
  std::vector<float> x(n_tokens * 1536, 0.5f), y(n_tokens * 49152);
  size_t scratch_bytes = 0;
  for (const Matrices& m : mats) {
    scratch_bytes = std::max(scratch_bytes, MatMulScratchBytes(m.copies[0], n_tokens));
  }
  std::vector<std::byte> scratch(scratch_bytes);
  ThreadPool pool(threads);
  double bytes = 0;
  for (const Matrices& m : mats) bytes += m.copies[0].row_bytes * m.copies[0].n_rows;
  for (auto _ : state) {
    for (const Matrices& m : mats) {
      const WeightMatrix& w = m.copies[0];
      // Logits for every token (a decode step of n_tokens sequences), one for prefill.
      const int64_t tokens = w.n_rows == 49152 && n_tokens > 64 ? 1 : n_tokens;
      if (!MatMul(w, x.data(), tokens, y.data(), w.n_rows, scratch, pool).ok()) {
        state.SkipWithError("MatMul failed");
        return;
      }
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["tokens/s"] = benchmark::Counter(
      static_cast<double>(n_tokens) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9 * state.iterations(), benchmark::Counter::kIsRate);
  state.SetLabel(std::string(MatMulIsaName()) + (packed ? " packed" : " gguf"));
}
BENCHMARK(BM_DecodeStepMatMuls)
    ->ArgNames({"threads", "tokens", "packed"})
    ->Args({1, 1, 1})
    ->Args({2, 1, 1})
    ->Args({1, 16, 1})
    ->Args({2, 16, 1})
    ->Args({2, 64, 1})
    ->Args({2, 512, 1})
    ->Args({2, 16, 0})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Cost of one ParallelFor with an empty body (the per-kernel overhead).
void BM_ThreadPoolParallelFor(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    pool.ParallelFor(64, 1,
                     [](int64_t begin, int64_t end) { benchmark::DoNotOptimize(begin + end); });
  }
}
BENCHMARK(BM_ThreadPoolParallelFor)->Arg(1)->Arg(2)->UseRealTime();

}  // namespace
}  // namespace pier::kernels

BENCHMARK_MAIN();
