#include "common/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "common/check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PIER_CPU_RELAX() _mm_pause()
#else
#define PIER_CPU_RELAX() std::this_thread::yield()
#endif

namespace pier {
namespace {

using Clock = std::chrono::steady_clock;

// The job word packs (generation << 32 | next unclaimed chunk). A worker claims a
// chunk with a compare-exchange that also checks the generation, so a worker that
// wakes late can never take a chunk of a newer job with the old job's function.
constexpr uint64_t MakeWord(uint32_t generation, uint32_t chunk) {
  return (static_cast<uint64_t>(generation) << 32) | chunk;
}
constexpr uint32_t WordGeneration(uint64_t word) { return static_cast<uint32_t>(word >> 32); }
constexpr uint32_t WordChunk(uint64_t word) { return static_cast<uint32_t>(word); }

// The chunk field while the caller is still writing a new job's parameters: above any
// chunk count, so nothing can be claimed, and in a new generation, so a worker still
// holding the previous job's word fails its compare-exchange instead of claiming a
// chunk of the previous generation with the new job's parameters.
constexpr uint32_t kJobBeingWritten = 0xFFFFFFFFu;

}  // namespace

struct ThreadPool::State {
  int num_threads = 1;
  int64_t spin_ns = 0;
  std::vector<std::thread> workers;

  // The current job; written by the caller before it publishes a new generation
  // in `word`, read by a worker only after it claimed a chunk of that generation.
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
  int64_t chunk = 0;
  std::atomic<uint32_t> num_chunks{0};

  std::atomic<uint64_t> word{0};
  std::atomic<uint32_t> chunks_done{0};
  std::atomic<bool> busy{false};
  std::atomic<bool> stop{false};

  std::mutex mutex;
  std::condition_variable wake;
  std::atomic<int> sleepers{0};

  // Runs chunks of job `generation` until none is left. num_chunks may already
  // belong to a newer job when read; the claim then fails on the generation.
  void RunChunks(uint32_t generation) {
    uint64_t current = word.load(std::memory_order_acquire);
    while (true) {
      if (WordGeneration(current) == generation && WordChunk(current) == kJobBeingWritten) {
        // The caller is publishing this job's parameters: a few stores away.
        PIER_CPU_RELAX();
        current = word.load(std::memory_order_acquire);
        continue;
      }
      // seq_cst pairs with the caller's stores in ParallelFor: a chunk count read here that
      // belongs to a newer job implies the word already moved on, so the claim below fails.
      if (WordGeneration(current) != generation ||
          WordChunk(current) >= num_chunks.load(std::memory_order_seq_cst)) {
        return;
      }
      if (!word.compare_exchange_weak(current, current + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        continue;
      }
      const int64_t index = WordChunk(current);
      const int64_t begin = index * chunk;
      const int64_t end = std::min(n, begin + chunk);
      (*fn)(begin, end);
      chunks_done.fetch_add(1, std::memory_order_acq_rel);
      current = word.load(std::memory_order_acquire);
    }
  }

  void WorkerLoop() {
    // Generation 0 is the state at construction, before any job: a worker that
    // starts late must still run job 1.
    uint32_t seen = 0;
    while (true) {
      // Spin briefly for the next job, then sleep until one is published.
      const Clock::time_point spin_until = Clock::now() + std::chrono::nanoseconds(spin_ns);
      uint32_t generation = seen;
      for (int i = 0;; ++i) {
        generation = WordGeneration(word.load(std::memory_order_acquire));
        if (generation != seen || stop.load(std::memory_order_relaxed)) break;
        PIER_CPU_RELAX();
        if ((i & 63) == 63 && Clock::now() >= spin_until) {
          std::unique_lock lock(mutex);
          sleepers.fetch_add(1, std::memory_order_seq_cst);
          wake.wait(lock, [&] {
            return WordGeneration(word.load(std::memory_order_seq_cst)) != seen ||
                   stop.load(std::memory_order_seq_cst);
          });
          sleepers.fetch_sub(1, std::memory_order_relaxed);
          i = 0;
        }
      }
      if (stop.load(std::memory_order_acquire)) return;
      seen = generation;
      RunChunks(generation);
    }
  }
};

ThreadPool::ThreadPool(int num_threads) : ThreadPool(num_threads, kDefaultSpinNs) {}

ThreadPool::ThreadPool(int num_threads, int64_t spin_ns) : state_(std::make_unique<State>()) {
  PIER_CHECK(num_threads >= 1, "a thread pool needs at least the calling thread");
  state_->num_threads = num_threads;
  state_->spin_ns = std::max<int64_t>(0, spin_ns);
  state_->workers.reserve(num_threads - 1);
  for (int i = 1; i < num_threads; ++i) {
    state_->workers.emplace_back([state = state_.get()] { state->WorkerLoop(); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stop.store(true, std::memory_order_seq_cst);
  }
  state_->wake.notify_all();
  for (std::thread& worker : state_->workers) worker.join();
}

int ThreadPool::num_threads() const { return state_->num_threads; }

void ThreadPool::ParallelFor(int64_t n, int64_t min_chunk,
                             const std::function<void(int64_t begin, int64_t end)>& fn) {
  if (n <= 0) return;
  State& s = *state_;
  min_chunk = std::max<int64_t>(1, min_chunk);
  const int64_t threads = s.num_threads;
  if (threads == 1 || n <= min_chunk) {
    fn(0, n);
    return;
  }
  PIER_CHECK(!s.busy.exchange(true, std::memory_order_acquire),
             "ThreadPool::ParallelFor called from two threads at once (or from inside itself)");

  // A few contiguous chunks per thread, claimed dynamically: when another process
  // takes a core for a while, the other threads pick up its share.
  constexpr int64_t kChunksPerThread = 4;
  const int64_t chunk =
      std::max(min_chunk, (n + threads * kChunksPerThread - 1) / (threads * kChunksPerThread));
  const int64_t num_chunks = (n + chunk - 1) / chunk;
  PIER_CHECK(num_chunks < (int64_t{1} << 31), "too many chunks");
  // Close the previous job first (see kJobBeingWritten), then write this one's
  // parameters, then open its chunks. Without the first step a worker that read the
  // previous word just before the new chunk count could claim a chunk past the old
  // job's end, run it with the new parameters and count it twice.
  const uint32_t generation = WordGeneration(s.word.load(std::memory_order_relaxed)) + 1;
  s.word.store(MakeWord(generation, kJobBeingWritten), std::memory_order_seq_cst);
  s.fn = &fn;
  s.n = n;
  s.chunk = chunk;
  s.num_chunks.store(static_cast<uint32_t>(num_chunks), std::memory_order_seq_cst);
  s.chunks_done.store(0, std::memory_order_relaxed);
  s.word.store(MakeWord(generation, 0), std::memory_order_seq_cst);
  if (s.sleepers.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard lock(s.mutex);
    s.wake.notify_all();
  }

  s.RunChunks(generation);
  for (int i = 0; s.chunks_done.load(std::memory_order_acquire) != num_chunks; ++i) {
    if (i < 4096) {
      PIER_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
  s.busy.store(false, std::memory_order_release);
}

}  // namespace pier
