#include "tensor/element_type.h"

#include <array>
#include <utility>

namespace pier {
namespace {

struct ElementTypeRow {
  ElementType type;
  std::string_view name;
  int64_t size;
};

constexpr std::array<ElementTypeRow, 14> kRows = {{
    {ElementType::kBool, "BOOL", 1},
    {ElementType::kUint8, "UINT8", 1},
    {ElementType::kUint16, "UINT16", 2},
    {ElementType::kUint32, "UINT32", 4},
    {ElementType::kUint64, "UINT64", 8},
    {ElementType::kInt8, "INT8", 1},
    {ElementType::kInt16, "INT16", 2},
    {ElementType::kInt32, "INT32", 4},
    {ElementType::kInt64, "INT64", 8},
    {ElementType::kFp16, "FP16", 2},
    {ElementType::kBf16, "BF16", 2},
    {ElementType::kFp32, "FP32", 4},
    {ElementType::kFp64, "FP64", 8},
    {ElementType::kBytes, "BYTES", 0},
}};

}  // namespace

std::string_view ElementTypeName(ElementType type) { return kRows[static_cast<size_t>(type)].name; }

std::optional<ElementType> ParseElementType(std::string_view name) {
  for (const ElementTypeRow& row : kRows) {
    if (row.name == name) return row.type;
  }
  return std::nullopt;
}

int64_t ElementSize(ElementType type) { return kRows[static_cast<size_t>(type)].size; }

}  // namespace pier
