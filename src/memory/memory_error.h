// MemoryError and MemoryResult<T>: typed, machine-readable allocation failures.
//
// Every refusal by the governor (over an owner's quota, over the device budget, device out
// of memory, an unresponsive owner, a bad request) carries the numbers a caller needs to act:
// which owner, how much it asked for, how much it uses, its quota, and how much is free. The
// scheduler reads the fields (to preempt or queue); a user reads ToStatus().message().
// MemoryResult<T> is Result<T, MemoryError> (common/status.h): ok, status, error, value, ->,
// *, so PIER_ASSIGN_OR_RETURN works with it in functions returning Status or Result.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace pier {

enum class MemoryErrorKind : uint8_t {
  kInvalidRequest,     // zero or absurd size, unknown owner, bad lease parameters
  kOwnerQuota,         // the owner's maximum would be exceeded
  kBudget,             // the device budget (after every owner's guarantee) would be exceeded
  kDeviceOutOfMemory,  // the device itself (or fragmentation) refused, even after trimming
  kOwnerUnresponsive,  // the owner missed a shrink deadline and may not grow until it complies
  kReclaimPending,     // memory is being reclaimed from others; retry (the caller did not wait)
  kReclaimTimedOut,    // the caller waited but the owners asked to shrink missed the deadline
};

// "owner_quota", "budget", ...
std::string_view MemoryErrorKindName(MemoryErrorKind kind);

struct MemoryError {
  MemoryErrorKind kind = MemoryErrorKind::kInvalidRequest;
  std::string owner;  // the owner that asked
  uint64_t requested_bytes = 0;
  uint64_t used_bytes = 0;    // charged to the owner before the request
  uint64_t quota_bytes = 0;   // the owner's maximum
  uint64_t free_bytes = 0;    // what the owner could still get from the budget now
  uint64_t budget_bytes = 0;  // the device budget
  std::string detail;         // extra words for the message (which owner failed a deadline, ...)

  // kInvalidArgument, kResourceExhausted, kFailedPrecondition or kUnavailable with a message
  // such as: "owner 'llama/kv' asked for 64.0 MiB: over its quota (uses 960.0 MiB of 1.0 GiB);
  // 2.3 GiB free in the budget of 12.0 GiB".
  Status ToStatus() const;
};

// A value or the MemoryError that refused it.
template <typename T>
using MemoryResult = Result<T, MemoryError>;

// For calls that return nothing on success.
struct MemoryOk {};
using MemoryStatus = MemoryResult<MemoryOk>;

}  // namespace pier
