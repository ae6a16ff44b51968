// The benchmark's synthetic workload: vLLM's "random" dataset, without a tokenizer.
//
// Each request gets an input length uniform in [floor(L_in * (1 - r)), ceil(L_in * (1 + r))]
// and an output length uniform in [floor(L_out * (1 - r)), ceil(L_out * (1 + r))] (at least 1),
// r being the range ratio, as `vllm bench serve --dataset-name random` draws them. The load
// generator talks to a remote server and has no tokenizer, so a prompt of a given length is
// made one of two ways:
//   - kText (default): that many words drawn at random from a list of common, short English
//     words, each of which is one token in the usual BPE vocabularies (GPT-2, Llama,
//     SmolLM2, Qwen) when preceded by a space; so the prompt is the asked length in tokens
//     (checked: 1024 such words are exactly 1024 tokens with the SmolLM2, Llama 2 (SPM),
//     Llama 3, Qwen2, GPT-2 and Phi-3 vocabularies), plus what the server adds (a BOS
//     token, a chat template). The totals use the server's `usage.prompt_tokens` when it
//     reports them.
//   - kTokenIds: a list of random token ids in [token_id_min, token_id_max), sent as the
//     completions `prompt` (Pier, vLLM and llama.cpp's server accept a list of ids): exact
//     lengths, but only for /v1/completions.
// Random draws make every prompt different, so a prefix cache does not shorten prefills.
//
// Pure function of its options (seeded); thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace pier::loadgen {

enum class PromptFormat { kText, kTokenIds };

struct WorkloadOptions {
  size_t num_prompts = 1000;
  int input_len = 1024;
  int output_len = 128;
  double range_ratio = 0.0;  // in [0, 1)
  PromptFormat format = PromptFormat::kText;
  int token_id_min = 100;
  int token_id_max = 32000;
  uint64_t seed = 0;
};

struct WorkloadRequest {
  std::string prompt_text;          // kText
  std::vector<int32_t> prompt_ids;  // kTokenIds
  int input_len = 0;                // asked prompt length in tokens (approximate for kText)
  int output_len = 0;               // max_tokens sent with the request
};

// Draws `num_prompts` requests. Rejects lengths below 1, a range ratio outside [0, 1) and an
// empty token id range.
Result<std::vector<WorkloadRequest>> MakeRandomWorkload(const WorkloadOptions& options);

// The words kText prompts are made of (exposed for tests).
const std::vector<std::string>& PromptWords();

}  // namespace pier::loadgen
