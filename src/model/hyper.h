// hyper.h: hyper-connections (model.hyper), the residual stream widened to n streams H (n, C) per
// token. Each sub-layer reads a mix of the streams, u = sum_s P_s H_s, runs its stages on u (the input
// norm, the branch, the branch norm) to g, and writes the streams back as
//   H'_t = sum_s M[s, t] H_s + b_t g,
// with read weights P (n), residual mix M (n x n) and write weights b (n) per token. The stack starts
// with every stream equal to the embedding output and ends with their sum (what the final norm reads).
// The four forms differ only in where P, M, b come from (exact forms in docs/METHODS.md):
//   hc_static: learned constants [P | M] = alpha (n, n+1), b = beta (n); at init P = e_(i mod n) for
//              sub-layer i, M = I, b = 1 (Zhu et al. 2409.19606, Algorithm 2; lucidrains/hyper-connections);
//   hc:        the same plus an input-dependent part, [P | M] = alpha + s_a tanh(Hn W_a) row by row
//              (stream s's row from Hn_s = RMSNorm(H_s)), b = beta + s_b tanh(Hn w_b); W_a, w_b start
//              at 0 and s_a, s_b at 0.01, so the model starts as the static one;
//   mhc:       DeepSeek's manifold-constrained form (2512.24880, as MaxText's layers/mhc.py computes it):
//              z = RMSNorm(vec H) over n C, h = phi z (2n + n^2 values), P = sigmoid(s_p h_pre + b_pre)
//              + 1e-6, b = 2 sigmoid(s_q h_post + b_post), M = Sinkhorn(s_r mat(h_res) + B_res): a row
//              softmax, then alternate column and row normalizations (sinkhorn_iters in all), so M is
//              (near) doubly stochastic and the streams' composite gain stays bounded through depth;
//   mhc_lite:  mHC-lite (2601.05732, MaxText's enable_mhc_lite): as mhc but M = sum_p softmax(s_r h_res +
//              B_res)_p Perm_p over the n! permutation matrices (lexicographic order), exactly doubly
//              stochastic; h_res has n! entries.
//   attn_res:  Attention Residuals (Kimi, 2603.15031; the form of Kimi K3's attn_res_aggregate): stream 0
//              holds the embedding output, stream k >= 1 the sum of the outputs g of the k-th block of
//              attn_res_block sub-layers. Sub-layer i reads P = softmax over its sources s < sources(i) of
//              w . RMSNorm_gamma(H_s) (zero elsewhere; w the pseudo-query, 0 at init: a uniform mean), M = I,
//              and writes its g into stream target(i) (b = e_target): a sub-layer that begins a block reads
//              the embedding and the finished blocks and starts a new stream, any other also reads (and
//              adds to) its block's partial sum. The stack starts with stream 0 = the embedding output and
//              the rest 0, and ends with one more read over every stream with its own gamma and w (Kimi K3's
//              output_attn_res_norm and output_attn_res_proj; parameters out.hc.*), not with the sum.
// The model (model/model.cpp) calls the read before a hyper-connected sub-layer's stages and the write
// after them; the stages' shortcut is absent (the write takes its place).
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "model/params.h"

namespace normlab {

class Rng;

// attn_res: the streams sub-layer `slot` reads (0 .. sources - 1) and the one it adds its output to.
inline int attn_res_target(const ModelConfig& cfg, int slot) { return slot / cfg.attn_res_block + 1; }
inline int attn_res_sources(const ModelConfig& cfg, int slot) {
  return attn_res_target(cfg, slot) + (slot % cfg.attn_res_block == 0 ? 0 : 1);
}
// Whether stream t starts as the embedding output: every stream, except attn_res's blocks (they start at 0).
inline bool hyper_stream_starts_at_x0(const ModelConfig& cfg, int t) { return cfg.hyper != HyperMix::AttnRes || t == 0; }
// attn_res: the prefix of the final read's parameters (out.hc.norm.weight, out.hc.query).
inline constexpr const char* kAttnResOutPrefix = "out";

// Why a config cannot carry hyper-connections (appended to `v`); nothing when model.hyper is none.
void hyper_violations(const ModelConfig& cfg, std::vector<std::string>& v);

// The parameters of one sub-layer's hyper-connection, named <slot prefix> + suffix, in this order.
struct HyperParamSpec {
  const char* suffix;
  std::vector<int64_t> shape;
  ParamRole role;
};
std::vector<HyperParamSpec> hyper_param_specs(const ModelConfig& cfg);

// The view of slot `prefix`'s hyper-connection parameters in a flat buffer.
template <class S>
HyperParams<S> hyper_params(const ParamTable& table, S* base, const std::string& prefix);

// Initializes parameter p in place when it is a hyper-connection's (of a sub-layer of `layer`); false
// if it is not one.
template <class S>
bool init_hyper_param(const ModelConfig& cfg, const ParamSpec& p, int layer, S* w, Rng& rng);

// The mixing weights of `rows` tokens: every token's [P | M] (n x (n+1), row s: P_s then M[s, 0..n)),
// then every token's b (n): rows hyper_mix_width(n) values; their pre-activations take as many.
inline int hyper_mix_width(int n) { return n * (n + 1) + n; }
// mhc and mhc_lite: the residual map's pre-activations per token, n^2 (mhc) or n! (mhc_lite, one per
// permutation); and the width of the pre buffers, the larger of the mix's and the projection's (2n + that).
int hyper_res_width(const ModelConfig& cfg);
int hyper_pre_width(const ModelConfig& cfg);

// Whether the read keeps its normalized streams hn for the backward (attn_res; hc and mhc fold their
// norm into the projection and keep only hrstd; hc_static normalizes nothing).
inline bool hyper_keeps_normalized_streams(const ModelConfig& cfg) { return cfg.hyper == HyperMix::AttnRes; }

// The read of one sub-layer over `rows` tokens. H (rows, n, C) the streams entering; writes u (rows, C)
// the branch input, R (rows, n, C) R_t = sum_s M[s, t] H_s (the write adds b_t g to it), and what the
// backward reads: hn (rows, n C) the normalized streams (when hyper_keeps_normalized_streams, else
// unused), hrstd (rows n for hc and attn_res, rows for mhc), mix (rows hyper_mix_width(n)) the weights
// and pre (rows hyper_pre_width(cfg)) their pre-activations.
template <class S>
void hyper_read_forward(const ModelConfig& cfg, const HyperParams<S>& p, const S* H, long rows, S* u, S* R, S* hn,
                        S* hrstd, S* mix, S* pre);
// H' (rows, n, C): H'_t += b_t g; sum (rows, C) = sum_t H'_t.
template <class S>
void hyper_write_forward(int n, const S* mix, const S* g, long rows, int C, S* H, S* sum);
// The write's reverse: dg (rows, C) = sum_t b_t dH'_t (assigned); dmix's b part (rows, n) = <dH'_t, g>.
template <class S>
void hyper_write_backward(int n, const S* mix, const S* g, const S* dH, long rows, int C, S* dg, S* dmix);
// The read's reverse: dH (rows, n, C) = d(loss)/d(the streams entering) (assigned) from du (rows, C) and
// dR (rows, n, C) (= the write's dH'); the parameter gradients dp +=. dmix (its b part filled by
// hyper_write_backward), dpre (2 rows hyper_pre_width) and dhn (rows, n C) are scratch.
template <class S>
void hyper_read_backward(const ModelConfig& cfg, const HyperParams<S>& p, const HyperParams<S>& dp, const S* H,
                         long rows, const S* du, const S* dR, const S* hn, const S* hrstd, const S* mix,
                         const S* pre, S* dH, S* dmix, S* dpre, S* dhn);

// ---- forward mode (model/hyper_jvp.cpp) ----
// The read's tangent for K tangents at rows [r0, r0 + count) of a forward over `total` rows (H, hrstd,
// mix and pre as hyper_read_forward left them, laid out for `total` rows): from tH (K, count, n, C) the
// tangents of the branch input tu (K, count, C), of R, tR (K, count, n, C), and of the weights, tmix
// (K, count, hyper_mix_width(n)) per token [tP_s | tM[s, 0..n)] for each s, then tb. scratch: at least
// hyper_jvp_scratch(cfg, K, count) values.
size_t hyper_jvp_scratch(const ModelConfig& cfg, int K, long count);
template <class S>
void hyper_read_jvp(const ModelConfig& cfg, const HyperParams<S>& p, const S* H, const S* hrstd, const S* mix,
                    const S* pre, long total, long r0, long count, int K, const S* tH, S* tu, S* tR, S* tmix,
                    S* scratch);
// The write's tangent: tR_t (K, count, n, C) += tb_t g + b_t tg, for g (total, C) the branch output of the
// forward and tg (K, count, C) its tangent; tR becomes the tangent of the streams leaving the sub-layer.
template <class S>
void hyper_write_jvp(int n, const S* mix, const S* g, long total, long r0, long count, int K, int C, const S* tmix,
                     const S* tg, S* tR);
// Sinkhorn-Knopp's tangent (public for its test): tM (K, n x n) for K tangents tX (K, n x n) at X.
void sinkhorn_jvp(const double* X, int n, int iters, int K, const double* tX, double* tM);

// The constants and the permutation order the forward and forward mode share.
inline constexpr double kHyperSinkhornEps = 1e-6;  // MaxText's sinkhorn() eps
inline constexpr double kHyperPreEps = 1e-6;       // MaxText's eps on the read weights P
// The most streams a config may have (model.hyper_streams); mhc_lite at most 6, so at most 720
// permutations
inline constexpr int kMaxHyperStreams = 16;
inline constexpr int kMaxLiteStreams = 6;
inline constexpr int kMaxLitePermutations = 720;
// mhc_lite: the n! permutations of 0..n-1 in lexicographic order (itertools.permutations'), flat: entry
// p n + k is the column of row k's 1 in permutation matrix p (MaxText: jnp.eye(n)[perm]).
std::vector<int> hyper_lite_permutations(int n);

// What the residual mixes do to the streams through depth (mHC's "Amax Gain Magnitude"): the map the
// streams take past sub-layer l, the branches left out, is H^res_l = M_l^T (H' = H^res H), and through
// sub-layers 1..l the composite H^res_l ... H^res_1. Of a map A (n x n) per token: forward, the largest
// absolute row sum (max_t sum_s |A[t, s]|: how much one output stream can gain); backward, the largest
// absolute column sum (the same for the gradients); spectral, the largest singular value. Each the
// maximum over the tokens.
struct HyperGain {
  double forward = 0, backward = 0, spectral = 0;
};
struct HyperGains {
  std::vector<HyperGain> own, composite;  // per entry of `mixes`: its own map, and the composite up to it
};
// mixes: the mix buffers of a stack's hyper-connected sub-layers in order (rows tokens each, the
// layout above).
template <class S>
HyperGains hyper_gains(int n, const std::vector<const S*>& mixes, long rows);

// The Sinkhorn-Knopp projection of mhc, public for its test: M (n x n) from X (n x n), MaxText's
// sinkhorn(): T = softmax_rows(X) + 1e-6, T /= (column sums + 1e-6), then iters - 1 times rows then
// columns; and its reverse, dX from dM at the same X.
void sinkhorn_forward(const double* X, int n, int iters, double* M);
void sinkhorn_backward(const double* X, int n, int iters, const double* dM, double* dX);

}  // namespace normlab
