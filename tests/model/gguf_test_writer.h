// GgufTestWriter: builds GGUF images in memory for tests (test-only, header-only).
//
// Writes the layout gguf_file.h reads: header, metadata, tensor infos, padding
// to `alignment`, then each tensor's bytes at an aligned offset. Fields can be
// overridden to produce the hostile files the reader must reject (wrong counts,
// raw type numbers, explicit offsets). Not thread-safe; a value type.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pier::model::testing {

class GgufTestWriter {
 public:
  // GGUF value type numbers (as in GgufType).
  enum : uint32_t {
    kU8 = 0,
    kI8 = 1,
    kU16 = 2,
    kI16 = 3,
    kU32 = 4,
    kI32 = 5,
    kF32 = 6,
    kBool = 7,
    kString = 8,
    kArray = 9,
    kU64 = 10,
    kI64 = 11,
    kF64 = 12,
  };

  uint32_t magic = 0x46554747u;  // "GGUF"
  uint32_t version = 3;
  uint32_t alignment = 32;  // layout alignment; add "general.alignment" yourself to change it
  std::optional<uint64_t> tensor_count_override;
  std::optional<uint64_t> kv_count_override;

  // ---- metadata ----
  void AddRaw(std::string_view key, uint32_t type, std::vector<uint8_t> value_bytes) {
    std::vector<uint8_t> bytes;
    PutString(bytes, key);
    Put<uint32_t>(bytes, type);
    bytes.insert(bytes.end(), value_bytes.begin(), value_bytes.end());
    kvs_.push_back(std::move(bytes));
  }
  void AddU8(std::string_view key, uint8_t v) { AddRaw(key, kU8, Encode(v)); }
  void AddU32(std::string_view key, uint32_t v) { AddRaw(key, kU32, Encode(v)); }
  void AddI32(std::string_view key, int32_t v) { AddRaw(key, kI32, Encode(v)); }
  void AddU64(std::string_view key, uint64_t v) { AddRaw(key, kU64, Encode(v)); }
  void AddI64(std::string_view key, int64_t v) { AddRaw(key, kI64, Encode(v)); }
  void AddF32(std::string_view key, float v) { AddRaw(key, kF32, Encode(v)); }
  void AddF64(std::string_view key, double v) { AddRaw(key, kF64, Encode(v)); }
  void AddBool(std::string_view key, bool v) { AddRaw(key, kBool, {uint8_t(v ? 1 : 0)}); }
  void AddString(std::string_view key, std::string_view v) {
    std::vector<uint8_t> bytes;
    PutString(bytes, v);
    AddRaw(key, kString, std::move(bytes));
  }
  void AddStringArray(std::string_view key, const std::vector<std::string>& items) {
    std::vector<uint8_t> bytes;
    Put<uint32_t>(bytes, kString);
    Put<uint64_t>(bytes, items.size());
    for (const std::string& item : items) PutString(bytes, item);
    AddRaw(key, kArray, std::move(bytes));
  }
  template <typename T>
  void AddArray(std::string_view key, uint32_t element_type, const std::vector<T>& items) {
    std::vector<uint8_t> bytes;
    Put<uint32_t>(bytes, element_type);
    Put<uint64_t>(bytes, items.size());
    for (const T& item : items) Put<T>(bytes, item);
    AddRaw(key, kArray, std::move(bytes));
  }

  // ---- tensors ----
  // `data` is written at the next aligned offset unless `offset` (relative to the
  // data section) is given; then the data is written there (if it fits the layout) too.
  void AddTensor(std::string_view name, uint32_t raw_type, std::vector<uint64_t> dims,
                 std::vector<uint8_t> data, std::optional<uint64_t> offset = std::nullopt) {
    tensors_.push_back({std::string(name), raw_type, std::move(dims), std::move(data), offset});
  }

  std::vector<uint8_t> Build() const {
    std::vector<uint8_t> out;
    Put<uint32_t>(out, magic);
    Put<uint32_t>(out, version);
    Put<uint64_t>(out, tensor_count_override.value_or(tensors_.size()));
    Put<uint64_t>(out, kv_count_override.value_or(kvs_.size()));
    for (const auto& kv : kvs_) out.insert(out.end(), kv.begin(), kv.end());
    // Assign offsets.
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const Tensor& t : tensors_) {
      const uint64_t offset = t.offset.value_or(next);
      offsets.push_back(offset);
      next = AlignUp(std::max(next, offset + t.data.size()));
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const Tensor& t = tensors_[i];
      PutString(out, t.name);
      Put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) Put<uint64_t>(out, d);
      Put<uint32_t>(out, t.raw_type);
      Put<uint64_t>(out, offsets[i]);
    }
    if (tensors_.empty()) return out;
    out.resize(AlignUp(out.size()), 0);
    const size_t data_start = out.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const Tensor& t = tensors_[i];
      if (offsets[i] > (1ull << 30)) continue;  // a hostile offset: write no data
      const size_t at = data_start + offsets[i];
      if (out.size() < at + t.data.size()) out.resize(at + t.data.size(), 0);
      if (!t.data.empty()) std::memcpy(out.data() + at, t.data.data(), t.data.size());
    }
    out.resize(data_start + AlignUp(out.size() - data_start), 0);
    return out;
  }

  template <typename T>
  static std::vector<uint8_t> Encode(T value) {
    std::vector<uint8_t> bytes;
    Put<T>(bytes, value);
    return bytes;
  }
  template <typename T>
  static void Put(std::vector<uint8_t>& out, T value) {
    const size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &value, sizeof(T));
  }
  static void PutString(std::vector<uint8_t>& out, std::string_view text) {
    Put<uint64_t>(out, text.size());
    out.insert(out.end(), text.begin(), text.end());
  }

 private:
  struct Tensor {
    std::string name;
    uint32_t raw_type;
    std::vector<uint64_t> dims;
    std::vector<uint8_t> data;
    std::optional<uint64_t> offset;
  };

  uint64_t AlignUp(uint64_t n) const { return (n + alignment - 1) / alignment * alignment; }

  std::vector<std::vector<uint8_t>> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace pier::model::testing
