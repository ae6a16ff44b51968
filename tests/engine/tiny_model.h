// Tiny random-weight Llama-family models for runner tests (test-only, header-only).
//
// TinyModelSpec describes a model small enough to run in microseconds; BuildTinyModel
// writes it as a GGUF image (weights in F32, Q8_0 or Q4_1) and ReferenceForward runs it
// the plain way: double precision, one token at a time, full causal attention over a
// growing K/V list, every step written out as in llama2.c. The reference reads the
// weights back from the image through DequantizeRow, so both sides see the same numbers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/gguf_file.h"
#include "model/gguf_test_writer.h"
#include "tensor/dequantize.h"
#include "tensor/float16.h"

namespace pier::engine::testing {

struct TinyModelSpec {
  std::string arch = "llama";  // "llama" or "qwen2"
  int64_t n_embd = 64;
  int64_t n_head = 4;
  int64_t n_kv_head = 2;
  int64_t n_ff = 96;
  int64_t n_layer = 2;
  int64_t n_vocab = 75;
  int64_t context = 256;
  int64_t rope_dims = 0;  // 0: head_dim
  double rope_base = 10000.0;
  double rope_linear_factor = 0;  // > 0 writes rope.scaling.type and rope.scaling.factor
  std::string rope_scaling_type = "linear";
  bool tied_output = false;
  bool qkv_bias = false;
  uint32_t matrix_type = 0;  // ggml type number of the 2-D weights: 0 F32, 8 Q8_0, 3 Q4_1
  uint32_t seed = 1;

  int64_t head_dim() const { return n_embd / n_head; }
  int64_t n_rot() const { return rope_dims > 0 ? rope_dims : head_dim(); }
};

inline std::vector<uint8_t> EncodeRows(uint32_t type, const std::vector<float>& v) {
  std::vector<uint8_t> out;
  auto put16 = [&](uint16_t h) {
    out.push_back(static_cast<uint8_t>(h & 0xFF));
    out.push_back(static_cast<uint8_t>(h >> 8));
  };
  if (type == 0) {
    out.resize(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  }
  for (size_t b = 0; b < v.size(); b += 32) {
    const float* x = v.data() + b;
    if (type == 8) {  // Q8_0: f16 d, int8 q[32]; x = d * q
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::abs(x[i]));
      const float d = amax / 127.0f;
      put16(Fp32ToFp16(d));
      for (int i = 0; i < 32; ++i) {
        const int q = d == 0 ? 0 : static_cast<int>(std::lround(x[i] / d));
        out.push_back(static_cast<uint8_t>(static_cast<int8_t>(std::clamp(q, -127, 127))));
      }
    } else {  // Q4_1: f16 d, f16 m, nibbles: low = x[0:16], high = x[16:32]; x = d * q + m
      float lo = x[0], hi = x[0];
      for (int i = 0; i < 32; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
      const float d = (hi - lo) / 15.0f;
      put16(Fp32ToFp16(d));
      put16(Fp32ToFp16(lo));
      uint8_t q[32];
      for (int i = 0; i < 32; ++i) {
        q[i] = static_cast<uint8_t>(d == 0 ? 0
                                           : std::clamp<long>(std::lround((x[i] - lo) / d), 0, 15));
      }
      for (int i = 0; i < 16; ++i) out.push_back(static_cast<uint8_t>(q[i] | (q[i + 16] << 4)));
    }
  }
  return out;
}

// The GGUF image of `spec` with random weights.
inline std::vector<uint8_t> BuildTinyModel(const TinyModelSpec& spec) {
  using W = model::testing::GgufTestWriter;
  W w;
  const std::string a = spec.arch;
  w.AddString("general.architecture", a);
  w.AddString("general.name", "tiny-" + a);
  w.AddU32(a + ".context_length", static_cast<uint32_t>(spec.context));
  w.AddU32(a + ".embedding_length", static_cast<uint32_t>(spec.n_embd));
  w.AddU32(a + ".block_count", static_cast<uint32_t>(spec.n_layer));
  w.AddU32(a + ".feed_forward_length", static_cast<uint32_t>(spec.n_ff));
  w.AddU32(a + ".attention.head_count", static_cast<uint32_t>(spec.n_head));
  w.AddU32(a + ".attention.head_count_kv", static_cast<uint32_t>(spec.n_kv_head));
  w.AddU32(a + ".rope.dimension_count", static_cast<uint32_t>(spec.n_rot()));
  w.AddF32(a + ".rope.freq_base", static_cast<float>(spec.rope_base));
  w.AddF32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  if (spec.rope_linear_factor > 0) {
    w.AddString(a + ".rope.scaling.type", spec.rope_scaling_type);
    w.AddF32(a + ".rope.scaling.factor", static_cast<float>(spec.rope_linear_factor));
  }

  std::mt19937 rng(spec.seed);
  auto random = [&](int64_t n, float scale, float offset = 0) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = offset + scale * u(rng);
    return v;
  };
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, float scale) {
    w.AddTensor(name, spec.matrix_type, {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)},
                EncodeRows(spec.matrix_type, random(rows * cols, scale)));
  };
  auto vector = [&](const std::string& name, std::vector<float> v) {
    w.AddTensor(name, 0, {v.size()}, EncodeRows(0, v));
  };
  const int64_t e = spec.n_embd, hd = spec.head_dim();
  const float s_in = 1.7f / std::sqrt(static_cast<float>(e));
  matrix("token_embd.weight", spec.n_vocab, e, 1.0f);
  for (int64_t il = 0; il < spec.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    vector(p + "attn_norm.weight", random(e, 0.3f, 1.0f));
    matrix(p + "attn_q.weight", spec.n_head * hd, e, s_in);
    matrix(p + "attn_k.weight", spec.n_kv_head * hd, e, s_in);
    matrix(p + "attn_v.weight", spec.n_kv_head * hd, e, s_in);
    if (spec.qkv_bias) {
      vector(p + "attn_q.bias", random(spec.n_head * hd, 0.5f));
      vector(p + "attn_k.bias", random(spec.n_kv_head * hd, 0.5f));
      vector(p + "attn_v.bias", random(spec.n_kv_head * hd, 0.5f));
    }
    matrix(p + "attn_output.weight", e, spec.n_head * hd,
           1.7f / std::sqrt(float(spec.n_head * hd)));
    vector(p + "ffn_norm.weight", random(e, 0.3f, 1.0f));
    matrix(p + "ffn_gate.weight", spec.n_ff, e, s_in);
    matrix(p + "ffn_up.weight", spec.n_ff, e, s_in);
    matrix(p + "ffn_down.weight", e, spec.n_ff, 1.7f / std::sqrt(float(spec.n_ff)));
  }
  vector("output_norm.weight", random(e, 0.3f, 1.0f));
  if (!spec.tied_output) matrix("output.weight", spec.n_vocab, e, s_in);
  return w.Build();
}

// Plain double-precision forward pass of a tiny model: logits of every position of `tokens`
// (processed one at a time from position 0). [tokens.size()][n_vocab].
inline std::vector<std::vector<double>> ReferenceForward(const model::GgufFile& file,
                                                         const TinyModelSpec& spec,
                                                         const std::vector<int32_t>& tokens) {
  auto tensor = [&](const std::string& name) {
    const model::GgufTensorInfo* t = file.FindTensor(name);
    std::vector<double> out;
    if (t == nullptr) return out;
    std::vector<float> f(t->element_count);
    if (!model::DequantizeRows(*t, 0, t->row_count(), f.data()).ok()) std::abort();
    return std::vector<double>(f.begin(), f.end());
  };
  // y[r] = sum_c W[r][c] x[c], W: [rows][cols]
  auto matvec = [](const std::vector<double>& w, const std::vector<double>& x, int64_t rows) {
    const int64_t cols = static_cast<int64_t>(x.size());
    std::vector<double> y(rows, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) y[r] += w[r * cols + c] * x[c];
    }
    return y;
  };
  auto rmsnorm = [](const std::vector<double>& x, const std::vector<double>& g) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + 1e-5);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * g[i];
    return y;
  };
  const int64_t e = spec.n_embd, hd = spec.head_dim(), nh = spec.n_head, nkv = spec.n_kv_head;
  const int64_t n_rot = spec.n_rot();
  const bool neox = spec.arch == "qwen2";
  const double pos_scale = spec.rope_linear_factor > 0 ? 1.0 / spec.rope_linear_factor : 1.0;
  auto rope = [&](std::vector<double>& v, int64_t heads, int64_t pos) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < n_rot / 2; ++i) {
        // theta_i = pos * base^(-2i / n_rot)
        const double angle =
            static_cast<double>(pos) * pos_scale *
            std::pow(spec.rope_base, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
        const int64_t i0 = h * hd + (neox ? i : 2 * i);
        const int64_t i1 = h * hd + (neox ? i + n_rot / 2 : 2 * i + 1);
        const double x0 = v[i0], x1 = v[i1];
        v[i0] = x0 * std::cos(angle) - x1 * std::sin(angle);
        v[i1] = x0 * std::sin(angle) + x1 * std::cos(angle);
      }
    }
  };

  const std::vector<double> embd = tensor("token_embd.weight");
  std::vector<double> out_w = tensor("output.weight");
  if (out_w.empty()) out_w = embd;
  std::vector<std::vector<std::vector<double>>> keys(spec.n_layer), values(spec.n_layer);
  std::vector<std::vector<double>> logits;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const int64_t pos = static_cast<int64_t>(t);
    std::vector<double> x(embd.begin() + tokens[t] * e, embd.begin() + (tokens[t] + 1) * e);
    for (int64_t il = 0; il < spec.n_layer; ++il) {
      const std::string p = "blk." + std::to_string(il) + ".";
      std::vector<double> h = rmsnorm(x, tensor(p + "attn_norm.weight"));
      std::vector<double> q = matvec(tensor(p + "attn_q.weight"), h, nh * hd);
      std::vector<double> k = matvec(tensor(p + "attn_k.weight"), h, nkv * hd);
      std::vector<double> v = matvec(tensor(p + "attn_v.weight"), h, nkv * hd);
      if (spec.qkv_bias) {
        const auto bq = tensor(p + "attn_q.bias"), bk = tensor(p + "attn_k.bias"),
                   bv = tensor(p + "attn_v.bias");
        for (size_t i = 0; i < q.size(); ++i) q[i] += bq[i];
        for (size_t i = 0; i < k.size(); ++i) k[i] += bk[i], v[i] += bv[i];
      }
      rope(q, nh, pos);
      rope(k, nkv, pos);
      keys[il].push_back(k);
      values[il].push_back(v);
      std::vector<double> att(nh * hd, 0.0);
      for (int64_t hq = 0; hq < nh; ++hq) {
        const int64_t hk = hq / (nh / nkv);
        std::vector<double> score(t + 1);
        double mx = -1e300;
        for (size_t j = 0; j <= t; ++j) {
          double s = 0;
          for (int64_t d = 0; d < hd; ++d) s += q[hq * hd + d] * keys[il][j][hk * hd + d];
          score[j] = s / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, score[j]);
        }
        double sum = 0;
        for (double& s : score) sum += (s = std::exp(s - mx));
        for (size_t j = 0; j <= t; ++j) {
          for (int64_t d = 0; d < hd; ++d) {
            att[hq * hd + d] += score[j] / sum * values[il][j][hk * hd + d];
          }
        }
      }
      const std::vector<double> o = matvec(tensor(p + "attn_output.weight"), att, e);
      for (int64_t i = 0; i < e; ++i) x[i] += o[i];
      h = rmsnorm(x, tensor(p + "ffn_norm.weight"));
      std::vector<double> g = matvec(tensor(p + "ffn_gate.weight"), h, spec.n_ff);
      const std::vector<double> u = matvec(tensor(p + "ffn_up.weight"), h, spec.n_ff);
      for (int64_t i = 0; i < spec.n_ff; ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      const std::vector<double> down = matvec(tensor(p + "ffn_down.weight"), g, e);
      for (int64_t i = 0; i < e; ++i) x[i] += down[i];
    }
    logits.push_back(matvec(out_w, rmsnorm(x, tensor("output_norm.weight")), spec.n_vocab));
  }
  return logits;
}

}  // namespace pier::engine::testing
