// attention.cpp: the attention-spectrum instrument: the statistics of one row-stochastic matrix and
// the per-head report of every self- and cross-attention sub-layer (bounds derived in attention.h).
#include "analysis/attention.h"

#include "model/methods.h"
#include "model/norm_of.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <type_traits>
#include <vector>

#include "analysis/linalg.h"

namespace normlab::analysis {

AttentionMatrixStats attention_matrix_stats(const double* A, int rows, int cols, double unit, int keys) {
  AttentionMatrixStats s;
  s.rows = rows;
  s.cols = cols;
  s.norm2 = singular_values(std::vector<double>(A, A + size_t(rows) * cols), rows, cols).front();
  std::vector<double> col(size_t(cols), 0.0);
  s.entropy_min = INFINITY;
  s.entropy_max = -INFINITY;
  for (int i = 0; i < rows; i++) {
    double h = 0, sum = 0;
    for (int j = 0; j < cols; j++) {
      const double p = A[size_t(i) * cols + j];
      col[size_t(j)] += p;
      sum += p;
      if (p > 0) h -= p * std::log(p);
    }
    s.row_sum_dev = std::max(s.row_sum_dev, std::abs(sum - 1));
    s.entropy_mean += h / rows;
    s.entropy_min = std::min(s.entropy_min, h);
    s.entropy_max = std::max(s.entropy_max, h);
  }
  s.c_max = *std::max_element(col.begin(), col.end());
  for (double c : col) {
    s.col_sum_norm += c * c;
    s.keys += c > 0;
  }
  if (keys >= 0) s.keys = keys;
  s.col_sum_norm = std::sqrt(s.col_sum_norm);
  s.lower = s.col_sum_norm / std::sqrt(double(rows));
  // rounding: each sum of up to max(rows, cols) terms of size <= 1 (entries rounded to `unit`), and
  // LAPACK's SVD (1e-12 at float64's unit, as before)
  const double slack = std::max(1e-12, 16 * unit) * std::max(rows, cols);
  const double r = rows, k = std::max(1, s.keys);
  s.chain_holds = std::sqrt(r / k) <= s.lower * (1 + slack) + slack && s.lower <= s.norm2 * (1 + slack) + slack &&
                  s.norm2 <= std::sqrt(s.c_max) * (1 + slack) + slack && std::sqrt(s.c_max) <= std::sqrt(r) + slack;
  return s;
}

double softmax_margin_bound(int T, int k, double M) { return std::sqrt(T / (1 + (k - 1) * std::exp(-2 * M))); }

namespace {

// A norm's gain and bias (bias null for RMSNorm); present false: no norm. A parameterless kind (L2)
// has neither: its gain is 1 and its output's length is at most 1, not sqrt(d) (unit_length).
template <typename S>
struct GainBias {
  const S* weight = nullptr;
  const S* bias = nullptr;
  bool present = false;
  bool unit_length = false;
  double gain_max = 1.0;  // max |gain| over the channels (SSNorm: |its scalar|; no gain: 1)
};
template <typename S>
double max_abs(const S* v, int n);
template <typename S>
GainBias<S> gain_bias_of(const ModelConfig& cfg, const NormParams<S>& p) {
  const int C = cfg.d_model;
  return {p.weight, p.bias, true, cfg.norm == NormKind::L2, max_abs(effective_gain(cfg.norm, p, C).data(), C)};
}

// The norm whose output a slot reads: its own ln_in, else the ln_out of the nearest present slot
// before it in the same stack (in an attention-only model the previous sub-layer is the last
// attention); none for the first slot of a stack without ln_in (the embeddings feed it).
template <typename S>
GainBias<S> feeding_norm(const Model<S>& model, int slot) {
  const ModelConfig& cfg = model.config();
  const SublayerParams<S>& p = model.sublayer_params_of(slot);
  const auto sites = [&](int i) { return norm_sites(cfg.placement_of(cfg.slot(i).layer), cfg.slot(i).kind); };
  if (sites(slot).in) return gain_bias_of(cfg, p.ln_in);
  const int first = cfg.encdec() && slot >= cfg.first_decoder_slot() ? cfg.first_decoder_slot() : 0;
  for (int i = slot - 1; i >= first; i--)
    if (cfg.has_sublayer(i))
      return sites(i).out ? gain_bias_of(cfg, model.sublayer_params_of(i).ln_out) : GainBias<S>{};
  return {};
}

// The encdec memory's last norm: enc.ln_f when the encoder has one, else the ln_out of its last
// present sub-layer, else none.
template <typename S>
GainBias<S> memory_norm(const Model<S>& model) {
  const ModelConfig& cfg = model.config();
  if (cfg.has_enc_final_norm())
    return gain_bias_of(cfg, norm_params(model.table(), const_cast<S*>(model.params().data()), "enc.ln_f"));
  for (int i = cfg.first_decoder_slot() - 1; i >= 0; i--)
    if (cfg.has_sublayer(i))
      return norm_sites(cfg.placement_of(cfg.slot(i).layer), cfg.slot(i).kind).out
                 ? gain_bias_of(cfg, model.sublayer_params_of(i).ln_out)
                 : GainBias<S>{};
  return {};
}

// (0 for an absent vector: a model without biases)
template <typename S>
double max_abs(const S* v, int n) {
  double m = 0;
  if (!v) return m;
  for (int i = 0; i < n; i++) m = std::max(m, double(std::abs(v[i])));
  return m;
}

// The heads of one attention slot (self or cross) of a forward on one sequence pair.
template <typename S>
void attention_slot_heads(const Model<S>& model, int slot, AttentionReport& rep) {
  const ModelConfig& cfg = model.config();
  const Slot s = cfg.slot(slot);
  const bool cross = s.kind == Sublayer::Cross, encdec = cfg.encdec();
  const int C = cfg.d_model, NH = cfg.n_heads, HS = cfg.head_size();
  const int A = cross ? C : cfg.attn_width();  // the queries' width (n_heads HS; an encdec's cross-attention: C)
  const int rows = encdec && s.encoder ? model.planned_S() : model.planned_T();
  const int cols = cross ? model.planned_S() : rows;
  const bool causal = cfg.causal() || (encdec && !s.encoder && !cross);
  const SublayerActs<S>& a = model.acts(slot);
  const SublayerParams<S>& p = model.sublayer_params_of(slot);
  const GainBias<S> qnorm = feeding_norm(model, slot);
  const GainBias<S> knorm = cross ? memory_norm(model) : qnorm;
  const S* wk = cross ? p.wkv : p.w1 + size_t(A) * C;  // this stack's key rows start here
  const S* bk = cross ? p.bkv : p.b1 ? p.b1 + A : nullptr;
  // the rounding of the model's numbers: the probabilities' and the bounds' verdicts allow it
  constexpr double unit = std::is_same_v<S, float> ? 0x1p-24 : 0x1p-53;
  constexpr double rel = std::is_same_v<S, float> ? 1e-5 : 1e-12;  // ||A|| <= bound (1 + rel)
  std::vector<double> att(size_t(rows) * cols);
  const int group = cross ? 1 : NH / cfg.kv_heads();  // query head h reads key head h / group (GQA)
  // the score bound M for |scale q.k|; a soft cap bounds every score by c whatever the weights
  // (model.attn_softcap, self-attention only)
  const auto capped = [&](double M) { return !cross && cfg.attn_softcap > 0 ? std::min(M, cfg.attn_softcap) : M; };
  // RoPE keeps |q| and |k| (a rotation), but model.rope_mscale m scales the rotated dimensions of both
  // (LongRoPE's, YaRN's factor), so |q.k| grows by at most max(1, m^2) on the layers it rotates with it
  // (not in nGPT, whose q and k are put on the sphere after RoPE)
  const bool scaled_rope = !cross && cfg.positions == Positions::Rope && cfg.rope_at(s.layer) && !cfg.rope_local(s.layer);
  const double scale = cfg.attention_scale() * (scaled_rope ? std::max(1.0, cfg.rope_mscale * cfg.rope_mscale) : 1.0);
  const double qk_bias_max = std::max(max_abs(p.b1, A), max_abs(bk, A / group));
  double beta_max = 0;
  for (const GainBias<S>& n : {qnorm, knorm})
    if (n.weight && n.bias) beta_max = std::max(beta_max, max_abs(n.bias, C));
  for (int h = 0; h < NH; h++) {
    HeadReport r;
    r.layer = encdec && !s.encoder ? s.layer - cfg.n_layers : s.layer;
    r.head = h;
    r.stack = encdec ? (s.encoder ? "encoder" : "decoder") : "";
    r.kind = cross ? "cross" : "self";
    r.causal = causal;
    std::copy(a.att + size_t(h) * rows * cols, a.att + size_t(h + 1) * rows * cols, att.begin());
    // a float32 model is read on one unpadded sequence (encoder-decoders are read in float64): every
    // column is a key, whether or not its probability underflowed
    r.stats = attention_matrix_stats(att.data(), rows, cols, unit, std::is_same_v<S, float> ? cols : -1);
    // this head's rows of the query and key projections: (HS, C) blocks
    r.sigma_q = singular_values(std::vector<double>(p.w1 + size_t(h) * HS * C, p.w1 + size_t(h + 1) * HS * C), HS, C).front();
    const size_t kh = size_t(h / group);
    r.sigma_k = singular_values(std::vector<double>(wk + kh * HS * C, wk + (kh + 1) * HS * C), HS, C).front();
    if (p.sqk && !cross) {
      // nGPT: q_h = s o q^, k_h = s o k^ with unit q^, k^ (its s_qk, the head's HS columns), so
      // |scale <q_h, k_h>| <= scale max_j s_j^2, whatever the weights and the stream
      const double f = sphere_scale("sqk", C).factor;
      double smax = 0;
      for (int j = h * HS; j < (h + 1) * HS; j++) smax = std::max(smax, std::abs(double(p.sqk[j]) * f));
      r.gamma_max = r.gamma_k_max = smax;
      const double M = capped(smax * smax * cfg.attention_scale());  // (unit q^, k^ after RoPE: its factor too)
      r.seed_bound = softmax_margin_bound(rows, std::max(1, r.stats.keys), M);
      r.bound_premises = !causal;
      const bool holds = r.stats.norm2 <= *r.seed_bound * (1 + rel);
      r.bound_verdict = fmt::format("{}: ||A|| = {:.4g} {} bound {:.4g} (M = {:.3g} from nGPT's s_qk alone, {} keys)",
                                    holds ? "holds" : "VIOLATED", r.stats.norm2, holds ? "<=" : ">", *r.seed_bound, M,
                                    r.stats.keys);
    } else if (const QkNormLayout& L = model.qk_layout(slot); L.n && !cross) {
      // QK-norm: q_h and k_h come out of norms, whatever W_q, W_k and the stream. A norm with a
      // statistic has ||n(z)|| <= sqrt(width of its row) (eps >= 0); a point-wise one |n(z)_i| <= 1, so
      // head h's part of it has ||.|| <= sqrt(HS). With gains: ||q_h|| <= max|gamma_q| B_q, and
      // M = max|gamma_q| B_q max|gamma_k| B_k / sqrt(HS).
      const bool statistic = norm_statistic(cfg.norm) != NormStatistic::None;
      const auto reach = [&](const QkNormPart& part) {
        return std::sqrt(double(statistic ? part.norm_width : HS));
      };
      const NormParams<S>& nq = p.qkv_norm[0];
      const NormParams<S>& nk = p.qkv_norm[1];
      // (a weightless QK-norm, model.qk_norm_affine = false, has gamma = 1)
      const int wq = L.part[0].norm_width, wk = L.part[1].norm_width;  // (SSNorm: its scalar; weightless: 1)
      r.gamma_max = max_abs(effective_gain(cfg.norm, nq, wq).data(), wq);
      r.gamma_k_max = max_abs(effective_gain(cfg.norm, nk, wk).data(), wk);
      const double M = capped(*r.gamma_max * reach(L.part[0]) * *r.gamma_k_max * reach(L.part[1]) * scale);
      r.seed_bound = softmax_margin_bound(rows, std::max(1, r.stats.keys), M);
      const bool holds = r.stats.norm2 <= *r.seed_bound * (1 + rel);
      r.bound_verdict = fmt::format("{}: ||A|| = {:.4g} {} bound {:.4g} (M = {:.3g} from QK-norm's gains alone, {} keys)",
                                    holds ? "holds" : "VIOLATED", r.stats.norm2, holds ? "<=" : ">", *r.seed_bound, M,
                                    r.stats.keys);
      const double qk_beta = std::max(max_abs(nq.bias, L.part[0].norm_width), max_abs(nk.bias, L.part[1].norm_width));
      r.bound_premises = !causal && qk_beta == 0;
      if (qk_beta > 0)
        r.bound_verdict += fmt::format("; the bound assumes QK-norm's beta = 0, here max|beta| = {:.3g}", qk_beta);
    } else if (!qnorm.present || !knorm.present) {
      r.bound_verdict = cross ? fmt::format("n/a: no norm feeds this attention's {}",
                                            !qnorm.present ? "queries" : "keys (the memory)")
                              : "n/a: no norm feeds this attention";
    } else {
      r.gamma_max = qnorm.gain_max;
      const double gk = knorm.gain_max;
      if (cross) r.gamma_k_max = gk;
      // |<q_i, k_j>| / sqrt(HS) <= (Gamma_q sqrt(d)) (Gamma_k sqrt(d)) sigma_Q sigma_K / sqrt(HS) = M;
      // for one head of size d and Gamma_q = Gamma_k this is source 002's M = Gamma^2 sigma_Q sigma_K sqrt(d).
      // An L2 norm's output has length 1: each sqrt(d) becomes 1.
      const double reach2 = (qnorm.unit_length ? 1.0 : std::sqrt(double(C))) * (knorm.unit_length ? 1.0 : std::sqrt(double(C)));
      const double M = capped(*r.gamma_max * gk * r.sigma_q * r.sigma_k * reach2 * scale);
      r.seed_bound = softmax_margin_bound(rows, std::max(1, r.stats.keys), M);
      const bool holds = r.stats.norm2 <= *r.seed_bound * (1 + rel);
      r.bound_verdict = fmt::format("{}: ||A|| = {:.4g} {} bound {:.4g} (M = {:.3g}, {} keys)", holds ? "holds" : "VIOLATED",
                                    r.stats.norm2, holds ? "<=" : ">", *r.seed_bound, M, r.stats.keys);
      if (!holds && causal)
        r.bound_verdict += " (source 002 derives it for rows of n entries; a causal row i has only "
                           "i + 1, so early columns collect more mass)";
      r.bound_premises = !causal && beta_max == 0 && qk_bias_max == 0;
      if (beta_max > 0 || qk_bias_max > 0)
        r.bound_verdict += fmt::format("; the bound assumes beta = 0 and no q/k bias, here max|beta| = "
                                       "{:.3g}, max|q,k bias| = {:.3g}",
                                       beta_max, qk_bias_max);
    }
    rep.heads_by_layer.push_back(r);
  }
}

}  // namespace

template <typename S>
AttentionReport analyze_attention(const Model<S>& model) {
  const ModelConfig& cfg = model.config();
  AttentionReport rep{model.planned_T(), cfg.d_model, cfg.n_heads, cfg.encdec() ? model.planned_S() : 0, {},
                      std::is_same_v<S, float> ? "float32" : "float64"};
  for (int i = 0; i < cfg.n_slots(); i++)
    if (cfg.slot(i).kind != Sublayer::Mlp && cfg.has_sublayer(i)) attention_slot_heads(model, i, rep);
  return rep;
}

template AttentionReport analyze_attention(const Model<double>&);
template AttentionReport analyze_attention(const Model<float>&);

nlohmann::json to_json(const AttentionReport& r) {
  nlohmann::json heads = nlohmann::json::array();
  const auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  for (const auto& h : r.heads_by_layer) {
    nlohmann::json j = {{"layer", h.layer}, {"head", h.head}, {"kind", h.kind}, {"causal", h.causal},
                        {"rows", h.stats.rows}, {"cols", h.stats.cols}, {"keys", h.stats.keys},
                        {"norm2", h.stats.norm2}, {"c_max", h.stats.c_max}, {"sqrt_c_max", std::sqrt(h.stats.c_max)},
                        {"sqrt_n", std::sqrt(double(h.stats.rows))}, {"lower_bound", h.stats.lower},
                        {"sqrt_rows_over_keys", std::sqrt(double(h.stats.rows) / std::max(1, h.stats.keys))},
                        {"row_sum_max_dev", h.stats.row_sum_dev}, {"chain_holds", h.stats.chain_holds},
                        {"entropy_mean", h.stats.entropy_mean}, {"entropy_min", h.stats.entropy_min},
                        {"entropy_max", h.stats.entropy_max}, {"gamma_max", opt(h.gamma_max)},
                        {"sigma_q", h.sigma_q}, {"sigma_k", h.sigma_k}, {"seed_bound", opt(h.seed_bound)},
                        {"bound_verdict", h.bound_verdict}};
    if (!h.stack.empty()) {
      j["stack"] = h.stack;
      j["gamma_k_max"] = opt(h.gamma_k_max);
    }
    heads.push_back(j);
  }
  nlohmann::json out = {{"T", r.T}, {"d", r.d}, {"heads", r.heads}, {"per_head", heads}, {"precision", r.precision}};
  if (r.S > 0) out["S"] = r.S;
  return out;
}

void print_report(const AttentionReport& r) {
  if (r.S > 0)
    fmt::print("Attention spectra, source S = {}, target T = {}, {} heads; chain sqrt(rows/keys) <= ||c||/sqrt(rows) "
               "<= ||A||_2 <= sqrt(c_max) <= sqrt(rows)\n", r.S, r.T, r.heads);
  else
    fmt::print("Attention spectra, T = {} (sqrt(n) = {:.4g}), {} heads\n", r.T, std::sqrt(double(r.T)), r.heads);
  fmt::print("{:<13} {:>4} {:>7} {:>9} {:>9} {:>9} {:>9} {:>6} {:>9} {:>9} {:>9}  {}\n", "layer", "head", "shape",
             "lower", "||A||_2", "sqrt(c)", "c_max", "chain", "H mean", "sigma_Q", "sigma_K", "002 bound");
  for (const auto& h : r.heads_by_layer) {
    const std::string where = h.stack.empty() ? fmt::format("{}", h.layer)
                                              : fmt::format("{} {} {}", h.stack.substr(0, 3), h.layer, h.kind);
    fmt::print("{:<13} {:>4} {:>7} {:>9.4f} {:>9.4f} {:>9.4f} {:>9.4f} {:>6} {:>9.4f} {:>9.4f} {:>9.4f}  {}\n", where,
               h.head, fmt::format("{}x{}", h.stats.rows, h.stats.cols), h.stats.lower, h.stats.norm2,
               std::sqrt(h.stats.c_max), h.stats.c_max, h.stats.chain_holds ? "holds" : "FAILS", h.stats.entropy_mean,
               h.sigma_q, h.sigma_k, h.bound_verdict);
  }
  fmt::print("columns: layer, head; shape: rows x keys of the probability matrix A; lower: ||c||_2/sqrt(rows), the "
             "chain's lower bound (c: the column sums); ||A||_2: spectral norm; sqrt(c): sqrt(c_max); c_max: the largest "
             "column sum; chain: whether lower <= ||A||_2 <= sqrt(c_max) <= sqrt(rows) holds; H mean: mean row entropy "
             "(nats); sigma_Q, sigma_K: spectral norms of the head's query and key projections; 002 bound: source 002's "
             "sqrt(n/(1+(n-1)exp(-2M))) and whether ||A||_2 is within it (docs/THEORY.md, 002 spectral bounds)\n");
}

}  // namespace normlab::analysis
