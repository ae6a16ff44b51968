// Request and Event: the contract between the engine and whoever feeds it (the front end, the
// CLI, and the supervisor and its worker processes, which carry them over IPC: ipc/convert.h).
//
// Both are plain, copyable, serializable values: no callbacks, no pointers into engine state,
// so the same types can cross a process boundary. A Request is submitted once; the engine
// streams Events for it, per choice (0 .. n-1), and ends each choice with exactly one Event
// carrying a finish reason, usage counts and timestamps.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/sampling/sampler.h"
#include "engine/sampling/sampling_params.h"
#include "grammar/output_constraint.h"

namespace pier::engine {

// Admission order: a lower value is served first. Aging moves a waiting request up a class
// at a time (see SchedulerOptions::aging_steps).
enum class Priority : uint8_t {
  kCritical = 0,
  kHigh = 1,
  kNormal = 2,
  kLow = 3,
};

// "critical", "high", "normal", "low"; INVALID_ARGUMENT naming the accepted values otherwise.
[[nodiscard]] Result<Priority> ParsePriority(std::string_view name);
std::string_view PriorityName(Priority priority);

// Microseconds on the engine's steady clock (std::chrono::steady_clock since its epoch).
using TimestampUs = int64_t;
TimestampUs NowUs();

struct Request {
  // Unique among live requests of one engine; chosen by the caller (Abort uses it).
  std::string id;
  std::vector<int32_t> prompt_tokens;  // [n_prompt], n_prompt >= 1
  sampling::SamplingParams sampling;
  // Parallel samples sharing the prompt's KV (full prompt blocks are shared through the prefix
  // cache). Choice i samples with seed sampling.seed + i.
  int32_t n = 1;
  int32_t max_tokens = 16;              // generated tokens per choice, >= 1
  std::vector<std::string> stop;        // stop strings (never streamed, not even in part)
  std::vector<int32_t> stop_token_ids;  // end generation like an end-of-generation token
  bool ignore_eos = false;              // keep going past the model's end-of-generation tokens
  // Event::text leaves out control tokens (<|im_end|>, ...), as vLLM's default does; token ids
  // and logprobs still carry them.
  bool skip_special_tokens = true;
  // Constrained decoding (response_format json_object / json_schema): every choice's output is
  // kept inside the constraint's language by masking the logits before each sample, and ends
  // (finish reason stop) as soon as it is a whole match nothing may extend. Needs the engine's
  // tokenizer.
  grammar::OutputConstraint constraint;
  // When set (0..20): the logprob of every prompt token after the first, given the tokens
  // before it, with that many most likely alternatives. Such a request does not read the
  // prefix cache (cached positions have no logits).
  std::optional<int32_t> prompt_logprobs;
  Priority priority = Priority::kNormal;
  // The queue deadline: when the request's work must have started (its class's max queue
  // time, or the client's shorter deadline). Served before requests of the same class and
  // tenant with a later (or no) deadline. Still waiting when it passes, the request ends with
  // Event::queue_expired (kReject), or waits on behind every request not past its deadline
  // (kDelay), as Triton's queue policy does. A request that has started never expires.
  std::optional<TimestampUs> deadline_us;
  enum class DeadlineAction : uint8_t { kReject = 0, kDelay = 1 };
  DeadlineAction on_deadline = DeadlineAction::kReject;
  // Fair share (scheduler/fair_share.h): tokens are charged to `tenant`, whose weight (> 0)
  // sets its share among the tenants of the request's class.
  std::string tenant;
  double tenant_weight = 1;
  // Set by Submit when 0.
  TimestampUs arrival_us = 0;
};

enum class FinishReason : uint8_t {
  kStop,    // an end-of-generation token, a stop token or a stop string
  kLength,  // max_tokens or the context length reached
  kAbort,   // Abort() or engine shutdown
  kError,   // see Event::error
};
std::string_view FinishReasonName(FinishReason reason);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens served from the prefix cache
};

struct Timestamps {
  TimestampUs queued_us = 0;
  TimestampUs scheduled_us = 0;    // start of the first step that computed any of it
  TimestampUs first_token_us = 0;  // 0 when no token was produced
  TimestampUs finished_us = 0;
};

// Prompt token `token` at position `position` (>= 1) and its logprob given the positions
// before it (log-softmax of the raw logits), with the most likely alternatives.
struct PromptTokenLogprob {
  int64_t position = 0;
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<sampling::TokenLogprob> top_logprobs;
};

struct Event {
  int32_t choice = 0;
  // The sampled token; -1 on a final event that carries no token (abort, error, stop string
  // matched by text already counted).
  int32_t token = -1;
  // UTF-8-safe text that may be shown now (empty without a tokenizer, or while held back).
  std::string text;
  std::optional<float> logprob;  // when sampling.logprobs is set
  std::vector<sampling::TokenLogprob> top_logprobs;
  // On choice 0's first event, when Request::prompt_logprobs is set.
  std::vector<PromptTokenLogprob> prompt_logprobs;
  // Set on the last event of a choice, with usage and timestamps.
  std::optional<FinishReason> finish;
  std::string error;  // the reason when finish == kError; with kAbort, why (may be empty)
  // With kError: the instance serving the request went away (its worker process died), so the
  // request failed for no fault of its own and may be retried (HTTP 503, not 500).
  bool instance_lost = false;
  // With kError: the request itself made it fail (its output constraint outgrew the grammar's
  // limits, or no token of the vocabulary can continue it), so the answer is the client's to
  // change (HTTP 400, not 500).
  bool request_fault = false;
  // With kAbort: the request was still waiting when its queue deadline passed
  // (Request::deadline_us), so it was refused rather than served late (HTTP 429).
  bool queue_expired = false;
  // With kError: a resubmission (after its worker process died) found the queue full, so the
  // request was refused as a full queue refuses a Submit (HTTP 429 with Retry-After).
  bool queue_full = false;
  Usage usage;
  Timestamps times;
};

}  // namespace pier::engine
