#include "model/model_info.h"

#include <array>
#include <cmath>
#include <limits>

namespace pier::model {
namespace {

constexpr std::array<std::string_view, 6> kSupportedArchitectures = {"llama", "qwen2",  "qwen3",
                                                                     "phi3",  "gemma2", "gemma3"};

// Upper bound for any single hyper-parameter; far above real models, low
// enough that products of a few of them cannot overflow int64.
constexpr int64_t kMaxHyperParameter = int64_t{1} << 24;

class InfoReader {
 public:
  InfoReader(const GgufFile& file, std::string arch) : file_(file), arch_(std::move(arch)) {}

  std::string Key(std::string_view suffix) const { return arch_ + "." + std::string(suffix); }

  // A required positive integer `<arch>.<suffix>`.
  Result<int64_t> Positive(std::string_view suffix) const {
    const std::string key = Key(suffix);
    PIER_ASSIGN_OR_RETURN(const int64_t value, file_.GetInt(key));
    return CheckRange(key, value);
  }

  // An optional positive integer; `fallback` when absent.
  Result<int64_t> PositiveOr(std::string_view suffix, int64_t fallback) const {
    const std::string key = Key(suffix);
    const GgufValue* value = file_.Find(key);
    if (value == nullptr) return fallback;
    if (value->type() == GgufType::kArray) {
      return UnsupportedError(file_.path() + ": metadata key '" + key +
                              "' is a per-layer array; only one value for all layers is supported");
    }
    PIER_ASSIGN_OR_RETURN(const int64_t number, file_.GetInt(key));
    return CheckRange(key, number);
  }

  // An optional float; `fallback` when absent. Must be finite and positive.
  Result<double> PositiveFloatOr(std::string_view suffix, std::optional<double> fallback) const {
    const std::string key = Key(suffix);
    if (!file_.Has(key)) {
      if (fallback.has_value()) return *fallback;
      return NotFoundError(file_.path() + ": metadata key '" + key + "' not found");
    }
    PIER_ASSIGN_OR_RETURN(const double value, file_.GetFloat(key));
    if (!std::isfinite(value) || value <= 0) {
      return DataLossError(file_.path() + ": metadata key '" + key + "' is " +
                           std::to_string(value) + ", expected a positive number");
    }
    return value;
  }

  Status Error(const std::string& message) const {
    return DataLossError(file_.path() + ": " + message);
  }

 private:
  Result<int64_t> CheckRange(const std::string& key, int64_t value) const {
    if (value <= 0 || value > kMaxHyperParameter) {
      return DataLossError(file_.path() + ": metadata key '" + key + "' is " +
                           std::to_string(value) + ", expected 1 to " +
                           std::to_string(kMaxHyperParameter));
    }
    return value;
  }

  const GgufFile& file_;
  std::string arch_;
};

Result<std::optional<RopeScaling>> ReadRopeScaling(const GgufFile& file, const InfoReader& r) {
  RopeScaling scaling;
  if (file.Has(r.Key("rope.scaling.type"))) {
    PIER_ASSIGN_OR_RETURN(const std::string_view type, file.GetString(r.Key("rope.scaling.type")));
    scaling.type = std::string(type);
  } else if (file.Has(r.Key("rope.scale_linear"))) {
    scaling.type = "linear";  // the older key of linear scaling
    PIER_ASSIGN_OR_RETURN(scaling.factor, r.PositiveFloatOr("rope.scale_linear", std::nullopt));
    return std::optional<RopeScaling>(scaling);
  } else {
    return std::optional<RopeScaling>();
  }
  if (scaling.type == "none") return std::optional<RopeScaling>();
  PIER_ASSIGN_OR_RETURN(scaling.factor, r.PositiveFloatOr("rope.scaling.factor", 1.0));
  PIER_ASSIGN_OR_RETURN(scaling.original_context,
                        r.PositiveOr("rope.scaling.original_context_length", 0));
  return std::optional<RopeScaling>(scaling);
}

Result<int64_t> ReadVocabSize(const GgufFile& file, const InfoReader& r) {
  if (const GgufValue* tokens = file.Find("tokenizer.ggml.tokens")) {
    if (tokens->type() != GgufType::kArray || tokens->array_type() != GgufType::kString) {
      return r.Error("tokenizer.ggml.tokens is not an array of strings");
    }
    if (tokens->array_size() == 0 ||
        tokens->array_size() > static_cast<uint64_t>(kMaxHyperParameter)) {
      return r.Error("tokenizer.ggml.tokens has " + std::to_string(tokens->array_size()) +
                     " entries");
    }
    return static_cast<int64_t>(tokens->array_size());
  }
  if (file.Has(r.Key("vocab_size"))) return r.PositiveOr("vocab_size", 0);
  if (const GgufTensorInfo* embd = file.FindTensor("token_embd.weight")) {
    if (embd->dims.size() == 2) return embd->dims[1];
  }
  return r.Error("cannot tell the vocabulary size: no tokenizer.ggml.tokens, " +
                 r.Key("vocab_size") + " or 2-D token_embd.weight");
}

}  // namespace

std::span<const std::string_view> SupportedArchitectures() { return kSupportedArchitectures; }

Result<ModelInfo> ReadModelInfo(const GgufFile& file) {
  ModelInfo info;
  PIER_ASSIGN_OR_RETURN(const std::string_view arch, file.GetString("general.architecture"));
  info.architecture = std::string(arch);
  bool supported = false;
  std::string supported_list;
  for (std::string_view name : kSupportedArchitectures) {
    supported = supported || name == arch;
    supported_list += (supported_list.empty() ? "" : ", ") + std::string(name);
  }
  if (!supported) {
    return UnsupportedError(file.path() + ": architecture '" + info.architecture +
                            "' is not supported (supported: " + supported_list + ")");
  }
  if (const GgufValue* name = file.Find("general.name")) {
    info.name = std::string(name->AsString().value_or(""));
  }

  const InfoReader r(file, info.architecture);
  PIER_ASSIGN_OR_RETURN(info.context_length, r.Positive("context_length"));
  PIER_ASSIGN_OR_RETURN(info.embedding_length, r.Positive("embedding_length"));
  PIER_ASSIGN_OR_RETURN(info.block_count, r.Positive("block_count"));
  PIER_ASSIGN_OR_RETURN(info.feed_forward_length, r.PositiveOr("feed_forward_length", 0));
  if (info.feed_forward_length == 0) {
    return NotFoundError(file.path() + ": metadata key '" + r.Key("feed_forward_length") +
                         "' not found");
  }
  PIER_ASSIGN_OR_RETURN(info.head_count, r.PositiveOr("attention.head_count", 0));
  if (info.head_count == 0) {
    return NotFoundError(file.path() + ": metadata key '" + r.Key("attention.head_count") +
                         "' not found");
  }
  PIER_ASSIGN_OR_RETURN(info.head_count_kv,
                        r.PositiveOr("attention.head_count_kv", info.head_count));
  if (info.head_count % info.head_count_kv != 0) {
    return r.Error("attention.head_count " + std::to_string(info.head_count) +
                   " is not a multiple of head_count_kv " + std::to_string(info.head_count_kv));
  }
  if (!file.Has(r.Key("attention.key_length")) && info.embedding_length % info.head_count != 0) {
    return r.Error("embedding_length " + std::to_string(info.embedding_length) +
                   " is not a multiple of head_count " + std::to_string(info.head_count) +
                   " and attention.key_length is absent");
  }
  PIER_ASSIGN_OR_RETURN(
      info.head_dim, r.PositiveOr("attention.key_length", info.embedding_length / info.head_count));
  PIER_ASSIGN_OR_RETURN(info.rope_dimension_count,
                        r.PositiveOr("rope.dimension_count", info.head_dim));
  PIER_ASSIGN_OR_RETURN(info.rope_freq_base, r.PositiveFloatOr("rope.freq_base", 10000.0));
  PIER_ASSIGN_OR_RETURN(info.rope_scaling, ReadRopeScaling(file, r));
  PIER_ASSIGN_OR_RETURN(info.rms_norm_eps,
                        r.PositiveFloatOr("attention.layer_norm_rms_epsilon", std::nullopt));
  PIER_ASSIGN_OR_RETURN(info.vocab_size, ReadVocabSize(file, r));
  PIER_ASSIGN_OR_RETURN(info.sliding_window, r.PositiveOr("attention.sliding_window", 0));
  if ((info.architecture == "gemma3" || info.architecture == "gemma2") &&
      info.sliding_window == 0) {
    return NotFoundError(file.path() + ": metadata key '" + r.Key("attention.sliding_window") +
                         "' not found (" + info.architecture + "'s local layers need it)");
  }
  PIER_ASSIGN_OR_RETURN(info.attn_logit_softcapping,
                        r.PositiveFloatOr("attn_logit_softcapping", 0.0));
  PIER_ASSIGN_OR_RETURN(info.final_logit_softcapping,
                        r.PositiveFloatOr("final_logit_softcapping", 0.0));
  if (info.sliding_window > info.context_length) {
    return r.Error("attention.sliding_window " + std::to_string(info.sliding_window) +
                   " is larger than context_length " + std::to_string(info.context_length));
  }

  for (const GgufTensorInfo& tensor : file.tensors()) {
    // Tensors may overlap in a hostile file, so even these sums are checked.
    if (__builtin_add_overflow(info.weight_bytes, tensor.size_bytes, &info.weight_bytes) ||
        __builtin_add_overflow(info.parameter_count, tensor.element_count, &info.parameter_count)) {
      return r.Error("the tensor sizes add up to more than 2^63");
    }
    ++info.tensor_types[tensor.type];
  }
  uint64_t kv = 2 * 2;  // K and V, 2 bytes (f16) each
  for (int64_t factor : {info.block_count, info.head_count_kv, info.head_dim}) {
    if (__builtin_mul_overflow(kv, static_cast<uint64_t>(factor), &kv)) {
      return r.Error("the KV cache size per token overflows");
    }
  }
  info.kv_bytes_per_token = kv;
  info.has_chat_template = file.Has("tokenizer.chat_template");
  return info;
}

}  // namespace pier::model
