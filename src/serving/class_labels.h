// A classifier's class names (models.yaml `labels:`, issue #45), so its answers name classes:
//
//   labels: imagenet.txt         # a file, one name per line (relative: from the file's folder)
//   labels: metadata             # the model's metadata entry "labels"
//   labels: metadata:character   # the model's metadata entry "character"
//
// A metadata value is a JSON list of strings, a Python-style map of indices to names
// (Ultralytics' "{0: 'person', 1: 'bicycle'}"), or one name per line.
//
// Plain functions; thread-safe.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tensor_models/tensor_request.h"

namespace pier::serving {

// The names `spec` points at. NOT_FOUND for a file that cannot be read or a metadata entry the
// model lacks (naming the entries it has); INVALID_ARGUMENT for an empty list or a map with a
// gap.
[[nodiscard]] Result<std::vector<std::string>> ReadClassLabels(
    std::string_view spec, const std::map<std::string, std::string>& metadata);

// Which outputs `labels` name: each output of numbers whose last dimension is labels.size(),
// or left open (-1; a row longer than the list then has unnamed classes). INVALID_ARGUMENT
// naming the count and every output's when none fits ("labels: 3 names, but output
// 'fetch_name_0' has 4 classes").
[[nodiscard]] Result<std::map<std::string, std::vector<std::string>>> AssignClassLabels(
    std::vector<std::string> labels, const tensor_models::TensorModelInfo& info,
    std::string_view model);

}  // namespace pier::serving
