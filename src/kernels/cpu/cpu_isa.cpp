#include "kernels/cpu/cpu_isa.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "common/check.h"

namespace pier::kernels {
namespace {

bool CpuHas(const char* feature) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
  __builtin_cpu_init();
  // __builtin_cpu_supports needs a string literal, hence the explicit list.
  const std::string_view f = feature;
  if (f == "avx2") return __builtin_cpu_supports("avx2");
  if (f == "fma") return __builtin_cpu_supports("fma");
  if (f == "f16c") return __builtin_cpu_supports("f16c");
  if (f == "avx512f") return __builtin_cpu_supports("avx512f");
  if (f == "avx512vl") return __builtin_cpu_supports("avx512vl");
  if (f == "avx512bw") return __builtin_cpu_supports("avx512bw");
  if (f == "avx512vnni") return __builtin_cpu_supports("avx512vnni");
#endif
  (void)feature;
  return false;
}

bool Detect(Isa isa) {
#ifndef PIER_KERNELS_X86
  // Only the scalar paths are compiled.
  if (isa != Isa::kScalar) return false;
#endif
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return CpuHas("avx2") && CpuHas("fma") && CpuHas("f16c");
    case Isa::kAvx512:
      return Detect(Isa::kAvx2) && CpuHas("avx512f") && CpuHas("avx512vl") && CpuHas("avx512bw") &&
             CpuHas("avx512vnni");
  }
  return false;
}

std::string SupportedList() {
  std::string list = "scalar";
  if (IsaSupported(Isa::kAvx2)) list += ", avx2";
  if (IsaSupported(Isa::kAvx512)) list += ", avx512";
  return list;
}

// PIER_CPU_ISA as read at the first call: the level, an error, or nothing when unset.
const Result<std::optional<Isa>>& Override() {
  static const Result<std::optional<Isa>> value = []() -> Result<std::optional<Isa>> {
    const char* env = std::getenv("PIER_CPU_ISA");
    if (env == nullptr || *env == '\0') return std::optional<Isa>();
    Result<Isa> isa = ParseIsa(env);
    if (!isa.ok()) return Status(isa.status().code(), "PIER_CPU_ISA: " + isa.status().message());
    if (!IsaSupported(*isa)) {
      return UnsupportedError(std::string("PIER_CPU_ISA=") + env +
                              ": this CPU lacks it (it has: " + SupportedList() + ")");
    }
    return std::optional<Isa>(*isa);
  }();
  return value;
}

Isa DefaultIsa() {
  const Result<std::optional<Isa>>& forced = Override();
  return forced.ok() && forced->has_value() ? **forced : BestIsa();
}

// kNone: no test override; otherwise the Isa's value.
constexpr int kNone = -1;
std::atomic<int> g_test_isa{kNone};

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kScalar:
      break;
  }
  return "scalar";
}

Result<Isa> ParseIsa(std::string_view name) {
  if (name == "scalar") return Isa::kScalar;
  if (name == "avx2") return Isa::kAvx2;
  if (name == "avx512") return Isa::kAvx512;
  return InvalidArgumentError("unknown CPU ISA level '" + std::string(name) +
                              "' (expected scalar, avx2 or avx512)");
}

bool IsaSupported(Isa isa) {
  static const bool supported[3] = {true, Detect(Isa::kAvx2), Detect(Isa::kAvx512)};
  return supported[static_cast<int>(isa)];
}

Isa BestIsa() {
  static const Isa best = [] {
    if (IsaSupported(Isa::kAvx512)) return Isa::kAvx512;
    if (IsaSupported(Isa::kAvx2)) return Isa::kAvx2;
    return Isa::kScalar;
  }();
  return best;
}

Isa ActiveIsa() {
  static const Isa by_default = DefaultIsa();
  const int forced = g_test_isa.load(std::memory_order_relaxed);
  return forced == kNone ? by_default : static_cast<Isa>(forced);
}

Status ValidateCpuIsaOverride() {
  const Result<std::optional<Isa>>& forced = Override();
  return forced.ok() ? Status() : forced.status();
}

namespace internal {

void SetActiveIsaForTesting(std::optional<Isa> isa) {
  PIER_CHECK(!isa.has_value() || IsaSupported(*isa), "SetActiveIsaForTesting: an unsupported ISA");
  g_test_isa.store(isa.has_value() ? static_cast<int>(*isa) : kNone, std::memory_order_relaxed);
}

}  // namespace internal
}  // namespace pier::kernels
