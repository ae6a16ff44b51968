// The instruction-set level every CPU kernel runs at: one probe of the CPU for all of them
// (MatMul, paged attention, the row operations, the K/V conversions), and one override.
//
// Levels are nested: kAvx2 means AVX2 + FMA + F16C, kAvx512 adds AVX-512 F/VL/BW/VNNI. Each
// kernel has a path per level it gains from (or takes the next lower one's), and every path
// gives the same bits as the scalar one, so the level changes speed, never results.
//
// PIER_CPU_ISA=scalar|avx2|avx512 in the environment forces a level (to test or benchmark one
// path on a machine that has a higher one). ValidateCpuIsaOverride() reports a bad value or a
// level this CPU lacks; ActiveIsa() never returns a level the CPU cannot run.
//
// Thread-safety: all functions are safe to call from any thread; SetActiveIsaForTesting()
// must not race with running kernels.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "common/status.h"

namespace pier::kernels {

enum class Isa : uint8_t { kScalar, kAvx2, kAvx512 };

// "scalar", "avx2" or "avx512".
const char* IsaName(Isa isa);
// The level named `name` ("scalar", "avx2", "avx512"); INVALID_ARGUMENT naming the accepted
// values otherwise.
[[nodiscard]] Result<Isa> ParseIsa(std::string_view name);

// Whether this CPU (and build) can run `isa`'s paths.
bool IsaSupported(Isa isa);
// The highest level this CPU supports.
Isa BestIsa();

// The level the kernels use: PIER_CPU_ISA when it is set to a supported level, BestIsa()
// otherwise (or what SetActiveIsaForTesting chose). Read on every kernel call: cheap.
Isa ActiveIsa();

// OK when PIER_CPU_ISA is unset or names a level this CPU supports; otherwise
// INVALID_ARGUMENT (unknown name) or UNSUPPORTED (a level this CPU lacks), naming the value
// and the levels this CPU has. Commands call it at start, so a bad override is an error
// instead of a silent fallback.
[[nodiscard]] Status ValidateCpuIsaOverride();

namespace internal {
// Forces ActiveIsa() (a supported level) for tests that compare paths in one process;
// std::nullopt returns to the default.
void SetActiveIsaForTesting(std::optional<Isa> isa);
}  // namespace internal

}  // namespace pier::kernels
