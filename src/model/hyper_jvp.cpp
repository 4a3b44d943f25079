// hyper_jvp.cpp: hyper-connections in forward mode (model/hyper.h): the tangent of one sub-layer's read
// (the weights' tangents through hc's tanh, mhc's sigmoids and Sinkhorn-Knopp, mhc_lite's softmax over
// the permutations, attn_res's softmax over depth, then the mixes of the streams) and of its write, for the instruments' Jacobian
// products (Model::jvp_sublayers on the n-stream state). Every map is token-local: a token's tangent
// reads only its own row of the forward's activations, so the same code serves the full sequence and
// one token.
#include <algorithm>
#include <cmath>

#include "model/hyper.h"
#include "ops/common.h"
#include "ops/matmul.h"
#include "ops/rmsnorm.h"

namespace normlab {

void sinkhorn_jvp(const double* X, int n, int iters, int K, const double* tX, double* tM) {
  const int nn = n * n;
  std::vector<double> T(static_cast<size_t>(nn));
  std::copy(tX, tX + size_t(K) * nn, tM);
  // T_0 = softmax_rows(X) + eps:  tT = p (tX - sum_row p tX)
  for (int i = 0; i < n; i++) {
    const double* x = X + i * n;
    const double mx = *std::max_element(x, x + n);
    double z = 0;
    for (int j = 0; j < n; j++) z += (T[size_t(i * n + j)] = std::exp(x[j] - mx));
    for (int j = 0; j < n; j++) T[size_t(i * n + j)] /= z;
    for (int k = 0; k < K; k++) {
      double* t = tM + size_t(k) * nn + i * n;
      double dot = 0;
      for (int j = 0; j < n; j++) dot += T[size_t(i * n + j)] * t[j];
      for (int j = 0; j < n; j++) t[j] = T[size_t(i * n + j)] * (t[j] - dot);
    }
    for (int j = 0; j < n; j++) T[size_t(i * n + j)] += kHyperSinkhornEps;
  }
  // then columns, rows, ... (2 iters - 1 in all): o = a / (s + eps), s the group's sum:
  // to = (ta - o sum_group ta) / (s + eps)
  for (int step = 1; step <= 2 * iters - 1; step++) {
    const bool rows = step % 2 == 0;
    for (int g = 0; g < n; g++) {
      const int first = rows ? g * n : g, stride = rows ? 1 : n;
      double s = 0;
      for (int j = 0; j < n; j++) s += T[size_t(first + j * stride)];
      const double inv = 1.0 / (s + kHyperSinkhornEps);
      for (int j = 0; j < n; j++) T[size_t(first + j * stride)] *= inv;
      for (int k = 0; k < K; k++) {
        double* t = tM + size_t(k) * nn;
        double ts = 0;
        for (int j = 0; j < n; j++) ts += t[first + j * stride];
        for (int j = 0; j < n; j++) t[first + j * stride] = (t[first + j * stride] - T[size_t(first + j * stride)] * ts) * inv;
      }
    }
  }
}

size_t hyper_jvp_scratch(const ModelConfig& cfg, int K, long count) {
  const size_t n = size_t(cfg.hyper_streams);
  return size_t(K) * size_t(count) * (n * size_t(cfg.d_model) + size_t(hyper_pre_width(cfg)) + n);
}

template <class S>
void hyper_read_jvp(const ModelConfig& cfg, const HyperParams<S>& p, const S* H, const S* hrstd, const S* mix,
                    const S* pre, long total, long r0, long count, int K, const S* tH, S* tu, S* tR, S* tmix,
                    S* scratch) {
  const int n = cfg.hyper_streams, C = cfg.d_model, n1 = n + 1, MW = hyper_mix_width(n);
  const int W = 2 * n + hyper_res_width(cfg);
  const long KR = long(K) * count;
  // the forward's weights of row r: [P_s | M[s, .]] at wa(r), b at wb(r) (hyper.cpp's layout for `total` rows)
  auto wa = [&](long r) { return mix + r * n * n1; };
  auto wb = [&](long r) { return mix + total * n * n1 + r * n; };
  std::fill(tmix, tmix + KR * MW, S(0));
  S* tn = scratch;               // the normalized streams' tangent (K, count, n C)
  S* tz = scratch + KR * n * C;  // their projections' tangents
  if (cfg.hyper == HyperMix::Hc) {
    // [P | M] = alpha + s_a tanh(Za), Za = RMSNorm(H_s) W_a^T row by row; b = beta + s_b tanh(Hn w_b)
    ops::rmsnorm_jvp(tn, tH, H + r0 * n * C, p.norm.weight, hrstd + r0 * n, K, int(count * n), C);
    S* tza = tz;                   // (K, count, n, n+1)
    S* tzb = tz + KR * n * n1;     // (K, count, n)
    ops::matmul_forward(tza, tn, p.alpha_fn, static_cast<const S*>(nullptr), int(KR * n), C, n1);
    ops::matmul_forward(tzb, tn, p.beta_fn, static_cast<const S*>(nullptr), int(KR * n), C, 1);
    const S* tanh_a = pre;                   // tanh(Za) (total, n, n+1)
    const S* tanh_b = pre + total * n * n1;  // tanh(Zb) (total, n)
#pragma omp parallel for schedule(static) if(KR * n * C > ops::kParallelMinWork)
    for (long kj = 0; kj < KR; kj++) {
      const long r = r0 + kj % count;
      S* tm = tmix + kj * MW;
      for (int q = 0; q < n * n1; q++) {
        const S a = tanh_a[r * n * n1 + q];
        tm[q] = *p.alpha_scale * (S(1) - a * a) * tza[kj * n * n1 + q];
      }
      for (int s = 0; s < n; s++) {
        const S b = tanh_b[r * n + s];
        tm[n * n1 + s] = *p.beta_scale * (S(1) - b * b) * tzb[kj * n + s];
      }
    }
  } else if (cfg.hyper == HyperMix::AttnRes) {
    // P = softmax_{s < sources}(w . Hn_s), Hn_s = RMSNorm_gamma(H_s):  tP_s = P_s (tl_s - sum_s' P_s' tl_s'),
    // tl_s = w . tHn_s; M and b are constants
    ops::rmsnorm_jvp(tn, tH, H + r0 * n * C, p.norm.weight, hrstd + r0 * n, K, int(count * n), C);
#pragma omp parallel for schedule(static) if(KR * n * C > ops::kParallelMinWork)
    for (long kj = 0; kj < KR; kj++) {
      const long r = r0 + kj % count;
      S* tm = tmix + kj * MW;
      double dot = 0;
      for (int s = 0; s < p.sources; s++) {
        double tl = 0;
        const S* t = tn + (kj * n + s) * C;
        for (int c = 0; c < C; c++) tl += double(p.query[c]) * t[c];
        tm[s * n1] = S(tl);
        dot += double(wa(r)[s * n1]) * tl;
      }
      for (int s = 0; s < p.sources; s++) tm[s * n1] = S(double(wa(r)[s * n1]) * (double(tm[s * n1]) - dot));
    }
  } else if (cfg.hyper == HyperMix::Mhc || cfg.hyper == HyperMix::MhcLite) {
    // h = RMSNorm(vec H) phi^T; P_s = sigmoid(s_p h_s + b) + eps, b_s = 2 sigmoid(s_q h_(n+s) + b), M from h_res
    ops::rmsnorm_jvp(tn, tH, H + r0 * n * C, p.norm.weight, hrstd + r0, K, int(count), n * C);
    ops::matmul_forward(tz, tn, p.phi, static_cast<const S*>(nullptr), int(KR), n * C, W);
    const std::vector<int> perms = cfg.hyper == HyperMix::MhcLite ? hyper_lite_permutations(n) : std::vector<int>();
    const int R = W - 2 * n, nn = n * n;
#pragma omp parallel if(KR * n * C > ops::kParallelMinWork)
    {
      std::vector<double> X(size_t(std::max(R, nn))), tX(size_t(K) * std::max(R, nn)), tM(size_t(K) * nn);
#pragma omp for schedule(static)
      for (long j = 0; j < count; j++) {
        const long r = r0 + j;
        const S* h = pre + r * W;
        for (int q = 0; q < R; q++) X[size_t(q)] = double(p.scale[2]) * h[2 * n + q] + double(p.bias[2 * n + q]);
        for (int k = 0; k < K; k++) {
          const S* th = tz + (long(k) * count + j) * W;
          S* tm = tmix + (long(k) * count + j) * MW;
          for (int s = 0; s < n; s++) {
            const double q = double(wa(r)[s * n1]) - kHyperPreEps, o = double(wb(r)[s]) / 2.0;
            tm[s * n1] = S(q * (1.0 - q) * double(p.scale[0]) * th[s]);
            tm[n * n1 + s] = S(2.0 * o * (1.0 - o) * double(p.scale[1]) * th[n + s]);
          }
          for (int q = 0; q < R; q++) tX[size_t(k) * R + q] = double(p.scale[2]) * th[2 * n + q];
        }
        if (cfg.hyper == HyperMix::Mhc) {
          sinkhorn_jvp(X.data(), n, cfg.sinkhorn_iters, K, tX.data(), tM.data());
        } else {  // M = sum_q softmax(x)_q Perm_q:  tM = sum_q w_q (tx_q - sum w tx) Perm_q
          const double mx = *std::max_element(X.begin(), X.begin() + R);
          std::vector<double> wq(static_cast<size_t>(R));
          double z = 0;
          for (int q = 0; q < R; q++) z += (wq[size_t(q)] = std::exp(X[size_t(q)] - mx));
          for (double& v : wq) v /= z;
          std::fill(tM.begin(), tM.end(), 0.0);
          for (int k = 0; k < K; k++) {
            const double* tx = tX.data() + size_t(k) * R;
            double dot = 0;
            for (int q = 0; q < R; q++) dot += wq[size_t(q)] * tx[q];
            for (int q = 0; q < R; q++)
              for (int a = 0; a < n; a++) tM[size_t(k) * nn + a * n + perms[size_t(q) * n + a]] += wq[size_t(q)] * (tx[q] - dot);
          }
        }
        for (int k = 0; k < K; k++) {
          S* tm = tmix + (long(k) * count + j) * MW;
          for (int s = 0; s < n; s++)
            for (int m = 0; m < n; m++) tm[s * n1 + 1 + m] = S(tM[size_t(k) * nn + s * n + m]);
        }
      }
    }
  }
  // u = sum_s P_s H_s:  tu = sum_s P_s tH_s + tP_s H_s;  R_t = sum_s M[s, t] H_s likewise
#pragma omp parallel for schedule(static) if(KR * n * C > ops::kParallelMinWork)
  for (long kj = 0; kj < KR; kj++) {
    const long r = r0 + kj % count;
    const S* w = wa(r);
    const S* tw = tmix + kj * MW;
    const S* h = H + r * n * C;
    const S* th = tH + kj * n * C;
    for (int t = 0; t <= n; t++) {  // t = 0: u; t >= 1: R_(t-1)
      S* o = t == 0 ? tu + kj * C : tR + (kj * n + t - 1) * C;
      std::fill(o, o + C, S(0));
      for (int s = 0; s < n; s++) {
        const S a = w[s * n1 + t], ta = tw[s * n1 + t];
        const S* hs = h + size_t(s) * C;
        const S* ths = th + size_t(s) * C;
        for (int c = 0; c < C; c++) o[c] += a * ths[c] + ta * hs[c];
      }
    }
  }
}

template <class S>
void hyper_write_jvp(int n, const S* mix, const S* g, long total, long r0, long count, int K, int C, const S* tmix,
                     const S* tg, S* tR) {
  const int n1 = n + 1, MW = hyper_mix_width(n);
  const long KR = long(K) * count;
#pragma omp parallel for schedule(static) if(KR * n * C > ops::kParallelMinWork)
  for (long kj = 0; kj < KR; kj++) {
    const long r = r0 + kj % count;
    const S* b = mix + total * n * n1 + r * n;
    const S* tb = tmix + kj * MW + n * n1;
    const S* gr = g + r * C;
    const S* tgr = tg + kj * C;
    for (int t = 0; t < n; t++) {
      S* o = tR + (kj * n + t) * C;
      for (int c = 0; c < C; c++) o[c] += tb[t] * gr[c] + b[t] * tgr[c];
    }
  }
}

#define NL_HYPER_JVP(S)                                                                                        \
  template void hyper_read_jvp(const ModelConfig&, const HyperParams<S>&, const S*, const S*, const S*,        \
                               const S*, long, long, long, int, const S*, S*, S*, S*, S*);                     \
  template void hyper_write_jvp(int, const S*, const S*, long, long, long, int, int, const S*, const S*, S*);
NL_HYPER_JVP(float)
NL_HYPER_JVP(double)
#undef NL_HYPER_JVP

}  // namespace normlab
