// The KV dtype's names and the layouts and stores of each dtype.
#include "engine/kv/kv_store.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "device/cpu/cpu_device.h"
#include "memory/memory_governor.h"

namespace pier::engine {
namespace {

TEST(KvDtypeTest, ParsesItsNamesAndRefusesOthersNamingTheAccepted) {
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kQ8_0}) {
    Result<KvDtype> parsed = ParseKvDtype(KvDtypeName(dtype));
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(*parsed, dtype);
  }
  for (const char* bad : {"q4_0", "Q8_0", "F16", "", "fp16", "f16 "}) {
    Result<KvDtype> parsed = ParseKvDtype(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("accepted: f32, f16, q8_0"), std::string::npos)
        << parsed.status().message();
  }
}

TEST(KvDtypeTest, F16LayoutHoldsHalfTheBytes) {
  KvLayout f32{.n_layer = 30, .block_size = 16, .n_kv_head = 3, .head_dim = 64};
  KvLayout f16 = f32;
  f16.dtype = KvDtype::kF16;
  EXPECT_EQ(f32.head_bytes(), 256u);
  EXPECT_EQ(f16.head_bytes(), 128u);
  EXPECT_EQ(f32.row_elements(), f16.row_elements());
  EXPECT_EQ(f32.bytes_per_block(), 30u * 2 * 16 * 3 * 64 * 4);
  EXPECT_EQ(2 * f16.bytes_per_block(), f32.bytes_per_block());
  EXPECT_EQ(2 * f16.plane_bytes(), f32.plane_bytes());
  EXPECT_FALSE(f16 == f32);
}

TEST(KvDtypeTest, Q8_0LayoutHolds34BytesPer32Values) {
  KvLayout q8{.n_layer = 30, .block_size = 16, .n_kv_head = 3, .head_dim = 64};
  q8.dtype = KvDtype::kQ8_0;
  EXPECT_EQ(q8.head_bytes(), 68u);
  EXPECT_EQ(q8.bytes_per_block(), 30u * 2 * 16 * 3 * 68);
  EXPECT_TRUE(ValidateKvLayout(q8).ok());
  q8.head_dim = 80;
  EXPECT_EQ(ValidateKvLayout(q8).code(), StatusCode::kInvalidArgument);
}

TEST(KvDtypeTest, F16StorePlanesTileEachBlock) {
  auto device = CpuDevice::Create();
  ASSERT_TRUE(device.ok());
  auto governor = MemoryGovernor::Create(device->get());
  ASSERT_TRUE(governor.ok());
  auto owner = (*governor)->AddOwner({.name = "kv"});
  ASSERT_TRUE(owner.ok());
  KvLayout layout{
      .n_layer = 3, .block_size = 4, .n_kv_head = 2, .head_dim = 8, .dtype = KvDtype::kF16};
  auto store = PooledKvStore::Create(layout, 5, **governor, *owner);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const KvStore& kv = **store;
  EXPECT_GE((*governor)->Stats().committed_bytes, 5 * layout.bytes_per_block());
  for (int32_t b = 0; b < 5; ++b) {
    EXPECT_EQ(kv.BlockData(b) - kv.BlockData(0), static_cast<ptrdiff_t>(b * 3 * 2 * 4 * 16 * 2));
    for (int64_t l = 0; l < 3; ++l) {
      EXPECT_EQ(kv.KeyPlane(l, b), kv.BlockData(b) + 2 * l * 4 * 16 * 2);
      EXPECT_EQ(kv.ValuePlane(l, b), kv.KeyPlane(l, b) + 4 * 16 * 2);
    }
  }
  EXPECT_DEATH((void)kv.Keys(0, 0), "non-f32 KV layout");
}

TEST(KvDtypeTest, Q8_0NeedsWholeBlocksPerHead) {
  KvLayout layout{.n_layer = 1, .block_size = 16, .n_kv_head = 2, .head_dim = 48};
  layout.dtype = KvDtype::kQ8_0;
  const Status status = ValidateKvLayout(layout);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("multiple of 32"), std::string::npos) << status.ToString();
  layout.head_dim = 64;
  EXPECT_TRUE(ValidateKvLayout(layout).ok());
  EXPECT_EQ(layout.head_bytes(), 68u);  // 2 blocks of f16 d + 32 int8
  EXPECT_EQ(layout.row_bytes(), 136u);
}

}  // namespace
}  // namespace pier::engine
