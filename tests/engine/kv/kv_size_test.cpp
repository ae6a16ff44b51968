#include "engine/kv/kv_size.h"

#include <gtest/gtest.h>

namespace pier::engine {
namespace {

TEST(KvSizeTest, PlainNumbersAreTokensAndUnitsAreBytes) {
  Result<KvSize> tokens = ParseKvSize("2048", "kv_max", 1 << 24);
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  EXPECT_EQ(*tokens, KvSize::Tokens(2048));
  EXPECT_EQ(tokens->TokensAt(1000), 2048);
  EXPECT_EQ(tokens->ToString(), "2048 tokens");

  Result<KvSize> bytes = ParseKvSize(" 64MiB ", "kv_max", 1 << 24);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(*bytes, KvSize::Bytes(uint64_t{64} << 20));
  EXPECT_EQ(bytes->TokensAt(9216), (int64_t{64} << 20) / 9216);  // rounded down
  EXPECT_EQ(bytes->ToString(), "64.0 MiB");

  Result<KvSize> zero = ParseKvSize("0", "kv_min", 1 << 24);
  ASSERT_TRUE(zero.ok());
  EXPECT_FALSE(zero->is_set());
  EXPECT_EQ(zero->ToString(), "unset");
  EXPECT_TRUE(KvSize::Bytes(1).is_set());
}

TEST(KvSizeTest, BadSizesNameTheSettingAndTheForms) {
  for (const char* bad : {"", "lots", "-5", "1.5", "64 parsecs", "0MiB"}) {
    Result<KvSize> r = ParseKvSize(bad, "serve.yaml: kv_max", 1 << 24);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("serve.yaml: kv_max"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("64MiB"), std::string::npos) << r.status().message();
  }
  Result<KvSize> huge = ParseKvSize("99999999999", "kv_max", 1 << 24);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("more than 16777216"), std::string::npos)
      << huge.status().message();
}

}  // namespace
}  // namespace pier::engine
