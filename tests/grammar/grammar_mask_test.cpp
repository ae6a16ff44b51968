#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "grammar/constraint.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar_test_util.h"

namespace pier::grammar {
namespace {

using testing::Language;

bool Bit(std::span<const uint64_t> mask, int32_t t) {
  return (mask[static_cast<size_t>(t) / 64] >> (t % 64) & 1) != 0;
}

// A random vocabulary over JSON's characters, with a control token and an end token.
std::shared_ptr<const TokenVocabulary> RandomVocabulary(std::mt19937_64* rng, int32_t n,
                                                        int32_t* eog, int32_t* control) {
  const std::string alphabet = "{}[]\",:0123456789abcdeflnrstu .-\n\\";
  std::vector<std::string> bytes;
  std::vector<bool> writes;
  for (unsigned char c = 0; c < 128; ++c) {  // every single byte, as byte-level BPE has
    bytes.emplace_back(1, static_cast<char>(c));
    writes.push_back(true);
  }
  while (static_cast<int32_t>(bytes.size()) < n) {
    std::string s;
    const size_t len = 2 + (*rng)() % 5;
    for (size_t i = 0; i < len; ++i) s += alphabet[(*rng)() % alphabet.size()];
    bytes.push_back(s);
    writes.push_back(true);
  }
  bytes.push_back("{\"");  // a duplicate of a likely random token's bytes
  writes.push_back(true);
  *control = static_cast<int32_t>(bytes.size());
  bytes.push_back("<|im_start|>");
  writes.push_back(false);
  *eog = static_cast<int32_t>(bytes.size());
  bytes.push_back("<|im_end|>");
  writes.push_back(true);
  return std::make_shared<const TokenVocabulary>(bytes, writes, std::vector<int32_t>{*eog});
}

TEST(TokenVocabularyTest, TheTrieHoldsEveryTextTokenOnce) {
  std::mt19937_64 rng(1);
  int32_t eog = 0;
  int32_t control = 0;
  auto v = RandomVocabulary(&rng, 3000, &eog, &control);
  std::vector<int> seen(static_cast<size_t>(v->vocab_size()), 0);
  std::vector<std::string> path;
  for (const TokenVocabulary::Node& n : v->nodes()) {
    path.resize(static_cast<size_t>(n.depth - 1));
    path.push_back((path.empty() ? "" : path.back()) + static_cast<char>(n.byte));
    for (int32_t k = n.tokens_begin; k < n.tokens_end; ++k) {
      const int32_t id = v->token_ids()[static_cast<size_t>(k)];
      EXPECT_EQ(v->bytes(id), path.back());
      ++seen[static_cast<size_t>(id)];
    }
  }
  for (int32_t id = 0; id < v->vocab_size(); ++id) {
    const bool text = id != eog && id != control && !v->bytes(id).empty();
    EXPECT_EQ(seen[static_cast<size_t>(id)], text ? 1 : 0) << id;
  }
}

// The mask of every state along random constrained walks equals the brute-force answer:
// token t is allowed exactly when the constraint's language has a string starting with
// the output so far plus t's bytes (end tokens: when the output so far is a whole match).
TEST(GrammarTest, MasksEqualBruteForceAlongRandomWalks) {
  std::mt19937_64 rng(2);
  int32_t eog = 0;
  int32_t control = 0;
  auto vocab = RandomVocabulary(&rng, 2500, &eog, &control);
  const ExprPtr schema = JsonSchemaExpr(nlohmann::ordered_json::parse(R"({"type":"object",
      "properties":{"name":{"type":"string","maxLength":6},"n":{"type":"integer","minimum":-5,
      "maximum":120},"tags":{"type":"array","items":{"enum":["ab","c"]}}},
      "required":["name","n"]})"))
                             .value();
  for (const ExprPtr& expr : {schema, AnyJsonObject(3)}) {
    auto grammar = Grammar::Create(*expr, vocab).value();
    Language reference(expr);
    for (int walk = 0; walk < 6; ++walk) {
      int32_t state = grammar->start();
      std::string written;
      for (int step = 0; step < 40; ++step) {
        const std::span<const uint64_t> mask = grammar->AllowedTokens(state).value();
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < vocab->vocab_size(); ++t) {
          bool expected = false;
          if (t == eog) {
            expected = reference.Matches(written);
          } else if (vocab->writes_text(t)) {
            // Is written + bytes(t) a prefix of the language? Walk the reference DFA.
            LazyDfa& dfa = reference.dfa();
            int32_t s = dfa.start();
            for (char c : written + vocab->bytes(t)) {
              s = s > 0 ? dfa.Next(s, static_cast<uint8_t>(c)) : s;
            }
            expected = s > 0;
          }
          ASSERT_EQ(Bit(mask, t), expected)
              << "token " << t << " '" << vocab->bytes(t) << "' after '" << written << "'";
          if (expected) allowed.push_back(t);
        }
        ASSERT_FALSE(allowed.empty()) << written;
        const int32_t t = allowed[rng() % allowed.size()];
        if (t == eog) break;
        state = grammar->Advance(state, t).value();
        ASSERT_GT(state, 0);
        written += vocab->bytes(t);
        if (grammar->IsComplete(state)) break;
      }
    }
    EXPECT_GT(grammar->num_cached_masks(), 10u);
  }
}

TEST(GrammarMatcherTest, MaskAcceptAndCompletion) {
  std::vector<std::string> bytes = {"{", "}", "\"", "a", "\"}", "{\"a\":", "1", " ", "x", "END"};
  std::vector<bool> writes(bytes.size(), true);
  const int32_t end = 9;
  auto vocab = std::make_shared<const TokenVocabulary>(bytes, writes, std::vector<int32_t>{end});
  const ExprPtr expr =
      JsonSchemaExpr(
          nlohmann::ordered_json::parse(
              R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})"))
          .value();
  GrammarMatcher m(Grammar::Create(*expr, vocab).value());
  std::vector<float> logits(bytes.size(), 1.0f);
  ASSERT_TRUE(m.MaskLogits(logits).ok());
  // Only "{" and "{\"a\":" can start the object.
  for (size_t t = 0; t < logits.size(); ++t) {
    EXPECT_EQ(std::isinf(logits[t]), t != 0 && t != 5) << bytes[t];
  }
  EXPECT_EQ(m.Accept(8).code(), StatusCode::kInvalidArgument);  // "x" is refused
  ASSERT_TRUE(m.Accept(5).ok());
  EXPECT_FALSE(m.accepting());
  ASSERT_TRUE(m.Accept(7).ok());
  ASSERT_TRUE(m.Accept(6).ok());
  EXPECT_FALSE(m.complete());
  ASSERT_TRUE(m.Accept(1).ok());
  EXPECT_TRUE(m.accepting());
  EXPECT_TRUE(m.complete());  // nothing may follow the closing brace
  std::fill(logits.begin(), logits.end(), 1.0f);
  ASSERT_TRUE(m.MaskLogits(logits).ok());
  for (size_t t = 0; t < logits.size(); ++t) EXPECT_EQ(std::isinf(logits[t]), t != end) << t;
}

TEST(GrammarMatcherTest, AVocabularyThatCannotContinueIsAnErrorNotASilentMask) {
  std::vector<std::string> bytes = {"a", "b"};
  auto vocab = std::make_shared<const TokenVocabulary>(bytes, std::vector<bool>{true, true},
                                                       std::vector<int32_t>{});
  GrammarMatcher m(Grammar::Create(*Literal("{}"), vocab).value());
  std::vector<float> logits(2, 0.0f);
  EXPECT_EQ(m.MaskLogits(logits).code(), StatusCode::kFailedPrecondition);
}

TEST(GrammarCacheTest, CompilesEachConstraintOnceAndEvictsTheOldest) {
  std::vector<std::string> bytes = {"{", "}", "\"", "1", ":", ","};
  auto vocab = std::make_shared<const TokenVocabulary>(bytes, std::vector<bool>(6, true),
                                                       std::vector<int32_t>{});
  GrammarCache cache(vocab, 2);
  OutputConstraint object = OutputConstraint::JsonObject();
  OutputConstraint a = OutputConstraint::JsonSchema(R"({"type":"integer"})");
  OutputConstraint b = OutputConstraint::JsonSchema(R"({"type":"null"})");
  auto first = cache.Get(object).value();
  EXPECT_EQ(cache.Get(object).value(), first);
  EXPECT_EQ(cache.compiles(), 1);
  ASSERT_TRUE(cache.Get(a).ok());
  ASSERT_TRUE(cache.Get(b).ok());  // evicts `object`, the least recently used
  EXPECT_EQ(cache.size(), 2u);
  ASSERT_TRUE(cache.Get(object).ok());
  EXPECT_EQ(cache.compiles(), 4);
  EXPECT_FALSE(cache.Get(OutputConstraint::JsonSchema(R"({"type":"x"})")).ok());
  // The same schema inside another wrapper is another grammar.
  OutputConstraint wrapped = a;
  wrapped.prefix = "1";
  ASSERT_TRUE(cache.Get(wrapped).ok());
  EXPECT_NE(cache.Get(wrapped).value(), cache.Get(a).value());
}

}  // namespace
}  // namespace pier::grammar
