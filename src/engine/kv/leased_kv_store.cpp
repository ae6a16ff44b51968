#include "engine/kv/leased_kv_store.h"

#include <string>
#include <utility>

namespace pier::engine {

Result<std::unique_ptr<LeasedKvStore>> LeasedKvStore::Create(const KvLayout& layout,
                                                             const LeasedKvOptions& options,
                                                             MemoryGovernor& governor,
                                                             OwnerId owner) {
  if (layout.bytes_per_block() == 0 || layout.block_size < 1) {
    return InvalidArgumentError("leased KV store: empty block layout");
  }
  PIER_RETURN_IF_ERROR(ValidateKvLayout(layout));
  if (options.blocks_per_chunk < 1 || options.max_chunks < 1 ||
      options.initial_chunks > options.max_chunks || options.min_chunks > options.max_chunks) {
    return InvalidArgumentError(
        "leased KV store: need blocks_per_chunk >= 1 and min, initial <= max chunks (got " +
        std::to_string(options.min_chunks) + ", " + std::to_string(options.initial_chunks) + ", " +
        std::to_string(options.max_chunks) + ")");
  }
  std::unique_ptr<LeasedKvStore> store(
      new LeasedKvStore(layout, &governor.device(), options.blocks_per_chunk, options.min_chunks));
  LeaseOptions lease_options;
  lease_options.name = options.name;
  lease_options.chunk_bytes =
      layout.bytes_per_block() * static_cast<size_t>(options.blocks_per_chunk);
  lease_options.max_chunks = options.max_chunks;
  lease_options.min_chunks = options.min_chunks;
  lease_options.initial_chunks = options.initial_chunks;
  lease_options.use_virtual_memory = options.use_virtual_memory;
  lease_options.on_shrink_request = [s = store.get()](const ShrinkRequest& r) {
    s->OnShrinkRequest(r);
  };
  MemoryResult<std::unique_ptr<Lease>> lease = governor.CreateLease(owner, lease_options);
  if (!lease.ok()) return lease.status();
  store->lease_ = std::move(lease).value();
  return store;
}

std::byte* LeasedKvStore::BlockData(int32_t block) const {
  const auto chunk = static_cast<size_t>(block / blocks_per_chunk_);
  PIER_CHECK(block >= 0 && chunk < lease_->chunks(), "KV block outside the mapped chunks");
  return static_cast<std::byte*>(lease_->ChunkAddress(chunk)) +
         static_cast<size_t>(block % blocks_per_chunk_) * layout().bytes_per_block();
}

void LeasedKvStore::SetShrinkHandler(std::function<void(const ShrinkRequest&)> handler) {
  MutexLock lock(handler_mutex_);
  handler_ = std::move(handler);
}

void LeasedKvStore::OnShrinkRequest(const ShrinkRequest& request) {
  MutexLock lock(handler_mutex_);
  if (handler_) handler_(request);
}

}  // namespace pier::engine
