// The default model's float64 reference (tools/gen_forward_fixture.py ->
// tests/fixtures/engine/forward_reference.json) and how tests measure logits against it.
// Shared by forward_reference_test, kv_f16_test, batch_invariance_test and run_command_test.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

namespace pier::engine::testing {

// The parsed fixture (an empty object when the file is missing, which the tests then fail on):
// the default model's, or another file of tests/fixtures/engine/.
inline nlohmann::json LoadForwardReference(const std::string& file = "forward_reference.json") {
  std::ifstream in(std::string(PIER_SOURCE_DIR) + "/tests/fixtures/engine/" + file);
  if (!in.good()) return nlohmann::json::object();
  return nlohmann::json::parse(in);
}

// The RMS logit of a fixture position: l2_norm / sqrt(n_vocab).
inline double RmsLogit(const nlohmann::json& position, int64_t n_vocab) {
  return position["l2_norm"].get<double>() / std::sqrt(static_cast<double>(n_vocab));
}

// max |row[id] - reference logit| over the ids the fixture records for a position: its top
// ids and the fixture-wide subset (`subset_ids`, whose logits are `subset_logits`).
inline double MaxLogitError(std::span<const float> row, const nlohmann::json& position,
                            const std::vector<int64_t>& subset_ids) {
  const auto top_ids = position["top_ids"].get<std::vector<int64_t>>();
  const auto top_logits = position["top_logits"].get<std::vector<double>>();
  const auto subset_logits = position["subset_logits"].get<std::vector<double>>();
  double err = 0;
  for (size_t j = 0; j < subset_ids.size(); ++j) {
    err = std::max(err, std::abs(row[subset_ids[j]] - subset_logits[j]));
  }
  for (size_t j = 0; j < top_ids.size(); ++j) {
    err = std::max(err, std::abs(row[top_ids[j]] - top_logits[j]));
  }
  return err;
}

}  // namespace pier::engine::testing
