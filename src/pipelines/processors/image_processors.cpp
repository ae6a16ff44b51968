// The processors that turn bytes into images and images into a detector's tensor
// (processors.h: image, text_detection_input).
#include <algorithm>
#include <cstring>

#include "pipelines/ocr/ocr.h"
#include "pipelines/processors/processor_base.h"
#include "tensor_models/batch_tensors.h"

namespace pier::pipelines {
namespace img = tensor_models::image;

namespace {

class ImageProcessor final : public ProcessorBase {
 public:
  explicit ImageProcessor(img::ImageLimits limits)
      : ProcessorBase("image", {{"bytes", {ValueKind::kTensor, ElementType::kBytes}}},
                      {{"image", {ValueKind::kImages, std::nullopt}}}),
        limits_(limits) {}

  StepOutcome Run(const StepCall& call) override {
    const HostTensor& bytes = call.inputs.at("bytes")->tensor;
    Result<std::vector<std::string_view>> elements =
        tensor_models::SplitBytesElements(bytes.bytes, ElementCount(bytes.shape));
    if (!elements.ok()) return Fail(elements.status());
    if (elements->size() != 1) {
      return Fail(InvalidArgumentError("takes one image, got " + std::to_string(elements->size()) +
                                       " elements"));
    }
    const std::string_view encoded = (*elements)[0];
    if (encoded.empty()) return Fail(InvalidArgumentError("the image is empty (0 bytes)"));
    Result<img::ImageHeader> header = img::ProbeImage(encoded);
    if (!header.ok()) return Fail(header.status());
    if (Status fits = img::CheckImageLimits(*header, encoded.size(), limits_); !fits.ok()) {
      return Fail(fits);
    }
    Image stored;
    stored.width = header->width;
    stored.height = header->height;
    stored.pixels.resize(static_cast<size_t>(header->width * header->height * 3));
    if (Status decoded = img::DecodeImage(encoded, *header, stored.view()); !decoded.ok()) {
      return Fail(decoded);
    }
    auto value = std::make_shared<PipelineValue>();
    value->kind = ValueKind::kImages;
    if (header->orientation == 1) {
      value->images.push_back(std::move(stored));
    } else {
      Image oriented;
      img::OrientedSize(header->orientation, stored.width, stored.height, &oriented.width,
                        &oriented.height);
      oriented.pixels.resize(stored.pixels.size());
      img::OrientImage(stored.view(), header->orientation, oriented.view());
      value->images.push_back(std::move(oriented));
    }
    StepOutcome outcome;
    outcome.outputs["image"] = std::move(value);
    return outcome;
  }

 private:
  img::ImageLimits limits_;
};

class DetectionInputProcessor final : public ProcessorBase {
 public:
  DetectionInputProcessor(ocr::DetectionInputOptions options, int64_t max_side_len)
      : ProcessorBase("text_detection_input", {{"image", {ValueKind::kImages, std::nullopt}}},
                      {{"tensor", {ValueKind::kTensor, ElementType::kFp32}}}),
        options_(options),
        max_side_len_(max_side_len) {}

  StepOutcome Run(const StepCall& call) override {
    const PipelineValue& in = *call.inputs.at("image");
    if (in.images.size() != 1) return Fail(InvalidArgumentError("takes one image"));
    const Image& image = in.images[0];
    // A page larger than max_side_len is sized as if shrunk to it first (rapidocr shrinks the
    // image itself; the tensor is resampled from the original here, in one pass).
    int64_t source_width = image.width;
    int64_t source_height = image.height;
    const int64_t longest = std::max(source_width, source_height);
    if (max_side_len_ > 0 && longest > max_side_len_) {
      const double ratio = static_cast<double>(max_side_len_) / static_cast<double>(longest);
      source_width = std::max<int64_t>(1, static_cast<int64_t>(source_width * ratio));
      source_height = std::max<int64_t>(1, static_cast<int64_t>(source_height * ratio));
    }
    int64_t width = 0;
    int64_t height = 0;
    ocr::DetectionInputSize(source_width, source_height, options_, &width, &height);
    // A tiny image under a "max" limit rounds to nothing: the smallest map the network takes
    // (it finds no text there, as rapidocr finds none).
    width = std::max(width, options_.multiple);
    height = std::max(height, options_.multiple);
    auto value = std::make_shared<PipelineValue>();
    value->tensor.type = ElementType::kFp32;
    value->tensor.shape = {1, 3, height, width};
    value->tensor.bytes.resize(static_cast<size_t>(3 * height * width) * sizeof(float));
    ocr::WriteDetectionInput(image.view(), options_, width, height,
                             std::span<float>(reinterpret_cast<float*>(value->tensor.bytes.data()),
                                              static_cast<size_t>(3 * height * width)));
    StepOutcome outcome;
    outcome.outputs["tensor"] = std::move(value);
    return outcome;
  }

 private:
  ocr::DetectionInputOptions options_;
  int64_t max_side_len_;
};

}  // namespace

Result<std::unique_ptr<Step>> MakeImageProcessor(const StepSpec& spec) {
  StepKeys keys(spec);
  img::ImageLimits limits;
  PIER_ASSIGN_OR_RETURN(
      int64_t max_bytes,
      keys.Count("max_image_bytes", static_cast<int64_t>(limits.max_bytes), 1, int64_t{1} << 31));
  limits.max_bytes = static_cast<uint64_t>(max_bytes);
  PIER_ASSIGN_OR_RETURN(limits.max_width,
                        keys.Count("max_image_width", limits.max_width, 1, 1 << 20));
  PIER_ASSIGN_OR_RETURN(limits.max_height,
                        keys.Count("max_image_height", limits.max_height, 1, 1 << 20));
  PIER_ASSIGN_OR_RETURN(limits.max_pixels,
                        keys.Count("max_image_pixels", limits.max_pixels, 1, int64_t{1} << 34));
  PIER_RETURN_IF_ERROR(keys.Finish("processor image"));
  return std::unique_ptr<Step>(new ImageProcessor(limits));
}

Result<std::unique_ptr<Step>> MakeDetectionInputProcessor(const StepSpec& spec) {
  StepKeys keys(spec);
  ocr::DetectionInputOptions options;
  PIER_ASSIGN_OR_RETURN(options.limit_side_len,
                        keys.Count("limit_side_len", options.limit_side_len, 32, 8192));
  PIER_ASSIGN_OR_RETURN(std::string limit_type, keys.Text("limit_type", "min"));
  if (limit_type != "min" && limit_type != "max") {
    return InvalidArgumentError(spec.source +
                                ".limit_type: must be min (the shorter side is "
                                "scaled up to limit_side_len) or max (the longer "
                                "side down), got '" +
                                limit_type + "'");
  }
  options.limit_min = limit_type == "min";
  PIER_ASSIGN_OR_RETURN(int64_t max_side_len, keys.Count("max_side_len", 2000, 0, 16384));
  PIER_RETURN_IF_ERROR(keys.Finish("processor text_detection_input"));
  return std::unique_ptr<Step>(new DetectionInputProcessor(options, max_side_len));
}

}  // namespace pier::pipelines
