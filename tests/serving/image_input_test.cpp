#include "serving/image_input.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "serving/model_settings.h"

namespace pier::serving {
namespace {

using Json = nlohmann::json;
namespace image = tensor_models::image;

// A vision model's declaration: one FP32 input x [-1, 3, 224, 224], one output [-1, 4].
tensor_models::TensorModelInfo Classifier(std::vector<int64_t> shape = {-1, 3, 224, 224},
                                          ElementType type = ElementType::kFp32) {
  tensor_models::TensorModelInfo info;
  info.inputs = {{"x", type, std::move(shape)}};
  info.outputs = {{"scores", ElementType::kFp32, {-1, 4}}};
  info.max_batch_size = 8;
  return info;
}

Result<ImagePreprocessSettings> Parse(const std::string& yaml_like_json) {
  return ParseImagePreprocess(Json::parse(yaml_like_json), "models.yaml: orientation: preprocess");
}

TEST(ImageInputTest, ReadsEveryKeyAsYamlGivesThem) {
  Result<ImagePreprocessSettings> s = Parse(R"({
      "input": "x", "name": "image", "size": ["224", "224"], "resize": "crop",
      "shorter_side": "256", "interpolation": "bicubic", "scale": "0.5",
      "mean": ["0.485", "0.456", "0.406"], "std": "0.25", "layout": "NCHW", "channels": "BGR",
      "exif": "off", "max_image_bytes": "1MiB", "max_image_width": "4000",
      "max_image_height": "3000", "max_image_pixels": "1000000", "threads": "2"})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->name, "image");
  EXPECT_EQ(s->resize, image::ResizeMode::kCrop);
  EXPECT_EQ(s->shorter_side, 256);
  EXPECT_EQ(s->interpolation, image::Interpolation::kBicubic);
  EXPECT_EQ(s->std, std::vector<double>{0.25});
  EXPECT_EQ(s->channels, image::ChannelOrder::kBgr);
  EXPECT_FALSE(s->exif);
  EXPECT_EQ(s->limits.max_bytes, uint64_t{1} << 20);
  EXPECT_EQ(s->limits.max_pixels, 1'000'000);
  EXPECT_EQ(s->threads, 2);
  // Shown and read back, it is the same (how a worker or /admin sees it).
  Result<ImagePreprocessSettings> again =
      ParseImagePreprocess(ImagePreprocessJson(*s), "round trip");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, *s);
}

TEST(ImageInputTest, RefusesUnknownKeysAndImpossibleCombinationsNamingTheKey) {
  struct Case {
    const char* json;
    const char* says;
  };
  const Case cases[] = {
      {R"({"resise": "crop"})", "unknown key \"resise\""},
      {R"({"resize": "squash"})", "preprocess.resize: expected one of stretch, crop, letterbox"},
      {R"({"shorter_side": "256"})", "preprocess.shorter_side: only with resize: crop"},
      {R"({"resize": "crop", "pad_value": "0"})",
       "preprocess.pad_value: only with resize: letterbox"},
      {R"({"mean": ["0.5", "0.5"]})", "preprocess.mean: expected 1 value or 3"},
      {R"({"std": "0"})", "preprocess.std: each value must be above 0"},
      {R"({"size": ["224"]})", "preprocess.size: expected [height, width]"},
      {R"({"resize": "crop", "size": ["224", "300"], "shorter_side": "256"})",
       "shorter_side: 256 is below the crop's larger side 300"},
      {R"({"pad_value": "300", "resize": "letterbox"})", "pad_value"},
      {R"({"layout": "CHW"})", "expected one of NCHW, NHWC"},
      {R"({"threads": "0"})", "threads"},
      {R"("crop")", "expected a map"},
  };
  for (const Case& c : cases) {
    Result<ImagePreprocessSettings> s = Parse(c.json);
    ASSERT_FALSE(s.ok()) << c.json;
    EXPECT_NE(s.status().message().find(c.says), std::string::npos)
        << c.json << " -> " << s.status().message();
    EXPECT_NE(s.status().message().find("models.yaml: orientation: preprocess"), std::string::npos)
        << s.status().message();
  }
}

TEST(ImageInputTest, ResolvesSizeLayoutAndTypeFromTheModel) {
  ImagePreprocessSettings s;
  s.name = "image";
  Result<ImageInput> in = ResolveImageInput(s, Classifier(), "orientation");
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ(in->input, "x");
  EXPECT_EQ(in->name, "image");
  EXPECT_EQ(in->spec.height, 224);
  EXPECT_EQ(in->spec.width, 224);
  EXPECT_EQ(in->spec.layout, image::TensorLayout::kNchw);
  EXPECT_EQ(in->image_dims, (std::vector<int64_t>{3, 224, 224}));
  EXPECT_TRUE(in->batched);
  EXPECT_FLOAT_EQ(in->spec.scale, 1.0f / 255.0f);

  // NHWC found from where the 3 is; a crop defaults its shorter side to the larger one.
  s.resize = image::ResizeMode::kCrop;
  in = ResolveImageInput(s, Classifier({-1, 160, 320, 3}), "detector");
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ(in->spec.layout, image::TensorLayout::kNhwc);
  EXPECT_EQ(in->spec.shorter_side, 320);
  EXPECT_EQ(in->image_dims, (std::vector<int64_t>{160, 320, 3}));

  // Open height and width take `size`; an unbatched 4-D input keeps its leading 1.
  ImagePreprocessSettings sized;
  sized.size = {96, 128};
  tensor_models::TensorModelInfo open = Classifier({1, 3, -1, -1}, ElementType::kUint8);
  open.max_batch_size = 0;
  in = ResolveImageInput(sized, open, "ocr");
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_FALSE(in->batched);
  EXPECT_TRUE(in->leading_one);
  EXPECT_EQ(in->spec.type, ElementType::kUint8);
  EXPECT_EQ(in->image_dims, (std::vector<int64_t>{3, 96, 128}));
}

TEST(ImageInputTest, RefusesWhatTheModelCannotTakeNamingTheModelAndKey) {
  struct Case {
    ImagePreprocessSettings settings;
    tensor_models::TensorModelInfo info;
    const char* says;
  };
  ImagePreprocessSettings plain;
  ImagePreprocessSettings missing;
  missing.input = "pixels";
  ImagePreprocessSettings wrong_size;
  wrong_size.size = {256, 256};
  ImagePreprocessSettings normalised;
  normalised.mean = {0.5};
  tensor_models::TensorModelInfo two = Classifier();
  two.inputs.push_back({"mask", ElementType::kFp32, {-1, 1}});
  const Case cases[] = {
      {plain, two, "preprocess.input: the model has 2 inputs (x, mask)"},
      {missing, Classifier(), "preprocess.input: the model has no input 'pixels'"},
      {plain, Classifier({-1, 3, 224, 224}, ElementType::kInt64), "is INT64"},
      {plain, Classifier({-1, 224, 224}), "an image input is [batch, 3, height, width]"},
      {plain, Classifier({-1, 3, -1, -1}), "preprocess.size: input 'x' is [-1, 3, -1, -1]"},
      {wrong_size, Classifier(), "preprocess.size: [256, 256] but input 'x' is"},
      {plain, Classifier({-1, 3, 224, 3}), "preprocess.layout"},
      {plain, Classifier({-1, 1, 224, 224}), "preprocess.layout"},
      {normalised, Classifier({-1, 3, 224, 224}, ElementType::kUint8), "UINT8"},
  };
  for (const Case& c : cases) {
    Result<ImageInput> in = ResolveImageInput(c.settings, c.info, "m");
    ASSERT_FALSE(in.ok()) << c.says;
    EXPECT_NE(in.status().message().find(c.says), std::string::npos) << in.status().message();
    EXPECT_NE(in.status().message().find("model m: preprocess"), std::string::npos);
  }
}

TEST(ImageInputTest, IsAPerModelKeyOfTheSettingsTable) {
  ModelSettings settings;
  ASSERT_TRUE(ApplyModelSetting(&settings, "preprocess", Json::parse(R"({"resize": "letterbox"})"),
                                "models.yaml: yolo: preprocess")
                  .ok());
  ASSERT_TRUE(settings.preprocess.has_value());
  EXPECT_EQ(settings.preprocess->resize, image::ResizeMode::kLetterbox);
  // Handed to a worker and read back unchanged; a model without it shows nothing.
  Result<ModelSettings> back = ModelSettingsFromJson(ModelSettingsToJson(settings), "worker");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->preprocess, settings.preprocess);
  EXPECT_FALSE(ModelSettingsToJson(ModelSettings{}).contains("preprocess"));
  // Every key shown (as /admin does) shows it as null, which reads back as none.
  EXPECT_TRUE(ModelSettingsToJson(ModelSettings{}, true).at("preprocess").is_null());
  ASSERT_TRUE(ApplyModelSetting(&settings, "preprocess", Json(), "null").ok());
  EXPECT_FALSE(settings.preprocess.has_value());
}

}  // namespace
}  // namespace pier::serving
