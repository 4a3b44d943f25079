// qk_norm.h: QK-norm (and QKV-norm), the norms of the self-attention's projections before RoPE
// (docs/MODEL.md "QK-norm"). q = N_q(x W_q), k = N_k(x W_k) and, with v_norm, v = N_v(x W_v), N of
// kind model.norm, either per head (each head's HS entries a row of the norm, one gain of HS shared
// by the heads: Qwen3, OLMo-core, HybridNorm) or over the whole projection (one row of C for q, of
// KVH HS for k and v: OLMo 2). This file is the layout (which columns of a qkv row each part is, how
// it is cut into norm rows) and the three modes on a (rows, qkv_width) buffer in place; the model
// saves each part's input (part-major, so each part's norm rows are contiguous) and statistics.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "model/config.h"
#include "model/norm_of.h"
#include "model/params.h"

namespace normlab {

// One normalized part of a qkv row: columns [col, col + width), cut into width / norm_width norm rows.
struct QkNormPart {
  int col = 0, width = 0, norm_width = 0;
  int pieces() const { return width / norm_width; }
};

// The parts of one layer's self-attention (n = 0: no QK-norm), in the order q, k, v.
struct QkNormLayout {
  int n = 0;
  QkNormPart part[3];
  // Scalars of the saved inputs and of the saved statistics per token, over all parts.
  size_t raw_width() const {
    size_t w = 0;
    for (int j = 0; j < n; j++) w += size_t(part[j].width);
    return w;
  }
  size_t stats_per_token() const {
    size_t w = 0;
    for (int j = 0; j < n; j++) w += size_t(part[j].pieces());
    return w;
  }
  // Where part j starts in a part-major (rows, raw_width) input buffer and in the statistics.
  size_t raw_offset(int j, size_t rows) const {
    size_t o = 0;
    for (int i = 0; i < j; i++) o += rows * size_t(part[i].width);
    return o;
  }
  size_t stat_offset(int j, size_t rows) const {
    size_t o = 0;
    for (int i = 0; i < j; i++) o += rows * size_t(part[i].pieces());
    return o;
  }
};

inline QkNormLayout qk_norm_layout(const ModelConfig& cfg, int layer) {
  QkNormLayout L;
  const QkNorm how = cfg.qk_norm_of(layer);
  if (how == QkNorm::None) return L;
  const int A = cfg.attn_width(), HS = cfg.head_size(), KVW = cfg.kv_heads() * HS;  // q is A wide
  const bool heads = how == QkNorm::Heads;
  L.part[0] = {0, A, heads ? HS : A};
  L.part[1] = {A, KVW, heads ? HS : KVW};
  L.part[2] = {A + KVW, KVW, heads ? HS : KVW};
  L.n = cfg.v_norm_of(layer) ? 3 : 2;
  return L;
}

// Parameter names of the parts ("h.0.attn" + ".q_norm"), in the order of QkNormLayout::part.
inline constexpr const char* kQkNormSites[] = {".q_norm", ".k_norm", ".v_norm"};

namespace qk_detail {
// out (K, rows, w) = columns [col, col + w) of buf (K rows, stride ld), and back
template <class S>
void gather(S* out, const S* buf, size_t rows, int ld, int col, int w) {
  for (size_t r = 0; r < rows; r++) std::copy(buf + r * ld + col, buf + r * ld + col + w, out + r * w);
}
template <class S>
void scatter(S* buf, const S* in, size_t rows, int ld, int col, int w) {
  for (size_t r = 0; r < rows; r++) std::copy(in + r * w, in + r * w + w, buf + r * ld + col);
}
}  // namespace qk_detail

// qkv (rows, ld) in place: each part normalized. raw (rows, raw_width) part-major, mean and rstd
// (rows, stats_per_token) part-major receive what the backward and the JVP read; scratch grows.
template <class S>
void qk_norm_forward(NormKind kind, double eps, const QkNormLayout& L, const NormParams<S>* p, S* qkv, size_t rows,
                     int ld, S* raw, S* mean, S* rstd, std::vector<S>& scratch) {
  for (int j = 0; j < L.n; j++) {
    const QkNormPart& q = L.part[j];
    S* x = raw + L.raw_offset(j, rows);
    const size_t so = L.stat_offset(j, rows);
    scratch.resize(std::max(scratch.size(), rows * q.width));
    qk_detail::gather(x, qkv, rows, ld, q.col, q.width);
    norm_forward(kind, scratch.data(), mean + so, rstd + so, x, p[j], int(rows * q.pieces()), q.norm_width, eps);
    qk_detail::scatter(qkv, scratch.data(), rows, ld, q.col, q.width);
  }
}

// dqkv (rows, ld) in place: d(loss)/d(normalized part) becomes d(loss)/d(part); dp += the gains'.
template <class S>
void qk_norm_backward(NormKind kind, const QkNormLayout& L, const NormParams<S>* p, const NormParams<S>* dp, S* dqkv,
                      size_t rows, int ld, const S* raw, const S* mean, const S* rstd, std::vector<S>& scratch) {
  for (int j = 0; j < L.n; j++) {
    const QkNormPart& q = L.part[j];
    const size_t n = rows * q.width, so = L.stat_offset(j, rows);
    scratch.resize(std::max(scratch.size(), 2 * n));
    S* dy = scratch.data();
    S* dx = dy + n;
    qk_detail::gather(dy, dqkv, rows, ld, q.col, q.width);
    std::fill(dx, dx + n, S(0));
    norm_backward(kind, dx, dp[j], dy, raw + L.raw_offset(j, rows), p[j], mean + so, rstd + so,
                  int(rows * q.pieces()), q.norm_width);
    qk_detail::scatter(dqkv, dx, rows, ld, q.col, q.width);
  }
}

// tqkv (K, rows, ld) in place: the tangents of the parts become those of the normalized parts, at
// rows [row0, row0 + rows) of a forward over `total` rows (its saved raw, mean and rstd).
template <class S>
void qk_norm_jvp(NormKind kind, const QkNormLayout& L, const NormParams<S>* p, S* tqkv, int K, size_t rows, int ld,
                 const S* raw, const S* mean, const S* rstd, size_t row0, size_t total, std::vector<S>& scratch) {
  for (int j = 0; j < L.n; j++) {
    const QkNormPart& q = L.part[j];
    const size_t n = size_t(K) * rows * q.width, pc = size_t(q.pieces());
    scratch.resize(std::max(scratch.size(), 2 * n));
    S* tin = scratch.data();
    S* tout = tin + n;
    qk_detail::gather(tin, tqkv, size_t(K) * rows, ld, q.col, q.width);
    const size_t so = L.stat_offset(j, total) + row0 * pc;
    norm_jvp(kind, tout, tin, raw + L.raw_offset(j, total) + row0 * q.width, p[j], mean + so, rstd + so, K,
             int(rows * pc), q.norm_width);
    qk_detail::scatter(tqkv, tout, size_t(K) * rows, ld, q.col, q.width);
  }
}

}  // namespace normlab
