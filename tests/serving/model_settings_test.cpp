// ModelSettings' table (serving/model_settings.h): one row per key, each parsed and shown in
// the same form, so a model's settings reach a worker process unchanged; values of the wrong
// shape are refused naming the key.
#include "serving/model_settings.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "common/yaml.h"

namespace pier::serving {
namespace {

using Json = nlohmann::json;

TEST(ModelSettingsTest, EveryKeyHasOneRowWithHelp) {
  std::set<std::string_view> names;
  for (const ModelSettingKey& key : ModelSettingKeys()) {
    EXPECT_TRUE(names.insert(key.name).second) << key.name << " twice";
    EXPECT_FALSE(key.type.empty()) << key.name;
    EXPECT_FALSE(key.help.empty()) << key.name;
    EXPECT_EQ(FindModelSettingKey(key.name), &key);
  }
  EXPECT_EQ(FindModelSettingKey("colour"), nullptr);
}

// Each key's shown value reads back as itself, for the defaults and for a value of its own.
TEST(ModelSettingsTest, EveryKeyReadsBackWhatItShows) {
  const ModelSettings defaults;
  for (const ModelSettingKey& key : ModelSettingKeys()) {
    // threads' default (0: every core) is no value a user may give (threads >= 1); being the
    // default, it never travels either.
    if (key.name == "threads") continue;
    ModelSettings s;
    ASSERT_TRUE(key.apply(key.show(defaults), key.name, &s).ok()) << key.name;
    EXPECT_EQ(s, defaults) << key.name;
  }
  ModelSettings changed;
  changed.threads = 3;
  changed.ctx = 1000;
  changed.kv_dtype = engine::KvDtype::kQ8_0;
  changed.weights_dtype = DType::kQ8_0;
  changed.kv_policy = engine::KvPolicy::kStatic;
  changed.kv_min = engine::KvSize::Tokens(300);
  changed.kv_max = engine::KvSize::Bytes((uint64_t{3} << 30) + 12345);
  changed.max_batched_tokens = 77;
  changed.prefill_chunk_while_decoding = 0;
  changed.max_seqs = 5;
  changed.max_queued = 0;
  changed.qos_reserve = 0.3;
  changed.qos = false;
  changed.qos_stop_steps = false;
  changed.adaptive_batching = false;
  changed.min_batched_tokens = 9;
  changed.max_prefill_chunk = 11;
  changed.max_queue_delay_ms = 0;
  changed.max_batch_texts = 2;
  changed.embed_batch_tokens = 16;
  changed.adaptive_batch_window = false;
  changed.swap_space = 123456789;
  changed.kv_idle_release_seconds = 0.1;
  changed.tool_format = ToolFormat::kGeneric;
  changed.max_batch_size = 0;
  changed.preferred_batch_sizes = {2, 6};
  changed.inputs = {
      {"x", {.shape = {-1, 3, 224, 224}, .pad = std::nullopt, .warmup = {}}},
      {"mask",
       {.shape = {-1, 128},
        .pad = tensor_models::PadRule{.axes = {1}, .value = -1.5},
        .warmup = {-1, 64}}},
      {"line",
       {.shape = {}, .pad = tensor_models::PadRule{.axes = {2, 3}, .value = 0.1}, .warmup = {}}}};
  ImagePreprocessSettings preprocess;
  preprocess.resize = tensor_models::image::ResizeMode::kCrop;
  preprocess.shorter_side = 256;
  preprocess.mean = {0.485, 0.456, 0.406};
  changed.preprocess = preprocess;
  changed.speculative = {.method = engine::SpeculativeMethod::kNgram,
                         .model = "",
                         .max_tokens = 5,
                         .ngram_min = 1,
                         .ngram_max = 3};
  const Json shown = ModelSettingsToJson(changed);
  EXPECT_EQ(shown.size(), ModelSettingKeys().size()) << "every field above differs: " << shown;
  Result<ModelSettings> back = ModelSettingsFromJson(shown, "test");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, changed) << shown;
}

TEST(ModelSettingsTest, TensorModelKeysRefuseWhatTheyCannotUse) {
  ModelSettings s;
  EXPECT_TRUE(ApplyModelSetting(&s, "preferred_batch_sizes", Json("8,2,8"), "flag").ok());
  EXPECT_EQ(s.preferred_batch_sizes, (std::vector<int64_t>{2, 8})) << "sorted, once each";
  EXPECT_FALSE(ApplyModelSetting(&s, "preferred_batch_sizes", Json("2,x"), "flag").ok());
  EXPECT_FALSE(ApplyModelSetting(&s, "preferred_batch_sizes", Json::array({"0"}), "f").ok());
  Status text = ApplyModelSetting(&s, "inputs", Json("x"), "models[0].inputs");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.message().find("expected a map"), std::string::npos) << text.message();
  Status key = ApplyModelSetting(&s, "inputs", Json::parse(R"({"x": {"fill": "right"}})"), "at");
  ASSERT_FALSE(key.ok());
  EXPECT_NE(key.message().find("at.x: unknown key \"fill\" (known: shape, pad, warmup)"),
            std::string::npos)
      << key.message();
  Status zero =
      ApplyModelSetting(&s, "inputs", Json::parse(R"({"x": {"shape": ["-1", "0"]}})"), "at");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.message().find("at.x.shape"), std::string::npos) << zero.message();
}

// speculative: off, or {method: ngram|draft, model, max_tokens 1..32, ngram_min/max 1..16}; a
// draft names its model, ngram does not; every refusal names the key.
TEST(ModelSettingsTest, SpeculativeTakesAMethodAndChecksItsBounds) {
  ModelSettings s;
  ASSERT_TRUE(
      ApplyModelSetting(&s, "speculative", Json::parse(R"({"method": "ngram"})"), "at").ok());
  EXPECT_EQ(s.speculative.method, engine::SpeculativeMethod::kNgram);
  EXPECT_EQ(s.speculative.max_tokens, 8);
  ASSERT_TRUE(ApplyModelSetting(
                  &s, "speculative",
                  Json::parse(R"({"method": "draft", "model": "tiny", "max_tokens": "4"})"), "at")
                  .ok());
  EXPECT_EQ(s.speculative.method, engine::SpeculativeMethod::kDraft);
  EXPECT_EQ(s.speculative.model, "tiny");
  EXPECT_EQ(s.speculative.max_tokens, 4);
  const Json shown = ModelSettingsToJson(s);
  Result<ModelSettings> back = ModelSettingsFromJson(shown, "test");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->speculative, s.speculative);
  ASSERT_TRUE(ApplyModelSetting(&s, "speculative", Json("off"), "at").ok());
  EXPECT_EQ(s.speculative.method, engine::SpeculativeMethod::kOff);
  auto refused = [&](const char* json, const char* expected) {
    ModelSettings t;
    Status st = ApplyModelSetting(&t, "speculative", Json::parse(json), "models[1].speculative");
    ASSERT_FALSE(st.ok()) << json;
    EXPECT_NE(st.message().find(expected), std::string::npos) << st.message();
  };
  refused(R"({"method": "ngram", "max_tokens": 0})", "models[1].speculative.max_tokens");
  refused(R"({"method": "ngram", "max_tokens": 33})", "models[1].speculative.max_tokens");
  refused(R"({"method": "medusa"})", "expected ngram, draft or off");
  refused(R"({"method": "draft"})", "method draft needs model");
  refused(R"({"method": "ngram", "model": "x"})", "model is for method draft");
  refused(R"({"method": "ngram", "ngram_min": 4, "ngram_max": 2})", "must not exceed ngram_max");
  refused(R"({"max_tokens": 4})", "method is required");
  refused(R"({"method": "ngram", "lookahead": 4})", "unknown key \"lookahead\"");
  refused(R"("on")", "expected off or a map");
}

// inputs: {NAME: {shape, pad: {axes, value}}}: either part alone or both; the axes sorted, the
// value a number (0 by default). Which axes the graph leaves open, and whether the input's type
// holds the value, is checked at load (tensor_models' input_pad_test, tensor_host_test).
TEST(ModelSettingsTest, InputsTakeAShapeAPadRuleOrBoth) {
  ModelSettings s;
  const YAML::Node yaml = YAML::Load(
      "x: {shape: [-1, 1, -1, -1], pad: {axes: [3, 2], value: -1}}\n"
      "line: {pad: {axes: [2]}, warmup: [-1, 3, 48, 640]}\n");
  ASSERT_TRUE(ApplyModelSetting(&s, "inputs", YamlToJson(yaml), "m.yaml: inputs").ok());
  ASSERT_EQ(s.inputs.size(), 2u);
  EXPECT_EQ(s.inputs.at("x").shape, (std::vector<int64_t>{-1, 1, -1, -1}));
  EXPECT_EQ(s.inputs.at("x").pad, (tensor_models::PadRule{.axes = {2, 3}, .value = -1}));
  EXPECT_TRUE(s.inputs.at("line").shape.empty());
  EXPECT_EQ(s.inputs.at("line").pad, (tensor_models::PadRule{.axes = {2}, .value = 0}));
  EXPECT_EQ(s.inputs.at("line").warmup, (std::vector<int64_t>{-1, 3, 48, 640}));
  EXPECT_TRUE(s.inputs.at("x").warmup.empty());
  // Shown as the worker reads it back.
  const Json shown = ModelSettingsToJson(s);
  EXPECT_EQ(shown["inputs"]["x"]["pad"], Json({{"axes", {"2", "3"}}, {"value", "-1"}}));
  EXPECT_FALSE(shown["inputs"]["line"].contains("shape"));
  Result<ModelSettings> back = ModelSettingsFromJson(shown, "worker");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, s);

  const auto refused = [&](const char* json) {
    ModelSettings t;
    Status status = ApplyModelSetting(&t, "inputs", Json::parse(json), "at");
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << json;
    EXPECT_EQ(t, ModelSettings{}) << json;
    return status.message();
  };
  EXPECT_NE(refused(R"({"x": {}})").find("at.x: expected {shape"), std::string::npos);
  EXPECT_NE(refused(R"({"x": {"shape": []}})").find("at.x.shape"), std::string::npos);
  EXPECT_NE(refused(R"({"x": {"pad": "right"}})").find("at.x.pad: expected {axes"),
            std::string::npos);
  EXPECT_NE(refused(R"({"x": {"pad": {"value": "0"}}})").find("at.x.pad.axes"), std::string::npos);
  EXPECT_NE(refused(R"({"x": {"pad": {"axes": []}}})").find("at.x.pad.axes"), std::string::npos);
  EXPECT_NE(refused(R"({"x": {"pad": {"axes": ["-1"]}}})").find("at.x.pad.axes"),
            std::string::npos);
  EXPECT_NE(refused(R"({"x": {"pad": {"axes": ["2", "2"]}}})").find("named twice"),
            std::string::npos);
  EXPECT_NE(refused(R"({"x": {"pad": {"axes": ["1"], "side": "left"}}})")
                .find("at.x.pad: unknown key \"side\" (known: axes, value)"),
            std::string::npos);
  EXPECT_NE(refused(R"({"x": {"pad": {"axes": ["1"], "value": "zero"}}})")
                .find("at.x.pad.value: expected a finite number"),
            std::string::npos);
  EXPECT_NE(refused(R"({"x": {"pad": {"axes": ["1"], "value": "inf"}}})")
                .find("at.x.pad.value: expected a finite number"),
            std::string::npos);
}

TEST(ModelSettingsTest, OnlyWhatDiffersFromTheDefaultsTravels) {
  EXPECT_EQ(ModelSettingsToJson(ModelSettings{}), Json::object());
  ModelSettings s;
  s.ctx = 512;
  EXPECT_EQ(ModelSettingsToJson(s), Json({{"ctx", "512"}}));
  EXPECT_EQ(ModelSettingsToJson(s, /*all=*/true).size(), ModelSettingKeys().size());
}

TEST(ModelSettingsTest, ValuesOfTheWrongShapeOrRangeNameTheKey) {
  ModelSettings s;
  const auto message = [&](std::string_view name, const Json& value) {
    Status status = ApplyModelSetting(&s, name, value, std::string("m.yaml: ") + std::string(name));
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << name << " " << value;
    return status.message();
  };
  EXPECT_EQ(message("ctx", Json::array({1, 2})), "m.yaml: ctx must be a single value");
  EXPECT_EQ(message("ctx", Json{{"a", 1}}), "m.yaml: ctx must be a single value");
  EXPECT_EQ(message("ctx", nullptr), "m.yaml: ctx has no value");
  EXPECT_NE(message("ctx", "1").find("out of range [2,"), std::string::npos);
  EXPECT_NE(message("qos", "yes").find("expected on or off"), std::string::npos);
  EXPECT_NE(message("kv_dtype", "f8").find("m.yaml: kv_dtype: KV dtype 'f8'"), std::string::npos);
  EXPECT_NE(message("colour", "red").find("unknown setting \"colour\""), std::string::npos);
  EXPECT_EQ(s, ModelSettings{}) << "a refused value changes nothing";
  // Numbers from JSON are their text.
  ASSERT_TRUE(ApplyModelSetting(&s, "ctx", 2048, "x").ok());
  EXPECT_EQ(s.ctx, 2048);
}

// What YAML gives a key's parser: scalars as text, lists and maps kept as such (the keys of
// ONNX preprocessing and speculative decoding take maps).
TEST(ModelSettingsTest, YamlValuesReachTheParserWithTheirShape) {
  const YAML::Node node = YAML::Load("a: 512\nb: [1, x]\nc: {method: ngram, max_tokens: 8}\nd:\n");
  const Json json = YamlToJson(node);
  EXPECT_EQ(json["a"], "512");
  EXPECT_EQ(json["b"], Json::array({"1", "x"}));
  EXPECT_EQ(json["c"], Json({{"method", "ngram"}, {"max_tokens", "8"}}));
  EXPECT_TRUE(json["d"].is_null());
}

}  // namespace
}  // namespace pier::serving
