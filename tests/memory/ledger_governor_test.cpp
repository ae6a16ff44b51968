// A governor over a LedgerDevice: the server process's books for a GPU its worker processes
// compute on. Grants are charged and refused past the budget with the numbers, an elastic KV
// mirror (accounting-only lease) grows and shrinks within it, and anything that would touch the
// GPU is refused naming it, never crashing.
#include <gtest/gtest.h>

#include <memory>

#include "device/ledger_device.h"
#include "memory/lease.h"
#include "memory/memory_governor.h"

namespace pier {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(LedgerGovernorTest, GrantsAndMirroredLeasesAreChargedAndNothingIsAllocated) {
  LedgerDevice gpu(0, "cuda:0 (NVIDIA H200)", 1024 * kMiB);
  EXPECT_EQ(gpu.kind(), DeviceKind::kLedger);
  auto governor = MemoryGovernor::Create(&gpu);
  ASSERT_TRUE(governor.ok()) << governor.status().ToString();
  MemoryGovernor& g = **governor;
  const OwnerId a = *g.AddOwner({.name = "a/worker"});
  const OwnerId b = *g.AddOwner({.name = "b/worker"});

  auto grant = g.ChargeExternal(a, 600 * kMiB);
  ASSERT_TRUE(grant.ok()) << grant.status().ToString();
  // A second grant past what is left is refused with the figures.
  auto refused = g.ChargeExternal(b, 600 * kMiB);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().ToString().find("424.0 MiB free in the budget of 1.0 GiB"),
            std::string::npos)
      << refused.status().ToString();
  auto fits = g.ChargeExternal(b, 300 * kMiB);
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  EXPECT_EQ(g.Stats().committed_bytes, 900 * kMiB);

  // A worker's elastic KV, mirrored: chunks counted, never mapped.
  LeaseOptions mirror;
  mirror.name = "a/kv";
  mirror.chunk_bytes = 32 * kMiB;
  mirror.max_chunks = 8;
  mirror.accounting_only = true;
  auto lease = g.CreateLease(a, mirror);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_TRUE((*lease)->Grow(2).ok());
  EXPECT_EQ(g.Stats().committed_bytes, 900 * kMiB + 64 * kMiB);
  EXPECT_FALSE((*lease)->Grow(2).ok()) << "past the budget";
  lease->reset();
  EXPECT_EQ(g.Stats().committed_bytes, 900 * kMiB);

  // Nothing is ever allocated on the GPU from this process.
  auto block = g.Allocate(b, 1 * kMiB);
  ASSERT_FALSE(block.ok());
  EXPECT_NE(block.status().ToString().find("only accounts for the GPU"), std::string::npos)
      << block.status().ToString();
  EXPECT_EQ(gpu.CreateStream().status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(gpu.CopyHostToDevice(nullptr, nullptr, 0, Stream{}).code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace pier
