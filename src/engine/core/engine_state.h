// The engine's per-request state (Engine::Live, Engine::Choice), shared by its source files
// (engine.cpp, engine_qos.cpp). Internal to the engine; engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/core/engine.h"
#include "engine/sampling/sampler.h"
#include "grammar/constraint.h"

namespace pier::engine {

struct Engine::Choice {
  int32_t index = 0;
  int64_t sequence_id = 0;
  sampling::Sampler sampler;
  OutputProcessor output;
  std::optional<grammar::GrammarMatcher> constraint;  // with Request::constraint
  int64_t generated = 0;
  TimestampUs first_token_us = 0;
  bool started = false;  // its sequence was queued
  bool done = false;
};

struct Engine::Live {
  Request request;
  std::shared_ptr<RequestHandle> handle;
  std::vector<Choice> choices;
  int64_t cached_prompt_tokens = 0;
  TimestampUs scheduled_us = 0;                     // start of its first step
  bool demoted = false;                             // past its queue deadline, delayed
  std::vector<PromptTokenLogprob> prompt_logprobs;  // [positions recorded so far]
};

}  // namespace pier::engine
