// The OCR processors between PP-OCR's models (processors.h: text_boxes, crop_lines,
// line_tensor, orient_lines, ctc_decode), over pipelines/ocr/ocr.h's pure functions.
#include <algorithm>
#include <filesystem>

#include "pipelines/ocr/ocr.h"
#include "pipelines/processors/processor_base.h"

namespace pier::pipelines {
namespace {

const ValueType kFp32{ValueKind::kTensor, ElementType::kFp32};
const ValueType kImages{ValueKind::kImages, std::nullopt};
const ValueType kBoxes{ValueKind::kBoxes, std::nullopt};

std::span<const float> Floats(const HostTensor& t) {
  return {reinterpret_cast<const float*>(t.bytes.data()), t.bytes.size() / sizeof(float)};
}

class TextBoxesProcessor final : public ProcessorBase {
 public:
  explicit TextBoxesProcessor(ocr::TextBoxOptions options)
      : ProcessorBase("text_boxes", {{"map", kFp32}, {"image", kImages}}, {{"boxes", kBoxes}}),
        options_(options) {}

  StepOutcome Run(const StepCall& call) override {
    const HostTensor& map = call.inputs.at("map")->tensor;
    const PipelineValue& image = *call.inputs.at("image");
    if (map.shape.size() != 4 || map.shape[0] != 1 || map.shape[1] != 1) {
      return Fail(InvalidArgumentError("takes a [1, 1, h, w] probability map, got " +
                                       ShapeText(map.shape)));
    }
    if (image.images.size() != 1) return Fail(InvalidArgumentError("takes one image"));
    auto value = std::make_shared<PipelineValue>();
    value->kind = ValueKind::kBoxes;
    value->source_width = image.images[0].width;
    value->source_height = image.images[0].height;
    value->boxes = ocr::FindTextBoxes(Floats(map), map.shape[3], map.shape[2],
                                      image.images[0].width, image.images[0].height, options_);
    StepOutcome outcome;
    outcome.outputs["boxes"] = std::move(value);
    return outcome;
  }

 private:
  ocr::TextBoxOptions options_;
};

class CropLinesProcessor final : public ProcessorBase {
 public:
  CropLinesProcessor()
      : ProcessorBase("crop_lines", {{"image", kImages}, {"boxes", kBoxes}}, {{"lines", kImages}}) {
  }

  StepOutcome Run(const StepCall& call) override {
    const PipelineValue& image = *call.inputs.at("image");
    const PipelineValue& boxes = *call.inputs.at("boxes");
    if (image.images.size() != 1) return Fail(InvalidArgumentError("takes one image"));
    auto value = std::make_shared<PipelineValue>();
    value->kind = ValueKind::kImages;
    for (const ocr::TextBox& box : boxes.boxes) {
      Image line;
      ocr::CropSize(box, &line.width, &line.height);
      if (line.width <= 0 || line.height <= 0) continue;  // a degenerate box: nothing to read
      line.pixels.resize(static_cast<size_t>(line.width * line.height * 3));
      ocr::CropTextLine(image.images[0].view(), box, line.view());
      value->images.push_back(std::move(line));
    }
    StepOutcome outcome;
    outcome.outputs["lines"] = std::move(value);
    return outcome;
  }
};

class LineTensorProcessor final : public ProcessorBase {
 public:
  LineTensorProcessor(int64_t height, int64_t width, int64_t min_width)
      : ProcessorBase("line_tensor", {{"lines", kImages}}, {{"tensor", kFp32}}),
        height_(height),
        width_(width),
        min_width_(min_width) {}

  StepOutcome Run(const StepCall& call) override {
    const PipelineValue& lines = *call.inputs.at("lines");
    std::vector<ocr::RgbView> views;
    for (const Image& line : lines.images) views.push_back(line.view());
    const int64_t width = width_ > 0 ? width_ : ocr::RecognitionWidth(views, height_, min_width_);
    const int64_t n = static_cast<int64_t>(views.size());
    const size_t per_line = static_cast<size_t>(3 * height_ * width);
    auto value = std::make_shared<PipelineValue>();
    value->tensor.type = ElementType::kFp32;
    value->tensor.shape = {n, 3, height_, width};
    value->tensor.bytes.resize(static_cast<size_t>(n) * per_line * sizeof(float));
    float* out = reinterpret_cast<float*>(value->tensor.bytes.data());
    for (int64_t i = 0; i < n; ++i) {
      ocr::WriteLineTensor(views[static_cast<size_t>(i)], height_, width,
                           std::span<float>(out + static_cast<size_t>(i) * per_line, per_line));
    }
    StepOutcome outcome;
    outcome.outputs["tensor"] = std::move(value);
    return outcome;
  }

 private:
  int64_t height_;
  int64_t width_;
  int64_t min_width_;
};

class OrientLinesProcessor final : public ProcessorBase {
 public:
  OrientLinesProcessor(float threshold, bool reverse_page)
      : ProcessorBase("orient_lines", {{"lines", kImages}, {"scores", kFp32}},
                      {{"lines", kImages}}),
        threshold_(threshold),
        reverse_page_(reverse_page) {}

  StepOutcome Run(const StepCall& call) override {
    const PipelineValue& lines = *call.inputs.at("lines");
    const HostTensor& scores = call.inputs.at("scores")->tensor;
    const int64_t n = static_cast<int64_t>(lines.images.size());
    if (scores.shape.size() != 2 || scores.shape[0] != n || scores.shape[1] < 2) {
      return Fail(InvalidArgumentError("takes [" + std::to_string(n) +
                                       ", 2] scores for its lines, got " +
                                       ShapeText(scores.shape)));
    }
    auto value = std::make_shared<PipelineValue>(lines);
    std::span<const float> all = Floats(scores);
    const size_t classes = static_cast<size_t>(scores.shape[1]);
    size_t turned = 0;
    for (size_t i = 0; i < value->images.size(); ++i) {
      if (ocr::IsUpsideDown(all.subspan(i * classes, classes), threshold_)) {
        ocr::Rotate180(value->images[i].view());
        ++turned;
      }
    }
    // Most lines upside down: the page itself is, so its boxes' reading order (top to bottom
    // as stored) is the text's last line first. Reversed, the lines read in the text's order.
    if (reverse_page_ && 2 * turned > value->images.size()) {
      std::reverse(value->images.begin(), value->images.end());
    }
    StepOutcome outcome;
    outcome.outputs["lines"] = std::move(value);
    return outcome;
  }

 private:
  float threshold_;
  bool reverse_page_;
};

class CtcDecodeProcessor final : public ProcessorBase {
 public:
  CtcDecodeProcessor(std::vector<std::string> charset, float min_score)
      : ProcessorBase("ctc_decode", {{"probabilities", kFp32}},
                      {{"text", {ValueKind::kTensor, ElementType::kBytes}}, {"scores", kFp32}}),
        charset_(std::move(charset)),
        min_score_(min_score) {}

  StepOutcome Run(const StepCall& call) override {
    const HostTensor& probabilities = call.inputs.at("probabilities")->tensor;
    if (probabilities.shape.size() != 3) {
      return Fail(InvalidArgumentError("takes [N, steps, classes] probabilities, got " +
                                       ShapeText(probabilities.shape)));
    }
    const int64_t n = probabilities.shape[0];
    const int64_t steps = probabilities.shape[1];
    const int64_t classes = probabilities.shape[2];
    if (n > 0 && classes != static_cast<int64_t>(charset_.size())) {
      return Fail(InvalidArgumentError("the model gives " + std::to_string(classes) +
                                       " classes; the character set has " +
                                       std::to_string(charset_.size())));
    }
    std::span<const float> all = Floats(probabilities);
    std::vector<std::string> texts;
    std::vector<float> kept_scores;
    const size_t per_line = static_cast<size_t>(steps * classes);
    for (int64_t i = 0; i < n; ++i) {
      ocr::DecodedText decoded = ocr::CtcGreedyDecode(
          all.subspan(static_cast<size_t>(i) * per_line, per_line), steps, classes, charset_);
      if (decoded.text.empty() || decoded.score < min_score_) continue;
      texts.push_back(std::move(decoded.text));
      kept_scores.push_back(decoded.score);
    }
    StepOutcome outcome;
    outcome.outputs["text"] = TextValue("text", texts);
    auto scores = std::make_shared<PipelineValue>();
    scores->tensor.type = ElementType::kFp32;
    scores->tensor.shape = {static_cast<int64_t>(kept_scores.size())};
    if (!kept_scores.empty()) {
      scores->tensor.bytes.assign(reinterpret_cast<const char*>(kept_scores.data()),
                                  kept_scores.size() * sizeof(float));
    }
    outcome.outputs["scores"] = std::move(scores);
    return outcome;
  }

 private:
  std::vector<std::string> charset_;
  float min_score_;
};

}  // namespace

Result<std::unique_ptr<Step>> MakeTextBoxesProcessor(const StepSpec& spec) {
  StepKeys keys(spec);
  ocr::TextBoxOptions o;
  PIER_ASSIGN_OR_RETURN(double threshold, keys.Number("threshold", o.threshold, 0, 1));
  PIER_ASSIGN_OR_RETURN(double box_threshold, keys.Number("box_threshold", o.box_threshold, 0, 1));
  PIER_ASSIGN_OR_RETURN(double unclip, keys.Number("unclip_ratio", o.unclip_ratio, 0, 10));
  PIER_ASSIGN_OR_RETURN(int64_t candidates,
                        keys.Count("max_candidates", o.max_candidates, 1, 100000));
  PIER_ASSIGN_OR_RETURN(int64_t min_size, keys.Count("min_size", o.min_size, 1, 1000));
  PIER_ASSIGN_OR_RETURN(o.dilate, keys.Flag("dilate", o.dilate));
  PIER_RETURN_IF_ERROR(keys.Finish("processor text_boxes"));
  o.threshold = static_cast<float>(threshold);
  o.box_threshold = static_cast<float>(box_threshold);
  o.unclip_ratio = static_cast<float>(unclip);
  o.max_candidates = static_cast<int>(candidates);
  o.min_size = static_cast<int>(min_size);
  return std::unique_ptr<Step>(new TextBoxesProcessor(o));
}

Result<std::unique_ptr<Step>> MakeCropLinesProcessor(const StepSpec& spec) {
  StepKeys keys(spec);
  PIER_RETURN_IF_ERROR(keys.Finish("processor crop_lines"));
  return std::unique_ptr<Step>(new CropLinesProcessor());
}

Result<std::unique_ptr<Step>> MakeLineTensorProcessor(const StepSpec& spec) {
  StepKeys keys(spec);
  PIER_ASSIGN_OR_RETURN(int64_t height, keys.Count("height", 48, 8, 1024));
  PIER_ASSIGN_OR_RETURN(int64_t width, keys.Count("width", 0, 0, 16384));
  PIER_ASSIGN_OR_RETURN(int64_t min_width, keys.Count("min_width", 0, 0, 16384));
  PIER_RETURN_IF_ERROR(keys.Finish("processor line_tensor"));
  if ((width > 0) == (min_width > 0)) {
    return InvalidArgumentError(spec.source +
                                ": processor line_tensor needs exactly one of "
                                "width (a fixed width, e.g. 192) or min_width (the "
                                "widest line's width, at least this, e.g. 320)");
  }
  return std::unique_ptr<Step>(new LineTensorProcessor(height, width, min_width));
}

Result<std::unique_ptr<Step>> MakeOrientLinesProcessor(const StepSpec& spec) {
  StepKeys keys(spec);
  PIER_ASSIGN_OR_RETURN(double threshold, keys.Number("threshold", 0.9, 0, 1));
  PIER_ASSIGN_OR_RETURN(bool reverse_page, keys.Flag("reverse_upside_down_page", true));
  PIER_RETURN_IF_ERROR(keys.Finish("processor orient_lines"));
  return std::unique_ptr<Step>(
      new OrientLinesProcessor(static_cast<float>(threshold), reverse_page));
}

Result<std::unique_ptr<Step>> MakeCtcDecodeProcessor(const StepSpec& spec,
                                                     const ModelResolver& models) {
  StepKeys keys(spec);
  PIER_ASSIGN_OR_RETURN(std::string where, keys.Text("charset", ""));
  PIER_ASSIGN_OR_RETURN(std::string model, keys.Text("charset_model", ""));
  PIER_ASSIGN_OR_RETURN(double min_score, keys.Number("min_score", 0.5, 0, 1));
  PIER_RETURN_IF_ERROR(keys.Finish("processor ctc_decode"));
  if (where.empty()) {
    return InvalidArgumentError(spec.source +
                                ".charset: processor ctc_decode needs its "
                                "characters: metadata:KEY (with charset_model) "
                                "or a file");
  }
  if (where.rfind("metadata:", 0) != 0 && !spec.folder.empty() &&
      std::filesystem::path(where).is_relative()) {
    where = (std::filesystem::path(spec.folder) / where).string();
  }
  PIER_ASSIGN_OR_RETURN(std::string text,
                        ReadListSource(where, model, models, spec.source + ".charset"));
  std::vector<std::string> charset = ocr::ParseCharset(text);
  if (charset.size() < 3) {
    return InvalidArgumentError(spec.source + ".charset: '" + where + "' holds no characters");
  }
  return std::unique_ptr<Step>(
      new CtcDecodeProcessor(std::move(charset), static_cast<float>(min_score)));
}

}  // namespace pier::pipelines
