#include "common/base64.h"

#include <gtest/gtest.h>

#include <string>

namespace pier {
namespace {

TEST(Base64Test, DecodesRfc4648Vectors) {
  EXPECT_EQ(DecodeBase64(""), "");
  EXPECT_EQ(DecodeBase64("Zg=="), "f");
  EXPECT_EQ(DecodeBase64("Zm8="), "fo");
  EXPECT_EQ(DecodeBase64("Zm9v"), "foo");
  EXPECT_EQ(DecodeBase64("Zm9vYg=="), "foob");
  EXPECT_EQ(DecodeBase64("Zm9vYmE="), "fooba");
  EXPECT_EQ(DecodeBase64("Zm9vYmFy"), "foobar");
  // Unpadded and wrapped text reads the same.
  EXPECT_EQ(DecodeBase64("Zm9vYg"), "foob");
  EXPECT_EQ(DecodeBase64("Zm9v\r\nYmFy\n"), "foobar");
}

TEST(Base64Test, DecodesEveryByteValue) {
  // "AAECAwQF...": bytes 0..255 as Python's base64.b64encode(bytes(range(256))) writes them,
  // checked by decoding a few groups whose values cover the alphabet's ends.
  EXPECT_EQ(DecodeBase64("AAEC"), std::string("\x00\x01\x02", 3));
  EXPECT_EQ(DecodeBase64("/+/+"), std::string("\xff\xef\xfe", 3));
  EXPECT_EQ(DecodeBase64("////"), std::string("\xff\xff\xff", 3));
}

TEST(Base64Test, RefusesWhatIsNotBase64) {
  EXPECT_FALSE(DecodeBase64("Zm9v!").has_value());     // outside the alphabet
  EXPECT_FALSE(DecodeBase64("Z").has_value());         // one sextet is not a byte
  EXPECT_FALSE(DecodeBase64("Zg==Zg==").has_value());  // data after padding
  EXPECT_FALSE(DecodeBase64("Zg===").has_value());     // too much padding
  EXPECT_FALSE(DecodeBase64("Zm=").has_value());       // padding that does not complete a group
  EXPECT_FALSE(DecodeBase64("data:image/png;base64,AAAA").has_value());
}

}  // namespace
}  // namespace pier
