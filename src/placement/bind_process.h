// Applies a Binding to the calling process (the worker, before it loads its model, so every
// thread it starts and every page it touches inherits it): its CPUs with hwloc_set_cpubind
// and, when a node is given, its memory with hwloc_set_membind (strict: a page that cannot
// come from the node is an error, not a silent remote allocation).
//
// Thread-safety: call it before starting threads.
#pragma once

#include "common/status.h"
#include "placement/binding.h"

namespace pier::placement {

// INVALID_ARGUMENT naming what could not be applied (CPUs this process may not use, a node
// that does not exist, binding refused by the kernel) with the system's reason.
[[nodiscard]] Status BindThisProcess(const std::vector<int>& cpus, int numa_node);

}  // namespace pier::placement
