// CPU lists as Linux writes them (`0-3,8,10-11`, as in /proc/PID/status and taskset -c):
// the `cpus` key of a model's binding and how bindings are printed.
//
// Thread-safety: plain functions on values.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace pier::placement {

// Sorted, without duplicates. INVALID_ARGUMENT naming the text for anything else than
// comma-separated numbers and ranges a-b (a <= b) below 4096.
[[nodiscard]] Result<std::vector<int>> ParseCpuList(std::string_view text);

// {0,1,2,3,8} -> "0-3,8"; {} -> "".
std::string FormatCpuList(const std::vector<int>& cpus);

}  // namespace pier::placement
