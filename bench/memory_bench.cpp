// Memory governor benchmarks.
//
// 1. Allocate/free throughput for cached sizes through the governor (lock, quota and budget
//    checks, pool) against the system allocator (malloc/free), in the same run.
// 2. Fragmentation on a serving trace: per-step workspace buffers of varying size plus KV
//    chunks that grow with each running request and are freed when it finishes. The caching
//    pool (best fit, splitting, coalescing) against a first-fit allocator that splits but never
//    coalesces. Reported as counters: peak reserved / peak live bytes and external
//    fragmentation (1 - largest free block / total free), at the end and averaged.
//
// The trace uses an address-only backend: segments are numbers, no memory is touched, so the
// trace can model a GPU-sized workload on any machine.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <list>
#include <random>
#include <unordered_map>
#include <vector>

#include "device/cpu/cpu_device.h"
#include "memory/caching_allocator.h"
#include "memory/memory_governor.h"

namespace pier {
namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;

// ---- Throughput -----------------------------------------------------------------------------

struct GovernorFixture {
  GovernorFixture() {
    CpuDeviceOptions options;
    options.capacity_bytes = 1024 * kMiB;
    device = std::move(CpuDevice::Create(options)).value();
    GovernorOptions governor_options;
    governor = std::move(MemoryGovernor::Create(device.get(), governor_options)).value();
    owner = *governor->AddOwner({.name = "bench"});
  }
  std::unique_ptr<CpuDevice> device;
  std::unique_ptr<MemoryGovernor> governor;
  OwnerId owner;
};

void BM_GovernorAllocFree(benchmark::State& state) {
  GovernorFixture f;
  const auto bytes = static_cast<size_t>(state.range(0));
  { MemoryResult<Block> warm = f.governor->Allocate(f.owner, bytes); }  // cache the segment
  for (auto _ : state) {
    MemoryResult<Block> block = f.governor->Allocate(f.owner, bytes);
    benchmark::DoNotOptimize(block->data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_GovernorAllocFree)
    ->Arg(256)
    ->Arg(4 * kKiB)
    ->Arg(64 * kKiB)
    ->Arg(1 * kMiB)
    ->Arg(16 * kMiB);

void BM_MallocFree(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = std::malloc(bytes);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MallocFree)->Arg(256)->Arg(4 * kKiB)->Arg(64 * kKiB)->Arg(1 * kMiB)->Arg(16 * kMiB);

// 64 live blocks of mixed sizes allocated, then freed in a shuffled order: exercises splitting
// and coalescing rather than one hot block.
std::vector<size_t> MixedSizes() {
  std::mt19937 rng(7);
  std::vector<size_t> sizes;
  for (int i = 0; i < 64; ++i) sizes.push_back(256 + rng() % (i % 8 == 0 ? 2 * kMiB : 32 * kKiB));
  return sizes;
}

void BM_GovernorMixedBatch(benchmark::State& state) {
  GovernorFixture f;
  const std::vector<size_t> sizes = MixedSizes();
  std::vector<Block> blocks;
  blocks.reserve(sizes.size());
  std::mt19937 rng(11);
  for (auto _ : state) {
    for (size_t s : sizes) blocks.push_back(std::move(f.governor->Allocate(f.owner, s)).value());
    std::shuffle(blocks.begin(), blocks.end(), rng);
    blocks.clear();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(sizes.size()));
}
BENCHMARK(BM_GovernorMixedBatch);

void BM_MallocMixedBatch(benchmark::State& state) {
  const std::vector<size_t> sizes = MixedSizes();
  std::vector<void*> blocks;
  blocks.reserve(sizes.size());
  std::mt19937 rng(11);
  for (auto _ : state) {
    for (size_t s : sizes) blocks.push_back(std::malloc(s));
    benchmark::DoNotOptimize(blocks.data());
    std::shuffle(blocks.begin(), blocks.end(), rng);
    for (void* p : blocks) std::free(p);
    blocks.clear();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(sizes.size()));
}
BENCHMARK(BM_MallocMixedBatch);

// ---- Fragmentation on a serving trace -------------------------------------------------------

// Segments are address ranges handed out by a bump pointer; nothing is mapped.
class AddressOnlyBackend : public AllocatorBackend {
 public:
  Result<void*> AllocateSegment(size_t bytes) override {
    uintptr_t addr = next_;
    next_ += (bytes + 4095) / 4096 * 4096 + 4096;
    return reinterpret_cast<void*>(addr);
  }
  void FreeSegment(void*, size_t) override {}
  Result<Event> RecordEvent(Stream) override { return Event{}; }
  bool EventDone(Event) override { return true; }
  void DestroyEvent(Event) override {}

 private:
  uintptr_t next_ = uintptr_t{1} << 40;
};

// First fit over an unsorted free list, splitting, never coalescing; new segments of at least
// 2 MiB. The baseline the issue compares against.
class FirstFitNoCoalesce {
 public:
  uintptr_t Allocate(size_t bytes) {
    const size_t size = (bytes + 255) / 256 * 256;
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->size < size) continue;
      uintptr_t addr = it->addr;
      if (it->size - size >= 256) {
        it->addr += size;
        it->size -= size;
      } else {
        free_.erase(it);
      }
      live_[addr] = size;
      return addr;
    }
    const size_t segment =
        std::max<size_t>((size + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB), 2 * kMiB);
    uintptr_t addr = next_;
    next_ += segment;
    reserved_ += segment;
    if (segment > size) free_.push_back({addr + size, segment - size});
    live_[addr] = size;
    return addr;
  }
  void Free(uintptr_t addr) {
    auto it = live_.find(addr);
    free_.push_back({addr, it->second});
    live_.erase(it);
  }
  size_t reserved() const { return reserved_; }
  double Fragmentation() const {
    size_t total = 0, largest = 0;
    for (const Range& r : free_) {
      total += r.size;
      largest = std::max(largest, r.size);
    }
    return total == 0 ? 0.0 : 1.0 - static_cast<double>(largest) / static_cast<double>(total);
  }

 private:
  struct Range {
    uintptr_t addr;
    size_t size;
  };
  std::list<Range> free_;
  std::unordered_map<uintptr_t, size_t> live_;
  uintptr_t next_ = uintptr_t{1} << 40;
  size_t reserved_ = 0;
};

// One step of the trace: what to free first, then what to allocate (sizes), by id.
struct TraceOp {
  bool allocate;
  uint32_t id;
  size_t bytes;
};

// A serving workload on a model with hidden size 2048 and a 32k vocabulary: up to 48
// concurrent requests, prompts of 16..2048 tokens prefilled in 512-token chunks, outputs of
// 16..512 tokens, KV in 2 MiB chunks of 64 tokens, per-step workspace (activations, attention
// scratch, logits) sized by the batch.
constexpr int kTraceSteps = 6000;

std::vector<TraceOp> ServingTrace(int steps) {
  std::mt19937_64 rng(42);
  struct Request {
    int prompt_left;
    int output_left;
    int tokens;
    std::vector<uint32_t> chunks;
  };
  constexpr int kTokensPerChunk = 64;
  constexpr size_t kChunkBytes = 2 * kMiB;
  std::vector<TraceOp> ops;
  std::vector<Request> running;
  uint32_t next_id = 1;
  for (int step = 0; step < steps; ++step) {
    // Arrivals: bursts every few hundred steps.
    const int arrivals =
        (step % 400 < 100) ? static_cast<int>(rng() % 3) : static_cast<int>(rng() % 2);
    for (int a = 0; a < arrivals && running.size() < 48; ++a) {
      running.push_back(
          {16 + static_cast<int>(rng() % 2033), 16 + static_cast<int>(rng() % 497), 0, {}});
    }
    int batch_tokens = 0, sampled = 0;
    for (Request& r : running) {
      int tokens = r.prompt_left > 0 ? std::min(r.prompt_left, 512) : 1;
      if (r.prompt_left > 0) {
        r.prompt_left -= tokens;
      } else {
        --r.output_left;
      }
      if (r.prompt_left == 0) ++sampled;
      batch_tokens += tokens;
      r.tokens += tokens;
      while (static_cast<int>(r.chunks.size()) * kTokensPerChunk < r.tokens) {
        r.chunks.push_back(next_id);
        ops.push_back({true, next_id++, kChunkBytes});
      }
    }
    // Workspace for this step, freed at its end.
    std::vector<uint32_t> workspace;
    const size_t sizes[] = {static_cast<size_t>(batch_tokens) * 2048 * 4,           // activations
                            static_cast<size_t>(batch_tokens) * 8192 * 4,           // MLP scratch
                            static_cast<size_t>(std::max(sampled, 1)) * 32000 * 4,  // logits
                            static_cast<size_t>(running.size() + 1) * 4096};        // block tables
    for (size_t bytes : sizes) {
      if (bytes == 0) continue;
      workspace.push_back(next_id);
      ops.push_back({true, next_id++, bytes});
    }
    for (uint32_t id : workspace) ops.push_back({false, id, 0});
    // Finished requests give their KV back.
    for (auto it = running.begin(); it != running.end();) {
      if (it->prompt_left == 0 && it->output_left <= 0) {
        for (uint32_t id : it->chunks) ops.push_back({false, id, 0});
        it = running.erase(it);
      } else {
        ++it;
      }
    }
  }
  return ops;
}

template <typename AllocateFn, typename FreeFn, typename StatsFn>
void RunTrace(benchmark::State& state, const std::vector<TraceOp>& ops, AllocateFn allocate,
              FreeFn free, StatsFn reserved_and_fragmentation) {
  std::unordered_map<uint32_t, std::pair<uintptr_t, size_t>> live;
  size_t live_bytes = 0, peak_live = 0, peak_reserved = 0;
  double fragmentation_sum = 0;
  size_t samples = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const TraceOp& op = ops[i];
    if (op.allocate) {
      live[op.id] = {allocate(op.bytes), op.bytes};
      live_bytes += op.bytes;
      peak_live = std::max(peak_live, live_bytes);
    } else {
      auto it = live.find(op.id);
      free(it->second.first);
      live_bytes -= it->second.second;
      live.erase(it);
    }
    const bool sample = i % 64 == 0;
    auto [reserved, fragmentation] = reserved_and_fragmentation(sample);
    peak_reserved = std::max(peak_reserved, reserved);
    if (sample) {
      fragmentation_sum += fragmentation;
      ++samples;
    }
  }
  state.counters["peak_live_MiB"] = static_cast<double>(peak_live) / kMiB;
  state.counters["peak_reserved_MiB"] = static_cast<double>(peak_reserved) / kMiB;
  state.counters["reserved_over_live"] =
      static_cast<double>(peak_reserved) / static_cast<double>(peak_live);
  state.counters["frag_mean"] = fragmentation_sum / static_cast<double>(samples);
  state.counters["frag_end"] = reserved_and_fragmentation(true).second;
  state.counters["ops"] = static_cast<double>(ops.size());
  for (auto& [id, block] : live) free(block.first);  // requests still running at the end
}

void BM_TraceCachingPool(benchmark::State& state) {
  const std::vector<TraceOp> ops = ServingTrace(kTraceSteps);
  for (auto _ : state) {
    AddressOnlyBackend backend;
    CachingAllocator pool(&backend);
    RunTrace(
        state, ops,
        [&](size_t bytes) {
          return reinterpret_cast<uintptr_t>(pool.Allocate(bytes, Stream{}, 1)->ptr);
        },
        [&](uintptr_t addr) { (void)pool.Free(reinterpret_cast<void*>(addr)); },
        [&](bool fragmentation) {
          if (!fragmentation) return std::make_pair(pool.reserved_bytes(), 0.0);
          AllocatorStats s = pool.Stats();
          return std::make_pair(s.reserved_bytes, s.external_fragmentation);
        });
    state.counters["segment_allocs"] = static_cast<double>(pool.Stats().segment_alloc_count);
  }
}
BENCHMARK(BM_TraceCachingPool)->Iterations(1)->Unit(benchmark::kMillisecond);

void BM_TraceFirstFitNoCoalesce(benchmark::State& state) {
  const std::vector<TraceOp> ops = ServingTrace(kTraceSteps);
  for (auto _ : state) {
    FirstFitNoCoalesce pool;
    RunTrace(
        state, ops, [&](size_t bytes) { return pool.Allocate(bytes); },
        [&](uintptr_t addr) { pool.Free(addr); },
        [&](bool fragmentation) {
          return std::make_pair(pool.reserved(), fragmentation ? pool.Fragmentation() : 0.0);
        });
  }
}
BENCHMARK(BM_TraceFirstFitNoCoalesce)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pier

BENCHMARK_MAIN();
