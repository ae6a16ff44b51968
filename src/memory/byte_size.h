// Parsing and printing of memory sizes and budgets: "512MiB", "2GB", "1.5GiB", "80%".
//
// Used for `--memory-budget`, `--device-memory` and configuration files. Binary units
// (KiB, MiB, GiB, TiB) are powers of 1024, decimal ones (KB, MB, GB, TB) powers of 1000; a
// bare number is bytes; "B" is accepted. Units are case-insensitive ("gib", "Mb" = MB).
// Anything else is an error a user can act on: negative, zero, garbage, more than 1 PiB, a
// percentage outside (0, 100].
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace pier {

// Sizes larger than this are treated as typos ("absurd").
inline constexpr uint64_t kMaxByteSize = uint64_t{1} << 50;  // 1 PiB

// "512MiB" -> 536870912. Fractions are allowed with a unit ("1.5GiB"); the result is
// rounded down to a whole byte. `what` names the setting in error messages.
[[nodiscard]] Result<uint64_t> ParseByteSize(std::string_view text,
                                             std::string_view what = "memory size");

// A budget as written by a user: an absolute size or a fraction of the device's capacity.
struct BudgetSpec {
  uint64_t bytes = 0;    // when !is_percent
  double percent = 100;  // when is_percent, in (0, 100]
  bool is_percent = true;

  static BudgetSpec Bytes(uint64_t bytes) { return BudgetSpec{bytes, 0, false}; }
  static BudgetSpec Percent(double percent) { return BudgetSpec{0, percent, true}; }

  // The budget in bytes on a device of `capacity_bytes`. kInvalidArgument when an absolute
  // budget exceeds the capacity (the message gives both numbers).
  [[nodiscard]] Result<uint64_t> Resolve(uint64_t capacity_bytes) const;
  std::string ToString() const;  // "80%" or "512.0 MiB"
};

// "80%" -> Percent(80); "2GiB" -> Bytes(2 << 30).
[[nodiscard]] Result<BudgetSpec> ParseBudget(std::string_view text,
                                             std::string_view what = "memory budget");

// 1536 -> "1.5 KiB"; 0 -> "0 B"; always binary units with one decimal.
std::string FormatBytes(uint64_t bytes);

}  // namespace pier
