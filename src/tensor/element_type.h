// Element types of the tensors a tensor model (an ONNX graph) takes and gives, as the KServe v2
// protocol names them ("FP32", "INT64", "BYTES", ...), with their sizes.
//
// BYTES elements have no fixed size: a BYTES tensor's bytes are Triton's binary form, each
// element a 4-byte little-endian length followed by that many bytes.
// Plain data and pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace pier {

enum class ElementType : uint8_t {
  kBool,
  kUint8,
  kUint16,
  kUint32,
  kUint64,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kFp16,
  kBf16,
  kFp32,
  kFp64,
  kBytes,
};

// KServe's name: "BOOL", "UINT8", ..., "FP16", "BF16", "FP32", "FP64", "BYTES".
std::string_view ElementTypeName(ElementType type);
// The type KServe's name stands for; nullopt for any other text (names are case-sensitive,
// as in the protocol).
std::optional<ElementType> ParseElementType(std::string_view name);
// Bytes per element; 0 for BYTES (variable).
int64_t ElementSize(ElementType type);

}  // namespace pier
