#include "common/status.h"

#include <gtest/gtest.h>

namespace pier {
namespace {

Result<int> ParsePositive(int x) {
  if (x <= 0) return InvalidArgumentError("expected a positive number, got " + std::to_string(x));
  return x;
}

Result<int> Doubled(int x) {
  PIER_ASSIGN_OR_RETURN(int v, ParsePositive(x));
  return v * 2;
}

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, CarriesCodeAndMessageWithContext) {
  Status s = DataLossError("truncated").WithContext("model.gguf");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.ToString(), "DATA_LOSS: model.gguf: truncated");
}

TEST(ResultTest, PropagatesErrorsAndValues) {
  EXPECT_EQ(*Doubled(4), 8);
  Result<int> r = Doubled(-1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("-1"), std::string::npos);
}

TEST(ResultDeathTest, ValueOfErrorAborts) {
  Result<int> r = InvalidArgumentError("nope");
  EXPECT_DEATH((void)r.value(), "nope");
}

// A typed error (as memory/memory_error.h's MemoryError): its fields stay readable, and
// status() is its ToStatus().
struct TooLarge {
  int64_t asked = 0;
  Status ToStatus() const {
    return ResourceExhaustedError("asked for " + std::to_string(asked) + " bytes");
  }
};

Result<int, TooLarge> Reserve(int64_t bytes) {
  if (bytes > 100) return TooLarge{bytes};
  return static_cast<int>(bytes);
}

Result<int> ReserveTwice(int64_t bytes) {
  PIER_ASSIGN_OR_RETURN(int first, Reserve(bytes));
  return first * 2;
}

TEST(ResultTest, TypedErrorKeepsItsFieldsAndConvertsToStatus) {
  Result<int, TooLarge> small = Reserve(7);
  ASSERT_TRUE(small.ok());
  EXPECT_TRUE(small.status().ok());
  EXPECT_EQ(*small, 7);
  Result<int, TooLarge> large = Reserve(500);
  ASSERT_FALSE(large.ok());
  EXPECT_EQ(large.error().asked, 500);
  EXPECT_EQ(large.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(large.status().message(), "asked for 500 bytes");
  EXPECT_EQ(ReserveTwice(500).status().message(), "asked for 500 bytes");
  EXPECT_EQ(*ReserveTwice(8), 16);
}

TEST(ResultDeathTest, ValueOfTypedErrorAbortsWithItsStatus) {
  Result<int, TooLarge> r = TooLarge{900};
  EXPECT_DEATH((void)r.value(), "asked for 900 bytes");
}

}  // namespace
}  // namespace pier
