#include "pipelines/pipeline_value.h"

#include "tensor_models/batch_tensors.h"

namespace pier::pipelines {

std::string_view ValueKindName(ValueKind kind) {
  switch (kind) {
    case ValueKind::kTensor:
      return "tensor";
    case ValueKind::kImages:
      return "images";
    case ValueKind::kBoxes:
      return "boxes";
  }
  return "?";
}

uint64_t PipelineValue::Bytes() const {
  uint64_t bytes = tensor.bytes.size() + boxes.size() * sizeof(ocr::TextBox);
  for (const Image& image : images) bytes += image.pixels.size();
  return bytes;
}

int64_t PipelineValue::Items() const {
  switch (kind) {
    case ValueKind::kTensor:
      return tensor.shape.empty() ? 1 : tensor.shape[0];
    case ValueKind::kImages:
      return static_cast<int64_t>(images.size());
    case ValueKind::kBoxes:
      return static_cast<int64_t>(boxes.size());
  }
  return 0;
}

std::string ValueTypeText(const ValueType& type) {
  if (type.kind != ValueKind::kTensor) return std::string(ValueKindName(type.kind));
  if (!type.element.has_value()) return "tensor";
  return std::string(ElementTypeName(*type.element)) + " tensor";
}

ValuePtr TextValue(std::string name, const std::vector<std::string>& texts) {
  auto value = std::make_shared<PipelineValue>();
  value->tensor.name = std::move(name);
  value->tensor.type = ElementType::kBytes;
  value->tensor.shape = {static_cast<int64_t>(texts.size())};
  for (const std::string& text : texts)
    tensor_models::AppendBytesElement(value->tensor.bytes, text);
  return value;
}

Result<std::vector<std::string>> TextsOf(const HostTensor& tensor) {
  if (tensor.type != ElementType::kBytes) {
    return InvalidArgumentError("'" + tensor.name + "' is " +
                                std::string(ElementTypeName(tensor.type)) + ", not BYTES text");
  }
  PIER_ASSIGN_OR_RETURN(
      std::vector<std::string_view> views,
      tensor_models::SplitBytesElements(tensor.bytes, ElementCount(tensor.shape)));
  return std::vector<std::string>(views.begin(), views.end());
}

}  // namespace pier::pipelines
