// Mutex and MutexLock: std::mutex and a scoped lock with clang thread-safety annotations
// (common/thread_annotations.h), so that fields marked PIER_GUARDED_BY(mu) are only touched
// with `mu` held, checked at compile time by clang. Waiting on a condition variable goes
// through MutexLock::Wait, whose predicate runs with the lock held (the predicate calls
// mu.AssertHeld() to tell the analysis so).
//
// Thread-safety: as std::mutex.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "common/thread_annotations.h"

namespace pier {

class PIER_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() PIER_ACQUIRE() { mu_.lock(); }
  void Unlock() PIER_RELEASE() { mu_.unlock(); }
  // Tells the analysis that the caller holds the mutex (in callbacks run under a lock, such
  // as condition-variable predicates). Checks nothing at run time.
  void AssertHeld() const PIER_ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

class PIER_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) PIER_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() PIER_RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // cv.wait(lock, pred): the lock is released while waiting and held when pred runs.
  template <class Predicate>
  void Wait(std::condition_variable& cv, Predicate pred) {
    cv.wait(lock_, pred);
  }
  template <class Predicate, class Clock, class Duration>
  bool WaitUntil(std::condition_variable& cv,
                 const std::chrono::time_point<Clock, Duration>& deadline, Predicate pred) {
    return cv.wait_until(lock_, deadline, pred);
  }
  template <class Clock, class Duration>
  void WaitUntil(std::condition_variable& cv,
                 const std::chrono::time_point<Clock, Duration>& deadline) {
    cv.wait_until(lock_, deadline);
  }
  template <class Predicate, class Rep, class Period>
  bool WaitFor(std::condition_variable& cv, const std::chrono::duration<Rep, Period>& timeout,
               Predicate pred) {
    return cv.wait_for(lock_, timeout, pred);
  }
  // Releases and retakes the lock (around callbacks that must not run under it).
  void Unlock() PIER_RELEASE() { lock_.unlock(); }
  void Lock() PIER_ACQUIRE() { lock_.lock(); }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace pier
