#include "common/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <thread>
#include <vector>

#include "common/check.h"
#include "common/mutex.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PIER_CPU_RELAX() _mm_pause()
#else
#define PIER_CPU_RELAX() std::this_thread::yield()
#endif

namespace pier {
namespace {

using Clock = std::chrono::steady_clock;

// A thread's share of the current job: the chunk indices [front, back) it has not started,
// packed in one word so that its owner (taking from the front) and a thread that ran out of
// work (stealing from the back) claim chunks with one compare-exchange each.
constexpr int kIndexBits = 32;
constexpr uint64_t MakeRange(uint32_t front, uint32_t back) {
  return (static_cast<uint64_t>(front) << kIndexBits) | back;
}
constexpr uint32_t RangeFront(uint64_t range) { return static_cast<uint32_t>(range >> kIndexBits); }
constexpr uint32_t RangeBack(uint64_t range) { return static_cast<uint32_t>(range); }

// Each share on its own cache line: the owner claims its chunks without touching a line
// another core is writing, so a balanced job moves few lines between cores: its publication
// (the shares and the generation), one look at each other share once a thread's own is
// done, and the completion count. (One shared claim counter, as before, moved a line per
// chunk: 16 sequences, 2 threads, ~250 jobs per step, cost 3-5% of the step.)
struct alignas(64) Share {
  std::atomic<uint64_t> range{MakeRange(0, 0)};
};

}  // namespace

struct ThreadPool::State {
  int num_threads = 1;
  int64_t spin_ns = 0;
  std::vector<std::thread> workers;
  // shares[i]: thread i's (0: the calling thread; worker w is thread w + 1).
  std::unique_ptr<Share[]> shares;

  // The current job; written by the caller while every share is empty (the job before
  // finished), before it publishes the new shares; read by a thread only after it claimed
  // a chunk of them.
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
  int64_t chunk = 0;

  std::atomic<uint32_t> generation{0};
  std::atomic<uint32_t> chunks_done{0};
  std::atomic<bool> busy{false};
  std::atomic<bool> stop{false};

  // Guards no data (what it orders is atomic): a worker checks for a job and goes to sleep
  // under it, and a notify is sent under it, so no wake-up falls between the two.
  Mutex mutex;
  std::condition_variable wake;
  std::atomic<int> sleepers{0};

  // Claims one chunk of share `i`: from the front when `own`, else from the back.
  bool Claim(int i, bool own, uint32_t* index) {
    std::atomic<uint64_t>& range = shares[i].range;
    uint64_t current = range.load(std::memory_order_acquire);
    while (true) {
      const uint32_t front = RangeFront(current), back = RangeBack(current);
      if (front >= back) return false;
      const uint64_t next = own ? MakeRange(front + 1, back) : MakeRange(front, back - 1);
      if (range.compare_exchange_weak(current, next, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        *index = own ? front : back - 1;
        return true;
      }
    }
  }

  // Thread `self` runs its share's chunks, then steals the others' from their backs until no
  // chunk is left unclaimed, then counts what it ran. A thread that arrives late (its share
  // emptied by the others) finds nothing and returns; one that arrives after the next job was
  // published runs that job's chunks, whose parameters were written before their shares.
  void RunChunks(int self) {
    uint32_t ran = 0;
    uint32_t index = 0;
    for (int k = 0; k < num_threads; ++k) {
      const int i = (self + k) % num_threads;
      while (Claim(i, i == self, &index)) {
        const int64_t begin = static_cast<int64_t>(index) * chunk;
        (*fn)(begin, begin + std::min(chunk, n - begin));
        ++ran;
      }
    }
    if (ran > 0) chunks_done.fetch_add(ran, std::memory_order_acq_rel);
  }

  void WorkerLoop(int self) {
    // Generation 0 is the state at construction, before any job.
    uint32_t seen = 0;
    while (true) {
      // Spin briefly for the next job, then sleep until one is published.
      const Clock::time_point spin_until = Clock::now() + std::chrono::nanoseconds(spin_ns);
      for (int i = 0;; ++i) {
        if (generation.load(std::memory_order_acquire) != seen ||
            stop.load(std::memory_order_relaxed)) {
          break;
        }
        PIER_CPU_RELAX();
        if ((i & 63) == 63 && Clock::now() >= spin_until) {
          MutexLock lock(mutex);
          sleepers.fetch_add(1, std::memory_order_seq_cst);
          lock.Wait(wake, [&] {
            return generation.load(std::memory_order_seq_cst) != seen ||
                   stop.load(std::memory_order_seq_cst);
          });
          sleepers.fetch_sub(1, std::memory_order_relaxed);
          i = 0;
        }
      }
      if (stop.load(std::memory_order_acquire)) return;
      seen = generation.load(std::memory_order_acquire);
      RunChunks(self);
    }
  }
};

ThreadPool::ThreadPool(int num_threads) : ThreadPool(num_threads, kDefaultSpinNs) {}

ThreadPool::ThreadPool(int num_threads, int64_t spin_ns) : state_(std::make_unique<State>()) {
  PIER_CHECK(num_threads >= 1, "a thread pool needs at least the calling thread");
  state_->num_threads = num_threads;
  state_->spin_ns = std::max<int64_t>(0, spin_ns);
  state_->shares = std::make_unique<Share[]>(static_cast<size_t>(num_threads));
  state_->workers.reserve(num_threads - 1);
  for (int i = 1; i < num_threads; ++i) {
    state_->workers.emplace_back([state = state_.get(), i] { state->WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(state_->mutex);
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

  // A few contiguous chunks per thread: each runs its own share's and then takes the others'
  // leftovers, so when another process takes a core for a while the other threads pick up
  // its share.
  constexpr int64_t kChunksPerThread = 4;
  // Rounded-up divisions that cannot overflow, whatever n is.
  auto divide_up = [](int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); };
  const int64_t chunk = std::max(min_chunk, divide_up(n, threads * kChunksPerThread));
  const int64_t num_chunks = divide_up(n, chunk);
  PIER_CHECK(num_chunks < (int64_t{1} << 31), "too many chunks");
  // Every share is empty here (the job before finished only once all its chunks were
  // claimed, run and counted), so no thread can claim a chunk while the parameters change.
  s.fn = &fn;
  s.n = n;
  s.chunk = chunk;
  s.chunks_done.store(0, std::memory_order_relaxed);
  // Thread i's share: chunks [i * num_chunks / threads, (i + 1) * num_chunks / threads).
  // Release: a thread that claims from a share sees the parameters and the reset count.
  for (int64_t i = 0; i < threads; ++i) {
    s.shares[i].range.store(MakeRange(static_cast<uint32_t>(i * num_chunks / threads),
                                      static_cast<uint32_t>((i + 1) * num_chunks / threads)),
                            std::memory_order_release);
  }
  s.generation.fetch_add(1, std::memory_order_seq_cst);
  if (s.sleepers.load(std::memory_order_seq_cst) > 0) {
    MutexLock lock(s.mutex);
    s.wake.notify_all();
  }

  s.RunChunks(0);
  for (int i = 0; s.chunks_done.load(std::memory_order_acquire) != num_chunks;) {
    if (i < 4096) {
      ++i;
      PIER_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
  s.busy.store(false, std::memory_order_release);
}

}  // namespace pier
