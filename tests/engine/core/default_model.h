// The default model (SmolLM2-135M) opened once per test suite with its tokenizer, for the
// engine tests that run it (engine_model_test, engine_speculative_test).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

#include "engine/runner/local_model.h"
#include "engine/test_governor.h"
#include "model/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace pier::engine {

struct DefaultModel {
  std::unique_ptr<LocalModel> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
};

// The model with a KV store of `kv_tokens` positions, 2 threads; fails the test when the file
// does not open (run scripts/bootstrap).
inline void OpenDefaultModel(int64_t kv_tokens, DefaultModel* out) {
  LocalModelOptions options;
  options.path = PIER_DEFAULT_MODEL_PATH;
  options.threads = 2;
  options.kv_tokens = kv_tokens;
  auto model = LocalModel::Open(options, pier::testing::TestGovernor());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto tok = model::LoadTokenizer((*model)->file());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  out->model = std::move(model).value();
  out->tokenizer = std::move(tok).value();
}

}  // namespace pier::engine
