// ThreadPool: a persistent pool of compute threads for data-parallel kernels.
//
// ParallelFor splits [0, n) into contiguous chunks and runs them on the pool's
// threads plus the calling thread, returning when all are done. Workers spin
// briefly after finishing (so back-to-back kernels of one forward pass do not pay
// a wake-up) and then sleep on a condition variable, so idle workers leave the
// cores to I/O threads. Which index range a thread gets must never influence a
// result: kernels write disjoint outputs and keep every reduction inside one
// index (see "Batch invariance" in docs/architecture.md).
//
// Thread-safety: one ParallelFor at a time per pool (the engine thread owns its
// pool); calling it from two threads at once is a bug (PIER_CHECK).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace pier {

class ThreadPool {
 public:
  // How long an idle worker spins for the next job before it sleeps.
  static constexpr int64_t kDefaultSpinNs = 50'000;

  // `num_threads` counts the calling thread: 1 means no worker threads.
  explicit ThreadPool(int num_threads);
  // `spin_ns`: how long idle workers poll for the next job before they sleep on a
  // condition variable (0: sleep at once).
  ThreadPool(int num_threads, int64_t spin_ns);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const;

  // Calls fn(begin, end) over disjoint chunks covering [0, n), each at least
  // `min_chunk` long (except the last), and waits for all of them.
  void ParallelFor(int64_t n, int64_t min_chunk,
                   const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace pier
