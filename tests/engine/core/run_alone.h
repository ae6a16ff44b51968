// The reference for a request run on a shared, elastic or memory-starved engine: the tokens it
// produces alone, on a plain KV store large enough for it (batch invariance makes them the
// tokens it must produce anywhere).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/core/engine.h"
#include "engine/core/fake_model.h"

namespace pier::engine::testing {

inline std::vector<int32_t> RunAloneOnFakeModel(const Request& r, int64_t block_size,
                                                int64_t vocab) {
  VectorKvStore kv(FakeLayout(block_size), 256);
  FakeRunner runner(&kv, vocab, 4096);
  EngineOptions options;
  options.start_thread = false;
  auto engine = *Engine::Create(options, &runner, &kv);
  auto h = *engine->Submit(r);
  while (engine->RunStep()) {
  }
  return TokensOf(h->Drain());
}

}  // namespace pier::engine::testing
