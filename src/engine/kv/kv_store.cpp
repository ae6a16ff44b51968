#include "engine/kv/kv_store.h"

#include <cstring>
#include <string>

#include "common/check.h"

namespace pier::engine {

std::string_view KvDtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32:
      return "f32";
    case KvDtype::kF16:
      return "f16";
    case KvDtype::kQ8_0:
      return "q8_0";
  }
  return "unknown";
}

Result<KvDtype> ParseKvDtype(std::string_view name) {
  if (name == "f32") return KvDtype::kF32;
  if (name == "f16") return KvDtype::kF16;
  if (name == "q8_0") return KvDtype::kQ8_0;
  return InvalidArgumentError("KV dtype '" + std::string(name) +
                              "' is not supported (accepted: f32, f16, q8_0)");
}

Result<KvPolicy> ParseKvPolicy(std::string_view name) {
  if (name == "static") return KvPolicy::kStatic;
  if (name == "elastic") return KvPolicy::kElastic;
  return InvalidArgumentError("unknown KV policy '" + std::string(name) +
                              "' (expected elastic or static)");
}

Status ValidateKvLayout(const KvLayout& layout) {
  if (layout.n_layer < 1 || layout.block_size < 1 || layout.n_kv_head < 1 || layout.head_dim < 1) {
    return InvalidArgumentError("KV store: every layout dimension must be positive");
  }
  if (layout.dtype != KvDtype::kF32 && layout.dtype != KvDtype::kF16 &&
      layout.dtype != KvDtype::kQ8_0) {
    return InvalidArgumentError("KV store: unknown KV dtype");
  }
  if (layout.dtype == KvDtype::kQ8_0 && layout.head_dim % 32 != 0) {
    return InvalidArgumentError(
        "KV dtype q8_0 needs a head size that is a multiple of 32 (this "
        "model's is " +
        std::to_string(layout.head_dim) + "); use f16 or f32");
  }
  return Status::Ok();
}

Result<std::unique_ptr<PooledKvStore>> PooledKvStore::Create(const KvLayout& layout,
                                                             int64_t n_blocks,
                                                             MemoryGovernor& governor,
                                                             OwnerId owner) {
  PIER_RETURN_IF_ERROR(ValidateKvLayout(layout));
  if (n_blocks < 1 || n_blocks > (int64_t{1} << 31) - 1) {
    return InvalidArgumentError("KV store: block count " + std::to_string(n_blocks) +
                                " is out of range");
  }
  const size_t bytes = layout.bytes_per_block() * static_cast<size_t>(n_blocks);
  MemoryResult<Block> memory = governor.Allocate(owner, bytes);
  if (!memory.ok()) return memory.status();
  // Zeroed so that an unwritten slot never holds NaNs from an earlier owner of the memory
  // (through the device: on a GPU the block is device memory).
  Device& device = governor.device();
  PIER_RETURN_IF_ERROR(device.Memset(memory->data(), 0, bytes, Stream{}));
  PIER_RETURN_IF_ERROR(device.Synchronize(Stream{}));
  return std::unique_ptr<PooledKvStore>(
      new PooledKvStore(layout, &device, n_blocks, std::move(memory).value()));
}

std::byte* PooledKvStore::BlockData(int32_t block) const {
  PIER_CHECK(block >= 0 && block < n_blocks_, "KV block id out of range");
  return memory_.as<std::byte>() + static_cast<size_t>(block) * layout().bytes_per_block();
}

}  // namespace pier::engine
