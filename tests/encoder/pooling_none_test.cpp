// Pooling none (bert.pooling_type = 0): a vector per token. On all-MiniLM-L6-v2 (Q8_0) with its
// pooling key set to none in a copy of the file: each token's state, mean-pooled as the
// original file pools, gives the original's vector bit for bit; a text's token rows are the same
// in any batch; the batcher returns them per text, normalized, with each text's token count.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "device/cpu/cpu_device.h"
#include "encoder/bert_model.h"
#include "encoder/embedding_batcher.h"
#include "memory/memory_governor.h"
#include "synthetic_text.h"

namespace pier::encoder {
namespace {

// A copy of `from` at `to` whose bert.pooling_type is 0 (none): the key's value is the 4 bytes
// after the key's name and its value type.
void WritePoolingNoneCopy(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = "bert.pooling_type";
  const size_t at = bytes.find(key);
  ASSERT_NE(at, std::string::npos);
  uint32_t type = 0;
  std::memcpy(&type, bytes.data() + at + key.size(), 4);
  ASSERT_TRUE(type == 4 || type == 5) << "value type " << type;  // GGUF uint32 / int32
  const uint32_t none = 0;
  std::memcpy(bytes.data() + at + key.size() + 4, &none, 4);
  std::ofstream out(to, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

class PoolingNoneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = std::string(PIER_MODELS_DIR) + "/all-MiniLM-L6-v2.Q8_0.gguf";
    ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing: run scripts/bootstrap";
    const std::string copy = (std::filesystem::temp_directory_path() /
                              ("pier-pooling-none-" + std::to_string(::getpid()) + ".gguf"))
                                 .string();
    WritePoolingNoneCopy(path, copy);
    mean_file_ = std::move(model::GgufFile::Open(path)).value();
    none_file_ = std::move(model::GgufFile::Open(copy)).value();
    std::filesystem::remove(copy);  // the mapping stays
    device_ = std::move(CpuDevice::Create()).value();
    governor_ = std::move(MemoryGovernor::Create(device_.get())).value();
    mean_ = Open(*mean_file_, "mean");
    none_ = Open(*none_file_, "none");
  }
  std::unique_ptr<BertModel> Open(const model::GgufFile& file, const std::string& name) {
    auto weights = governor_->AddOwner({.name = name + "/w"});
    auto workspace = governor_->AddOwner({.name = name + "/ws"});
    auto model = BertModel::Create(file, {.governor = governor_.get(),
                                          .weights_owner = *weights,
                                          .workspace_owner = *workspace,
                                          .pool = &pool_,
                                          .max_batch_tokens = 512});
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    return model.ok() ? std::move(model).value() : nullptr;
  }
  static std::vector<int32_t> Text(int32_t seed, int length) {
    return testing::SyntheticText(seed, length);
  }

  ThreadPool pool_{2};
  std::unique_ptr<model::GgufFile> mean_file_, none_file_;
  std::unique_ptr<CpuDevice> device_;
  std::unique_ptr<MemoryGovernor> governor_;
  std::unique_ptr<BertModel> mean_, none_;
};

TEST_F(PoolingNoneTest, TokenStatesMeanPooledAreTheMeanModelsVectors) {
  ASSERT_NE(none_, nullptr);
  EXPECT_EQ(none_->info().pooling, Pooling::kNone);
  const int64_t d = none_->info().embedding_length;
  const std::vector<std::vector<int32_t>> texts = {Text(1, 5), Text(2, 17), Text(3, 2)};
  std::vector<EncoderInput> inputs;
  int64_t total = 0;
  for (const auto& t : texts) {
    inputs.push_back({.ids = t});
    total += static_cast<int64_t>(t.size());
  }
  std::vector<float> rows(total * d), pooled(texts.size() * d);
  ASSERT_TRUE(none_->Embed(inputs, rows.data()).ok());
  ASSERT_TRUE(mean_->Embed(inputs, pooled.data()).ok());
  int64_t first = 0;
  for (size_t s = 0; s < texts.size(); ++s) {
    const auto n = static_cast<int64_t>(texts[s].size());
    // Mean pooling's own order: the rows added in token order, then times 1/n.
    std::vector<float> mean(d, 0.0f);
    for (int64_t t = first; t < first + n; ++t) {
      for (int64_t i = 0; i < d; ++i) mean[i] += rows[t * d + i];
    }
    const float inv = 1.0f / static_cast<float>(n);
    for (int64_t i = 0; i < d; ++i) mean[i] *= inv;
    EXPECT_EQ(std::memcmp(mean.data(), pooled.data() + s * d, d * sizeof(float)), 0)
        << "text " << s;
    // The text alone: the same rows.
    std::vector<float> alone(n * d);
    const EncoderInput one{.ids = texts[s]};
    ASSERT_TRUE(none_->Embed({&one, 1}, alone.data()).ok());
    EXPECT_EQ(std::memcmp(alone.data(), rows.data() + first * d, n * d * sizeof(float)), 0)
        << "text " << s;
    first += n;
  }
}

TEST_F(PoolingNoneTest, TheBatcherReturnsEveryTokensVectorNormalized) {
  ASSERT_NE(none_, nullptr);
  const int64_t d = none_->info().embedding_length;
  EmbeddingBatcher batcher(*none_, {});
  const std::vector<std::vector<int32_t>> texts = {Text(4, 9), Text(5, 3), Text(6, 30)};
  // Two requests at once, so they may share a batch.
  std::promise<EmbedResult> a, b;
  ASSERT_TRUE(batcher.Submit({.texts = texts}, [&](EmbedResult r) { a.set_value(r); }).ok());
  ASSERT_TRUE(batcher.Submit({.texts = {texts[2]}}, [&](EmbedResult r) { b.set_value(r); }).ok());
  const EmbedResult ra = a.get_future().get(), rb = b.get_future().get();
  ASSERT_TRUE(ra.status.ok()) << ra.status.ToString();
  ASSERT_TRUE(rb.status.ok());
  EXPECT_EQ(ra.tokens_per_text, (std::vector<int64_t>{9, 3, 30}));
  ASSERT_EQ(ra.vectors.size(), static_cast<size_t>(42 * d));
  int64_t row = 0;
  for (size_t s = 0; s < texts.size(); ++s) {
    const auto n = static_cast<int64_t>(texts[s].size());
    std::vector<float> want(n * d);
    const EncoderInput one{.ids = texts[s]};
    ASSERT_TRUE(none_->Embed({&one, 1}, want.data()).ok());
    for (int64_t t = 0; t < n; ++t) NormalizeL2(want.data() + t * d, d);
    EXPECT_EQ(std::memcmp(want.data(), ra.vectors.data() + row * d, n * d * sizeof(float)), 0)
        << "text " << s;
    double norm = 0;
    for (int64_t i = 0; i < d; ++i)
      norm += double(ra.vectors[row * d + i]) * ra.vectors[row * d + i];
    EXPECT_NEAR(norm, 1.0, 1e-5);
    row += n;
  }
  // The same text in another request: the same rows.
  EXPECT_EQ(std::memcmp(rb.vectors.data(), ra.vectors.data() + 12 * d, 30 * d * sizeof(float)), 0);
  // The padded tensor KServe answers with: [3, 30, d], zero rows after each text's tokens.
  int64_t longest = 0;
  const std::vector<float> padded = PaddedTokenVectors(ra, &longest);
  EXPECT_EQ(longest, 30);
  ASSERT_EQ(padded.size(), static_cast<size_t>(3 * 30 * d));
  EXPECT_EQ(std::memcmp(padded.data() + 30 * d, ra.vectors.data() + 9 * d, 3 * d * sizeof(float)),
            0);
  for (int64_t i = 33 * d; i < 60 * d; ++i) ASSERT_EQ(padded[i], 0.0f) << i;
}

TEST_F(PoolingNoneTest, AnAnswerPastItsCapIsRefused) {
  ASSERT_NE(none_, nullptr);
  EmbeddingBatcher batcher(*none_, {});
  // 200 texts of 250 tokens: 50,000 vectors of 384 floats, past 64 MiB.
  EmbedRequest big;
  for (int i = 0; i < 200; ++i) big.texts.push_back(Text(i, 250));
  const Status refused = batcher.Submit(std::move(big), [](EmbedResult) {});
  ASSERT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("send fewer inputs"), std::string::npos) << refused.message();
  // One long text among short ones counts as padded: 181 texts padded to 250 tokens (45,250).
  EmbedRequest padded;
  padded.texts.push_back(Text(1, 250));
  for (int i = 0; i < 180; ++i) padded.texts.push_back(Text(i, 3));
  EXPECT_EQ(batcher.Submit(std::move(padded), [](EmbedResult) {}).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pier::encoder
