#include "memory/memory_error.h"

#include "memory/byte_size.h"

namespace pier {

std::string_view MemoryErrorKindName(MemoryErrorKind kind) {
  switch (kind) {
    case MemoryErrorKind::kInvalidRequest:
      return "invalid_request";
    case MemoryErrorKind::kOwnerQuota:
      return "owner_quota";
    case MemoryErrorKind::kBudget:
      return "budget";
    case MemoryErrorKind::kDeviceOutOfMemory:
      return "device_out_of_memory";
    case MemoryErrorKind::kOwnerUnresponsive:
      return "owner_unresponsive";
    case MemoryErrorKind::kReclaimPending:
      return "reclaim_pending";
    case MemoryErrorKind::kReclaimTimedOut:
      return "reclaim_timed_out";
  }
  return "unknown";
}

Status MemoryError::ToStatus() const {
  std::string message = "owner '" + owner + "' asked for " + FormatBytes(requested_bytes) + ": ";
  StatusCode code = StatusCode::kResourceExhausted;
  switch (kind) {
    case MemoryErrorKind::kInvalidRequest:
      code = StatusCode::kInvalidArgument;
      message += "invalid request";
      break;
    case MemoryErrorKind::kOwnerQuota:
      message += "over its quota (uses " + FormatBytes(used_bytes) + " of " +
                 FormatBytes(quota_bytes) + ")";
      break;
    case MemoryErrorKind::kBudget:
      message += "over the memory budget (owner uses " + FormatBytes(used_bytes) + ")";
      break;
    case MemoryErrorKind::kDeviceOutOfMemory:
      message += "the device is out of memory (owner uses " + FormatBytes(used_bytes) + ")";
      break;
    case MemoryErrorKind::kOwnerUnresponsive:
      code = StatusCode::kFailedPrecondition;
      message +=
          "refused: the owner missed a shrink deadline and may not grow until it frees "
          "what was asked";
      break;
    case MemoryErrorKind::kReclaimPending:
      code = StatusCode::kUnavailable;
      message += "memory is being reclaimed from other owners; retry shortly";
      break;
    case MemoryErrorKind::kReclaimTimedOut:
      code = StatusCode::kUnavailable;
      message += "the owners asked to give memory back missed their deadline";
      break;
  }
  if (!detail.empty()) message += " (" + detail + ")";
  if (kind != MemoryErrorKind::kInvalidRequest) {
    message +=
        "; " + FormatBytes(free_bytes) + " free in the budget of " + FormatBytes(budget_bytes);
  }
  return Status(code, std::move(message));
}

}  // namespace pier
