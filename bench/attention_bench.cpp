// Paged attention benchmarks on SmolLM2-135M's shapes (9 query heads, 3 K/V heads, head_dim
// 64, 30 layers, blocks of 16 positions): one iteration is the attention of every layer of
// one engine step, so the K/V read per iteration is what a real step reads (decode at long
// contexts streams more than the last-level cache holds).
//
//   BM_Decode/ctx/dtype/threads:   16 sequences, one query token each at position ctx - 1.
//   BM_DecodeHot/...: the same on a store of one layer, attended 30 times: K/V stay in the
//                     caches, so this is the arithmetic alone.
//   BM_Prefill/tokens/dtype/threads: one sequence, a chunk of `tokens` query tokens at
//                                     positions 0 .. tokens - 1.
//   BM_DecodePortable, BM_PrefillPortable: the portable loops instead of the AVX-512 kernel.
// dtype: 0 = f32 K/V, 1 = f16 K/V. Each sequence's blocks are scattered over the store.
// Times: real time, and the CPU time of the whole process (all pool threads, including
// their short spin after each parallel section) as "CPU".
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "common/thread_pool.h"
#include "device/cpu/cpu_device.h"
#include "engine/kv/kv_store.h"
#include "kernels/cpu/attention_kernel.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/kv_convert.h"
#include "kernels/cpu/paged_attention.h"
#include "memory/memory_governor.h"

namespace pier::engine {
namespace {

using kernels::AttentionSpan;
using kernels::ConvertF32ToF16;
using kernels::ConvertF32ToQ8_0;
using kernels::PagedAttention;
using kernels::PagedAttentionScratchFloats;

constexpr int64_t kLayers = 30, kHeads = 9, kKvHeads = 3, kHeadDim = 64, kBlockSize = 16;

// A store holding `n_seq` sequences of `ctx` positions each, random K/V, blocks shuffled.
struct Setup {
  std::unique_ptr<Device> device;
  std::unique_ptr<MemoryGovernor> governor;
  std::unique_ptr<PooledKvStore> store;
  std::vector<std::vector<int32_t>> tables;  // per sequence: its block ids
  std::vector<AttentionSpan> spans;
  std::vector<float> q, out, scratch;  // q, out: [n_rows, kHeads, kHeadDim]
  int64_t max_context = 0;
  int64_t queries_per_task = 1;
};

Setup MakeSetup(int64_t n_layer, int64_t n_seq, int64_t ctx, int64_t tokens_per_seq, KvDtype dtype,
                int64_t n_slots) {
  Setup s;
  s.device = std::move(*CpuDevice::Create());
  s.governor = std::move(*MemoryGovernor::Create(s.device.get()));
  const OwnerId owner = *s.governor->AddOwner({.name = "kv"});
  const KvLayout layout{.n_layer = n_layer,
                        .block_size = kBlockSize,
                        .n_kv_head = kKvHeads,
                        .head_dim = kHeadDim,
                        .dtype = dtype};
  const int64_t blocks_per_seq = (ctx + kBlockSize - 1) / kBlockSize;
  const int64_t n_blocks = n_seq * blocks_per_seq;
  s.store = std::move(*PooledKvStore::Create(layout, n_blocks, *s.governor, owner));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  // Random values, one row's worth repeated in every row (the values do not change the timing).
  std::vector<float> pattern(static_cast<size_t>(layout.row_elements()));
  for (float& v : pattern) v = dist(rng);
  std::vector<std::byte> stored(layout.row_bytes());  // the pattern in the store's dtype
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(stored.data(), pattern.data(), stored.size());
      break;
    case KvDtype::kF16:
      ConvertF32ToF16(pattern.data(), static_cast<int64_t>(pattern.size()),
                      reinterpret_cast<uint16_t*>(stored.data()));
      break;
    case KvDtype::kQ8_0:
      ConvertF32ToQ8_0(pattern.data(), static_cast<int64_t>(pattern.size()), stored.data());
      break;
  }
  for (int32_t b = 0; b < n_blocks; ++b) {
    std::byte* data = s.store->BlockData(b);
    for (size_t off = 0; off < layout.bytes_per_block(); off += stored.size()) {
      std::memcpy(data + off, stored.data(), stored.size());
    }
  }
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  int64_t row = 0;
  for (int64_t i = 0; i < n_seq; ++i) {
    s.tables.emplace_back(ids.begin() + i * blocks_per_seq, ids.begin() + (i + 1) * blocks_per_seq);
  }
  for (int64_t i = 0; i < n_seq; ++i) {
    s.spans.push_back({.block_table = s.tables[i].data(),
                       .first_position = ctx - tokens_per_seq,
                       .n_tokens = tokens_per_seq,
                       .first_row = row});
    row += tokens_per_seq;
  }
  s.q.resize(static_cast<size_t>(row * kHeads * kHeadDim));
  for (float& v : s.q) v = dist(rng);
  s.out.resize(s.q.size());
  s.max_context = ctx;
  s.queries_per_task = kernels::PagedAttentionQueriesPerTask(kHeads, ctx, n_slots, tokens_per_seq);
  s.scratch.resize(static_cast<size_t>(
      PagedAttentionScratchFloats(layout, kHeads, ctx, n_slots, s.queries_per_task)));
  return s;
}

// n_layer: layers in the store; the step attends kLayers layers, cycling through them (one
// layer: the same K/V every time, which then stays in the caches).
void Run(benchmark::State& state, int64_t n_layer, int64_t n_seq, int64_t ctx,
         int64_t tokens_per_seq, std::optional<kernels::Isa> isa = std::nullopt) {
  if (isa.has_value() && !kernels::IsaSupported(*isa)) {
    state.SkipWithError("this CPU lacks the path");
    return;
  }
  kernels::internal::SetActiveIsaForTesting(isa);
  const KvDtype dtype = state.range(1) == 0   ? KvDtype::kF32
                        : state.range(1) == 1 ? KvDtype::kF16
                                              : KvDtype::kQ8_0;
  const int threads = static_cast<int>(state.range(2));
  const int64_t n_slots = 4 * threads;  // as the Llama runner sizes them
  Setup s = MakeSetup(n_layer, n_seq, ctx, tokens_per_seq, dtype, n_slots);
  ThreadPool pool(threads);
  for (auto _ : state) {
    for (int64_t layer = 0; layer < kLayers; ++layer) {
      PagedAttention(s.store->View(), layer % n_layer, s.spans, kHeads, s.q.data(), s.out.data(),
                     s.max_context, s.scratch.data(), n_slots, s.queries_per_task, pool);
    }
    benchmark::DoNotOptimize(s.out.data());
    benchmark::ClobberMemory();
  }
  // Query-key pairs attended per second (every layer, every query head).
  int64_t pairs = 0;
  for (const AttentionSpan& span : s.spans) {
    for (int64_t t = 0; t < span.n_tokens; ++t) pairs += span.first_position + t + 1;
  }
  kernels::internal::SetActiveIsaForTesting(std::nullopt);
  state.counters["pairs/s"] = benchmark::Counter(static_cast<double>(pairs * kHeads * kLayers),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Decode(benchmark::State& state) { Run(state, kLayers, 16, state.range(0), 1); }
void BM_DecodeHot(benchmark::State& state) { Run(state, 1, 16, state.range(0), 1); }
void BM_Prefill(benchmark::State& state) { Run(state, kLayers, 1, state.range(0), state.range(0)); }
// The portable loops compiled for AVX2 (what a CPU without AVX-512 runs). PIER_CPU_ISA
// forces every benchmark onto one level instead.
void BM_DecodePortable(benchmark::State& state) {
  Run(state, kLayers, 16, state.range(0), 1, kernels::Isa::kAvx2);
}
void BM_PrefillPortable(benchmark::State& state) {
  Run(state, kLayers, 1, state.range(0), state.range(0), kernels::Isa::kAvx2);
}

BENCHMARK(BM_Decode)
    ->ArgNames({"ctx", "kv", "threads"})  // kv: 0 f32, 1 f16, 2 q8_0
    ->ArgsProduct({{128, 256, 768}, {0, 1, 2}, {1, 2}})
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeHot)
    ->ArgNames({"ctx", "kv", "threads"})
    ->ArgsProduct({{128}, {0, 1}, {1}})
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Prefill)
    ->ArgNames({"tokens", "kv", "threads"})
    ->ArgsProduct({{512}, {0, 1, 2}, {1, 2}})
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodePortable)
    ->ArgNames({"ctx", "kv", "threads"})
    ->ArgsProduct({{256}, {0, 1}, {1}})
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PrefillPortable)
    ->ArgNames({"tokens", "kv", "threads"})
    ->ArgsProduct({{512}, {0, 1}, {1}})
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pier::engine

BENCHMARK_MAIN();
