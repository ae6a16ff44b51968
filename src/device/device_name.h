// How devices are named in configs, flags and the worker protocol: "cpu", "cuda:N" (GPU N in PCI
// bus order), a GPU's UUID ("GPU-...") or a MIG instance's ("MIG-..."), as `pier devices` lists
// them. One parser for every place that reads such a name.
//
// Thread-safety: pure functions.
#pragma once

#include <string_view>

namespace pier {

// "cuda:N" -> N (1 to 3 digits); -1 for anything else.
inline int CudaOrdinalOf(std::string_view name) {
  if (!name.starts_with("cuda:") || name.size() <= 5 || name.size() > 8) return -1;
  int ordinal = 0;
  for (char c : name.substr(5)) {
    if (c < '0' || c > '9') return -1;
    ordinal = ordinal * 10 + (c - '0');
  }
  return ordinal;
}

// Whether `name` names a device in one of the forms above (not whether it exists).
inline bool IsDeviceName(std::string_view name) {
  return name == "cpu" || CudaOrdinalOf(name) >= 0 ||
         ((name.starts_with("GPU-") || name.starts_with("MIG-")) && name.size() > 4);
}

}  // namespace pier
