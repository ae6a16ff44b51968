// ParseBaseUrl: the load generator's target URL.
#include "loadgen/http_client.h"

#include <gtest/gtest.h>

namespace pier::loadgen {
namespace {

TEST(BaseUrlTest, ParsesHostPortAndPrefix) {
  auto url = ParseBaseUrl("http://127.0.0.1:8080");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->host, "127.0.0.1");
  EXPECT_EQ(url->port, 8080);
  EXPECT_EQ(url->path_prefix, "");
  EXPECT_EQ(url->host_header, "127.0.0.1:8080");
  url = ParseBaseUrl("http://localhost/");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->port, 80);
  EXPECT_EQ(url->path_prefix, "");
  url = ParseBaseUrl("http://[::1]:9000/api/");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->host, "::1");
  EXPECT_EQ(url->port, 9000);
  EXPECT_EQ(url->path_prefix, "/api");
}

TEST(BaseUrlTest, RejectsOtherSchemesAndBadPorts) {
  EXPECT_EQ(ParseBaseUrl("https://x").status().code(), StatusCode::kUnsupported);
  EXPECT_FALSE(ParseBaseUrl("127.0.0.1:8080").ok());
  EXPECT_FALSE(ParseBaseUrl("http://:80").ok());
  EXPECT_FALSE(ParseBaseUrl("http://h:0").ok());
  EXPECT_FALSE(ParseBaseUrl("http://h:70000").ok());
  EXPECT_FALSE(ParseBaseUrl("http://h:").ok());
  EXPECT_FALSE(ParseBaseUrl("http://[::1").ok());
}

}  // namespace
}  // namespace pier::loadgen
