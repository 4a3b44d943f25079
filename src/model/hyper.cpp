// hyper.cpp: hyper-connections (model/hyper.h): their config rules, parameters and initialization, the
// read and write of one sub-layer over a batch of tokens and their reverse, and mhc's Sinkhorn-Knopp
// projection. Sums run in double; one token's mixing weights are computed in double and stored in S.
#include "model/hyper.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "model/methods.h"
#include "ops/common.h"
#include "ops/rmsnorm.h"
#include "util/rng.h"

namespace normlab {

namespace {

constexpr int kMaxHyperStreams = 16;
constexpr int kMaxSinkhornIters = 100;
constexpr double kSinkhornEps = 1e-6;  // MaxText's sinkhorn() eps
constexpr double kPreEps = 1e-6;       // MaxText's eps on the read weights P
constexpr double kDynamicScaleInit = 0.01;  // lucidrains' dynamic_alpha_scale, dynamic_beta_scale; MaxText's scalars

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

void hyper_violations(const ModelConfig& cfg, std::vector<std::string>& v) {
  if (cfg.hyper_streams < 1 || cfg.hyper_streams > kMaxHyperStreams)
    v.push_back(fmt::format("model.hyper_streams = {} must be in [1, {}] (the number of residual streams)",
                            cfg.hyper_streams, kMaxHyperStreams));
  if (cfg.sinkhorn_iters < 1 || cfg.sinkhorn_iters > kMaxSinkhornIters)
    v.push_back(fmt::format("model.sinkhorn_iters = {} must be in [1, {}]", cfg.sinkhorn_iters, kMaxSinkhornIters));
  if (!cfg.hyper_connected()) return;
  const std::string key = fmt::format("model.hyper = \"{}\"", to_string(cfg.hyper));
  if (cfg.encdec()) v.push_back(key + " is for one stack (arch = \"gpt\" or \"encoder\")");
  if (!cfg.residual) v.push_back(key + " replaces the skip path: it needs model.residual = true");
  if (cfg.completep_base_depth > 0) v.push_back(key + " does not combine with model.completep_base_depth");
  for (int l = 0; l < cfg.total_layers(); l++) {
    const Method& m = method_of(cfg.placement_of(l));
    if (!residual_form(m.id) || m.gain != BranchGain::One || m.sphere) {
      v.push_back(fmt::format("{} takes the place of the shortcut x + g of a method without a norm after the sum "
                              "or a scale on either path (pre, peri, llama-family orders, LayerNorm Scaling); "
                              "placement \"{}\" has {}",
                              key, m.name,
                              norm_sites(m.id, Sublayer::Attn).out || norm_sites(m.id, Sublayer::Mlp).out
                                  ? "a norm after the sum"
                                  : "its own shortcut or branch scale"));
      return;
    }
  }
}

std::vector<HyperParamSpec> hyper_param_specs(const ModelConfig& cfg) {
  const int64_t n = cfg.hyper_streams, C = cfg.d_model;
  switch (cfg.hyper) {
    case HyperMix::None:
      return {};
    case HyperMix::HcStatic:
      return {{".hc.alpha", {n, n + 1}, ParamRole::Gate}, {".hc.beta", {n}, ParamRole::Gate}};
    case HyperMix::Hc:
      return {{".hc.norm.weight", {C}, ParamRole::NormGain},   {".hc.alpha", {n, n + 1}, ParamRole::Gate},
              {".hc.beta", {n}, ParamRole::Gate},              {".hc.alpha_fn", {C, n + 1}, ParamRole::Gate},
              {".hc.alpha_scale", {1}, ParamRole::Gate},       {".hc.beta_fn", {C}, ParamRole::Gate},
              {".hc.beta_scale", {1}, ParamRole::Gate}};
    case HyperMix::Mhc:
      return {{".hc.norm.weight", {n * C}, ParamRole::NormGain},
              {".hc.phi", {n * C, 2 * n + n * n}, ParamRole::Gate},
              {".hc.scale", {3}, ParamRole::Gate},
              {".hc.bias", {2 * n + n * n}, ParamRole::Gate}};
  }
  return {};
}

template <class S>
HyperParams<S> hyper_params(const ParamTable& table, S* base, const std::string& prefix) {
  auto ptr = [&](const char* suffix) -> S* {
    const ParamSpec* s = table.find(prefix + suffix);
    return s ? base + s->offset : nullptr;
  };
  HyperParams<S> h;
  h.norm.weight = ptr(".hc.norm.weight");
  h.alpha = ptr(".hc.alpha");
  h.beta = ptr(".hc.beta");
  h.alpha_fn = ptr(".hc.alpha_fn");
  h.alpha_scale = ptr(".hc.alpha_scale");
  h.beta_fn = ptr(".hc.beta_fn");
  h.beta_scale = ptr(".hc.beta_scale");
  h.phi = ptr(".hc.phi");
  h.scale = ptr(".hc.scale");
  h.bias = ptr(".hc.bias");
  return h;
}

template <class S>
bool init_hyper_param(const ModelConfig& cfg, const ParamSpec& p, int layer, S* w, Rng& rng) {
  const size_t at = p.name.find(".hc.");
  if (at == std::string::npos) return false;
  const std::string what = p.name.substr(at + 4);
  const int n = cfg.hyper_streams;
  // the sub-layer's index in its stack: lucidrains' layer_index, which picks the stream it reads first
  const int slot = 2 * layer + (p.name.find(".mlp.hc.") != std::string::npos ? 1 : 0);
  std::fill(w, w + p.numel, S(0));
  if (what == "alpha") {  // [e_(slot mod n) | I]
    w[size_t(slot % n) * (n + 1)] = S(1);
    for (int s = 0; s < n; s++) w[size_t(s) * (n + 1) + 1 + s] = S(1);
  } else if (what == "beta") {
    std::fill(w, w + p.numel, S(1));
  } else if (what == "alpha_scale" || what == "beta_scale" || what == "scale") {
    std::fill(w, w + p.numel, S(kDynamicScaleInit));
  } else if (what == "phi") {  // MaxText: variance scaling 1 over fan-in (n C), normal
    const double std = 1.0 / std::sqrt(double(p.shape[0]));
    for (size_t j = 0; j < p.numel; j++) w[j] = S(std * rng.normal());
  }  // alpha_fn, beta_fn (lucidrains) and the biases (MaxText) start at 0
  return true;
}

// ---- Sinkhorn-Knopp (mhc) ----

namespace {

// The iterates: T_0 = softmax_rows(X) + eps, then T_1 = columns-normalized T_0, then rows, columns, ...
// (2 iters - 1 normalizations after T_0). Step k >= 1 normalizes rows when k is even, columns when odd.
void sinkhorn_iterates(const double* X, int n, int iters, std::vector<double>& T) {
  const int nn = n * n, steps = 2 * iters - 1;
  T.assign(size_t(steps + 1) * nn, 0.0);
  for (int k = 0; k < n; k++) {
    const double* x = X + k * n;
    double mx = x[0];
    for (int m = 1; m < n; m++) mx = std::max(mx, x[m]);
    double z = 0;
    for (int m = 0; m < n; m++) z += std::exp(x[m] - mx);
    for (int m = 0; m < n; m++) T[size_t(k) * n + m] = std::exp(x[m] - mx) / z + kSinkhornEps;
  }
  for (int step = 1; step <= steps; step++) {
    const double* a = T.data() + size_t(step - 1) * nn;
    double* b = T.data() + size_t(step) * nn;
    const bool rows = step % 2 == 0;
    for (int g = 0; g < n; g++) {
      double s = 0;
      for (int j = 0; j < n; j++) s += rows ? a[g * n + j] : a[j * n + g];
      for (int j = 0; j < n; j++) {
        const int at = rows ? g * n + j : j * n + g;
        b[at] = a[at] / (s + kSinkhornEps);
      }
    }
  }
}

}  // namespace

void sinkhorn_forward(const double* X, int n, int iters, double* M) {
  std::vector<double> T;
  sinkhorn_iterates(X, n, iters, T);
  std::copy(T.end() - n * n, T.end(), M);
}

void sinkhorn_backward(const double* X, int n, int iters, const double* dM, double* dX) {
  std::vector<double> T;
  sinkhorn_iterates(X, n, iters, T);
  const int nn = n * n, steps = 2 * iters - 1;
  std::vector<double> d(dM, dM + nn), prev(nn);
  for (int step = steps; step >= 1; step--) {
    // b = a / (s + eps) over each group:  da = (db - sum_group db b) / (s + eps)
    const double* a = T.data() + size_t(step - 1) * nn;
    const double* b = T.data() + size_t(step) * nn;
    const bool rows = step % 2 == 0;
    for (int g = 0; g < n; g++) {
      double s = 0, dot = 0;
      for (int j = 0; j < n; j++) {
        const int at = rows ? g * n + j : j * n + g;
        s += a[at];
        dot += d[at] * b[at];
      }
      for (int j = 0; j < n; j++) {
        const int at = rows ? g * n + j : j * n + g;
        prev[at] = (d[at] - dot) / (s + kSinkhornEps);
      }
    }
    d.swap(prev);
  }
  // T_0 = softmax(X) + eps, row by row:  dX = p (dT - sum p dT)
  for (int k = 0; k < n; k++) {
    double dot = 0;
    for (int m = 0; m < n; m++) dot += (T[size_t(k) * n + m] - kSinkhornEps) * d[size_t(k) * n + m];
    for (int m = 0; m < n; m++) dX[k * n + m] = (T[size_t(k) * n + m] - kSinkhornEps) * (d[size_t(k) * n + m] - dot);
  }
}

// ---- one sub-layer's read and write ----

// Layout of one token's mix (and pre) row: [P_s | M[s, 0..n)] for s = 0..n-1 (n (n+1)), then b (n).
// hc's pre row holds tanh of the same layout (the dynamic parts); mhc's holds h = z phi as MaxText
// orders it: h_pre (n), h_post (n), h_res (n^2, row-major (s, t)).

template <class S>
void hyper_read_forward(const ModelConfig& cfg, const HyperParams<S>& p, const S* H, long rows, S* u, S* R, S* hn,
                        S* hrstd, S* mix, S* pre) {
  const int n = cfg.hyper_streams, C = cfg.d_model, W = hyper_mix_width(n), n1 = n + 1;
  if (cfg.hyper == HyperMix::Hc) ops::rmsnorm_forward(hn, hrstd, H, p.norm.weight, int(rows * n), C, cfg.eps);
  if (cfg.hyper == HyperMix::Mhc) ops::rmsnorm_forward(hn, hrstd, H, p.norm.weight, int(rows), n * C, cfg.eps);
#pragma omp parallel
  {
    std::vector<double> X(size_t(n) * n), M(size_t(n) * n);
#pragma omp for schedule(static)
    for (long r = 0; r < rows; r++) {
      S* w = mix + r * W;
      S* t = pre + r * W;
      const S* z = hn + r * n * C;
      switch (cfg.hyper) {
        case HyperMix::None:
          break;
        case HyperMix::HcStatic:
          std::copy(p.alpha, p.alpha + n * n1, w);
          std::copy(p.beta, p.beta + n, w + n * n1);
          break;
        case HyperMix::Hc:
          for (int s = 0; s < n; s++) {
            const S* zs = z + size_t(s) * C;
            for (int j = 0; j < n1; j++) {
              double a = 0;
              for (int c = 0; c < C; c++) a += double(zs[c]) * p.alpha_fn[size_t(c) * n1 + j];
              t[s * n1 + j] = S(std::tanh(a));
              w[s * n1 + j] = S(double(p.alpha[s * n1 + j]) + double(*p.alpha_scale) * std::tanh(a));
            }
            double b = 0;
            for (int c = 0; c < C; c++) b += double(zs[c]) * p.beta_fn[c];
            t[n * n1 + s] = S(std::tanh(b));
            w[n * n1 + s] = S(double(p.beta[s]) + double(*p.beta_scale) * std::tanh(b));
          }
          break;
        case HyperMix::Mhc: {
          for (int j = 0; j < W; j++) {
            double a = 0;
            for (int c = 0; c < n * C; c++) a += double(z[c]) * p.phi[size_t(c) * W + j];
            t[j] = S(a);
          }
          for (int s = 0; s < n; s++) {
            w[s * n1] = S(sigmoid(double(p.scale[0]) * t[s] + double(p.bias[s])) + kPreEps);
            w[n * n1 + s] = S(2.0 * sigmoid(double(p.scale[1]) * t[n + s] + double(p.bias[n + s])));
          }
          for (int k = 0; k < n * n; k++) X[k] = double(p.scale[2]) * t[2 * n + k] + double(p.bias[2 * n + k]);
          sinkhorn_forward(X.data(), n, cfg.sinkhorn_iters, M.data());
          for (int s = 0; s < n; s++)
            for (int m = 0; m < n; m++) w[s * n1 + 1 + m] = S(M[size_t(s) * n + m]);
          break;
        }
      }
      // u = sum_s P_s H_s;  R_t = sum_s M[s, t] H_s
      const S* h = H + r * n * C;
      for (int c = 0; c < C; c++) {
        double a = 0;
        for (int s = 0; s < n; s++) a += double(w[s * n1]) * h[size_t(s) * C + c];
        u[r * C + c] = S(a);
      }
      for (int tt = 0; tt < n; tt++)
        for (int c = 0; c < C; c++) {
          double a = 0;
          for (int s = 0; s < n; s++) a += double(w[s * n1 + 1 + tt]) * h[size_t(s) * C + c];
          R[(r * n + tt) * C + c] = S(a);
        }
    }
  }
}

template <class S>
void hyper_write_forward(int n, const S* mix, const S* g, long rows, int C, S* H, S* sum) {
  const int W = hyper_mix_width(n), b0 = n * (n + 1);
#pragma omp parallel for schedule(static) if(rows * n * C > ops::kParallelMinWork)
  for (long r = 0; r < rows; r++) {
    const S* b = mix + r * W + b0;
    for (int c = 0; c < C; c++) {
      double total = 0;
      for (int t = 0; t < n; t++) {
        S& h = H[(r * n + t) * C + c];
        h += b[t] * g[r * C + c];
        total += h;
      }
      sum[r * C + c] = S(total);
    }
  }
}

template <class S>
void hyper_write_backward(int n, const S* mix, const S* g, const S* dH, long rows, int C, S* dg, S* dmix) {
  const int W = hyper_mix_width(n), b0 = n * (n + 1);
#pragma omp parallel for schedule(static) if(rows * n * C > ops::kParallelMinWork)
  for (long r = 0; r < rows; r++) {
    const S* b = mix + r * W + b0;
    for (int c = 0; c < C; c++) {
      double a = 0;
      for (int t = 0; t < n; t++) a += double(b[t]) * dH[(r * n + t) * C + c];
      dg[r * C + c] = S(a);
    }
    for (int t = 0; t < n; t++) {
      double a = 0;
      for (int c = 0; c < C; c++) a += double(dH[(r * n + t) * C + c]) * g[r * C + c];
      dmix[r * W + b0 + t] = S(a);
    }
  }
}

template <class S>
void hyper_read_backward(const ModelConfig& cfg, const HyperParams<S>& p, const HyperParams<S>& dp, const S* H,
                         long rows, const S* du, const S* dR, const S* hn, const S* hrstd, const S* mix,
                         const S* pre, S* dH, S* dmix, S* dpre, S* dhn) {
  const int n = cfg.hyper_streams, C = cfg.d_model, W = hyper_mix_width(n), n1 = n + 1, b0 = n * n1;
  const HyperMix form = cfg.hyper;
#pragma omp parallel
  {
    std::vector<double> X(size_t(n) * n), dM(size_t(n) * n), dX(size_t(n) * n);
#pragma omp for schedule(static)
    for (long r = 0; r < rows; r++) {
      const S* h = H + r * n * C;
      const S* w = mix + r * W;
      S* dw = dmix + r * W;
      // dP_s = <du, H_s>, dM[s, t] = <dR_t, H_s>;  dH_s = P_s du + sum_t M[s, t] dR_t
      for (int s = 0; s < n; s++) {
        double a = 0;
        for (int c = 0; c < C; c++) a += double(du[r * C + c]) * h[size_t(s) * C + c];
        dw[s * n1] = S(a);
        for (int t = 0; t < n; t++) {
          double m = 0;
          for (int c = 0; c < C; c++) m += double(dR[(r * n + t) * C + c]) * h[size_t(s) * C + c];
          dw[s * n1 + 1 + t] = S(m);
        }
        for (int c = 0; c < C; c++) {
          double v = double(w[s * n1]) * du[r * C + c];
          for (int t = 0; t < n; t++) v += double(w[s * n1 + 1 + t]) * dR[(r * n + t) * C + c];
          dH[(r * n + s) * C + c] = S(v);
        }
      }
      // the weights' pre-activations: dpre (hc: d(tanh argument); mhc: d h), and dhn = J^T dpre
      const S* t = pre + r * W;
      S* dt = dpre + r * W;
      S* dz = dhn + r * n * C;
      if (form == HyperMix::Hc) {
        for (int k = 0; k < b0; k++) dt[k] = S(double(dw[k]) * *p.alpha_scale * (1.0 - double(t[k]) * t[k]));
        for (int s = 0; s < n; s++) dt[b0 + s] = S(double(dw[b0 + s]) * *p.beta_scale * (1.0 - double(t[b0 + s]) * t[b0 + s]));
        for (int s = 0; s < n; s++)
          for (int c = 0; c < C; c++) {
            double a = double(dt[b0 + s]) * p.beta_fn[c];
            for (int j = 0; j < n1; j++) a += double(dt[s * n1 + j]) * p.alpha_fn[size_t(c) * n1 + j];
            dz[size_t(s) * C + c] = S(a);
          }
      } else if (form == HyperMix::Mhc) {
        // P_s = sigmoid(y) + eps, y = s_p h_s + b_s;  b_s = 2 sigmoid(y'), y' = s_q h_(n+s) + b_(n+s)
        for (int s = 0; s < n; s++) {
          const double q = double(w[s * n1]) - kPreEps, o = double(w[b0 + s]) / 2.0;
          dt[s] = S(double(dw[s * n1]) * q * (1.0 - q));            // d y (dw's slots are re-used below)
          dt[n + s] = S(double(dw[b0 + s]) * 2.0 * o * (1.0 - o));  // d y'
        }
        for (int k = 0; k < n * n; k++) X[k] = double(p.scale[2]) * t[2 * n + k] + double(p.bias[2 * n + k]);
        for (int s = 0; s < n; s++)
          for (int m = 0; m < n; m++) dM[size_t(s) * n + m] = dw[s * n1 + 1 + m];
        sinkhorn_backward(X.data(), n, cfg.sinkhorn_iters, dM.data(), dX.data());
        for (int k = 0; k < n * n; k++) dt[2 * n + k] = S(dX[k]);
        // dt now holds d(the pre-activations y): keep them in dw for the bias and scale gradients,
        // and turn dt into d h = scale * dy
        for (int j = 0; j < W; j++) dw[j] = dt[j];
        for (int j = 0; j < W; j++) dt[j] = S(double(dw[j]) * p.scale[j < n ? 0 : j < 2 * n ? 1 : 2]);
        for (int c = 0; c < n * C; c++) {
          double a = 0;
          for (int j = 0; j < W; j++) a += double(dt[j]) * p.phi[size_t(c) * W + j];
          dz[c] = S(a);
        }
      }
    }
  }
  // the parameter gradients, each a sum over the tokens in token order
  if (form == HyperMix::HcStatic || form == HyperMix::Hc) {
    for (int k = 0; k < b0; k++) {
      double a = 0;
      for (long r = 0; r < rows; r++) a += dmix[r * W + k];
      dp.alpha[k] += S(a);
    }
    for (int s = 0; s < n; s++) {
      double a = 0;
      for (long r = 0; r < rows; r++) a += dmix[r * W + b0 + s];
      dp.beta[s] += S(a);
    }
  }
  if (form == HyperMix::Hc) {
    double sa = 0, sb = 0;
    for (long r = 0; r < rows; r++) {
      for (int k = 0; k < b0; k++) sa += double(dmix[r * W + k]) * pre[r * W + k];
      for (int s = 0; s < n; s++) sb += double(dmix[r * W + b0 + s]) * pre[r * W + b0 + s];
    }
    *dp.alpha_scale += S(sa);
    *dp.beta_scale += S(sb);
#pragma omp parallel for schedule(static) if(rows * n * C > ops::kParallelMinWork)
    for (int c = 0; c < C; c++) {
      std::vector<double> a(n1, 0.0);
      double b = 0;
      for (long r = 0; r < rows; r++)
        for (int s = 0; s < n; s++) {
          const double z = hn[(r * n + s) * C + c];
          for (int j = 0; j < n1; j++) a[j] += z * dpre[r * W + s * n1 + j];
          b += z * dpre[r * W + b0 + s];
        }
      for (int j = 0; j < n1; j++) dp.alpha_fn[size_t(c) * n1 + j] += S(a[j]);
      dp.beta_fn[c] += S(b);
    }
  }
  if (form == HyperMix::Mhc) {
    double sc[3] = {0, 0, 0};
    for (int j = 0; j < W; j++) {
      double a = 0;
      for (long r = 0; r < rows; r++) {
        a += dmix[r * W + j];
        sc[j < n ? 0 : j < 2 * n ? 1 : 2] += double(dmix[r * W + j]) * pre[r * W + j];
      }
      dp.bias[j] += S(a);
    }
    for (int k = 0; k < 3; k++) dp.scale[k] += S(sc[k]);
#pragma omp parallel for schedule(static) if(rows * n * C > ops::kParallelMinWork)
    for (int c = 0; c < n * C; c++) {
      std::vector<double> a(W, 0.0);
      for (long r = 0; r < rows; r++) {
        const double z = hn[r * n * C + c];
        for (int j = 0; j < W; j++) a[j] += z * dpre[r * W + j];
      }
      for (int j = 0; j < W; j++) dp.phi[size_t(c) * W + j] += S(a[j]);
    }
  }
  // through the norm: dH += RMSNorm'^T dhn
  if (form == HyperMix::Hc)
    ops::rmsnorm_backward(dH, dp.norm.weight, dhn, H, p.norm.weight, hrstd, int(rows * n), C);
  if (form == HyperMix::Mhc) ops::rmsnorm_backward(dH, dp.norm.weight, dhn, H, p.norm.weight, hrstd, int(rows), n * C);
}

#define NL_HYPER(S)                                                                                                 \
  template HyperParams<S> hyper_params(const ParamTable&, S*, const std::string&);                                  \
  template bool init_hyper_param(const ModelConfig&, const ParamSpec&, int, S*, Rng&);                             \
  template void hyper_read_forward(const ModelConfig&, const HyperParams<S>&, const S*, long, S*, S*, S*, S*, S*,   \
                                   S*);                                                                             \
  template void hyper_write_forward(int, const S*, const S*, long, int, S*, S*);                                    \
  template void hyper_write_backward(int, const S*, const S*, const S*, long, int, S*, S*);                         \
  template void hyper_read_backward(const ModelConfig&, const HyperParams<S>&, const HyperParams<S>&, const S*,     \
                                    long, const S*, const S*, const S*, const S*, const S*, const S*, S*, S*, S*, \
                                    S*);
NL_HYPER(float)
NL_HYPER(double)
#undef NL_HYPER

}  // namespace normlab
