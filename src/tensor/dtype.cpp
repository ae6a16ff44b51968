#include "tensor/dtype.h"

#include <limits>

#include "common/check.h"

namespace pier {
namespace {

struct TraitsEntry {
  uint32_t raw_type;
  DTypeTraits traits;
};

// Block geometry as ggml defines it (cross-checked with gguf-py's GGML_QUANT_SIZES).
constexpr TraitsEntry kTraitsTable[] = {
    {0, {"f32", 1, 4, true}},          {1, {"f16", 1, 2, true}},
    {2, {"q4_0", 32, 18, true}},       {3, {"q4_1", 32, 20, true}},
    {6, {"q5_0", 32, 22, true}},       {7, {"q5_1", 32, 24, true}},
    {8, {"q8_0", 32, 34, true}},       {9, {"q8_1", 32, 40, false}},
    {10, {"q2_k", 256, 84, false}},    {11, {"q3_k", 256, 110, false}},
    {12, {"q4_k", 256, 144, true}},    {13, {"q5_k", 256, 176, true}},
    {14, {"q6_k", 256, 210, true}},    {15, {"q8_k", 256, 292, false}},
    {16, {"iq2_xxs", 256, 66, false}}, {17, {"iq2_xs", 256, 74, false}},
    {18, {"iq3_xxs", 256, 98, false}}, {19, {"iq1_s", 256, 50, false}},
    {20, {"iq4_nl", 32, 18, false}},   {21, {"iq3_s", 256, 110, false}},
    {22, {"iq2_s", 256, 82, false}},   {23, {"iq4_xs", 256, 136, false}},
    {24, {"i8", 1, 1, false}},         {25, {"i16", 1, 2, false}},
    {26, {"i32", 1, 4, false}},        {27, {"i64", 1, 8, false}},
    {28, {"f64", 1, 8, false}},        {29, {"iq1_m", 256, 56, false}},
    {30, {"bf16", 1, 2, true}},        {34, {"tq1_0", 256, 54, false}},
    {35, {"tq2_0", 256, 66, false}},   {39, {"mxfp4", 32, 17, false}},
    {40, {"nvfp4", 64, 36, false}},    {41, {"q1_0", 128, 18, false}},
};

}  // namespace

std::optional<DTypeTraits> GetDTypeTraits(uint32_t raw_type) {
  for (const TraitsEntry& entry : kTraitsTable) {
    if (entry.raw_type == raw_type) return entry.traits;
  }
  return std::nullopt;
}

DTypeTraits Traits(DType type) {
  std::optional<DTypeTraits> traits = GetDTypeTraits(static_cast<uint32_t>(type));
  PIER_CHECK(traits.has_value(), "DType value outside the ggml type table");
  return *traits;
}

std::string_view DTypeName(DType type) { return Traits(type).name; }

std::optional<uint64_t> RowBytes(DType type, int64_t n_elements) {
  const DTypeTraits traits = Traits(type);
  if (n_elements < 0 || n_elements % traits.block_size != 0) return std::nullopt;
  const uint64_t blocks = static_cast<uint64_t>(n_elements / traits.block_size);
  const uint64_t type_size = static_cast<uint64_t>(traits.type_size);
  if (blocks > std::numeric_limits<uint64_t>::max() / type_size) return std::nullopt;
  return blocks * type_size;
}

}  // namespace pier
