// The table of per-model keys (model_settings.h): each row's name, --help line, parser and
// the form it is shown and handed to workers in. Rows are built from a few shapes (a whole
// number in a range, on/off, seconds, a share, bytes, a KV amount, a name from a list).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "common/setting_text.h"
#include "engine/runner/cpu/cpu_runner.h"
#include "engine/runner/local_model.h"
#include "memory/byte_size.h"
#include "serving/image_input.h"
#include "serving/model_settings.h"

namespace pier::serving {
namespace {

using Json = nlohmann::json;
using Field = ModelSettings;

constexpr int64_t kMaxTokens = int64_t{1} << 24;

// A key's value as text: a YAML scalar (or a flag) arrives as a string; numbers and booleans
// from JSON are taken as their text.
Result<std::string> TextOf(const Json& value, std::string_view at) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number() || value.is_boolean()) return value.dump();
  if (value.is_null()) return InvalidArgumentError(std::string(at) + " has no value");
  return InvalidArgumentError(std::string(at) + " must be a single value");
}

// The message of a parser that does not name the source itself, prefixed with it.
Status At(std::string_view at, const Status& status) {
  return InvalidArgumentError(std::string(at) + ": " + status.message());
}

template <typename T>
ModelSettingKey Integer(std::string_view name, std::string_view type, std::string_view help,
                        T Field::*field, int64_t min, int64_t max) {
  return {name, type, help,
          [=](const Json& value, std::string_view at, ModelSettings* s) -> Status {
            PIER_ASSIGN_OR_RETURN(std::string text, TextOf(value, at));
            PIER_ASSIGN_OR_RETURN(int64_t n, ParseIntegerSetting(text, at, min, max));
            s->*field = static_cast<T>(n);
            return Status::Ok();
          },
          [=](const ModelSettings& s) { return Json(std::to_string(s.*field)); }};
}

ModelSettingKey OnOff(std::string_view name, std::string_view help, bool Field::*field) {
  return {name, "on|off", help,
          [=](const Json& value, std::string_view at, ModelSettings* s) -> Status {
            PIER_ASSIGN_OR_RETURN(std::string text, TextOf(value, at));
            PIER_ASSIGN_OR_RETURN(s->*field, ParseOnOffSetting(text, at));
            return Status::Ok();
          },
          [=](const ModelSettings& s) { return Json(s.*field ? "on" : "off"); }};
}

ModelSettingKey Seconds(std::string_view name, std::string_view help, double Field::*field,
                        double min) {
  return {name, "SECONDS", help,
          [=](const Json& value, std::string_view at, ModelSettings* s) -> Status {
            PIER_ASSIGN_OR_RETURN(std::string text, TextOf(value, at));
            PIER_ASSIGN_OR_RETURN(s->*field, ParseSecondsSetting(text, at, min));
            return Status::Ok();
          },
          [=](const ModelSettings& s) { return Json(ExactDecimal(s.*field)); }};
}

ModelSettingKey Share(std::string_view name, std::string_view help, double Field::*field,
                      double max) {
  return {name, "SHARE", help,
          [=](const Json& value, std::string_view at, ModelSettings* s) -> Status {
            PIER_ASSIGN_OR_RETURN(std::string text, TextOf(value, at));
            PIER_ASSIGN_OR_RETURN(s->*field, ParseShareSetting(text, at, max));
            return Status::Ok();
          },
          [=](const ModelSettings& s) { return Json(ExactDecimal(s.*field)); }};
}

ModelSettingKey Bytes(std::string_view name, std::string_view help, uint64_t Field::*field) {
  return {name, "BYTES", help,
          [=](const Json& value, std::string_view at, ModelSettings* s) -> Status {
            PIER_ASSIGN_OR_RETURN(std::string text, TextOf(value, at));
            if (text == "0") {  // off, as the help says (a size must otherwise be positive)
              s->*field = 0;
              return Status::Ok();
            }
            PIER_ASSIGN_OR_RETURN(s->*field, ParseByteSize(text, at));
            return Status::Ok();
          },
          [=](const ModelSettings& s) { return Json(std::to_string(s.*field)); }};
}

// Tokens ("2048") or bytes ("64MiB"); shown exactly ("2048", "67108864B").
ModelSettingKey KvAmount(std::string_view name, std::string_view help,
                         engine::KvSize Field::*field) {
  return {
      name, "TOKENS|BYTES", help,
      [=](const Json& value, std::string_view at, ModelSettings* s) -> Status {
        PIER_ASSIGN_OR_RETURN(std::string text, TextOf(value, at));
        PIER_ASSIGN_OR_RETURN(s->*field, engine::ParseKvSize(text, at, kMaxTokens));
        return Status::Ok();
      },
      [=](const ModelSettings& s) {
        const engine::KvSize& size = s.*field;
        return Json(size.in_bytes ? std::to_string(size.bytes) + "B" : std::to_string(size.tokens));
      }};
}

// An `inputs` entry's shape: dimensions, each -1 or positive.
Result<std::vector<int64_t>> InputShape(const Json& shape, const std::string& at) {
  if (!shape.is_array() || shape.empty()) {
    return InvalidArgumentError(at + ": expected a list of dimensions");
  }
  std::vector<int64_t> dims;
  for (const Json& dim : shape) {
    PIER_ASSIGN_OR_RETURN(std::string text, TextOf(dim, at));
    PIER_ASSIGN_OR_RETURN(int64_t n, ParseIntegerSetting(text, at, -1, 1 << 20));
    if (n == 0) return InvalidArgumentError(at + ": a dimension must be -1 or positive");
    dims.push_back(n);
  }
  return dims;
}

// An `inputs` entry's pad rule: {axes: [A, ...], value: V}, the axes sorted, each once. Which
// axes the graph leaves open, and whether the input's type holds the value, is checked at load
// (tensor_models/input_pad.h).
Result<tensor_models::PadRule> PadRuleOf(const Json& pad, const std::string& at) {
  if (!pad.is_object()) return InvalidArgumentError(at + ": expected {axes: [...], value: V}");
  for (const auto& [key, unused] : pad.items()) {
    if (key != "axes" && key != "value") {
      return InvalidArgumentError(at + ": unknown key \"" + key + "\" (known: axes, value)");
    }
  }
  tensor_models::PadRule rule;
  const Json* axes = pad.contains("axes") ? &pad["axes"] : nullptr;
  if (axes == nullptr || !axes->is_array() || axes->empty()) {
    return InvalidArgumentError(at +
                                ".axes: expected a list of dimensions (1 is the first "
                                "after the batch)");
  }
  for (const Json& axis : *axes) {
    PIER_ASSIGN_OR_RETURN(std::string text, TextOf(axis, at + ".axes"));
    PIER_ASSIGN_OR_RETURN(int64_t n, ParseIntegerSetting(text, at + ".axes", 0, 1 << 20));
    rule.axes.push_back(n);
  }
  std::sort(rule.axes.begin(), rule.axes.end());
  if (std::adjacent_find(rule.axes.begin(), rule.axes.end()) != rule.axes.end()) {
    return InvalidArgumentError(at + ".axes: an axis is named twice");
  }
  if (pad.contains("value")) {
    PIER_ASSIGN_OR_RETURN(std::string text, TextOf(pad["value"], at + ".value"));
    const char* begin = text.c_str();
    char* end = nullptr;
    errno = 0;
    rule.value = std::strtod(begin, &end);
    if (text.empty() || end != begin + text.size() || errno == ERANGE ||
        !std::isfinite(rule.value)) {
      return InvalidArgumentError(at + ".value: expected a finite number, got \"" + text + "\"");
    }
  }
  return rule;
}

std::vector<ModelSettingKey> BuildTable() {
  std::vector<ModelSettingKey> keys;
  keys.push_back(
      Integer("threads", "N", "Compute threads (default: every core)", &Field::threads, 1, 1024));
  keys.push_back(Integer(
      "ctx", "TOKENS",
      "KV cache size in tokens, all requests together (default 4096), unless --kv-max sets it; "
      "one request uses at most this and the model's context",
      &Field::ctx, 2, kMaxTokens));
  keys.push_back(
      {"kv_dtype", "f32|f16|q8_0",
       "K/V element type in the cache; f16 (default) holds twice the tokens of f32, q8_0 "
       "almost twice those of f16",
       [](const Json& value, std::string_view at, ModelSettings* s) -> Status {
         PIER_ASSIGN_OR_RETURN(std::string text, TextOf(value, at));
         Result<engine::KvDtype> dtype = engine::ParseKvDtype(text);
         if (!dtype.ok()) return At(at, dtype.status());
         s->kv_dtype = *dtype;
         return Status::Ok();
       },
       [](const ModelSettings& s) { return Json(std::string(engine::KvDtypeName(s.kv_dtype))); }});
  keys.push_back(
      {"weights_dtype", "q8_0|q4_0|none",
       "Quantize f32/f16/bf16 weight matrices at load into this type (charged to the budget as "
       "what they become); none (default): use the file's weights as they are",
       [](const Json& value, std::string_view at, ModelSettings* s) -> Status {
         PIER_ASSIGN_OR_RETURN(std::string text, TextOf(value, at));
         if (text == "none") {
           s->weights_dtype.reset();
           return Status::Ok();
         }
         Result<DType> dtype = engine::ParseWeightsDtype(text);
         if (!dtype.ok()) return At(at, dtype.status());
         s->weights_dtype = *dtype;
         return Status::Ok();
       },
       [](const ModelSettings& s) {
         return Json(s.weights_dtype ? std::string(DTypeName(*s.weights_dtype)) : "none");
       }});
  keys.push_back(
      {"kv_policy", "POLICY",
       "elastic (default): each model's KV cache grows on demand up to its capacity and is lent "
       "between models; static: each holds its whole capacity from load on",
       [](const Json& value, std::string_view at, ModelSettings* s) -> Status {
         PIER_ASSIGN_OR_RETURN(std::string text, TextOf(value, at));
         Result<engine::KvPolicy> policy = engine::ParseKvPolicy(text);
         if (!policy.ok()) return At(at, policy.status());
         s->kv_policy = *policy;
         return Status::Ok();
       },
       [](const ModelSettings& s) {
         return Json(s.kv_policy == engine::KvPolicy::kElastic ? "elastic" : "static");
       }});
  keys.push_back(KvAmount("kv_min",
                          "KV each model always keeps with --kv-policy elastic, as tokens (1024) "
                          "or bytes (64MiB) (default: one chunk of 256 tokens)",
                          &Field::kv_min));
  keys.push_back(KvAmount("kv_max",
                          "Each model's KV capacity, as tokens or bytes (64MiB); --ctx then "
                          "limits one request (default: --ctx tokens)",
                          &Field::kv_max));
  keys.push_back(Integer("max_batched_tokens", "TOKENS",
                         "Tokens computed per engine step (default 512)",
                         &Field::max_batched_tokens, 1, kMaxTokens));
  keys.push_back(Integer(
      "prefill_chunk_while_decoding", "TOKENS",
      "Largest prompt chunk per step while other sequences decode, so running streams keep "
      "producing during a long prompt (default 64; 0: no cap, the prompt's first token sooner)",
      &Field::prefill_chunk_while_decoding, 0, kMaxTokens));
  keys.push_back(Integer("max_seqs", "N", "Sequences running at once (default 64)",
                         &Field::max_seqs, 1, 65536));
  keys.push_back(Integer("max_queued", "N",
                         "Waiting sequences before requests get 429 (default 256; 0: no limit)",
                         &Field::max_queued, 0, kMaxTokens));
  keys.push_back(
      Share("qos_reserve",
            "Share (0..0.5) of each engine's running slots, batched tokens and KV kept for the "
            "critical class, and of its queue places, so it starts at once under any load (default "
            "0.05, rounded down but at least one)",
            &Field::qos_reserve, 0.5));
  keys.push_back(OnOff("qos",
                       "off: first come, first served -- priority classes, tenants' fair share "
                       "and the reserve are ignored (the QoS-off baseline; default on)",
                       &Field::qos));
  keys.push_back(OnOff("qos_stop_steps",
                       "A critical request arriving while a step runs (one that reads no "
                       "critical prompt) stops that step between layers and goes first; the "
                       "step is redone after it (default on)",
                       &Field::qos_stop_steps));
  keys.push_back(OnOff("adaptive_batching",
                       "Each step's token budget and prompt chunk beside decodes move with the "
                       "queue's depth between a latency-leaning and a throughput-leaning "
                       "setting (default on)",
                       &Field::adaptive_batching));
  keys.push_back(Integer("min_batched_tokens", "TOKENS",
                         "Adaptive batching's latency-leaning token budget (default: the running "
                         "decodes plus one prompt chunk)",
                         &Field::min_batched_tokens, 0, kMaxTokens));
  keys.push_back(Integer("max_prefill_chunk", "TOKENS",
                         "Adaptive batching's throughput-leaning prompt chunk beside decodes "
                         "(default 4 x prefill_chunk_while_decoding)",
                         &Field::max_prefill_chunk, 0, kMaxTokens));
  keys.push_back(Integer("max_queue_delay_ms", "MS",
                         "Embedding models: how long a batch waits for more texts at most; the "
                         "window in use adapts below it (default 10)",
                         &Field::max_queue_delay_ms, 0, 10'000));
  keys.push_back(Integer("max_batch_texts", "N",
                         "Embedding models: texts per batch at most (default 64)",
                         &Field::max_batch_texts, 1, 4096));
  // At least a short text with its [CLS] and [SEP].
  keys.push_back(Integer("embed_batch_tokens", "TOKENS",
                         "Embedding models: tokens per batch at most, all texts together "
                         "(default 4096)",
                         &Field::embed_batch_tokens, 16, kMaxTokens));
  keys.push_back(OnOff("adaptive_batch_window",
                       "Embedding models: shrink the batching window while requests come alone, "
                       "grow it back under load (default on; off: a fixed window of "
                       "max_queue_delay_ms)",
                       &Field::adaptive_batch_window));
  keys.push_back(Bytes("swap_space",
                       "Host memory per model instance for preemption by swap, from the pinned "
                       "pool (default 0: preempted sequences are recomputed)",
                       &Field::swap_space));
  keys.push_back(Seconds("kv_idle_release",
                         "An elastic KV cache idle this long gives its memory above kv_min back "
                         "to the device (default 120; 0: never)",
                         &Field::kv_idle_release_seconds, 0));
  keys.push_back(
      {"tool_format", "auto|template|generic|off",
       "Chat requests with tools: auto (default) uses the chat template's tool-call family when "
       "the template shows tools, else Pier's generic form (a system message listing the tools, "
       "answers as JSON under a grammar); template: the template's family only; generic: the "
       "generic form always; off: tools are refused",
       [](const Json& value, std::string_view at, ModelSettings* s) -> Status {
         PIER_ASSIGN_OR_RETURN(std::string text, TextOf(value, at));
         static constexpr std::pair<std::string_view, ToolFormat> kNames[] = {
             {"auto", ToolFormat::kAuto},
             {"template", ToolFormat::kTemplate},
             {"generic", ToolFormat::kGeneric},
             {"off", ToolFormat::kOff}};
         for (const auto& [name, format] : kNames) {
           if (text == name) {
             s->tool_format = format;
             return Status::Ok();
           }
         }
         return InvalidArgumentError(
             std::string(at) + ": expected auto, template, generic or off, got \"" + text + "\"");
       },
       [](const ModelSettings& s) {
         switch (s.tool_format) {
           case ToolFormat::kTemplate:
             return Json("template");
           case ToolFormat::kGeneric:
             return Json("generic");
           case ToolFormat::kOff:
             return Json("off");
           case ToolFormat::kAuto:
             break;
         }
         return Json("auto");
       }});
  keys.push_back(Integer("max_batch_size", "N",
                         "Tensor (ONNX) models: the most items one batch holds (default 8; 0: "
                         "served unbatched, one request at a time, its inputs as declared)",
                         &Field::max_batch_size, 0, 4096));
  keys.push_back(
      {"preferred_batch_sizes", "N,N,...",
       "Tensor (ONNX) models: batch sizes that close a batch at once (default: none; a batch "
       "goes when full or when its oldest request has waited max_queue_delay_ms)",
       [](const Json& value, std::string_view at, ModelSettings* s) -> Status {
         std::vector<std::string> texts;
         if (value.is_array()) {
           for (const Json& item : value) {
             PIER_ASSIGN_OR_RETURN(std::string text, TextOf(item, at));
             texts.push_back(std::move(text));
           }
         } else {
           PIER_ASSIGN_OR_RETURN(std::string text, TextOf(value, at));
           size_t start = text.empty() ? 1 : 0;  // "" (the default, shown): none
           while (start <= text.size()) {
             const size_t comma = std::min(text.find(',', start), text.size());
             texts.push_back(text.substr(start, comma - start));
             start = comma + 1;
           }
         }
         std::vector<int64_t> sizes;
         for (const std::string& text : texts) {
           PIER_ASSIGN_OR_RETURN(int64_t n, ParseIntegerSetting(text, at, 1, 4096));
           sizes.push_back(n);
         }
         std::sort(sizes.begin(), sizes.end());
         sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
         s->preferred_batch_sizes = std::move(sizes);
         return Status::Ok();
       },
       [](const ModelSettings& s) {
         std::string text;
         for (int64_t n : s.preferred_batch_sizes) {
           text += (text.empty() ? "" : ",") + std::to_string(n);
         }
         return Json(text);
       }});
  keys.push_back(
      {"inputs", "MAP",
       "Tensor (ONNX) models, in models.yaml: per input, fixed sizes for dimensions it leaves "
       "open, e.g. inputs: {x: {shape: [-1, 3, 224, 224]}} (-1 keeps a dimension open; a fixed "
       "dimension of the model must be repeated as it is), and where requests of different "
       "sizes share a batch, padded, e.g. inputs: {line: {pad: {axes: [3], value: 0}}} (axes: "
       "dimensions after the batch that the model leaves open; value: the element padded in, "
       "default 0; not for BYTES). A batch is padded to its largest size along those axes and "
       "its outputs come back at that size; padding changes what a graph computes over them "
       "(a mean counts the padding), hence opt-in; and the size warm-up runs its open "
       "dimensions at, e.g. inputs: {x: {warmup: [-1, 3, 736, 1216]}} (default 1), so the "
       "working memory measured at load is that of the inputs it will serve",
       [](const Json& value, std::string_view at, ModelSettings* s) -> Status {
         if (!value.is_object()) {
           return InvalidArgumentError(std::string(at) +
                                       ": expected a map of input names to {shape, pad}");
         }
         std::map<std::string, TensorInputSettings> inputs;
         for (const auto& [name, entry] : value.items()) {
           const std::string where = std::string(at) + "." + name;
           if (!entry.is_object() || entry.empty()) {
             return InvalidArgumentError(where +
                                         ": expected {shape: [...]}, {pad: {...}}, {warmup: "
                                         "[...]} or several");
           }
           for (const auto& [key, unused] : entry.items()) {
             if (key != "shape" && key != "pad" && key != "warmup") {
               return InvalidArgumentError(where + ": unknown key \"" + key +
                                           "\" (known: shape, pad, warmup)");
             }
           }
           TensorInputSettings input;
           if (entry.contains("shape")) {
             PIER_ASSIGN_OR_RETURN(input.shape, InputShape(entry["shape"], where + ".shape"));
           }
           if (entry.contains("pad")) {
             PIER_ASSIGN_OR_RETURN(input.pad, PadRuleOf(entry["pad"], where + ".pad"));
           }
           if (entry.contains("warmup")) {
             PIER_ASSIGN_OR_RETURN(input.warmup, InputShape(entry["warmup"], where + ".warmup"));
           }
           inputs[name] = std::move(input);
         }
         s->inputs = std::move(inputs);
         return Status::Ok();
       },
       [](const ModelSettings& s) {
         Json object = Json::object();
         for (const auto& [name, input] : s.inputs) {
           Json entry = Json::object();
           if (!input.shape.empty()) {
             Json shape = Json::array();
             for (int64_t d : input.shape) shape.push_back(std::to_string(d));
             entry["shape"] = std::move(shape);
           }
           if (!input.warmup.empty()) {
             Json warmup = Json::array();
             for (int64_t d : input.warmup) warmup.push_back(std::to_string(d));
             entry["warmup"] = std::move(warmup);
           }
           if (input.pad) {
             Json axes = Json::array();
             for (int64_t a : input.pad->axes) axes.push_back(std::to_string(a));
             entry["pad"] =
                 Json{{"axes", std::move(axes)}, {"value", ExactDecimal(input.pad->value)}};
           }
           object[name] = std::move(entry);
         }
         return object;
       }});
  keys.push_back(
      {"speculative", "MAP",
       "LLMs: speculative decoding, whose output is bit for bit the output without it: "
       "speculative: {method: ngram} (prompt lookup: the tokens that followed an earlier "
       "occurrence of the latest ones) or {method: draft, model: NAME} (a smaller served LLM "
       "with the same vocabulary, loaded before this one, in the server's process), with "
       "max_tokens (proposed tokens per step, 1..32, default 8) and for ngram ngram_min / "
       "ngram_max (the suffix lengths searched, default 2 and 4); off (the default): none. "
       "The engine proposes only while a step's extra tokens are nearly free (it measures "
       "its device) and steps aside under load",
       [](const Json& value, std::string_view at, ModelSettings* s) -> Status {
         SpeculativeSettings spec;
         if (value.is_string() && value.get<std::string>() == "off") {
           s->speculative = spec;
           return Status::Ok();
         }
         if (!value.is_object()) {
           return InvalidArgumentError(std::string(at) +
                                       ": expected off or a map {method: ngram|draft, model, "
                                       "max_tokens, ngram_min, ngram_max}");
         }
         for (const auto& [key, unused] : value.items()) {
           if (key != "method" && key != "model" && key != "max_tokens" && key != "ngram_min" &&
               key != "ngram_max") {
             return InvalidArgumentError(std::string(at) + ": unknown key \"" + key +
                                         "\" (known: method, model, max_tokens, ngram_min, "
                                         "ngram_max)");
           }
         }
         if (!value.contains("method")) {
           return InvalidArgumentError(std::string(at) + ": method is required (ngram or draft)");
         }
         PIER_ASSIGN_OR_RETURN(std::string method,
                               TextOf(value["method"], std::string(at) + ".method"));
         if (method == "ngram") {
           spec.method = engine::SpeculativeMethod::kNgram;
         } else if (method == "draft") {
           spec.method = engine::SpeculativeMethod::kDraft;
         } else if (method == "off") {
           spec.method = engine::SpeculativeMethod::kOff;
         } else {
           return InvalidArgumentError(std::string(at) +
                                       ".method: expected ngram, draft or off, "
                                       "got \"" +
                                       method + "\"");
         }
         auto integer = [&](const char* key, int64_t min, int64_t max, int32_t* field) -> Status {
           if (!value.contains(key)) return Status::Ok();
           const std::string where = std::string(at) + "." + key;
           PIER_ASSIGN_OR_RETURN(std::string text, TextOf(value[key], where));
           PIER_ASSIGN_OR_RETURN(int64_t n, ParseIntegerSetting(text, where, min, max));
           *field = static_cast<int32_t>(n);
           return Status::Ok();
         };
         PIER_RETURN_IF_ERROR(integer("max_tokens", 1, 32, &spec.max_tokens));
         PIER_RETURN_IF_ERROR(integer("ngram_min", 1, 16, &spec.ngram_min));
         PIER_RETURN_IF_ERROR(integer("ngram_max", 1, 16, &spec.ngram_max));
         if (spec.ngram_min > spec.ngram_max) {
           return InvalidArgumentError(
               std::string(at) + ": ngram_min (" + std::to_string(spec.ngram_min) +
               ") must not exceed ngram_max (" + std::to_string(spec.ngram_max) + ")");
         }
         if (value.contains("model")) {
           PIER_ASSIGN_OR_RETURN(spec.model, TextOf(value["model"], std::string(at) + ".model"));
         }
         if (spec.method == engine::SpeculativeMethod::kDraft && spec.model.empty()) {
           return InvalidArgumentError(std::string(at) +
                                       ": method draft needs model: the draft model's name");
         }
         if (spec.method != engine::SpeculativeMethod::kDraft && !spec.model.empty()) {
           return InvalidArgumentError(std::string(at) + ": model is for method draft");
         }
         s->speculative = std::move(spec);
         return Status::Ok();
       },
       [](const ModelSettings& s) {
         const SpeculativeSettings& spec = s.speculative;
         if (spec.method == engine::SpeculativeMethod::kOff) return Json("off");
         Json object = {{"method", std::string(engine::SpeculativeMethodName(spec.method))},
                        {"max_tokens", std::to_string(spec.max_tokens)}};
         if (spec.method == engine::SpeculativeMethod::kDraft) {
           object["model"] = spec.model;
         } else {
           object["ngram_min"] = std::to_string(spec.ngram_min);
           object["ngram_max"] = std::to_string(spec.ngram_max);
         }
         return object;
       }});
  keys.push_back(
      {"preprocess", "MAP",
       "Tensor (ONNX) models, in models.yaml: an input that takes encoded JPEG or PNG images "
       "(a BYTES input), decoded, resized and normalised in the server, e.g. preprocess: "
       "{resize: crop, shorter_side: 256, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, "
       "0.225]}; keys: input, name, size, resize (stretch|crop|letterbox), shorter_side, "
       "interpolation (nearest|box|bilinear|hamming|bicubic|lanczos), pad_value, scale, mean, "
       "std, layout (NCHW|NHWC), channels (RGB|BGR), exif, max_image_bytes, max_image_width, "
       "max_image_height, max_image_pixels, threads (docs/api.md, \"Images\")",
       [](const Json& value, std::string_view at, ModelSettings* s) -> Status {
         if (value.is_null()) {  // shown as null when unset
           s->preprocess.reset();
           return Status::Ok();
         }
         PIER_ASSIGN_OR_RETURN(s->preprocess, ParseImagePreprocess(value, at));
         return Status::Ok();
       },
       [](const ModelSettings& s) {
         return s.preprocess.has_value() ? ImagePreprocessJson(*s.preprocess) : Json();
       }});
  return keys;
}

}  // namespace

const std::vector<ModelSettingKey>& ModelSettingKeys() {
  static const std::vector<ModelSettingKey> kKeys = BuildTable();
  return kKeys;
}

const ModelSettingKey* FindModelSettingKey(std::string_view name) {
  const std::vector<ModelSettingKey>& keys = ModelSettingKeys();
  auto it = std::find_if(keys.begin(), keys.end(), [&](const auto& k) { return k.name == name; });
  return it == keys.end() ? nullptr : &*it;
}

Status ApplyModelSetting(ModelSettings* settings, std::string_view name, const Json& value,
                         std::string_view at) {
  const ModelSettingKey* key = FindModelSettingKey(name);
  if (key == nullptr) {
    return InvalidArgumentError(std::string(at) + ": unknown setting \"" + std::string(name) +
                                "\"");
  }
  return key->apply(value, at, settings);
}

Json ModelSettingsToJson(const ModelSettings& settings, bool all) {
  static const ModelSettings kDefaults;
  Json object = Json::object();
  for (const ModelSettingKey& key : ModelSettingKeys()) {
    Json shown = key.show(settings);
    if (all || shown != key.show(kDefaults)) object[std::string(key.name)] = std::move(shown);
  }
  return object;
}

Result<ModelSettings> ModelSettingsFromJson(const Json& object, std::string_view at) {
  if (!object.is_object()) {
    return InvalidArgumentError(std::string(at) + ": expected an object of settings");
  }
  ModelSettings settings;
  for (const auto& [name, value] : object.items()) {
    PIER_RETURN_IF_ERROR(ApplyModelSetting(&settings, name, value, std::string(at) + ": " + name));
  }
  return settings;
}

}  // namespace pier::serving
