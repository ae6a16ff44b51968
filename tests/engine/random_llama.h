// Random-weight Llama models of a real model's shape, built in memory as a GGUF image, for the
// GPU checks (a 135M-parameter file is too large to bring to a GPU machine, so the check makes
// its own there) and the tests of the GPU runner's host side (test-only, header-only).
//
// Weights are random quantized blocks whose scales keep activations in a sane range through
// every layer; norms are 1. The same seed gives the same image.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/gguf_test_writer.h"
#include "tensor/dtype.h"
#include "tensor/float16.h"

namespace pier::engine::testing {

// The shape of a random-weight Llama model (general.architecture "llama").
struct RandomLlamaSpec {
  int64_t n_embd = 576;  // the defaults are SmolLM2-135M's
  int64_t n_layer = 30;
  int64_t n_head = 9;
  int64_t n_kv_head = 3;
  int64_t n_ff = 1536;
  int64_t n_vocab = 49152;
  int64_t context_length = 8192;
  float rope_freq_base = 100000.0f;
  DType matrix_type = DType::kQ4_1;     // every layer matrix
  DType embedding_type = DType::kQ8_0;  // token_embd, also the output head (tied)
};

// A small model of the same family, for the CPU-side tests (quick to build and run).
inline RandomLlamaSpec SmallRandomLlamaSpec() {
  RandomLlamaSpec spec;
  spec.n_embd = 128;
  spec.n_layer = 6;
  spec.n_head = 4;
  spec.n_kv_head = 2;
  spec.n_ff = 256;
  spec.n_vocab = 500;
  spec.context_length = 512;
  return spec;
}

// Random quantized rows: random bytes, then each block's f16 scale (and offset) set so that a
// weight is about uniform in [-scale, scale] with mean about 0.
inline std::vector<uint8_t> RandomRows(DType type, int64_t rows, int64_t cols, float scale,
                                       std::mt19937& rng) {
  const DTypeTraits traits = Traits(type);
  std::vector<uint8_t> bytes(static_cast<size_t>(*RowBytes(type, cols) * rows));
  for (size_t i = 0; i < bytes.size(); i += 4) {  // four random bytes per draw
    const uint32_t r = rng();
    for (size_t k = 0; k < 4 && i + k < bytes.size(); ++k)
      bytes[i + k] = static_cast<uint8_t>(r >> (8 * k));
  }
  std::uniform_real_distribution<float> jitter(0.8f, 1.2f);
  auto put_half = [&](size_t at, float v) {
    const uint16_t h = Fp32ToFp16(v);
    std::memcpy(&bytes[at], &h, 2);
  };
  for (size_t base = 0; base < bytes.size(); base += static_cast<size_t>(traits.type_size)) {
    const float j = jitter(rng);
    switch (type) {
      case DType::kQ4_0:  // (q - 8) d
        put_half(base, scale / 8 * j);
        break;
      case DType::kQ5_0:
        put_half(base, scale / 16 * j);
        break;
      case DType::kQ4_1:  // q d + m
        put_half(base, scale / 7.5f * j);
        put_half(base + 2, -scale * j);
        break;
      case DType::kQ5_1:
        put_half(base, scale / 15.5f * j);
        put_half(base + 2, -scale * j);
        break;
      case DType::kQ8_0:
        put_half(base, scale / 127 * j);
        break;
      case DType::kQ4_K:  // d sc q - dmin m, sc and m random 6-bit
      case DType::kQ5_K:
        put_half(base, scale / 400 * j);
        put_half(base + 2, scale / 200 * j);
        break;
      case DType::kQ6_K:  // d sc (q - 32), sc random int8
        put_half(base + 208, scale / 2000 * j);
        break;
      default:
        break;
    }
  }
  return bytes;
}

inline bool HasRandomRows(DType type) {
  switch (type) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

inline std::vector<uint64_t> Dims(std::initializer_list<int64_t> dims) {
  std::vector<uint64_t> out;
  for (int64_t d : dims) out.push_back(static_cast<uint64_t>(d));
  return out;
}

// The model's GGUF image; empty when the spec's widths are not whole blocks of its types.
inline std::vector<uint8_t> BuildRandomLlama(const RandomLlamaSpec& spec, uint32_t seed) {
  const int64_t hd = spec.n_embd / spec.n_head;
  for (DType type : {spec.matrix_type, spec.embedding_type}) {
    const int64_t block = Traits(type).block_size;
    if (!HasRandomRows(type) || spec.n_embd % block != 0 || spec.n_ff % block != 0 ||
        (spec.n_head * hd) % block != 0 || spec.n_embd % spec.n_head != 0 ||
        spec.n_head % spec.n_kv_head != 0) {
      return {};
    }
  }
  std::mt19937 rng(seed);
  model::testing::GgufTestWriter w;
  w.AddString("general.architecture", "llama");
  w.AddString("general.name", "pier-random-llama");
  w.AddU32("llama.context_length", static_cast<uint32_t>(spec.context_length));
  w.AddU32("llama.embedding_length", static_cast<uint32_t>(spec.n_embd));
  w.AddU32("llama.block_count", static_cast<uint32_t>(spec.n_layer));
  w.AddU32("llama.feed_forward_length", static_cast<uint32_t>(spec.n_ff));
  w.AddU32("llama.attention.head_count", static_cast<uint32_t>(spec.n_head));
  w.AddU32("llama.attention.head_count_kv", static_cast<uint32_t>(spec.n_kv_head));
  w.AddU32("llama.vocab_size", static_cast<uint32_t>(spec.n_vocab));
  w.AddF32("llama.rope.freq_base", spec.rope_freq_base);
  w.AddF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);

  auto ones = [](int64_t n) {
    std::vector<uint8_t> bytes(static_cast<size_t>(n) * 4);
    for (int64_t i = 0; i < n; ++i) {
      const float one = 1.0f;
      std::memcpy(&bytes[i * 4], &one, 4);
    }
    return bytes;
  };
  const float embd_scale = 1.0f;
  w.AddTensor("token_embd.weight", static_cast<uint32_t>(spec.embedding_type),
              Dims({spec.n_embd, spec.n_vocab}),
              RandomRows(spec.embedding_type, spec.n_vocab, spec.n_embd, embd_scale, rng));
  w.AddTensor("output_norm.weight", static_cast<uint32_t>(DType::kF32), Dims({spec.n_embd}),
              ones(spec.n_embd));
  const int64_t q_dim = spec.n_head * hd, kv_dim = spec.n_kv_head * hd;
  // Uniform weights in [-s, s] with s = sqrt(3 / fan_in) keep a product's output near the
  // scale of its normalized input.
  auto scale_for = [](int64_t fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); };
  for (int64_t il = 0; il < spec.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const DType t = spec.matrix_type;
    w.AddTensor(p + "attn_norm.weight", static_cast<uint32_t>(DType::kF32), Dims({spec.n_embd}),
                ones(spec.n_embd));
    w.AddTensor(p + "ffn_norm.weight", static_cast<uint32_t>(DType::kF32), Dims({spec.n_embd}),
                ones(spec.n_embd));
    w.AddTensor(p + "attn_q.weight", static_cast<uint32_t>(t), Dims({spec.n_embd, q_dim}),
                RandomRows(t, q_dim, spec.n_embd, scale_for(spec.n_embd), rng));
    w.AddTensor(p + "attn_k.weight", static_cast<uint32_t>(t), Dims({spec.n_embd, kv_dim}),
                RandomRows(t, kv_dim, spec.n_embd, scale_for(spec.n_embd), rng));
    w.AddTensor(p + "attn_v.weight", static_cast<uint32_t>(t), Dims({spec.n_embd, kv_dim}),
                RandomRows(t, kv_dim, spec.n_embd, scale_for(spec.n_embd), rng));
    w.AddTensor(p + "attn_output.weight", static_cast<uint32_t>(t), Dims({q_dim, spec.n_embd}),
                RandomRows(t, spec.n_embd, q_dim, scale_for(q_dim) / 4, rng));
    w.AddTensor(p + "ffn_gate.weight", static_cast<uint32_t>(t), Dims({spec.n_embd, spec.n_ff}),
                RandomRows(t, spec.n_ff, spec.n_embd, scale_for(spec.n_embd), rng));
    w.AddTensor(p + "ffn_up.weight", static_cast<uint32_t>(t), Dims({spec.n_embd, spec.n_ff}),
                RandomRows(t, spec.n_ff, spec.n_embd, scale_for(spec.n_embd), rng));
    w.AddTensor(p + "ffn_down.weight", static_cast<uint32_t>(t), Dims({spec.n_ff, spec.n_embd}),
                RandomRows(t, spec.n_embd, spec.n_ff, scale_for(spec.n_ff) / 4, rng));
  }
  return w.Build();
}

}  // namespace pier::engine::testing
