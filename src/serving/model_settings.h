// ModelSettings: the settings one model runs with (its engine's step and queue limits, its KV
// cache, its embedding batcher, its QoS), each a key of `pier serve` whose server-wide value
// (flag or YAML key) is every model's default and which an entry of the `models:` list may
// override for its model (cli/model_repository.h).
//
// One table (model_settings_table.cpp) names every key once, with its --help line and its
// parser. The table gives:
//   - the keys the server's file, flags and `models:` entries accept, and the list of known
//     keys in their "unknown key" errors;
//   - `pier serve --help`'s lines for these keys (the docs point there);
//   - the form in which the supervisor hands a model's settings to its worker processes
//     (ModelSettingsToJson / ModelSettingsFromJson), read back with the same parsers.
// A value is what YAML gives, as JSON: a scalar as a string ("512"; a flag's text too), a list
// as an array, a map as an object. Each key's parser says which it takes and checks it; keys
// are independent of each other (checks across keys happen at load).
//
// Adding a per-model key: a field here, a row in the table, and the code that uses it.
//
// Thread-safety: plain values and functions on them; the table is immutable.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/kv/kv_size.h"
#include "engine/kv/kv_store.h"
#include "engine/speculative/proposer.h"
#include "tensor/dtype.h"
#include "tensor_models/image/image_preprocess.h"
#include "tensor_models/input_pad.h"

namespace pier::serving {

// How a chat model's requests with `tools` are shown to it and read back (api/openai/
// tool_calls.h, generic_tools.h): kAuto, its template's own tool-call family when the template
// shows tools, else the generic form; kTemplate, the template's family only (a template that
// does not show tools refuses tools); kGeneric, the generic form always; kOff, tools refused.
enum class ToolFormat : uint8_t { kAuto, kTemplate, kGeneric, kOff };

// One input of a tensor (ONNX) model as `inputs:` configures it: fixed sizes for dimensions the
// graph leaves open (-1 keeping one open; empty: none given), and where requests of different
// sizes may share a batch, padded (tensor_models/input_pad.h; checked against the graph at load).
struct TensorInputSettings {
  std::vector<int64_t> shape;
  std::optional<tensor_models::PadRule> pad;
  // The size warm-up runs open dimensions at (-1: 1; the batch dimension is warm-up's own), so
  // a graph whose working memory grows with them (a detector on whole pages) is measured at
  // the size it will serve, and a worker's grant covers it. Empty: 1 for every open dimension.
  std::vector<int64_t> warmup;

  bool operator==(const TensorInputSettings&) const = default;
};

// A tensor model's `preprocess:` map as written (every field optional): an input that takes
// encoded images instead of tensors, decoded and fitted in the front end (image_input.h checks
// it against the model at load and says what each key does).
struct ImagePreprocessSettings {
  std::string input;          // the model's input it fills; empty: the model's only input
  std::string name;           // what requests call it; empty: the input's own name
  std::vector<int64_t> size;  // [height, width]; empty: the input's fixed dimensions
  tensor_models::image::ResizeMode resize = tensor_models::image::ResizeMode::kStretch;
  int64_t shorter_side = 0;  // resize: crop; 0: max(height, width)
  tensor_models::image::Interpolation interpolation =
      tensor_models::image::Interpolation::kBilinear;
  std::optional<int64_t> pad_value;                          // resize: letterbox; default 114
  std::optional<double> scale;                               // default 1/255
  std::vector<double> mean;                                  // 3 values (or 1 for all); default 0
  std::vector<double> std;                                   // 3 values (or 1 for all); default 1
  std::optional<tensor_models::image::TensorLayout> layout;  // default: from the input's shape
  tensor_models::image::ChannelOrder channels = tensor_models::image::ChannelOrder::kRgb;
  bool exif = true;
  tensor_models::image::ImageLimits limits;
  int64_t threads = 1;  // decoding threads

  bool operator==(const ImagePreprocessSettings&) const = default;
};

// An LLM's `speculative:` map (engine/speculative/proposer.h): prompt lookup
// ({method: ngram}) or a draft model ({method: draft, model: NAME}) proposes up to max_tokens
// tokens per step, verified so that the output stays the output without speculation.
struct SpeculativeSettings {
  engine::SpeculativeMethod method = engine::SpeculativeMethod::kOff;
  std::string model;  // draft: the served name of the draft model
  int32_t max_tokens = 8;
  int32_t ngram_min = 2;
  int32_t ngram_max = 4;

  bool operator==(const SpeculativeSettings&) const = default;
};

struct ModelSettings {
  int threads = 0;     // compute threads, counting the engine thread; 0: every core
  int64_t ctx = 4096;  // KV positions, all requests together, and the most one request may use
  engine::KvDtype kv_dtype = engine::KvDtype::kF16;
  // f32/f16/bf16 matrices quantized at load (q8_0 or q4_0); unset: as the file stores them.
  std::optional<DType> weights_dtype;
  // elastic: the KV cache grows on demand up to its capacity and lends memory back to other
  // models, never below kv_min; static: the capacity is held from load on. The capacity is
  // kv_max when set (then ctx only limits one request), else ctx.
  engine::KvPolicy kv_policy = engine::KvPolicy::kElastic;
  engine::KvSize kv_min;                      // tokens or bytes; unset: one chunk
  engine::KvSize kv_max;                      // tokens or bytes; unset: ctx tokens
  int64_t max_batched_tokens = 512;           // tokens per engine step
  int64_t prefill_chunk_while_decoding = 64;  // largest prompt chunk beside decodes (0: no cap)
  int64_t max_seqs = 64;                      // running sequences at once
  int64_t max_queued = 256;                   // waiting sequences before 429 (0: no limit)
  // QoS in the engine's scheduler: the share of slots, tokens and KV kept for the critical
  // class (0..0.5), false for first come, first served, and whether a critical arrival stops
  // a running step (EngineOptions::stop_steps_for_critical).
  double qos_reserve = 0.05;
  bool qos = true;
  bool qos_stop_steps = true;
  // Adaptive batching (engine::AdaptiveBatching): the step's token budget and prompt chunk
  // move between min_batched_tokens / prefill_chunk_while_decoding and max_batched_tokens /
  // max_prefill_chunk with the queue's depth (0: the running decodes plus one prompt chunk,
  // and 4 x prefill_chunk_while_decoding).
  bool adaptive_batching = true;
  int64_t min_batched_tokens = 0;
  int64_t max_prefill_chunk = 0;
  // Embedding models' batcher (encoder/embedding_batcher.h): the window a batch waits for
  // company, the texts and tokens one batch holds, and whether the window adapts to load.
  int64_t max_queue_delay_ms = 10;
  int64_t max_batch_texts = 64;
  int64_t embed_batch_tokens = 4096;
  bool adaptive_batch_window = true;
  // Host memory per instance for preemption by swap (0: preemption recomputes).
  uint64_t swap_space = 0;
  // An idle elastic KV cache gives its memory above kv_min back after this long (0: never).
  double kv_idle_release_seconds = 120;
  ToolFormat tool_format = ToolFormat::kAuto;  // chat requests with `tools`
  // Tensor (ONNX) models: the most items one batch holds (0: unbatched), the batch sizes that
  // close a batch at once, and per input (by name) its `shape` and `pad` rule.
  int64_t max_batch_size = 8;
  std::vector<int64_t> preferred_batch_sizes;
  std::map<std::string, TensorInputSettings> inputs;
  std::optional<ImagePreprocessSettings> preprocess;  // an image input (unset: none)
  SpeculativeSettings speculative;                    // LLMs: off unless set

  bool operator==(const ModelSettings&) const = default;
};

// One key of the table.
struct ModelSettingKey {
  std::string_view name;  // YAML key; the flag is "--" + name with '_' -> '-'
  std::string_view type;  // what --help shows after the flag: "TOKENS", "on|off"
  std::string_view help;  // what it does, and its default
  // Sets the key's field from `value`; INVALID_ARGUMENT naming `at` ("serve.yaml: ctx") when
  // the value has the wrong shape, does not parse or is out of range.
  std::function<Status(const nlohmann::json& value, std::string_view at, ModelSettings* s)> apply;
  // The field in the form `apply` reads back.
  std::function<nlohmann::json(const ModelSettings& s)> show;
};

// Every per-model key, in --help order.
const std::vector<ModelSettingKey>& ModelSettingKeys();

// The key named `name`; null when there is none.
const ModelSettingKey* FindModelSettingKey(std::string_view name);

// Sets `name` from `value` (INVALID_ARGUMENT naming `at` for an unknown key, or as apply).
[[nodiscard]] Status ApplyModelSetting(ModelSettings* settings, std::string_view name,
                                       const nlohmann::json& value, std::string_view at);

// The keys whose values differ from a default ModelSettings, as a JSON object (what a worker
// process is handed); every key with `all`.
nlohmann::json ModelSettingsToJson(const ModelSettings& settings, bool all = false);

// Default settings with the keys of `object` applied (ModelSettingsToJson's output read back).
// INVALID_ARGUMENT naming `at` for anything but an object of known keys with valid values.
[[nodiscard]] Result<ModelSettings> ModelSettingsFromJson(const nlohmann::json& object,
                                                          std::string_view at);

}  // namespace pier::serving
