// The built-in processors (issue #46), each a synchronous Step run on the pipeline's threads,
// and the keys they take (every other key of the step is refused, naming it):
//
//   image                 bytes (BYTES, one encoded JPEG or PNG) -> image (images)
//                         max_image_bytes, max_image_width, max_image_height, max_image_pixels
//                         (as a model's preprocess; refused by the header before decoding)
//   text_detection_input  image -> tensor (FP32 [1, 3, H, W], PP-OCR's DetPreProcess)
//                         limit_side_len (736), limit_type (min | max), max_side_len (2000:
//                         a larger page is sized as if shrunk to it first; 0: never)
//   text_boxes            map (FP32 [1, 1, h, w], a DB text detector's output), image -> boxes
//                         threshold (0.3), box_threshold (0.5), max_candidates (1000),
//                         unclip_ratio (1.6), dilate (true), min_size (3)
//   crop_lines            image, boxes -> lines (images, each box cut out upright)
//   line_tensor           lines -> tensor (FP32 [N, 3, height, W]); height (48) and either
//                         width (fixed, e.g. 192 for the direction classifier) or min_width
//                         (W from the widest line, at least this; 320 for the recogniser)
//   orient_lines          lines, scores (FP32 [N, 2]: 0 and 180 degrees) -> lines (those read
//                         as upside down turned); threshold (0.9); reverse_upside_down_page
//                         (true: when most lines were upside down, so was the page, and the
//                         lines are reversed to read in the text's order)
//   ctc_decode            probabilities (FP32 [N, T, C]) -> text (BYTES [N']), scores (FP32 [N'])
//                         charset: metadata:KEY of the model `charset_model`, or a file (one
//                         character a line); min_score (0.5: lines scoring less are dropped)
//   top_k                 scores (FP32 [N, C]) -> labels (BYTES [N, k], "score:index:label")
//                         k (1); labels: metadata:KEY of `labels_model`, or a file
//   template              any inputs -> text (BYTES [1], or [0] when every input is empty)
//                         template: the text, with {input} replaced by that input's elements
//                         joined by `separator` ("\n")
//
// Thread-safety: the processors are immutable after construction.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "pipelines/step.h"

namespace pier::pipelines {

// The processor `spec.processor` names; NOT_FOUND listing the processors for another name.
[[nodiscard]] Result<std::unique_ptr<Step>> MakeProcessor(const StepSpec& spec,
                                                          const ModelResolver& models);

// Reads a step's keys, refusing values out of range and (Finish) keys nobody read.
class StepKeys {
 public:
  StepKeys(const StepSpec& spec) : spec_(spec) {}
  [[nodiscard]] Result<double> Number(const std::string& key, double fallback, double min,
                                      double max);
  [[nodiscard]] Result<int64_t> Count(const std::string& key, int64_t fallback, int64_t min,
                                      int64_t max);
  [[nodiscard]] Result<bool> Flag(const std::string& key, bool fallback);
  [[nodiscard]] Result<std::string> Text(const std::string& key, const std::string& fallback);
  // The raw value, or null when absent.
  const nlohmann::ordered_json* Raw(const std::string& key);
  bool Has(const std::string& key) const { return spec_.settings.contains(key); }
  [[nodiscard]] Status Finish(const std::string& what) const;
  const std::string& source() const { return spec_.source; }

 private:
  const StepSpec& spec_;
  std::vector<std::string> read_;
};

// A character set or label list from `where`: "metadata:KEY" of `model` (its graph's
// metadata_props, one entry a line) or a file (one entry a line). Errors name `source`.
[[nodiscard]] Result<std::string> ReadListSource(const std::string& where, const std::string& model,
                                                 const ModelResolver& models,
                                                 const std::string& source);

}  // namespace pier::pipelines
