// End-to-end byte-level BPE against llama.cpp's tokenizer test vectors: the
// vocabulary-only GGUF files tests/fixtures/vendor/llama.cpp/ggml-vocab-NAME.gguf
// with inputs (.inp, separated by "\n__ggml_vocab_test__\n") and the expected ids
// (.out, one line of space-separated ids per input), encoded the way llama.cpp's
// test-tokenizer-0 does: no BOS/EOS, special tokens not parsed. The files are
// placed by scripts/bootstrap (git-ignored); they hold no tensors, so this is a
// unit test.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "model/gguf_file.h"
#include "model/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace pier::tokenizer {
namespace {

std::string VendorPath(const std::string& name) {
  return std::string(PIER_SOURCE_DIR) + "/tests/fixtures/vendor/llama.cpp/ggml-vocab-" + name +
         ".gguf";
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  *out = buffer.str();
  return true;
}

struct VocabCase {
  std::string input;
  std::vector<TokenId> expected;
};

std::vector<VocabCase> ReadCases(const std::string& gguf_path) {
  std::string inp, out;
  EXPECT_TRUE(ReadFile(gguf_path + ".inp", &inp))
      << gguf_path << ".inp missing: run scripts/bootstrap";
  EXPECT_TRUE(ReadFile(gguf_path + ".out", &out))
      << gguf_path << ".out missing: run scripts/bootstrap";
  constexpr std::string_view kSeparator = "\n__ggml_vocab_test__\n";
  std::vector<VocabCase> cases;
  size_t pos = 0;
  for (size_t next; (next = inp.find(kSeparator, pos)) != std::string::npos;
       pos = next + kSeparator.size()) {
    cases.push_back({inp.substr(pos, next - pos), {}});
  }
  std::istringstream lines(out);
  std::string line;
  for (VocabCase& c : cases) {
    EXPECT_TRUE(std::getline(lines, line)) << "fewer outputs than inputs in " << gguf_path;
    std::istringstream ids(line);
    for (TokenId id; ids >> id;) c.expected.push_back(id);
  }
  return cases;
}

std::unique_ptr<Tokenizer> Load(const std::string& path) {
  auto file = model::GgufFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status().ToString() << " (run scripts/bootstrap)";
  if (!file.ok()) return nullptr;
  auto tokenizer = model::LoadTokenizer(**file);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

constexpr EncodeOptions kLikeTestTokenizer0{.add_special = false, .parse_special = false};

class LlamaCppVocabTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaCppVocabTest, EncodesEveryInputLikeLlamaCpp) {
  const std::string path = VendorPath(GetParam());
  auto tokenizer = Load(path);
  ASSERT_NE(tokenizer, nullptr);
  const auto cases = ReadCases(path);
  ASSERT_GE(cases.size(), 40u);
  for (const VocabCase& c : cases) {
    auto ids = tokenizer->Encode(c.input, kLikeTestTokenizer0);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    EXPECT_EQ(*ids, c.expected) << GetParam() << " on \"" << c.input << "\"";
    // Every input is valid UTF-8 that byte-level BPE must give back unchanged.
    EXPECT_EQ(tokenizer->Decode(*ids), c.input) << GetParam();
  }
}

INSTANTIATE_TEST_SUITE_P(ByteLevelBpe, LlamaCppVocabTest,
                         ::testing::Values("llama-bpe", "qwen2", "gpt-2", "starcoder", "refact",
                                           "mpt", "command-r", "falcon", "qwen35", "deepseek-llm",
                                           "deepseek-coder"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

TEST(LlamaCppVocabTest, Llama3EndOfGenerationIncludesEotId) {
  auto tokenizer = Load(VendorPath("llama-bpe"));
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->Piece(128009), "<|eot_id|>");
  EXPECT_TRUE(tokenizer->IsEndOfGeneration(128001));  // <|end_of_text|>, the eos
  EXPECT_TRUE(tokenizer->IsEndOfGeneration(128009));  // <|eot_id|>, ends every chat turn
  EXPECT_FALSE(tokenizer->IsEndOfGeneration(128000));
  EXPECT_TRUE(tokenizer->add_bos());  // Llama-3 convention when the file does not say
  auto ids = tokenizer->Encode("<|start_header_id|>user<|end_header_id|>");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<TokenId>{128000, 128006, 882, 128007}));
}

TEST(LlamaCppVocabTest, Qwen2ParsesChatMarkupAndStopsAtImEnd) {
  auto tokenizer = Load(VendorPath("qwen2"));
  ASSERT_NE(tokenizer, nullptr);
  auto ids = tokenizer->Encode("<|im_start|>user\nhi<|im_end|>");
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 5u);
  EXPECT_EQ((*ids)[0], 151644);
  EXPECT_EQ(ids->back(), 151645);
  EXPECT_TRUE(tokenizer->IsEndOfGeneration(151645));
  EXPECT_TRUE(tokenizer->IsEndOfGeneration(151643));
}

TEST(LlamaCppVocabTest, ConcurrentEncodesAgree) {
  const std::string path = VendorPath("qwen2");
  auto tokenizer = Load(path);
  ASSERT_NE(tokenizer, nullptr);
  const auto cases = ReadCases(path);
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (const VocabCase& c : cases) {
          auto ids = tokenizer->Encode(c.input, kLikeTestTokenizer0);
          if (!ids.ok() || *ids != c.expected) ++mismatches[t];
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

}  // namespace
}  // namespace pier::tokenizer
