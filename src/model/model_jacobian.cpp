// model_jacobian.cpp: one block's full-sequence Jacobian built from d x d blocks (structure-aware),
// instead of pushing T C unit tangents through the sequence (model_jvp.cpp). The result is the same
// matrix as jvp_sublayers_unit over the block's two sub-layers with every unit tangent, to rounding
// (tests/test_block_jacobian.cpp).
//
// Letters: T tokens, C channels, NH query heads of HS columns (A = NH HS, the mix's width), KVH
// key-value heads (query head h reads key-value head kv(h) = h / (NH / KVH)), QW = A + 2 KVH HS the
// width of [q | k | v]. Block `layer` maps the stream x (T, C) to x'' (T, C) through the attention
// sub-layer (x -> x') and the MLP sub-layer (x' -> x''). Attention is the only thing that mixes
// tokens, and only through its keys and values:
//
//   mix_i = o_i (per head h: o_i^h = sum_m P_im^h v_m^kv(h)),  P_i^h = softmax_m(cap(c q_i^h . k_m^kv(h)))
//
// with q, k, v the token-local maps of x: ln_in, W_{q,k,v} (+ bias), QK-norm (and V-norm), RoPE at the
// token's position; c the score scale and cap the soft cap (identity without one). So J_ij =
// d x''_i / d x_j (C x C) is
//
//   J_ij = Post_i Z_ij + [i == j] Skip_i
//   Post_i = d x''_i / d mix_i   (C x A: out projection, ln_branch, branch gain, ln_out, the MLP sub-layer)
//   Skip_i = d x''_i / d x_i through the shortcut (omega, ln_out, the MLP sub-layer)
//   Z_ij^h = P_ij^h [RV_j^kv(h) + (v_j^kv(h) - o_i^h) cap'_ij s_ij^hT]        (rows of head h)
//          + [i == j] Qd_i^h RQ_i^h                                         (the query path)
//   s_ij^h = c RK_j^kv(h)T q_i^h,  Qd_i^h = c sum_m P_im^h cap'_im (v_m^kv(h) - o_i^h) k_m^kv(h)T
//   RQ_t, RK_t, RV_t = d (q, k, v)_t / d x_t   (QW x C, token-local: the tangent path's own kernels)
//
// P_ij = 0 for the keys a query never sees (causal: j > i; padding), so a causal block is lower
// triangular over tokens and those blocks are written as exact zeros without any work. Post_i,
// Skip_i and the R's come from the existing token-local JVP kernels with unit tangents applied at
// every token at once (so every placement, norm kind, gain, QK-norm, RoPE (its scalings and per-layer
// bases included), nGPT's spheres and update and the folded MLP are handled by the same code as the
// tangent path); the
// T (T + 1) / 2 blocks are then one GEMM per row of blocks, Post_i [Z_i0 ... Z_ii]: about T^2 C^2 A
// multiply-adds instead of T C tangents of full work.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "model/methods.h"
#include "model/model.h"
#include "ops/common.h"
#include "ops/matmul.h"
#include "ops/residual.h"
#include "ops/sphere.h"
#include "util/error.h"

namespace normlab {

using namespace ops;

template <class S>
bool Model<S>::block_jacobian_covers(int first, int last) const {
  // whole blocks of a one-stream gpt or encoder, one sequence; the attention sub-layer present and
  // ungated (its closed form has no output gate: a gated model takes the tangents)
  if (cfg_.encdec() || cfg_.hyper_connected() || B_ != 1 || first < 0 || first % 2 != 0 || last != first + 2 ||
      last > int(slots_.size()) || cfg_.attn_gate_width())
    return false;
  const Slot& attn = slots_[size_t(first)];
  if (!attn.present || attn.kind != Sublayer::Attn || cfg_.dual_stack(attn.layer)) return false;
  // at most one stage before the branch transforms the value (its tangents have one scratch buffer)
  int before = 0;
  for (const StageFns<S>* stage : stages_[size_t(first)]) {
    if (stage->branch) break;
    before += stage->transforms;
  }
  return before <= 1;
}

// (One computation in steps that share the scratch carved at its top: the token-local maps R, the post-
// attention tangents, the score tangents, then the rows of blocks; long for that reason.)
template <class S>
void Model<S>::block_jacobian(S* J, int layer) const {
  refuse_ablated("block_jacobian");
  if (!block_jacobian_covers(2 * layer, 2 * layer + 2))
    throw Error(fmt::format("block_jacobian: block {} is not covered (encdec, two or more streams, a batch of {} rows, "
                            "or no such layer); use jvp_sublayers_unit",
                            layer, B_));
  const int T = T_, C = cfg_.d_model, NH = cfg_.n_heads, HS = cfg_.head_size(), A = cfg_.attn_width();
  const int QW = cfg_.qkv_width(), KVW = cfg_.kv_heads() * HS, group = NH / cfg_.kv_heads();
  const size_t n = size_t(T) * C, TC = n;  // J is (n, n)
  const int ai = 2 * layer, mi = 2 * layer + 1;
  const SublayerActs<S>& a = a_[ai];
  const SublayerParams<S>& p = p_[ai];
  const ops::ScoreMap sm = score_map();
  const S scale = S(sm.scale_for(HS));
  const bool causal = cfg_.causal(), capped = sm.softcap > 0;
  const int AC = A + C;  // Post's tangents: A on the mix, then C on the shortcut

  // scratch carved from one buffer kept across calls (fresh hundreds of MB per call would cost a
  // page fault per 4 KiB)
  // (unitA is unit when the heads are d wide: A == C)
  const size_t KTC = size_t(C) * TC, nunitA = A == C ? 0 : size_t(A) * T * A, nR = size_t(T) * QW * C,
               ns = size_t(T) * NH * T * C;
  const size_t nslope = capped ? size_t(NH) * T * T : 0;
  const size_t need = 2 * KTC + size_t(C) * T * QW + nunitA + size_t(A) * TC + 3 * size_t(AC) * TC + nR + ns + nslope;
  if (block_jac_scratch_.size() < need) block_jac_scratch_.resize(need);
  S* unit = block_jac_scratch_.data();  // (C, T, C)
  S* th = unit + KTC;                   // (C, T, C)
  S* thid = th + KTC;                   // (C, T, QW)
  S* unitA = A == C ? unit : thid + size_t(C) * T * QW;  // (A, T, A)
  S* tf = thid + size_t(C) * T * QW + nunitA;            // (A, T, C)
  S* tx = tf + size_t(A) * TC;          // (A + C, T, C)
  S* g = tx + size_t(AC) * TC;          // (A + C, T, C)
  S* post = g + size_t(AC) * TC;        // (A + C, T, C)
  S* R = post + size_t(AC) * TC;        // (T, QW, C)
  S* s = R + nR;                        // (T, NH, T, C)
  S* slope = s + ns;                    // (NH, T, T): the soft cap's slope cap'_ij at each score

  // unit (C, T, C): tangent k is e_k at every token (every token-local Jacobian at once)
  std::fill(unit, unit + KTC, S(0));
  for (int k = 0; k < C; k++)
    for (int t = 0; t < T; t++) unit[(size_t(k) * T + t) * C + k] = S(1);

  // R (T, QW, C): R[t][r][k] = d qkv_t[r] / d x_t[k], by the tangent path's token-local kernels
  // h's tangents: the stages before the branch (the input norm, if any), on every token at once
  JvpFlow<S> before;
  before.tx = unit;
  before.pool[0] = before.pool[1] = th;  // (block_jacobian_covers: at most one stage transforms the value there)
  before.K = C;
  before.rows = JvpRows{false, 0, T, 0, 0};
  sublayer_jvp(ai, before, StagePart::BeforeBranch);
  const S* h = before.v;
  matmul_jvp(thid, h, p.w1, C, T, C, QW);
  attn_qk_jvp(ai, thid, C, T, T, 0, 0);  // QK-norm's (and V-norm's) tangent, RoPE at each token's position
  value_mix(ai, thid, long(C) * T, nullptr, 0);  // value residual: the first self-attention's values held
  // (per token, the C x QW matrix thid[:, t, :] transposed in 16 x 16 tiles: row by row its reads
  // would stride over T QW entries each)
  constexpr int kTile = 16;
#pragma omp parallel for schedule(static) if (long(T) * C * QW > ops::kParallelMinWork)
  for (int t = 0; t < T; t++)
    for (int k0 = 0; k0 < C; k0 += kTile)
      for (int r0 = 0; r0 < QW; r0 += kTile)
        for (int k = k0; k < std::min(k0 + kTile, C); k++) {
          const S* src = thid + (size_t(k) * T + t) * QW;
          for (int r = r0; r < std::min(r0 + kTile, QW); r++) R[(size_t(t) * QW + r) * C + k] = src[r];
        }

  // post (A + C, T, C): tangent m < A is e_m on mix (Post_i[:, m] at token i), tangent A + k is e_k
  // on the shortcut (Skip_i[:, k])
  {
    if (A != C) {
      std::fill(unitA, unitA + nunitA, S(0));
      for (int m = 0; m < A; m++)
        for (int t = 0; t < T; t++) unitA[(size_t(m) * T + t) * A + m] = S(1);
    }
    matmul_jvp(tf, unitA, p.w2, A, T, A, C);  // f = W_o mix
    // the stages after the branch (the branch norm, the shortcut, the output norm; nGPT's update on the
    // sphere) on A + C tangents: f's tangents then zeros, and zeros then the shortcut's unit tangents
    std::copy(tf, tf + size_t(A) * TC, g);
    std::fill(g + size_t(A) * TC, g + size_t(AC) * TC, S(0));
    std::fill(tx, tx + size_t(A) * TC, S(0));
    std::copy(unit, unit + KTC, tx + size_t(A) * TC);
    JvpFlow<S> after;
    after.tx = tx;
    after.v = g;
    after.pool[0] = post;
    after.pool[1] = g;
    after.K = AC;
    after.rows = JvpRows{false, 0, T, 0, 0};
    sublayer_jvp(ai, after, StagePart::AfterBranch);
    S* xo = after.tx;
    // the MLP sub-layer is token-local: the tangent path applies it (folded into C x C per token)
    if (slots_[size_t(mi)].present) {
      post = after.pool[0];  // (not after.tx: finish() swapped it out of the pool)
      jvp_sublayers_impl(post, xo, nullptr, AC, mi, mi + 1);
    } else {
      post = xo;
    }
  }

  // s (T_j, NH, T_i, C): s[j][h][i] = c RK_j^kv(h)T q_i^h
  for (int j = 0; j < T; j++)
    for (int hh = 0; hh < NH; hh++)
      gemm<S>(Trans::No, Trans::No, T, C, HS, scale, a.hid + hh * HS, QW, R + (size_t(j) * QW + A + (hh / group) * HS) * C,
              C, S(0), s + (size_t(j) * NH + hh) * T * C, C);
  // cap'_ij at the scaled score c q_i . k_j (1 without a soft cap)
  if (capped)
    for (int hh = 0; hh < NH; hh++)
      for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++) {
          const S* q_i = a.hid + size_t(i) * QW + hh * HS;
          const S* k_j = a.hid + size_t(j) * QW + A + (hh / group) * HS;
          double qk = 0;
          for (int e = 0; e < HS; e++) qk += double(q_i[e]) * k_j[e];
          slope[(size_t(hh) * T + i) * T + j] = sm.slope(S(scale * S(qk)));
        }

  // one row of blocks per token i, the longest rows first
#pragma omp parallel if (long(T) * T * NH * C * HS > ops::kParallelMinWork)
  {
    std::vector<S> Z(size_t(A) * TC), Qd(size_t(HS) * HS);
#pragma omp for schedule(dynamic, 1)
    for (int ii = 0; ii < T; ii++) {
      const int i = T - 1 - ii;
      const int nb = causal ? i + 1 : T;  // blocks j < nb; the rest are zero
      const int ld = nb * C;
      const S* o_i = a.mix + size_t(i) * A;
      for (int hh = 0; hh < NH; hh++) {
        const int kv = (hh / group) * HS;  // the key-value head's first column within k and v
        const S* P_i = a.att + (size_t(hh) * T + i) * T;
        const S* cap_i = capped ? slope + (size_t(hh) * T + i) * T : nullptr;
        for (int j = 0; j < nb; j++) {
          const S pij = P_i[j];
          const S cj = cap_i ? cap_i[j] : S(1);
          const S* v_j = a.hid + size_t(j) * QW + A + KVW + kv;
          const S* s_ij = s + ((size_t(j) * NH + hh) * T + i) * C;
          for (int e = 0; e < HS; e++) {
            const int r = hh * HS + e;
            S* z = Z.data() + size_t(r) * ld + size_t(j) * C;
            if (pij == S(0)) {
              std::fill(z, z + C, S(0));
              continue;
            }
            const S* rv = R + (size_t(j) * QW + A + KVW + kv + e) * C;
            const S u = (v_j[e] - o_i[r]) * cj;
            for (int k = 0; k < C; k++) z[k] = pij * (rv[k] + u * s_ij[k]);
          }
        }
        // the query path at j = i: Z_ii^h += Qd_i^h RQ_i^h
        std::fill(Qd.begin(), Qd.end(), S(0));
        for (int m = 0; m < T; m++) {
          const S pim = P_i[m];
          if (pim == S(0)) continue;
          const S* v_m = a.hid + size_t(m) * QW + A + KVW + kv;
          const S* k_m = a.hid + size_t(m) * QW + A + kv;
          const S cm = cap_i ? cap_i[m] : S(1);
          for (int e = 0; e < HS; e++) {
            const S w = scale * pim * cm * (v_m[e] - o_i[hh * HS + e]);
            for (int f = 0; f < HS; f++) Qd[size_t(e) * HS + f] += w * k_m[f];
          }
        }
        gemm<S>(Trans::No, Trans::No, HS, C, HS, S(1), Qd.data(), HS, R + (size_t(i) * QW + hh * HS) * C, C,
                S(1), Z.data() + size_t(hh) * HS * ld + size_t(i) * C, ld);
      }
      // J[i, 0..nb) = Post_i Z; Post_i[c][m] = post[m][i][c]
      S* Ji = J + size_t(i) * C * n;
      gemm<S>(Trans::Yes, Trans::No, C, ld, A, S(1), post + size_t(i) * C, int(TC), Z.data(), ld, S(0), Ji,
              int(n));
      for (int c = 0; c < C; c++) {
        std::fill(Ji + size_t(c) * n + ld, Ji + size_t(c + 1) * n, S(0));  // causal: exact zeros
        for (int k = 0; k < C; k++)
          Ji[size_t(c) * n + size_t(i) * C + k] += post[(size_t(A + k) * T + i) * C + c];
      }
    }
  }
}

template bool Model<float>::block_jacobian_covers(int, int) const;
template bool Model<double>::block_jacobian_covers(int, int) const;
template void Model<float>::block_jacobian(float*, int) const;
template void Model<double>::block_jacobian(double*, int) const;

}  // namespace normlab
