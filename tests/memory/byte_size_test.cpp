#include "memory/byte_size.h"

#include <gtest/gtest.h>

namespace pier {
namespace {

TEST(ByteSizeTest, ParsesBinaryAndDecimalUnits) {
  EXPECT_EQ(*ParseByteSize("512MiB"), uint64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("2GB"), uint64_t{2000000000});
  EXPECT_EQ(*ParseByteSize("1.5GiB"), uint64_t{3} << 29);
  EXPECT_EQ(*ParseByteSize("4096"), uint64_t{4096});
  EXPECT_EQ(*ParseByteSize(" 64 kib "), uint64_t{64} << 10);
  EXPECT_EQ(*ParseByteSize("1TiB"), uint64_t{1} << 40);
  EXPECT_EQ(*ParseByteSize("10B"), uint64_t{10});
}

TEST(ByteSizeTest, RejectsBadSizesWithReasons) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : {Case{"-1GiB", "negative"}, Case{"0", "zero"}, Case{"0MiB", "zero"},
                        Case{"0.0000001KiB", "zero"}, Case{"lots", "expected a positive size"},
                        Case{"", "expected a positive size"}, Case{"12XB", "unknown unit"},
                        Case{"2EiB", "unknown unit"}, Case{"5000TiB", "absurdly large"},
                        Case{"1.5", "whole number"}, Case{"1e400GiB", "unknown unit"},
                        Case{"nanGiB", "expected"}, Case{"1..5GiB", "expected"}}) {
    Result<uint64_t> parsed = ParseByteSize(c.text, "--memory-budget");
    ASSERT_FALSE(parsed.ok()) << c.text;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(parsed.status().message().find(c.says), std::string::npos)
        << c.text << ": " << parsed.status().message();
    EXPECT_NE(parsed.status().message().find("--memory-budget"), std::string::npos);
  }
}

TEST(ByteSizeTest, ParsesPercentBudgets) {
  Result<BudgetSpec> spec = ParseBudget("80%");
  ASSERT_TRUE(spec.ok());
  EXPECT_TRUE(spec->is_percent);
  EXPECT_DOUBLE_EQ(spec->percent, 80);
  EXPECT_EQ(*spec->Resolve(1000), 800u);
  EXPECT_EQ(spec->ToString(), "80%");
  Result<BudgetSpec> bytes = ParseBudget("512MiB");
  ASSERT_TRUE(bytes.ok());
  EXPECT_FALSE(bytes->is_percent);
  EXPECT_EQ(*bytes->Resolve(uint64_t{1} << 30), uint64_t{512} << 20);
}

TEST(ByteSizeTest, RejectsBadBudgets) {
  for (const char* text : {"0%", "-5%", "150%", "abc%", "%", "-2GiB", "0"}) {
    Result<BudgetSpec> spec = ParseBudget(text);
    EXPECT_FALSE(spec.ok()) << text;
    EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument) << text;
  }
}

TEST(ByteSizeTest, BudgetAboveCapacityIsRefusedWithBothNumbers) {
  Result<uint64_t> resolved = BudgetSpec::Bytes(uint64_t{2} << 30).Resolve(uint64_t{1} << 30);
  ASSERT_FALSE(resolved.ok());
  EXPECT_NE(resolved.status().message().find("2.0 GiB"), std::string::npos);
  EXPECT_NE(resolved.status().message().find("1.0 GiB"), std::string::npos);
  EXPECT_FALSE(BudgetSpec::Percent(0.00001).Resolve(10).ok());
}

TEST(ByteSizeTest, FormatsBytes) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(uint64_t{3} << 30), "3.0 GiB");
}

}  // namespace
}  // namespace pier
