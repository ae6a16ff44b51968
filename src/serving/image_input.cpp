#include "serving/image_input.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/setting_text.h"
#include "memory/byte_size.h"
#include "tensor/element_type.h"

namespace pier::serving {
namespace {

using Json = nlohmann::json;
namespace image = tensor_models::image;

constexpr std::array<std::string_view, 19> kKeys = {"input",
                                                    "name",
                                                    "size",
                                                    "resize",
                                                    "shorter_side",
                                                    "interpolation",
                                                    "pad_value",
                                                    "scale",
                                                    "mean",
                                                    "std",
                                                    "layout",
                                                    "channels",
                                                    "exif",
                                                    "max_image_bytes",
                                                    "max_image_width",
                                                    "max_image_height",
                                                    "max_image_pixels",
                                                    "threads",
                                                    "type"};

std::string KnownKeys() {
  std::string out;
  for (std::string_view k : kKeys) {
    if (k == "type") continue;  // reserved: the tensor's type comes from the model
    out += (out.empty() ? "" : ", ") + std::string(k);
  }
  return out;
}

Result<std::string> Text(const Json& value, const std::string& at) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number() || value.is_boolean()) return value.dump();
  return InvalidArgumentError(at + ": expected a single value");
}

Result<double> Number(const Json& value, const std::string& at) {
  PIER_ASSIGN_OR_RETURN(std::string text, Text(value, at));
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v)) {
    return InvalidArgumentError(at + ": expected a number, got \"" + text + "\"");
  }
  return v;
}

Result<int64_t> Integer(const Json& value, const std::string& at, int64_t min, int64_t max) {
  PIER_ASSIGN_OR_RETURN(std::string text, Text(value, at));
  return ParseIntegerSetting(text, at, min, max);
}

// One value for every channel, or one per channel (RGB).
Result<std::vector<double>> Channels(const Json& value, const std::string& at, bool positive) {
  std::vector<double> out;
  if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) {
      PIER_ASSIGN_OR_RETURN(double v, Number(value[i], at + "[" + std::to_string(i) + "]"));
      out.push_back(v);
    }
  } else {
    PIER_ASSIGN_OR_RETURN(double v, Number(value, at));
    out.push_back(v);
  }
  if (out.size() != 1 && out.size() != 3) {
    return InvalidArgumentError(at + ": expected 1 value or 3 (R, G, B), got " +
                                std::to_string(out.size()));
  }
  if (positive) {
    for (double v : out) {
      if (!(v > 0)) return InvalidArgumentError(at + ": each value must be above 0");
    }
  }
  return out;
}

template <typename E, size_t N>
Result<E> OneOf(const Json& value, const std::string& at,
                const std::array<std::pair<std::string_view, E>, N>& names) {
  PIER_ASSIGN_OR_RETURN(std::string text, Text(value, at));
  std::string known;
  for (const auto& [name, e] : names) {
    if (text == name) return e;
    known += (known.empty() ? "" : ", ") + std::string(name);
  }
  return InvalidArgumentError(at + ": expected one of " + known + ", got \"" + text + "\"");
}

constexpr std::array<std::pair<std::string_view, image::ResizeMode>, 3> kResize = {
    {{"stretch", image::ResizeMode::kStretch},
     {"crop", image::ResizeMode::kCrop},
     {"letterbox", image::ResizeMode::kLetterbox}}};
constexpr std::array<std::pair<std::string_view, image::Interpolation>, 6> kFilters = {
    {{"nearest", image::Interpolation::kNearest},
     {"box", image::Interpolation::kBox},
     {"bilinear", image::Interpolation::kBilinear},
     {"hamming", image::Interpolation::kHamming},
     {"bicubic", image::Interpolation::kBicubic},
     {"lanczos", image::Interpolation::kLanczos}}};
constexpr std::array<std::pair<std::string_view, image::TensorLayout>, 2> kLayouts = {
    {{"NCHW", image::TensorLayout::kNchw}, {"NHWC", image::TensorLayout::kNhwc}}};
constexpr std::array<std::pair<std::string_view, image::ChannelOrder>, 2> kOrders = {
    {{"RGB", image::ChannelOrder::kRgb}, {"BGR", image::ChannelOrder::kBgr}}};

template <typename E, size_t N>
std::string NameOf(E e, const std::array<std::pair<std::string_view, E>, N>& names) {
  for (const auto& [name, v] : names) {
    if (v == e) return std::string(name);
  }
  return "";
}

std::array<float, 3> ThreeOf(const std::vector<double>& values, float otherwise) {
  if (values.empty()) return {otherwise, otherwise, otherwise};
  if (values.size() == 1) {
    const auto v = static_cast<float>(values[0]);
    return {v, v, v};
  }
  return {static_cast<float>(values[0]), static_cast<float>(values[1]),
          static_cast<float>(values[2])};
}

Json Numbers(const std::vector<double>& values) {
  Json out = Json::array();
  for (double v : values) out.push_back(ExactDecimal(v));
  return out;
}

}  // namespace

Result<ImagePreprocessSettings> ParseImagePreprocess(const Json& value, std::string_view at_view) {
  const std::string at(at_view);
  if (!value.is_object()) {
    return InvalidArgumentError(at + ": expected a map (resize: crop, mean: [...], ...)");
  }
  ImagePreprocessSettings s;
  for (const auto& [key, v] : value.items()) {
    const std::string where = at + "." + key;
    if (std::find(kKeys.begin(), kKeys.end(), key) == kKeys.end() || key == "type") {
      return InvalidArgumentError(at + ": unknown key \"" + key + "\" (known: " + KnownKeys() +
                                  ")");
    }
    if (key == "input" || key == "name") {
      PIER_ASSIGN_OR_RETURN(std::string text, Text(v, where));
      if (text.empty()) return InvalidArgumentError(where + ": must not be empty");
      (key == "input" ? s.input : s.name) = std::move(text);
    } else if (key == "size") {
      if (!v.is_array() || v.size() != 2) {
        return InvalidArgumentError(where + ": expected [height, width]");
      }
      s.size.clear();
      for (size_t i = 0; i < 2; ++i) {
        PIER_ASSIGN_OR_RETURN(int64_t d, Integer(v[i], where, 1, 16384));
        s.size.push_back(d);
      }
    } else if (key == "resize") {
      PIER_ASSIGN_OR_RETURN(s.resize, OneOf(v, where, kResize));
    } else if (key == "shorter_side") {
      PIER_ASSIGN_OR_RETURN(s.shorter_side, Integer(v, where, 1, 16384));
    } else if (key == "interpolation") {
      PIER_ASSIGN_OR_RETURN(s.interpolation, OneOf(v, where, kFilters));
    } else if (key == "pad_value") {
      PIER_ASSIGN_OR_RETURN(s.pad_value, Integer(v, where, 0, 255));
    } else if (key == "scale") {
      PIER_ASSIGN_OR_RETURN(double scale, Number(v, where));
      if (!(scale > 0)) return InvalidArgumentError(where + ": must be above 0");
      s.scale = scale;
    } else if (key == "mean") {
      PIER_ASSIGN_OR_RETURN(s.mean, Channels(v, where, false));
    } else if (key == "std") {
      PIER_ASSIGN_OR_RETURN(s.std, Channels(v, where, true));
    } else if (key == "layout") {
      PIER_ASSIGN_OR_RETURN(s.layout, OneOf(v, where, kLayouts));
    } else if (key == "channels") {
      PIER_ASSIGN_OR_RETURN(s.channels, OneOf(v, where, kOrders));
    } else if (key == "exif") {
      PIER_ASSIGN_OR_RETURN(std::string text, Text(v, where));
      if (text == "true") text = "on";
      if (text == "false") text = "off";
      PIER_ASSIGN_OR_RETURN(s.exif, ParseOnOffSetting(text, where));
    } else if (key == "max_image_bytes") {
      PIER_ASSIGN_OR_RETURN(std::string text, Text(v, where));
      PIER_ASSIGN_OR_RETURN(s.limits.max_bytes, ParseByteSize(text, where));
    } else if (key == "max_image_width") {
      PIER_ASSIGN_OR_RETURN(s.limits.max_width, Integer(v, where, 1, 1 << 20));
    } else if (key == "max_image_height") {
      PIER_ASSIGN_OR_RETURN(s.limits.max_height, Integer(v, where, 1, 1 << 20));
    } else if (key == "max_image_pixels") {
      PIER_ASSIGN_OR_RETURN(s.limits.max_pixels, Integer(v, where, 1, int64_t{1} << 36));
    } else if (key == "threads") {
      PIER_ASSIGN_OR_RETURN(s.threads, Integer(v, where, 1, 64));
    }
  }
  // Combinations that cannot work, whatever the model.
  if (s.shorter_side > 0 && s.resize != image::ResizeMode::kCrop) {
    return InvalidArgumentError(at + ".shorter_side: only with resize: crop (resize is " +
                                NameOf(s.resize, kResize) + ")");
  }
  if (s.pad_value.has_value() && s.resize != image::ResizeMode::kLetterbox) {
    return InvalidArgumentError(at + ".pad_value: only with resize: letterbox (resize is " +
                                NameOf(s.resize, kResize) + ")");
  }
  if (!s.size.empty() && s.shorter_side > 0 && s.shorter_side < std::max(s.size[0], s.size[1])) {
    return InvalidArgumentError(at + ".shorter_side: " + std::to_string(s.shorter_side) +
                                " is below the crop's larger side " +
                                std::to_string(std::max(s.size[0], s.size[1])) +
                                ": the crop would leave the image");
  }
  return s;
}

Json ImagePreprocessJson(const ImagePreprocessSettings& s) {
  Json out = Json::object();
  if (!s.input.empty()) out["input"] = s.input;
  if (!s.name.empty()) out["name"] = s.name;
  if (!s.size.empty()) out["size"] = {std::to_string(s.size[0]), std::to_string(s.size[1])};
  out["resize"] = NameOf(s.resize, kResize);
  if (s.shorter_side > 0) out["shorter_side"] = std::to_string(s.shorter_side);
  out["interpolation"] = NameOf(s.interpolation, kFilters);
  if (s.pad_value.has_value()) out["pad_value"] = std::to_string(*s.pad_value);
  if (s.scale.has_value()) out["scale"] = ExactDecimal(*s.scale);
  if (!s.mean.empty()) out["mean"] = Numbers(s.mean);
  if (!s.std.empty()) out["std"] = Numbers(s.std);
  if (s.layout.has_value()) out["layout"] = NameOf(*s.layout, kLayouts);
  out["channels"] = NameOf(s.channels, kOrders);
  out["exif"] = s.exif ? "on" : "off";
  out["max_image_bytes"] = std::to_string(s.limits.max_bytes) + "B";
  out["max_image_width"] = std::to_string(s.limits.max_width);
  out["max_image_height"] = std::to_string(s.limits.max_height);
  out["max_image_pixels"] = std::to_string(s.limits.max_pixels);
  out["threads"] = std::to_string(s.threads);
  return out;
}

Result<ImageInput> ResolveImageInput(const ImagePreprocessSettings& s,
                                     const tensor_models::TensorModelInfo& info,
                                     std::string_view model_view) {
  const std::string model(model_view);
  const std::string at = "model " + model + ": preprocess";
  ImageInput out;
  if (s.input.empty()) {
    if (info.inputs.size() != 1) {
      std::string names;
      for (const TensorSpec& spec : info.inputs) names += (names.empty() ? "" : ", ") + spec.name;
      return InvalidArgumentError(at + ".input: the model has " +
                                  std::to_string(info.inputs.size()) + " inputs (" + names +
                                  "); name the one images fill");
    }
    out.index = 0;
  } else {
    auto it = std::find_if(info.inputs.begin(), info.inputs.end(),
                           [&](const TensorSpec& spec) { return spec.name == s.input; });
    if (it == info.inputs.end()) {
      return InvalidArgumentError(at + ".input: the model has no input '" + s.input + "'");
    }
    out.index = static_cast<size_t>(it - info.inputs.begin());
  }
  const TensorSpec& input = info.inputs[out.index];
  out.input = input.name;
  out.name = s.name.empty() ? input.name : s.name;
  for (size_t i = 0; i < info.inputs.size(); ++i) {
    if (i != out.index && info.inputs[i].name == out.name) {
      return InvalidArgumentError(at + ".name: '" + out.name + "' is another input of the model");
    }
  }
  if (input.type != ElementType::kFp32 && input.type != ElementType::kFp16 &&
      input.type != ElementType::kUint8) {
    return InvalidArgumentError(at + ": input '" + input.name + "' is " +
                                std::string(ElementTypeName(input.type)) +
                                "; images become FP32, FP16 or UINT8 tensors");
  }
  if (input.type == ElementType::kUint8 &&
      (!s.mean.empty() || !s.std.empty() || s.scale.has_value())) {
    return InvalidArgumentError(at + ": input '" + input.name +
                                "' is UINT8, which takes the pixels as they are: scale, mean "
                                "and std do not apply");
  }
  out.batched = info.max_batch_size > 0;
  // The image's three dimensions within the input's shape.
  std::vector<int64_t> dims = input.shape;
  if (out.batched) {
    if (dims.size() != 4) {
      return InvalidArgumentError(at + ": input '" + input.name + "' is " + ShapeText(dims) +
                                  "; an image input is [batch, 3, height, width] or [batch, "
                                  "height, width, 3]");
    }
    dims.erase(dims.begin());
  } else if (dims.size() == 4 && (dims[0] == 1 || dims[0] == -1)) {
    out.leading_one = true;
    dims.erase(dims.begin());
  } else if (dims.size() != 3) {
    return InvalidArgumentError(at + ": input '" + input.name + "' is " + ShapeText(dims) +
                                "; an image input is [3, height, width], [height, width, 3] "
                                "or either with a leading 1");
  }
  image::TensorLayout layout;
  if (s.layout.has_value()) {
    layout = *s.layout;
  } else if (dims[0] == 3 && dims[2] != 3) {
    layout = image::TensorLayout::kNchw;
  } else if (dims[2] == 3 && dims[0] != 3) {
    layout = image::TensorLayout::kNhwc;
  } else {
    return InvalidArgumentError(at + ".layout: input '" + input.name + "' is " +
                                ShapeText(input.shape) + "; say NCHW or NHWC");
  }
  const bool nchw = layout == image::TensorLayout::kNchw;
  const int64_t channels = nchw ? dims[0] : dims[2];
  int64_t height = nchw ? dims[1] : dims[0];
  int64_t width = nchw ? dims[2] : dims[1];
  if (channels != 3 && channels != -1) {
    return InvalidArgumentError(at + ".layout: input '" + input.name + "' is " +
                                ShapeText(input.shape) + ": as " + NameOf(layout, kLayouts) +
                                " it has " + std::to_string(channels) + " channels, not 3");
  }
  if (!s.size.empty()) {
    if ((height > 0 && height != s.size[0]) || (width > 0 && width != s.size[1])) {
      return InvalidArgumentError(at + ".size: [" + std::to_string(s.size[0]) + ", " +
                                  std::to_string(s.size[1]) + "] but input '" + input.name +
                                  "' is " + ShapeText(input.shape));
    }
    height = s.size[0];
    width = s.size[1];
  } else if (height <= 0 || width <= 0) {
    return InvalidArgumentError(at + ".size: input '" + input.name + "' is " +
                                ShapeText(input.shape) +
                                ", which leaves its height or width open; give size: [h, w]");
  }
  out.image_dims =
      nchw ? std::vector<int64_t>{3, height, width} : std::vector<int64_t>{height, width, 3};
  image::PreprocessSpec& spec = out.spec;
  spec.height = height;
  spec.width = width;
  spec.resize = s.resize;
  spec.shorter_side = s.resize == image::ResizeMode::kCrop
                          ? (s.shorter_side > 0 ? s.shorter_side : std::max(height, width))
                          : 0;
  if (spec.resize == image::ResizeMode::kCrop && spec.shorter_side < std::max(height, width)) {
    return InvalidArgumentError(at + ".shorter_side: " + std::to_string(spec.shorter_side) +
                                " is below the crop's larger side " +
                                std::to_string(std::max(height, width)));
  }
  spec.interpolation = s.interpolation;
  spec.pad_value = static_cast<uint8_t>(s.pad_value.value_or(114));
  spec.scale = static_cast<float>(s.scale.value_or(1.0 / 255.0));
  spec.mean = ThreeOf(s.mean, 0.0f);
  spec.std = ThreeOf(s.std, 1.0f);
  spec.layout = layout;
  spec.channels = s.channels;
  spec.type = input.type;
  spec.apply_exif = s.exif;
  spec.limits = s.limits;
  out.threads = s.threads;
  return out;
}

}  // namespace pier::serving
