#include <gtest/gtest.h>

#include "grammar/expr.h"
#include "grammar/lazy_dfa.h"
#include "grammar/nfa.h"
#include "grammar_test_util.h"

namespace pier::grammar {
namespace {

using testing::Language;

TEST(ExprTest, BuildersSimplifyTheEmptyLanguage) {
  EXPECT_TRUE(IsNothing(Seq({Literal("a"), Nothing()})));
  EXPECT_EQ(Alt({Nothing(), Literal("a")})->kind, ExprKind::kBytes);
  EXPECT_EQ(Repeat(Nothing(), 0, 3)->kind, ExprKind::kEmpty);
  EXPECT_TRUE(IsNothing(Repeat(Nothing(), 1, 3)));
  EXPECT_TRUE(IsNothing(Alt({Nothing(), Nothing()})));
  EXPECT_TRUE(IsNothing(SeparatedList(Nothing(), Literal(","), 1, kUnbounded)));
  EXPECT_EQ(SeparatedList(Nothing(), Literal(","), 0, kUnbounded)->kind, ExprKind::kEmpty);
}

TEST(NfaTest, NothingIsRefusedAndTheStateLimitIsNamed) {
  EXPECT_EQ(CompileNfa(*Nothing()).status().code(), StatusCode::kInvalidArgument);
  const Result<Nfa> big = CompileNfa(*Repeat(Literal("abc"), 0, 1000), 100);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(big.status().message().find("100 automaton states"), std::string::npos);
}

TEST(LazyDfaTest, LiteralsAlternativesAndRepeats) {
  Language lang(
      Seq({Literal("ab"), Alt({Literal("c"), Literal("de")}), Repeat(Literal("x"), 1, 3)}));
  EXPECT_TRUE(lang.Matches("abcx"));
  EXPECT_TRUE(lang.Matches("abdexxx"));
  EXPECT_FALSE(lang.Matches("abc"));
  EXPECT_FALSE(lang.Matches("abcxxxx"));
  EXPECT_FALSE(lang.Matches("abdx "));
  EXPECT_FALSE(lang.Matches(""));
}

TEST(LazyDfaTest, UnboundedRepeatLoopsOnOneCopy) {
  Language lang(Seq({Literal("<"), Repeat(Bytes({{'a', 'z'}}), 2, kUnbounded), Literal(">")}));
  EXPECT_FALSE(lang.Matches("<a>"));
  EXPECT_TRUE(lang.Matches("<ab>"));
  EXPECT_TRUE(lang.Matches("<" + std::string(500, 'q') + ">"));
  EXPECT_FALSE(lang.Matches("<ab1>"));
}

TEST(LazyDfaTest, SeparatedListsCountTheirItems) {
  for (int32_t min = 0; min <= 3; ++min) {
    for (int32_t max : {0, 1, 2, 4, kUnbounded}) {
      if (max != kUnbounded && max < min) continue;
      Language lang(
          Seq({Literal("["), SeparatedList(Literal("x"), Literal(","), min, max), Literal("]")}));
      for (int n = 0; n <= 6; ++n) {
        std::string s = "[";
        for (int i = 0; i < n; ++i) s += i == 0 ? "x" : ",x";
        s += "]";
        const bool expected = n >= min && (max == kUnbounded || n <= max);
        EXPECT_EQ(lang.Matches(s), expected) << s << " min " << min << " max " << max;
      }
      EXPECT_FALSE(lang.Matches("[,x]"));
      EXPECT_FALSE(lang.Matches("[x,]"));
    }
  }
}

TEST(LazyDfaTest, TheDeadStateAndTheStateLimit) {
  auto nfa = std::make_shared<const Nfa>(CompileNfa(*Repeat(Bytes({{'a', 'z'}}), 0, 50)).value());
  LazyDfa dfa(nfa, 10);
  int32_t state = dfa.start();
  EXPECT_EQ(dfa.Next(state, '1'), LazyDfa::kDead);
  int32_t last = state;
  for (int i = 0; i < 20 && last > 0; ++i) last = dfa.Next(last, 'a');
  EXPECT_EQ(last, LazyDfa::kOverflow);
  EXPECT_LE(dfa.num_states(), 10u);
}

TEST(LazyDfaTest, BytesNoEdgeSeparatesShareAClass) {
  auto nfa = std::make_shared<const Nfa>(
      CompileNfa(*Alt({Bytes({{'a', 'z'}}), Bytes({{'0', '9'}})})).value());
  LazyDfa dfa(nfa);
  // Below '0', the digits, between, the letters, above: five classes.
  EXPECT_EQ(dfa.num_byte_classes(), 5);
}

}  // namespace
}  // namespace pier::grammar
