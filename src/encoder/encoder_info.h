// EncoderInfo: the hyper-parameters of an encoder (embedding) model, read from GGUF metadata.
//
// ReadEncoderInfo reads the keys llama.cpp's converter writes for architecture `bert`:
// `bert.context_length`, `bert.embedding_length`, `bert.feed_forward_length`,
// `bert.block_count`, `bert.attention.head_count`, `bert.attention.layer_norm_epsilon`,
// `bert.attention.causal` (must be false when present), `bert.pooling_type` (llama.cpp's enum:
// 0 none, 1 mean, 2 cls, 3 last, 4 rank; absent: mean) and `tokenizer.ggml.token_type_count`.
// Errors name the file and the key. A plain value type.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "common/status.h"
#include "model/gguf_file.h"

namespace pier::encoder {

// How one vector is made of a text's token states.
enum class Pooling : uint8_t { kNone, kMean, kCls, kLast };
std::string_view PoolingName(Pooling pooling);  // "none", "mean", "cls", "last"

struct EncoderInfo {
  std::string architecture;  // "bert"
  std::string name;          // general.name; empty if absent
  int64_t context_length = 0;
  int64_t embedding_length = 0;
  int64_t feed_forward_length = 0;
  int64_t block_count = 0;
  int64_t head_count = 0;
  int64_t head_dim = 0;
  double layer_norm_eps = 1e-12;
  Pooling pooling = Pooling::kMean;
  int64_t token_type_count = 0;  // rows of token_types.weight (0: no such tensor)
  int64_t vocab_size = 0;
  int64_t parameter_count = 0;
  uint64_t weight_bytes = 0;
  std::map<DType, int64_t> tensor_types;
};

// Whether `architecture` names an encoder Pier runs (bert).
bool IsEncoderArchitecture(std::string_view architecture);

// UNSUPPORTED for another architecture, causal attention or a pooling type Pier does not run
// (rank); NOT_FOUND / INVALID_ARGUMENT for missing or inconsistent keys.
[[nodiscard]] Result<EncoderInfo> ReadEncoderInfo(const model::GgufFile& file);

}  // namespace pier::encoder
