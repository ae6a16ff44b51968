#include "common/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace pier {
namespace {

// Runs ParallelFor and returns how often each index was visited.
std::vector<int> VisitCounts(ThreadPool& pool, int64_t n, int64_t min_chunk) {
  std::vector<std::atomic<int>> counts(n);
  pool.ParallelFor(n, min_chunk, [&](int64_t begin, int64_t end) {
    EXPECT_LE(0, begin);
    EXPECT_LT(begin, end);
    EXPECT_LE(end, n);
    for (int64_t i = begin; i < end; ++i) counts[i].fetch_add(1);
  });
  std::vector<int> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = counts[i].load();
  return out;
}

TEST(ThreadPoolTest, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {1, 2, 3, 7, 64, 1000, 4097}) {
      for (int64_t min_chunk : {1, 4, 100}) {
        std::vector<int> counts = VisitCounts(pool, n, min_chunk);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(counts[i], 1) << "threads=" << threads << " n=" << n << " i=" << i;
        }
      }
    }
  }
}

TEST(ThreadPoolTest, ChunksRespectMinimumLength) {
  ThreadPool pool(4);
  std::mutex mutex;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  pool.ParallelFor(103, 10, [&](int64_t begin, int64_t end) {
    std::lock_guard lock(mutex);
    ranges.emplace_back(begin, end);
  });
  int64_t total = 0;
  for (auto [begin, end] : ranges) {
    total += end - begin;
    if (end != 103) {
      EXPECT_GE(end - begin, 10);
    }
  }
  EXPECT_EQ(total, 103);
}

// Lengths near the largest int64_t: the chunks still tile [0, n) exactly (the chunk
// arithmetic must not overflow).
TEST(ThreadPoolTest, HugeLengthsAreSplitWithoutOverflow) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  ThreadPool pool(2);
  for (int64_t n : {kMax, kMax - 2, kMax / 2 + 1}) {
    for (int64_t min_chunk : {int64_t{1}, kMax / 4}) {
      std::mutex mutex;
      std::vector<std::pair<int64_t, int64_t>> ranges;
      pool.ParallelFor(n, min_chunk, [&](int64_t begin, int64_t end) {
        std::lock_guard lock(mutex);
        ranges.emplace_back(begin, end);
      });
      std::sort(ranges.begin(), ranges.end());
      ASSERT_FALSE(ranges.empty());
      EXPECT_EQ(ranges.front().first, 0);
      EXPECT_EQ(ranges.back().second, n) << "n=" << n << " min_chunk=" << min_chunk;
      for (size_t i = 0; i < ranges.size(); ++i) {
        EXPECT_LT(ranges[i].first, ranges[i].second);
        if (i > 0) {
          EXPECT_EQ(ranges[i].first, ranges[i - 1].second);
        }
      }
    }
  }
}

TEST(ThreadPoolTest, ZeroLengthCallsNothing) {
  ThreadPool pool(2);
  bool called = false;
  pool.ParallelFor(0, 1, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
}

TEST(ThreadPoolTest, ManyBackToBackCallsAllComplete) {
  for (int64_t spin_ns : {int64_t{0}, ThreadPool::kDefaultSpinNs}) {
    ThreadPool pool(3, spin_ns);
    std::vector<int64_t> sums(64, 0);
    for (int iter = 0; iter < 20000; ++iter) {
      // Each call writes its own slots; the next call reads them, so a call that
      // returned before its chunks finished would show up as a wrong sum.
      const int64_t n = 1 + iter % 64;
      pool.ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) sums[i] += 1;
      });
    }
    int64_t total = 0;
    for (int64_t v : sums) total += v;
    int64_t expected = 0;
    for (int iter = 0; iter < 20000; ++iter) expected += 1 + iter % 64;
    EXPECT_EQ(total, expected) << "spin_ns=" << spin_ns;
  }
}

TEST(ThreadPoolTest, SingleThreadPoolRunsOnCallingThread) {
  ThreadPool pool(1);
  const std::thread::id caller = std::this_thread::get_id();
  int calls = 0;
  pool.ParallelFor(100, 1, [&](int64_t begin, int64_t end) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 100);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
}

TEST(ThreadPoolTest, UsesWorkerThreadsWhenWorkIsSplit) {
  ThreadPool pool(2, 0);
  std::mutex mutex;
  std::vector<std::thread::id> ids;
  // Chunks block until both have started, so they must run on two threads.
  std::atomic<int> started{0};
  pool.ParallelFor(2, 1, [&](int64_t, int64_t) {
    started.fetch_add(1);
    while (started.load() < 2) std::this_thread::yield();
    std::lock_guard lock(mutex);
    ids.push_back(std::this_thread::get_id());
  });
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_NE(ids[0], ids[1]);
}

// A thread that is held up leaves its share to the others: the first chunk a worker runs
// waits until every other chunk is done, which only happens if the calling thread takes
// that worker's remaining chunks (its own share is half of them).
TEST(ThreadPoolTest, IdleThreadsTakeTheChunksOfAHeldUpOne) {
  ThreadPool pool(2, 0);
  const std::thread::id caller = std::this_thread::get_id();
  constexpr int64_t kChunks = 8;
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> done{0}, by_caller{0};
    std::atomic<bool> held{false}, timed_out{false};
    pool.ParallelFor(kChunks, 1, [&](int64_t begin, int64_t end) {
      ASSERT_EQ(end, begin + 1);
      if (std::this_thread::get_id() == caller) {
        by_caller.fetch_add(1);
      } else if (!held.exchange(true)) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (done.load() < kChunks - 1) {
          if (std::chrono::steady_clock::now() > deadline) {
            timed_out = true;
            break;
          }
          std::this_thread::yield();
        }
      }
      done.fetch_add(1);
    });
    ASSERT_FALSE(timed_out) << "the held-up worker's chunks were never taken over";
    EXPECT_EQ(done.load(), kChunks);
    EXPECT_GE(by_caller.load(), held.load() ? kChunks - 1 : kChunks / 2);
  }
}

// Jobs of different lengths back to back, with workers that arrive late to some: every index
// of every job exactly once (a late worker must never run a chunk of one job with another's
// parameters).
TEST(ThreadPoolTest, BackToBackJobsOfVaryingShapeRunEachIndexOnce) {
  ThreadPool pool(3, 0);
  std::vector<std::atomic<int>> counts(257);
  for (int iter = 0; iter < 5000; ++iter) {
    const int64_t n = 1 + (iter * 37) % 257;
    const int64_t min_chunk = 1 + iter % 5;
    pool.ParallelFor(n, min_chunk, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) counts[i].fetch_add(1, std::memory_order_relaxed);
    });
    for (int64_t i = 0; i < 257; ++i) {
      ASSERT_EQ(counts[i].exchange(0), i < n ? 1 : 0) << "iter=" << iter << " i=" << i;
    }
  }
}

TEST(ThreadPoolTest, IdleWorkersSleepAndWakeForNextJob) {
  ThreadPool pool(3, 1000);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // workers are asleep now
  std::vector<int> counts = VisitCounts(pool, 300, 1);
  for (int c : counts) ASSERT_EQ(c, 1);
}

}  // namespace
}  // namespace pier
