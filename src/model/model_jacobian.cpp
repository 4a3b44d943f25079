// model_jacobian.cpp: one block's full-sequence Jacobian built from d x d blocks (structure-aware),
// instead of pushing T C unit tangents through the sequence (model_jvp.cpp). The result is the same
// matrix as jvp_sublayers_unit over the block's two sub-layers with every unit tangent, to rounding
// (tests/test_block_jacobian.cpp).
//
// Letters: T tokens, C channels, NH heads, HS = C / NH, F the MLP width. Block `layer` maps the
// stream x (T, C) to x'' (T, C) through the attention sub-layer (x -> x') and the MLP sub-layer
// (x' -> x''). Attention is the only thing that mixes tokens, and only through its keys and values:
//
//   mix_i = o_i (per head h: o_i^h = sum_m P_im^h v_m^h),  q, k, v = W_{q,k,v} ln_in(x) (+ bias)
//
// so J_ij = d x''_i / d x_j (C x C) is
//
//   J_ij = Post_i Z_ij + [i == j] Skip_i
//   Post_i = d x''_i / d mix_i   (out projection, ln_branch, branch gain, ln_out, the MLP sub-layer)
//   Skip_i = d x''_i / d x_i through the shortcut (omega, ln_out, the MLP sub-layer)
//   Z_ij^h = P_ij^h [RV_j^h + (v_j^h - o_i^h) s_ij^hT]                  (rows of head h)
//          + [i == j] Qd_i^h RQ_i^h                                     (the query path)
//   s_ij^h = RK_j^hT q_i^h / sqrt(HS),  Qd_i^h = sum_m P_im^h (v_m^h - o_i^h) k_m^hT / sqrt(HS)
//   RQ_j, RK_j, RV_j = W_{q,k,v} Lin_j  (Lin_j: ln_in's Jacobian at token j, or I)
//
// P_ij = 0 for the keys a query never sees (causal: j > i; padding), so a causal block is lower
// triangular over tokens and those blocks are written as exact zeros without any work. Post_i,
// Skip_i and RQ/RK/RV come from the existing token-local JVP kernels with C unit tangents applied
// at every token at once (so every placement, norm kind, gain and the folded MLP are handled by the
// same code as the tangent path); the T (T + 1) / 2 blocks are then one GEMM per row of blocks,
// Post_i [Z_i0 ... Z_ii]: about T^2 C^3 multiply-adds instead of T C tangents of full work.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "model/methods.h"
#include "model/model.h"
#include "ops/common.h"
#include "ops/matmul.h"
#include "ops/residual.h"
#include "util/error.h"

namespace normlab {

using namespace ops;

template <class S>
bool Model<S>::block_jacobian_covers(int first, int last) const {
  // whole blocks of a one-stream gpt or encoder, one sequence; the attention sub-layer present
  if (cfg_.encdec() || B_ != 1 || first < 0 || first % 2 != 0 || last != first + 2 ||
      last > int(slots_.size()))
    return false;
  // (RoPE rotates RQ_t and RK_t by the token's position: not built here yet; the tangents cover it)
  const Slot& attn = slots_[size_t(first)];
  // (nor grouped-query attention's shared keys and values, nor QK-norm's norms of q and k: also left
  // to the tangents)
  return attn.present && attn.kind == Sublayer::Attn && !cfg_.dual_stack(attn.layer) &&
         cfg_.positions != Positions::Rope && cfg_.kv_heads() == cfg_.n_heads && !cfg_.wide_heads() &&
         cfg_.qk_norm_of(attn.layer) == QkNorm::None && cfg_.plain_scores() &&  // (nor a soft cap or another scale,
         !cfg_.on_sphere();  // nor nGPT's update and scales)
}

template <class S>
void Model<S>::block_jacobian(S* J, int layer) const {
  if (!block_jacobian_covers(2 * layer, 2 * layer + 2))
    throw Error(fmt::format("block_jacobian: block {} is not covered (encdec, two streams, a batch of {} rows, "
                            "or no such layer); use jvp_sublayers_unit",
                            layer, B_));
  const int T = T_, C = cfg_.d_model, NH = cfg_.n_heads, HS = C / NH, C3 = 3 * C;
  const size_t n = size_t(T) * C, TC = n;  // J is (n, n)
  const int ai = 2 * layer, mi = 2 * layer + 1;
  const SublayerActs<S>& a = a_[ai];
  const SublayerParams<S>& p = p_[ai];
  const NormSites sites = norm_sites(cfg_.placement_of(layer), Sublayer::Attn);
  const S scale = S(1.0 / std::sqrt(double(HS)));
  const bool causal = cfg_.causal();

  // scratch carved from one buffer kept across calls (fresh hundreds of MB per call would cost a
  // page fault per 4 KiB)
  const size_t KTC = size_t(C) * TC;  // C tangents over the sequence
  const size_t nR = size_t(T) * C3 * C, ns = size_t(T) * NH * T * C;
  if (block_jac_scratch_.size() < 8 * KTC + nR + ns) block_jac_scratch_.resize(8 * KTC + nR + ns);
  S* unit = block_jac_scratch_.data();  // (C, T, C)
  S* th = unit + KTC;                   // (C, T, C)
  S* tx = th + KTC;                     // (2C, T, C); first f's tangents
  S* g = tx + 2 * KTC;                  // (2C, T, C)
  S* post = g + 2 * KTC;                // (2C, T, C)
  S* R = post + 2 * KTC;                // (T, 3C, C)
  S* s = R + nR;                        // (T, NH, T, C)

  // unit (C, T, C): tangent k is e_k at every token (every token-local Jacobian at once)
  std::fill(unit, unit + KTC, S(0));
  for (int k = 0; k < C; k++)
    for (int t = 0; t < T; t++) unit[(size_t(k) * T + t) * C + k] = S(1);

  // R (T, 3C, C): R[t] = W1 Lin_t, the rows RQ_t | RK_t | RV_t; th[k][t][:] = Lin_t e_k
  if (sites.in) {
    norm_jvp(th, unit, a.x_in, p.ln_in, a.in_mean, a.in_rstd, C, T);
    for (int t = 0; t < T; t++)
      gemm<S>(Trans::No, Trans::Yes, C3, C, C, S(1), p.w1, C, th + size_t(t) * C, int(TC), S(0), R + size_t(t) * C3 * C,
              C);
  } else {
    for (int t = 0; t < T; t++) std::copy(p.w1, p.w1 + size_t(C3) * C, R + size_t(t) * C3 * C);
  }

  // post (2C, T, C): tangent k < C is e_k on mix (Post_i[:, k] at token i), tangent C + k is e_k on
  // the shortcut (Skip_i[:, k])
  {
    S* tf = tx;  // f = W_o mix
    matmul_jvp(tf, unit, p.w2, C, T, C, C);
    if (sites.branch)
      norm_jvp(g, tf, a.f, p.ln_branch, a.br_mean, a.br_rstd, C, T);
    else
      std::copy(tf, tf + KTC, g);
    std::fill(g + KTC, g + 2 * KTC, S(0));
    std::fill(tx, tx + KTC, S(0));
    std::copy(unit, unit + KTC, tx + KTC);
    // r = omega * x + lambda * g (into post);  x' = ln_out(r)
    gated_residual_jvp(post, tx, g, p.omega, p.gain, p.gain_c, S(cfg_.residual_alpha(layer)), long(2 * C) * T, C);
    S* xo = post;
    if (sites.out) {
      norm_jvp(tx, post, a.r, p.ln_out, a.out_mean, a.out_rstd, 2 * C, T);
      xo = tx;
    }
    // the MLP sub-layer is token-local: the tangent path applies it (folded into C x C per token)
    if (slots_[size_t(mi)].present)
      jvp_sublayers_impl(post, xo, nullptr, 2 * C, mi, mi + 1);
    else if (xo != post)
      std::copy(xo, xo + 2 * KTC, post);
  }

  // s (T_j, NH, T_i, C): s[j][h][i] = RK_j^hT q_i^h / sqrt(HS)
  for (int j = 0; j < T; j++)
    for (int hh = 0; hh < NH; hh++)
      gemm<S>(Trans::No, Trans::No, T, C, HS, scale, a.hid + hh * HS, C3, R + (size_t(j) * C3 + C + hh * HS) * C, C,
              S(0), s + (size_t(j) * NH + hh) * T * C, C);

  // one row of blocks per token i, the longest rows first
#pragma omp parallel
  {
    std::vector<S> Z(size_t(C) * TC), Qd(size_t(HS) * HS);
#pragma omp for schedule(dynamic, 1)
    for (int ii = 0; ii < T; ii++) {
      const int i = T - 1 - ii;
      const int nb = causal ? i + 1 : T;  // blocks j < nb; the rest are zero
      const int ld = nb * C;
      const S* o_i = a.mix + size_t(i) * C;
      for (int hh = 0; hh < NH; hh++) {
        const S* P_i = a.att + (size_t(hh) * T + i) * T;
        for (int j = 0; j < nb; j++) {
          const S pij = P_i[j];
          const S* v_j = a.hid + size_t(j) * C3 + 2 * C;
          const S* s_ij = s + ((size_t(j) * NH + hh) * T + i) * C;
          for (int r = hh * HS; r < (hh + 1) * HS; r++) {
            S* z = Z.data() + size_t(r) * ld + size_t(j) * C;
            if (pij == S(0)) {
              std::fill(z, z + C, S(0));
              continue;
            }
            const S* rv = R + (size_t(j) * C3 + 2 * C + r) * C;
            const S u = v_j[r] - o_i[r];
            for (int k = 0; k < C; k++) z[k] = pij * (rv[k] + u * s_ij[k]);
          }
        }
        // the query path at j = i: Z_ii^h += Qd_i^h RQ_i^h
        std::fill(Qd.begin(), Qd.end(), S(0));
        for (int m = 0; m < T; m++) {
          const S pim = P_i[m];
          if (pim == S(0)) continue;
          const S* v_m = a.hid + size_t(m) * C3 + 2 * C + hh * HS;
          const S* k_m = a.hid + size_t(m) * C3 + C + hh * HS;
          for (int r = 0; r < HS; r++) {
            const S w = scale * pim * (v_m[r] - o_i[hh * HS + r]);
            for (int e = 0; e < HS; e++) Qd[size_t(r) * HS + e] += w * k_m[e];
          }
        }
        gemm<S>(Trans::No, Trans::No, HS, C, HS, S(1), Qd.data(), HS, R + (size_t(i) * C3 + hh * HS) * C, C,
                S(1), Z.data() + size_t(hh) * HS * ld + size_t(i) * C, ld);
      }
      // J[i, 0..nb) = Post_i Z; Post_i[c][m] = post[m][i][c]
      S* Ji = J + size_t(i) * C * n;
      gemm<S>(Trans::Yes, Trans::No, C, ld, C, S(1), post + size_t(i) * C, int(TC), Z.data(), ld, S(0), Ji,
              int(n));
      for (int c = 0; c < C; c++) {
        std::fill(Ji + size_t(c) * n + ld, Ji + size_t(c + 1) * n, S(0));  // causal: exact zeros
        for (int k = 0; k < C; k++) Ji[size_t(c) * n + size_t(i) * C + k] += post[(size_t(C + k) * T + i) * C + c];
      }
    }
  }
}

template bool Model<float>::block_jacobian_covers(int, int) const;
template bool Model<double>::block_jacobian_covers(int, int) const;
template void Model<float>::block_jacobian(float*, int) const;
template void Model<double>::block_jacobian(double*, int) const;

}  // namespace normlab
