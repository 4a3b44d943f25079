// branch_mlp.cpp: the feed-forward branch, F(h) = act(h W_fc^T + b_fc) W_proj^T + b_proj (a gated
// activation reads two rows of fc per output: model/activation_of.h): forward, backward, forward mode
// over the batch (many tangents: folded into one C x C matrix per token) and at one token, and the
// incremental decoder's step. It is token-local: the token's own row is all any mode reads.
#include <algorithm>

#include "model/activation_of.h"
#include "model/branch.h"
#include "model/decode.h"
#include "model/model.h"
#include "model/methods.h"
#include "ops/matmul.h"
#include "ops/sphere.h"

namespace normlab {

using namespace ops;
using branch::zero;

template <class S>
void Model<S>::mlp_forward(int i) {
  const SublayerActs<S>& a = a_[i];
  const SublayerParams<S>& p = p_[i];
  const int N = rows(i), C = cfg_.d_model, F = cfg_.ff();
  matmul_forward(a.hid, a.h, p.w1, p.b1, N, C, cfg_.fc_width(), prec_, bf16_of(p.w1));
  if (p.suv) {  // nGPT: hid = s_uv (h W_fc^T), column by column
    std::copy(a.hid, a.hid + size_t(N) * cfg_.fc_width(), a.pre);
    scale_columns(a.hid, a.pre, long(N), cfg_.fc_width(), p.suv, sphere_scale("suv", C).factor);
  }
  activation_forward(cfg_.activation, a.mix, a.hid, N, F);
  matmul_forward(a.f, a.mix, p.w2, p.b2, N, F, C, prec_, bf16_of(p.w2));
}

template <class S>
void Model<S>::mlp_backward(int i, const S* df, S* dh) {
  const SublayerActs<S>& a = a_[i];
  const SublayerParams<S>& p = p_[i];
  const SublayerParams<S>& dp = dp_[i];
  const int N = rows(i), C = cfg_.d_model, F = cfg_.ff();
  zero(dmix_, size_t(N) * F);
  matmul_backward(dmix_, dp.w2, dp.b2, df, a.mix, p.w2, N, F, C, prec_, bf16_of(p.w2));
  zero(dhid_, size_t(N) * cfg_.fc_width());
  activation_backward(cfg_.activation, dhid_, a.hid, dmix_, N, F);
  if (p.suv) {  // hid = s_uv pre:  ds_uv += sum dhid pre;  dpre = s_uv dhid
    const double factor = sphere_scale("suv", C).factor;
    scale_columns_param_grad(dp.suv, dhid_, a.pre, long(N), cfg_.fc_width(), factor);
    scale_columns(dhid_, dhid_, long(N), cfg_.fc_width(), p.suv, factor);
  }
  matmul_backward(dh, dp.w1, dp.b1, dhid_, a.h, p.w1, N, C, cfg_.fc_width(), prec_, bf16_of(p.w1));
}

template <class S>
void Model<S>::mlp_jvp(int i, S* tf, const S* th, int K, const JvpScratch& sc) const {
  const SublayerActs<S>& a = a_[i];
  const SublayerParams<S>& p = p_[i];
  const int N = rows(i), C = cfg_.d_model, F = cfg_.ff(), FW = cfg_.fc_width();
  if (K >= C && activation_width(cfg_.activation) == 1 && !p.suv) {
    // Many tangents (a Jacobian build): the MLP is token-local, so fold it into one C x C matrix
    // per token, M_n = W2 diag(act'(hid_n)) W1, and apply that to the token's K tangent rows:
    // 2 C^2 flops per row instead of 4 C F. hid holds act' (one tangent of ones), mix the fold.
    const size_t NF = size_t(N) * F;
    std::fill(sc.mix, sc.mix + NF, S(1));
    activation_jvp(cfg_.activation, sc.hid, a.hid, sc.mix, N, F, 1);
    S* scaled = sc.mix;                 // (F, C): diag(act'(hid_n)) W1
    S* fold = sc.mix + size_t(F) * C;   // (C, C): M_n
    for (int n = 0; n < N; n++) {
      const S* d = sc.hid + size_t(n) * F;
      for (int f = 0; f < F; f++)
        for (int c = 0; c < C; c++) scaled[size_t(f) * C + c] = d[f] * p.w1[size_t(f) * C + c];
      gemm<S>(Trans::No, Trans::No, C, C, F, S(1), p.w2, F, scaled, C, S(0), fold, C);
      // tf[k, n, :] = M_n th[k, n, :] for every tangent k: rows strided by N C
      gemm<S>(Trans::No, Trans::Yes, K, C, C, S(1), th + size_t(n) * C, N * C, fold, C, S(0), tf + size_t(n) * C, N * C);
    }
    return;
  }
  // (a gated activation is not folded: its Jacobian has two coefficient rows per token; nor nGPT's s_uv)
  matmul_jvp(sc.hid, th, p.w1, K, N, C, FW);
  if (p.suv) scale_columns(sc.hid, sc.hid, long(K) * N, FW, p.suv, sphere_scale("suv", C).factor);
  activation_jvp(cfg_.activation, sc.mix, a.hid, sc.hid, N, F, K);
  matmul_jvp(tf, sc.mix, p.w2, K, N, F, C);
}

// at row n of the batch (its saved pre-activation)
template <class S>
void Model<S>::mlp_jvp_token(int i, S* tf, const S* th, int K, size_t n, const JvpScratch& sc) const {
  const SublayerActs<S>& a = a_[i];
  const SublayerParams<S>& p = p_[i];
  const int C = cfg_.d_model, F = cfg_.ff(), FW = cfg_.fc_width();
  matmul_jvp(sc.hid, th, p.w1, K, 1, C, FW);
  if (p.suv) scale_columns(sc.hid, sc.hid, long(K), FW, p.suv, sphere_scale("suv", C).factor);
  activation_jvp(cfg_.activation, sc.mix, a.hid + n * FW, sc.hid, 1, F, K);
  matmul_jvp(tf, sc.mix, p.w2, K, 1, F, C);
}

template <class S>
void IncrementalDecoder<S>::mlp_step(const S* h, const SublayerParams<S>& p) {
  const ModelConfig& cfg = m_.config();
  const int B = B_, C = cfg.d_model, F = cfg.ff();
  matmul_forward(hid_.data(), h, p.w1, p.b1, B, C, cfg.fc_width());
  if (p.suv) scale_columns(hid_.data(), hid_.data(), long(B), cfg.fc_width(), p.suv, sphere_scale("suv", C).factor);
  activation_forward(cfg.activation, mix_.data(), hid_.data(), B, F);
  matmul_forward(f_.data(), mix_.data(), p.w2, p.b2, B, F, C);
}

#define NL_INSTANTIATE(S)                                                                         \
  template void Model<S>::mlp_forward(int);                                                      \
  template void Model<S>::mlp_backward(int, const S*, S*);                                       \
  template void Model<S>::mlp_jvp(int, S*, const S*, int, const JvpScratch&) const;              \
  template void Model<S>::mlp_jvp_token(int, S*, const S*, int, size_t, const JvpScratch&) const;\
  template void IncrementalDecoder<S>::mlp_step(const S*, const SublayerParams<S>&);
NL_INSTANTIATE(float)
NL_INSTANTIATE(double)
#undef NL_INSTANTIATE

}  // namespace normlab
