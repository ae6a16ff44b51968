// Clang's thread-safety annotations (-Wthread-safety), so that "this field is guarded by that
// mutex" is checked by the compiler instead of written in a comment. Under other compilers
// they expand to nothing. Use them with pier::Mutex / pier::MutexLock (common/mutex.h):
// std::mutex itself carries no annotations in libstdc++.
//
//   Mutex mutex_;
//   int pending_ PIER_GUARDED_BY(mutex_);
//   void DrainLocked() PIER_REQUIRES(mutex_);
//
// The check runs in the clang thread-safety pass (tests/lint: thread_safety_check).
#pragma once

#if defined(__clang__)
#define PIER_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define PIER_THREAD_ANNOTATION(x)
#endif

#define PIER_CAPABILITY(name) PIER_THREAD_ANNOTATION(capability(name))
#define PIER_SCOPED_CAPABILITY PIER_THREAD_ANNOTATION(scoped_lockable)
#define PIER_GUARDED_BY(mu) PIER_THREAD_ANNOTATION(guarded_by(mu))
#define PIER_PT_GUARDED_BY(mu) PIER_THREAD_ANNOTATION(pt_guarded_by(mu))
#define PIER_REQUIRES(...) PIER_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define PIER_EXCLUDES(...) PIER_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define PIER_ACQUIRE(...) PIER_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define PIER_RELEASE(...) PIER_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define PIER_ASSERT_CAPABILITY(x) PIER_THREAD_ANNOTATION(assert_capability(x))
#define PIER_RETURN_CAPABILITY(x) PIER_THREAD_ANNOTATION(lock_returned(x))
#define PIER_NO_THREAD_SAFETY_ANALYSIS PIER_THREAD_ANNOTATION(no_thread_safety_analysis)
