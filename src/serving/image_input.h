// A tensor model's image input (models.yaml `preprocess:`, issue #45): clients send encoded
// JPEG or PNG bytes as a BYTES input and the front end decodes and fits each image into the
// tensor the model takes (tensor_models/image/image_preprocess.h's steps).
//
//   preprocess:
//     input: x                 # the model's input it fills (default: its only input)
//     name: image              # what requests call it (default: the input's name)
//     size: [224, 224]         # height, width (default: the input's fixed dimensions)
//     resize: crop             # stretch (default) | crop | letterbox
//     shorter_side: 256        # crop: shorter side first resized to this (default: max(size))
//     interpolation: bilinear  # nearest | box | bilinear (default) | hamming | bicubic | lanczos
//     pad_value: 114           # letterbox: the border's value (default 114)
//     scale: 0.00392156862745098            # pixel * scale (default 1/255)
//     mean: [0.485, 0.456, 0.406]           # then - mean (default 0), RGB order
//     std: [0.229, 0.224, 0.225]            # then / std (default 1)
//     layout: NCHW             # or NHWC (default: where the input's 3 channels are)
//     channels: RGB            # or BGR
//     exif: on                 # apply EXIF orientation (default on)
//     max_image_bytes: 32MiB   # refused above these before decoding
//     max_image_width: 16384
//     max_image_height: 16384
//     max_image_pixels: 40000000
//     threads: 1               # images decoded at once for this model
//
// ParseImagePreprocess checks the map on its own (unknown keys, values, combinations that
// cannot work: shorter_side without crop, pad_value without letterbox, mean with 2 values);
// ResolveImageInput checks it against the model's inputs at load (the input exists, is FP32,
// FP16 or UINT8 with 3 channels, its size is known, the crop fits).
//
// Plain functions; thread-safe.
#pragma once

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "common/status.h"
#include "serving/model_settings.h"
#include "tensor_models/image/image_preprocess.h"
#include "tensor_models/tensor_request.h"

namespace pier::serving {

// `value` (a map, scalars as text as YAML gives them) read; INVALID_ARGUMENT naming `at` and
// the key.
[[nodiscard]] Result<ImagePreprocessSettings> ParseImagePreprocess(const nlohmann::json& value,
                                                                   std::string_view at);

// The settings in the form ParseImagePreprocess reads back.
nlohmann::json ImagePreprocessJson(const ImagePreprocessSettings& settings);

// The image input of a loaded model.
struct ImageInput {
  std::string input;  // the model's input
  std::string name;   // the request's input
  size_t index = 0;   // of `input` in the model's inputs
  tensor_models::image::PreprocessSpec spec;
  // One image's dimensions in the model's input: [3, H, W] or [H, W, 3]. A batched model's
  // input is [n] + these for n images; an unbatched model's takes one image, as these or, when
  // its input is 4-D, [1] + these.
  std::vector<int64_t> image_dims;
  bool batched = false;
  bool leading_one = false;  // unbatched, 4-D
  int64_t threads = 1;
};

// `settings` checked against `info` (the model's own inputs). INVALID_ARGUMENT naming the
// model and the key.
[[nodiscard]] Result<ImageInput> ResolveImageInput(const ImagePreprocessSettings& settings,
                                                   const tensor_models::TensorModelInfo& info,
                                                   std::string_view model);

}  // namespace pier::serving
