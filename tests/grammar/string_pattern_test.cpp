#include "grammar/string_pattern.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>

#include "grammar_test_util.h"

namespace pier::grammar {
namespace {

using testing::Language;

ExprPtr QuotedPattern(const std::string& pattern) {
  return Seq({Byte('"'), PatternContent(pattern).value(), Byte('"')});
}

// std::regex (ECMAScript) is the independent reference: for random strings over an alphabet
// that exercises each pattern, and for strings drawn from Pier's own language, both agree.
TEST(StringPatternTest, AgreesWithStdRegexOnRandomAndSampledStrings) {
  const char* patterns[] = {
      "^[a-z]+$",
      "^\\d{3}-\\d{4}$",
      "^(foo|bar)+baz?$",
      "ab*c",
      "^[^0-9]*$",
      "^\\w+@\\w+\\.com$",
      "^[A-Z][a-z]{2,4}$",
      "x{2,}",
      "^(?:a|b)c?$",
      "^\\s*\\S+$",
      "^[a\\-z]$",
      "^[.]$",
      "^.$",
      "^\\.$",
      "^(a(b|c)){1,2}$",
      "^\\x41\\u0042[\\d_]?$",
      "^(?<word>[a-c]+)-\\1?$",
  };
  const std::string alphabet = "abcxyzfor0123456789-@. _ACBZ\t\\\"";
  std::mt19937_64 rng(3);
  for (const char* p : patterns) {
    Result<ExprPtr> content = PatternContent(p);
    if (std::string(p).find("\\1") != std::string::npos) {
      EXPECT_FALSE(content.ok()) << p;
      continue;
    }
    ASSERT_TRUE(content.ok()) << p << ": " << content.status().ToString();
    Language lang(Seq({Byte('"'), *content, Byte('"')}));
    const std::regex re(p, std::regex::ECMAScript);
    for (int i = 0; i < 1500; ++i) {
      std::string s;
      const size_t n = rng() % 9;
      for (size_t k = 0; k < n; ++k) s += alphabet[rng() % alphabet.size()];
      const bool expected = std::regex_search(s, re);
      ASSERT_EQ(lang.Matches(nlohmann::json(s).dump()), expected)
          << p << " on " << nlohmann::json(s).dump();
    }
    for (int i = 0; i < 200; ++i) {
      std::string written;
      if (!lang.Sample(&rng, &written, 0.2)) continue;
      // Pier's strings are JSON; ASCII ones must satisfy the pattern once decoded.
      const std::string s = nlohmann::json::parse(written).get<std::string>();
      bool ascii = true;
      for (char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
      if (ascii) {
        ASSERT_TRUE(std::regex_search(s, re)) << p << " sampled " << written;
      }
    }
  }
}

TEST(StringPatternTest, UnanchoredPatternsMatchAnywhere) {
  Language lang(QuotedPattern("cat"));
  EXPECT_TRUE(lang.Matches("\"a cat sat\""));
  EXPECT_TRUE(lang.Matches("\"cat\""));
  EXPECT_FALSE(lang.Matches("\"dog\""));
  Language start(QuotedPattern("^cat"));
  EXPECT_TRUE(start.Matches("\"catalog\""));
  EXPECT_FALSE(start.Matches("\"a cat\""));
}

TEST(StringPatternTest, WhatCannotBeEnforcedIsRefusedByName) {
  const std::pair<const char*, const char*> cases[] = {
      {"(?=a)b", "lookaround"},
      {"(a)\\1", "backreference"},
      {"\\bword", "word boundary"},
      {"\\p{L}+", "Unicode property"},
      {"a^b", "anchor"},
      {"(ab", "'(' without ')'"},
      {"ab)", "unbalanced"},
      {"[ab", "'[' without ']'"},
      {"a{2000}", "repeat count above"},
      {"*a", "nothing to repeat"},
      {"[z-a]", "out of order"},
  };
  for (const auto& [pattern, reason] : cases) {
    const Result<ExprPtr> e = PatternContent(pattern);
    ASSERT_FALSE(e.ok()) << pattern;
    // Valid ECMA-262 Pier cannot enforce (lookarounds, \b, \p{}, anchors inside, long
    // repeats) is UNSUPPORTED; a malformed pattern is INVALID_ARGUMENT.
    const bool malformed = std::string(reason).find("without") != std::string::npos ||
                           std::string(reason) == "unbalanced" ||
                           std::string(reason) == "nothing to repeat" ||
                           std::string(reason) == "out of order";
    EXPECT_EQ(e.status().code(),
              malformed ? StatusCode::kInvalidArgument : StatusCode::kUnsupported)
        << pattern << ": " << e.status().ToString();
    EXPECT_NE(e.status().message().find(reason), std::string::npos)
        << pattern << ": " << e.status().message();
  }
}

}  // namespace
}  // namespace pier::grammar
