// PipelineValue: what flows between a pipeline's steps. A tensor (what models take and give,
// and text as BYTES), a list of images (a decoded page, the text lines cut from it) or a list
// of text boxes (a detector's quadrilaterals). Values are immutable once made and shared
// between the steps that read them (std::shared_ptr<const PipelineValue>); their bytes are
// charged to the pipeline's governor owner while the request holds them (pipeline.h).
//
// Thread-safety: plain data.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pipelines/ocr/ocr.h"
#include "tensor/host_tensor.h"
#include "tensor_models/image/image_preprocess.h"

namespace pier::pipelines {

// Interleaved 8-bit RGB, row-major.
struct Image {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> pixels;  // width * height * 3

  tensor_models::image::RgbView view() { return {width, height, std::span<uint8_t>(pixels)}; }
  tensor_models::image::RgbView view() const {
    return {width, height, std::span<uint8_t>(const_cast<uint8_t*>(pixels.data()), pixels.size())};
  }
};

enum class ValueKind : uint8_t { kTensor, kImages, kBoxes };
std::string_view ValueKindName(ValueKind kind);

struct PipelineValue {
  ValueKind kind = ValueKind::kTensor;
  HostTensor tensor;                // kTensor
  std::vector<Image> images;        // kImages
  std::vector<ocr::TextBox> boxes;  // kBoxes
  int64_t source_width = 0;         // kBoxes: the image they were found in
  int64_t source_height = 0;

  // The bytes it holds (what the governor is charged).
  uint64_t Bytes() const;
  // The items it carries: a tensor's first dimension (1 for a scalar), images, boxes.
  int64_t Items() const;
};
using ValuePtr = std::shared_ptr<const PipelineValue>;
using Values = std::map<std::string, ValuePtr>;  // by port or by value name

// What a port accepts or a value is, for the checks at build: the kind and, for tensors, the
// element type (nullopt: any).
struct ValueType {
  ValueKind kind = ValueKind::kTensor;
  std::optional<ElementType> element;
};
std::string ValueTypeText(const ValueType& type);  // "FP32 tensor", "images", "tensor"

// A BYTES tensor of `texts` with shape [texts.size()].
ValuePtr TextValue(std::string name, const std::vector<std::string>& texts);
// The elements of a BYTES tensor (INVALID_ARGUMENT for another type or a bad framing).
[[nodiscard]] Result<std::vector<std::string>> TextsOf(const HostTensor& tensor);

}  // namespace pier::pipelines
