#include "serving/model_registry.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "serving/model_loader.h"

namespace pier::serving {
namespace {

class NullClient final : public engine::EngineClient {
 public:
  Result<std::shared_ptr<engine::RequestHandle>> Submit(engine::Request) override {
    return UnavailableError("null client");
  }
  void Abort(const std::string&) override {}
  void AbortAll(std::string) override {}
  engine::EngineStats Stats() const override { return {}; }
};

class NoTokenizer final : public tokenizer::Tokenizer {
 public:
  Result<std::vector<tokenizer::TokenId>> Encode(std::string_view,
                                                 const tokenizer::EncodeOptions&) const override {
    return std::vector<tokenizer::TokenId>{};
  }
  std::string TokenBytes(tokenizer::TokenId) const override { return ""; }
  std::string_view Piece(tokenizer::TokenId) const override { return ""; }
  tokenizer::TokenType Type(tokenizer::TokenId) const override {
    return tokenizer::TokenType::kNormal;
  }
  int32_t vocab_size() const override { return 1; }
  tokenizer::TokenId bos_id() const override { return -1; }
  tokenizer::TokenId eos_id() const override { return -1; }
  bool add_bos() const override { return false; }
  bool add_eos() const override { return false; }
  const std::vector<tokenizer::TokenId>& end_of_generation_ids() const override { return eog_; }

 private:
  std::vector<tokenizer::TokenId> eog_;
};

TEST(ModelRegistryTest, ResolvesByIdAndTheFirstModelIsTheDefault) {
  NullClient client_a, client_b;
  NoTokenizer tokenizer;
  ModelRegistry registry;
  EXPECT_EQ(registry.default_id(), "");
  EXPECT_FALSE(registry.Resolve("").ok());
  ASSERT_TRUE(registry.Add({.id = "a", .client = &client_a, .tokenizer = &tokenizer}).ok());
  ASSERT_TRUE(registry.Add({.id = "b", .client = &client_b, .tokenizer = &tokenizer}).ok());

  ASSERT_TRUE(registry.Resolve("b").ok());
  EXPECT_EQ((*registry.Resolve("b"))->client, &client_b);
  EXPECT_EQ((*registry.Resolve(""))->id, "a");
  EXPECT_EQ(registry.default_id(), "a");
  Result<ModelRef> missing = registry.Resolve("gpt-4");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "model gpt-4 does not exist");
  const std::vector<ModelEntry> entries = registry.Snapshot();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[1].id, "b");
  EXPECT_EQ(entries[1].state, ModelState::kReady);
  EXPECT_FALSE(entries[1].managed);
  EXPECT_EQ(registry.KnownIds(), "'a', 'b'");
  EXPECT_EQ(registry.ReadyModels().size(), 2u);
}

TEST(ModelRegistryTest, AliasesReachTheirModelAndMayNotCollide) {
  NullClient client_a, client_b;
  NoTokenizer tokenizer;
  ModelRegistry registry;
  ASSERT_TRUE(registry
                  .Add({.id = "a",
                        .aliases = {"gpt-4o-mini", "chat"},
                        .client = &client_a,
                        .tokenizer = &tokenizer})
                  .ok());
  ASSERT_TRUE(registry.Add({.id = "b", .client = &client_b, .tokenizer = &tokenizer}).ok());
  EXPECT_EQ((*registry.Resolve("gpt-4o-mini"))->id, "a");
  EXPECT_EQ((*registry.Resolve("chat"))->client, &client_a);
  EXPECT_EQ((*registry.Resolve("b"))->client, &client_b);
  // An alias may not take another model's id or alias, nor repeat within one model.
  EXPECT_FALSE(
      registry.Add({.id = "c", .aliases = {"b"}, .client = &client_b, .tokenizer = &tokenizer})
          .ok());
  EXPECT_FALSE(registry.Add({.id = "chat", .client = &client_b, .tokenizer = &tokenizer}).ok());
  EXPECT_FALSE(
      registry.Add({.id = "d", .aliases = {"x", "x"}, .client = &client_b, .tokenizer = &tokenizer})
          .ok());
  EXPECT_FALSE(registry.Declare("e", {"gpt-4o-mini"}, LoadPolicy::kOnDemand).ok());
  EXPECT_EQ(registry.Snapshot().size(), 2u);
}

TEST(ModelRegistryTest, RefusesDuplicatesAndIncompleteEntries) {
  NullClient client;
  NoTokenizer tokenizer;
  ModelRegistry registry;
  ASSERT_TRUE(registry.Add({.id = "a", .client = &client, .tokenizer = &tokenizer}).ok());
  Status duplicate = registry.Add({.id = "a", .client = &client, .tokenizer = &tokenizer});
  EXPECT_FALSE(duplicate.ok());
  EXPECT_NE(duplicate.message().find("already served"), std::string::npos);
  EXPECT_FALSE(registry.Add({.id = "", .client = &client, .tokenizer = &tokenizer}).ok());
  EXPECT_FALSE(registry.Add({.id = "c", .client = nullptr, .tokenizer = &tokenizer}).ok());
  EXPECT_FALSE(registry.Add({.id = "d", .client = &client, .tokenizer = nullptr}).ok());
  EXPECT_FALSE(registry.Declare("", {}, LoadPolicy::kOnStart).ok());
  EXPECT_EQ(registry.Snapshot().size(), 1u);
}

// The lifecycle as the manager drives it: declared (unloaded), loading, ready, draining,
// unloaded; a failed load; each change wakes the watchers; only ready resolves.
TEST(ModelRegistryTest, StatesChangeAsTheManagerSaysAndWakeWatchers) {
  NullClient client;
  NoTokenizer tokenizer;
  ModelRegistry registry;
  int wakes = 0;
  const uint64_t watch = registry.Watch([&] { ++wakes; });
  ASSERT_TRUE(registry.Declare("m", {"alias"}, LoadPolicy::kOnDemand).ok());
  Result<ModelEntry> entry = registry.Lookup("alias");
  ASSERT_TRUE(entry.ok());
  EXPECT_EQ(entry->id, "m");
  EXPECT_EQ(entry->state, ModelState::kUnloaded);
  EXPECT_EQ(entry->load, LoadPolicy::kOnDemand);
  EXPECT_TRUE(entry->managed);
  Result<ModelRef> unloaded = registry.Resolve("m");
  ASSERT_FALSE(unloaded.ok());
  EXPECT_EQ(unloaded.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(unloaded.status().message(), "model m is unloaded");

  ASSERT_TRUE(registry.SetState("m", ModelState::kLoading).ok());
  EXPECT_EQ(registry.Resolve("m").status().message(), "model m is loading");
  auto model = std::make_shared<ServedModel>();
  model->id = "m";
  model->aliases = {"alias", "new-alias"};
  model->client = &client;
  model->tokenizer = &tokenizer;
  ASSERT_TRUE(registry.Publish("m", model, 0.25).ok());
  ASSERT_TRUE(registry.Resolve("new-alias").ok());
  EXPECT_EQ(registry.Lookup("m")->loads, 1);
  EXPECT_DOUBLE_EQ(registry.Lookup("m")->last_load_seconds, 0.25);

  ModelRef retired = registry.Retire("m", "unload requested");
  EXPECT_EQ(retired, model);
  EXPECT_EQ(registry.Resolve("m").status().message(), "model m is draining: unload requested");
  EXPECT_EQ(registry.Lookup("m")->model, nullptr) << "a draining model is the manager's";
  EXPECT_EQ(registry.Retire("m", "again"), nullptr);
  EXPECT_FALSE(registry.Remove("m").ok()) << "draining models cannot be forgotten";
  ASSERT_TRUE(registry.MarkUnloaded("m", ModelRegistry::UnloadKind::kEvicted).ok());
  entry = registry.Lookup("m");
  EXPECT_EQ(entry->state, ModelState::kUnloaded);
  EXPECT_EQ(entry->unloads, 1);
  EXPECT_EQ(entry->evictions, 1);

  ASSERT_TRUE(registry.MarkLoadFailed("m", ModelState::kFailed, "bad file").ok());
  EXPECT_EQ(registry.Resolve("m").status().message(), "model m is failed: bad file");
  EXPECT_EQ(registry.Lookup("m")->load_failures, 1);
  EXPECT_EQ(wakes, 5);  // loading, ready, draining, unloaded, failed

  registry.Unwatch(watch);
  const int before = wakes;
  registry.Notify();
  EXPECT_EQ(wakes, before);
  ASSERT_TRUE(registry.Remove("m").ok());
  EXPECT_FALSE(registry.Lookup("m").ok());
  EXPECT_EQ(registry.SetState("m", ModelState::kReady).code(), StatusCode::kNotFound);
}

// A reload's new version takes over at once: the id resolves all along.
TEST(ModelRegistryTest, ReplaceSwapsTheVersionWithoutAGap) {
  NullClient client;
  NoTokenizer tokenizer;
  ModelRegistry registry;
  ASSERT_TRUE(registry.Declare("m", {}, LoadPolicy::kOnStart).ok());
  ASSERT_TRUE(registry.Declare("other", {"taken"}, LoadPolicy::kOnStart).ok());
  auto version = [&](std::vector<std::string> aliases) {
    auto model = std::make_shared<ServedModel>();
    model->id = "m";
    model->aliases = std::move(aliases);
    model->client = &client;
    model->tokenizer = &tokenizer;
    return model;
  };
  auto first = version({});
  EXPECT_EQ(registry.Replace("m", first, 1), nullptr) << "not ready: nothing to replace";
  ASSERT_TRUE(registry.Publish("m", first, 1).ok());
  auto second = version({"m2"});
  EXPECT_EQ(registry.Replace("m", second, 2), first);
  EXPECT_EQ(*registry.Resolve("m2"), second);
  EXPECT_EQ(registry.Lookup("m")->state, ModelState::kReady);
  EXPECT_EQ(registry.Lookup("m")->loads, 2);
  EXPECT_EQ(registry.Replace("m", version({"taken"}), 3), nullptr) << "alias collision";
  EXPECT_EQ(*registry.Resolve("m"), second);
}

TEST(ModelRegistryTest, LoadRequestsGoToTheInstalledRequester) {
  ModelRegistry registry;
  EXPECT_FALSE(registry.RequestLoad("m"));
  std::vector<std::string> asked;
  registry.SetLoadRequester([&](const std::string& id) { asked.push_back(id); });
  EXPECT_TRUE(registry.RequestLoad("m"));
  EXPECT_EQ(asked, std::vector<std::string>{"m"});
}

TEST(ModelIdFromPathTest, DropsFolderAndGgufSuffix) {
  EXPECT_EQ(ModelIdFromPath("/m/SmolLM2-135M-Instruct.Q4_1.gguf"), "SmolLM2-135M-Instruct.Q4_1");
  EXPECT_EQ(ModelIdFromPath("model.bin"), "model.bin");
  EXPECT_EQ(ModelIdFromPath("dir/.gguf"), ".gguf");
}

}  // namespace
}  // namespace pier::serving
