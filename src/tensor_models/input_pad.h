// A tensor model's per-input padding rule (the `pad:` of serve.yaml's `inputs:`; serving/
// model_settings.h): along which dimensions requests of different sizes may still share a
// batch, and the element the smaller ones are padded with. Padding is opt-in because it changes
// what a graph computes over the padded dimensions (a mean or a softmax over them counts the
// padding); only the model's owner knows where it is harmless (text-line widths under a mask,
// or a recognizer that ignores trailing blanks).
//
// The rule as configured (PadRule) is checked against the loaded graph once (ResolvePadRules);
// the batcher (tensor_batcher.h) takes the result (InputPad) and pads with
// batch_tensors.h's ConcatenatePadded.
//
// Plain data and pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "tensor/element_type.h"
#include "tensor_models/tensor_request.h"

namespace pier::tensor_models {

// One input's rule as configured.
struct PadRule {
  std::vector<int64_t> axes;  // dimensions of the input (0 is a batchable model's batch)
  double value = 0;           // the element padded in, before conversion to the input's type

  bool operator==(const PadRule&) const = default;
};

// One input's rule checked against the model: which of its dimensions requests may differ in,
// and the pad element's bytes in the input's type. No padded dimension: no rule.
struct InputPad {
  std::vector<bool> padded;  // [rank of the input]
  std::string element;       // one element, little-endian

  bool any() const;
};

// `value` as one element of `type` (little-endian bytes). INVALID_ARGUMENT when the type cannot
// hold it: BOOL takes 0 or 1; integer types a whole number in their range; FP16, BF16 and FP32
// a number that stays finite when rounded to them; BYTES nothing (a string has no pad value).
[[nodiscard]] Result<std::string> PadElementBytes(ElementType type, double value);

// Checks `rules` (input name -> rule) against the loaded graph's `info`: each names an input,
// each axis is a dimension of it that the graph leaves open (-1), not a batchable model's batch
// dimension, and the value fits the input's type. Returns one InputPad per input of `info`, in
// its order (no padded dimension for inputs without a rule). INVALID_ARGUMENT naming the input
// and the axis ("inputs: 'x': pad axis 1: that dimension is fixed at 3 ([-1, 3, -1])": by the
// graph, or by the input's `shape`).
[[nodiscard]] Result<std::vector<InputPad>> ResolvePadRules(
    const TensorModelInfo& info, const std::map<std::string, PadRule>& rules);

}  // namespace pier::tensor_models
