// Token-mask cost of constrained decoding on a real vocabulary: builds the model's
// TokenVocabulary, compiles json_object and a schema, and walks random constrained outputs,
// timing each first (computed) and repeated (cached) mask. Results: docs/benchmarks.md.
// Usage: pier_bench_grammar MODEL.gguf
#include <chrono>
#include <cstdio>
#include <random>

#include "grammar/constraint.h"
#include "model/gguf_file.h"
#include "model/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"
using namespace pier;
using Clock = std::chrono::steady_clock;
static double Ms(Clock::time_point a) {
  return std::chrono::duration<double, std::milli>(Clock::now() - a).count();
}
int main(int, char** argv) {
  auto file = model::GgufFile::Open(argv[1]).value();
  auto tok = model::LoadTokenizer(*file).value();
  auto t0 = Clock::now();
  auto vocab = grammar::TokenVocabulary::FromTokenizer(*tok);
  std::printf("vocab %d tokens, trie %zu nodes, built in %.1f ms\n", vocab->vocab_size(),
              vocab->nodes().size(), Ms(t0));
  const char* schema =
      R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"type":"string"},"maxItems":5}},"required":["name","age","tags"]})";
  for (int kind = 0; kind < 2; ++kind) {
    grammar::OutputConstraint c;
    c.kind = kind == 0 ? grammar::OutputConstraint::Kind::kJsonObject
                       : grammar::OutputConstraint::Kind::kJsonSchema;
    c.schema = kind == 0 ? "" : schema;
    grammar::GrammarCache cache(vocab);
    t0 = Clock::now();
    auto g = cache.Get(c).value();
    std::printf("%s: compiled in %.2f ms (%zu NFA states)\n", kind == 0 ? "json_object" : "schema",
                Ms(t0), g->num_nfa_states());
    std::mt19937_64 rng(1);
    double first = 0, again = 0;
    int firsts = 0, steps = 0;
    for (int walk = 0; walk < 20; ++walk) {
      int32_t s = g->start();
      for (int step = 0; step < 60; ++step) {
        const size_t before = g->num_cached_masks();
        auto t = Clock::now();
        auto mask = g->AllowedTokens(s).value();
        const double ms = Ms(t);
        if (g->num_cached_masks() > before) {
          first += ms;
          ++firsts;
        } else {
          again += ms;
        }
        ++steps;
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < vocab->vocab_size(); ++id)
          if (mask[id / 64] >> (id % 64) & 1) allowed.push_back(id);
        int32_t t2 = allowed[rng() % allowed.size()];
        if (vocab->IsEndOfGeneration(t2)) break;
        s = g->Advance(s, t2).value();
        if (g->IsComplete(s)) break;
      }
    }
    std::printf(
        "  %d steps: %d new masks at %.3f ms each, cached lookups %.4f ms each; %zu DFA states\n",
        steps, firsts, first / firsts, again / std::max(1, steps - firsts), g->num_dfa_states());
  }
}
