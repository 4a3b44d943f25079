// dynamics.cpp: the depth-dynamics instrument.
#include "analysis/dynamics.h"
#include "analysis/linalg.h"
#include "analysis/stats.h"

#include <cmath>
#include <fmt/format.h>
#include <memory>
#include <type_traits>

#include "model/hyper.h"
#include "ops/common.h"
#include "util/error.h"
#include "util/rng.h"
#include "util/interrupt.h"
#include "util/progress.h"

namespace normlab::analysis {

namespace {

// res(X) = ||X - 1 mean(X)^T||_F / ||X||_F for one sequence X (T x C)
template <typename S>
double residual_rank(const S* X, int T, int C) {
  std::vector<double> mean(size_t(C), 0.0);
  for (int t = 0; t < T; t++)
    for (int c = 0; c < C; c++) mean[size_t(c)] += X[size_t(t) * C + c] / T;
  double num = 0, den = 0;
  for (int t = 0; t < T; t++)
    for (int c = 0; c < C; c++) {
      const double x = X[size_t(t) * C + c];
      num += (x - mean[size_t(c)]) * (x - mean[size_t(c)]);
      den += x * x;
    }
  return den > 0 ? std::sqrt(num / den) : 0.0;
}

// Hyper-connections: each stream's RMS entering every layer and the composite mix's gains through it,
// from this batch's forward, added into `layers` as a share of the mean over `batches`.
template <typename S>
void read_streams(const Model<S>& model, std::vector<LayerDynamics>& layers, std::vector<double>& final_weights,
                  int batches) {
  const ModelConfig& cfg = model.config();
  const int n = cfg.hyper_streams, C = cfg.d_model;
  const long N = long(model.planned_B()) * model.planned_T();
  std::vector<const S*> mixes;
  std::vector<int> last_slot(layers.size(), -1);  // per layer: its last sub-layer's index in `mixes`
  for (int i = 0; i < cfg.n_slots(); i++)
    if (cfg.has_sublayer(i)) {
      mixes.push_back(model.acts(i).hmix);
      last_slot[size_t(cfg.slot(i).layer)] = int(mixes.size()) - 1;
    }
  const HyperGains gains = hyper_gains(n, mixes, N);
  for (size_t l = 0; l < layers.size(); l++) {
    LayerDynamics& d = layers[l];
    d.streams_rms.resize(size_t(n), 0.0);
    const S* H = model.acts(int(2 * l)).hs_in;
    for (int t = 0; t < n; t++)
      for (long r = 0; r < N; r++)
        d.streams_rms[size_t(t)] += row_norm(H + (r * n + t) * C, C) / std::sqrt(double(C)) / (double(N) * batches);
    const HyperGain& g = gains.composite[size_t(last_slot[l])];
    d.composite_forward += g.forward / batches;
    d.composite_backward += g.backward / batches;
    d.composite_spectral += g.spectral / batches;
    if (cfg.hyper == HyperMix::AttnRes)  // the read weights P_s, column 0 of each token's [P | M]
      for (int kind = 0; kind < 2; kind++) {
        std::vector<double>& w = kind == 0 ? d.depth_weights_attn : d.depth_weights_mlp;
        w.resize(size_t(n), 0.0);
        const S* mix = model.acts(int(2 * l) + kind).hmix;
        for (long r = 0; r < N; r++)
          for (int s = 0; s < n; s++) w[size_t(s)] += mix[(r * n + s) * (n + 1)] / (double(N) * batches);
      }
  }
  if (cfg.hyper == HyperMix::AttnRes) {
    final_weights.resize(size_t(n), 0.0);
    const S* mix = model.attn_res_out_mix();
    for (long r = 0; r < N; r++)
      for (int s = 0; s < n; s++) final_weights[size_t(s)] += mix[(r * n + s) * (n + 1)] / (double(N) * batches);
  }
}

// The per-sequence readings of one pass of `rows` sequences (the model's last forward), added to the
// report as the whole batch's of B sequences would be: per layer the stream's RMS, the branch ratios,
// res(X) and the largest token's share, and after the last layer the stream's RMS and res(X).
template <typename S>
void read_pass(const Model<S>& model, DynamicsReport& rep, int rows, int T, int batches, int B) {
  const ModelConfig& cfg = model.config();
  const int L = cfg.n_layers, C = cfg.d_model, N = rows * T, NB = B * T;
  const double nan = std::nan("");
  for (int l = 0; l < L; l++) {
    LayerDynamics& d = rep.layers[size_t(l)];
    TokenDynamics& tok = rep.tokens[size_t(l)];
    const S* x = model.stream(2 * l);
    for (int n = 0; n < N; n++) {
      const double rms = row_norm(x + size_t(n) * C, C) / std::sqrt(double(C));
      d.stream_rms += rms / (double(NB) * batches);
      tok.stream_rms[size_t(n % T)] += rms / (double(B) * batches);
    }
    for (int s = 0; s < 2; s++) {
      std::vector<double>& per_token = s == 0 ? tok.attn_branch_ratio : tok.mlp_branch_ratio;
      if (!cfg.has_sublayer(2 * l + s)) {
        d.mlp_branch_ratio = nan;  // attention-only model: no MLP branch (JSON null)
        std::fill(per_token.begin(), per_token.end(), nan);
        continue;
      }
      const SublayerActs<S>& a = model.acts(2 * l + s);
      double ratio = 0;
      for (int n = 0; n < N; n++) {
        const double r = row_norm(a.g + size_t(n) * C, C) / std::max(1e-300, row_norm(a.x_in + size_t(n) * C, C));
        ratio += r;
        per_token[size_t(n % T)] += r / (double(B) * batches);
      }
      (s == 0 ? d.attn_branch_ratio : d.mlp_branch_ratio) += ratio / (double(NB) * batches);
    }
    for (int b = 0; b < rows; b++) d.residual_rank += residual_rank(x + size_t(b) * T * C, T, C) / (double(B) * batches);
    for (int b = 0; b < rows; b++) {
      double largest = 0, total = 0;
      for (int t = 0; t < T; t++) {
        const double n2 = std::pow(row_norm(x + (size_t(b) * T + t) * C, C), 2);
        largest = std::max(largest, n2);
        total += n2;
      }
      d.largest_token_share += norm_ratio(largest, total) / (double(B) * batches);
    }
  }
  const S* xl = model.stream(2 * L);
  for (int n = 0; n < N; n++) {
    const double rms = row_norm(xl + size_t(n) * C, C) / std::sqrt(double(C));
    rep.final_stream_rms += rms / (double(NB) * batches);
    rep.tokens.back().stream_rms[size_t(n % T)] += rms / (double(B) * batches);
  }
  for (int b = 0; b < rows; b++) rep.final_residual_rank += residual_rank(xl + size_t(b) * T * C, T, C) / (double(B) * batches);
}

}  // namespace

template <typename S>
DynamicsReport analyze_dynamics(Model<S>& model, const std::vector<int32_t>& bytes, int batches, int B, int T,
                                uint64_t seed, int32_t first) {
  Rng rng(seed, 3);
  std::vector<Batch> sampled;
  for (int k = 0; k < batches; k++) {
    Batch b = sample_batch(bytes, model.config().arch, B, T, rng);
    sampled.push_back(first >= 0 ? with_first_token(std::move(b), first) : std::move(b));
  }
  return analyze_dynamics(model, sampled);
}

template <typename S>
DynamicsReport analyze_dynamics(Model<S>& model, const std::vector<Batch>& given, double pass_bytes) {
  if (given.empty()) throw Error("analyze dynamics: no batches");
  refuse_second_stream(model.config(), "analyze dynamics");  // a two-stream model (ResiDual) is refused by name
  const ModelConfig& cfg = model.config();
  const int batches = int(given.size()), B = given[0].B, T = given[0].T;
  const int L = cfg.n_layers, C = cfg.d_model;
  for (const Batch& b : given)
    if (b.B != B || b.T != T) throw Error("analyze dynamics: every batch must have the same shape");
  DynamicsReport rep;
  rep.layers.resize(size_t(L));
  const double nan = std::nan("");
  rep.tokens.assign(size_t(L) + 1, TokenDynamics{std::vector<double>(size_t(T), 0.0), std::vector<double>(size_t(T), 0.0),
                                                  std::vector<double>(size_t(T), 0.0)});
  std::fill(rep.tokens.back().attn_branch_ratio.begin(), rep.tokens.back().attn_branch_ratio.end(), nan);
  std::fill(rep.tokens.back().mlp_branch_ratio.begin(), rep.tokens.back().mlp_branch_ratio.end(), nan);
  rep.batches = batches;
  if constexpr (std::is_same_v<S, float>) rep.precision = "float32", rep.res_floor = 1e-5;
  rep.B = B;
  rep.T = T;
  // every parameter tensor; the layers' (h.<l>.*) and their MLP output weights W2, by index
  const std::vector<ParamSpec>& specs = model.table().specs;
  std::vector<std::vector<size_t>> layer_specs(static_cast<size_t>(L));
  std::vector<long> ffn_out(static_cast<size_t>(L), -1);
  for (size_t s = 0; s < specs.size(); s++) {
    rep.params.push_back({specs[s].name, 0.0});
    if (specs[s].name.rfind("h.", 0) != 0) continue;
    const int l = std::stoi(specs[s].name.substr(2));
    layer_specs[size_t(l)].push_back(s);
    if (specs[s].name == fmt::format("h.{}.mlp.proj.weight", l)) ffn_out[size_t(l)] = long(s);
  }
  std::vector<double> sq(specs.size());  // squared gradient norm of each tensor, this batch
  const long steps = 4L * batches;  // (progress: the batches with gradients, then up to 3 ablations' forwards)
  report_progress("analyze dynamics", 0, steps, "");
  // the batch in passes of per_pass sequences (all B when they fit pass_bytes: passes.h)
  const int per_pass = rows_per_pass(model, B, T, pass_bytes);
  // runs f(pass, rows) after the forward of each pass of `batch` (the batch itself when it is one pass)
  const auto in_passes = [&](const Batch& batch, const auto& f) {
    for (int first = 0; first < B; first += per_pass) {
      const int rows = std::min(per_pass, B - first);
      const Batch part = rows == B ? Batch{} : batch_rows(batch, first, rows);
      const Batch& pass = rows == B ? batch : part;
      const double loss = model.forward(pass.ids.data(), pass.labels.data(), rows, T, pass.types_or_null(),
                                        pass.mask_or_null());
      f(loss, rows);
    }
  };
  for (int k = 0; k < batches; k++) {
    throw_if_interrupted();
    report_progress("analyze dynamics", k, steps, "steps");
    const Batch& batch = given[size_t(k)];
    int64_t labelled = 0;  // the batch's mean loss is over these; a pass weighs by its share of them
    for (int32_t label : batch.labels) labelled += label != ops::kIgnoreLabel;
    model.zero_grad();
    in_passes(batch, [&](double loss, int rows) {
      const double share = labelled > 0 ? double(model.label_count()) / double(labelled) : 1.0;  // (1 in one pass)
      rep.loss += loss * share / batches;
      model.backward(share);  // a headless model has no loss: its gradients stay 0 and are reported as NaN below
      read_pass(model, rep, rows, T, batches, B);
    });
    for (size_t s = 0; s < specs.size(); s++) {
      const S* g = model.grads().data() + specs[s].offset;
      sq[s] = 0;
      for (size_t i = 0; i < specs[s].numel; i++) sq[s] += double(g[i]) * double(g[i]);
      rep.params[s].grad_norm += std::sqrt(sq[s]) / batches;
    }
    if (cfg.hyper_connected()) read_streams(model, rep.layers, rep.final_depth_weights, batches);  // (one pass)
    for (int l = 0; l < L; l++) {
      LayerDynamics& d = rep.layers[size_t(l)];
      double g2 = 0;
      for (size_t s : layer_specs[size_t(l)]) g2 += sq[s];
      d.grad_norm += std::sqrt(g2) / batches;
      const long w2 = ffn_out[size_t(l)];
      d.ffn_out_grad_norm = w2 >= 0 ? d.ffn_out_grad_norm + std::sqrt(sq[size_t(w2)]) / batches : std::nan("");
    }
  }
  // rank collapse: the model's own readings for its own (skips, MLP) setting, the other ablations
  // run on the model itself (Model::set_ablation: no copy of its parameters), by forward passes
  for (const bool skips : {true, false})
    for (const bool mlp : {true, false}) {
      if (mlp && !cfg.mlp) continue;
      RankCollapseVariant v{skips, mlp, std::vector<double>(size_t(L) + 1, 0.0), 0};
      if (skips == cfg.residual && mlp == cfg.mlp) {
        for (int l = 0; l < L; l++) v.residual_rank[size_t(l)] = rep.layers[size_t(l)].residual_rank;
        v.residual_rank.back() = rep.final_residual_rank;
        v.ratio = norm_ratio(v.residual_rank.back(), v.residual_rank.front());
        rep.rank_collapse.push_back(std::move(v));
        continue;
      }
      ModelConfig variant = cfg;
      variant.residual = skips;
      variant.mlp = mlp;
      // a method without this ablation (nGPT has no skip-free form); hyper-connections have their own
      // (Model::set_ablation: the residual mix dropped, the streams passed through the MLP sub-layers)
      if (!cfg.hyper_connected() && !variant.violations().empty()) continue;
      struct Restore {  // the model leaves ablated by no path, an interrupt's included
        Model<S>& m;
        ~Restore() { m.set_ablation({}); }
      } restore{model};
      model.set_ablation({skips, mlp});
      for (const Batch& batch : given) {
        throw_if_interrupted();
        report_progress("analyze dynamics", long(batches) * long(rep.rank_collapse.size()) + (&batch - given.data()),
                        steps, "steps");
        in_passes(batch, [&](double, int rows) {
          for (int l = 0; l <= L; l++)
            for (int b = 0; b < rows; b++)
              v.residual_rank[size_t(l)] += residual_rank(model.stream(2 * l) + size_t(b) * T * C, T, C) / (double(B) * batches);
        });
      }
      v.ratio = norm_ratio(v.residual_rank.back(), v.residual_rank.front());
      rep.rank_collapse.push_back(std::move(v));
    }
  if (rep.rank_collapse.size() > 1 && per_pass == B) {  // the model's activations are its own last batch's again
    const Batch& last = given.back();
    model.forward(last.ids.data(), last.labels.data(), B, T, last.types_or_null(), last.mask_or_null());
  }
  for (int l = 0; l < L; l++) rep.layers[size_t(l)].placement = to_string(cfg.placement_of(l)), rep.layers[size_t(l)].layer = l;
  if (!cfg.has_logits()) {  // no head, no loss: no gradients to report (JSON null, "-" in the table)
    rep.has_loss = false;
    for (auto& d : rep.layers) d.grad_norm = d.ffn_out_grad_norm = std::nan("");
    for (auto& p : rep.params) p.grad_norm = std::nan("");
  }
  rep.grad_growth = norm_ratio(rep.layers.back().grad_norm, rep.layers.front().grad_norm);
  rep.ffn_out_grad_growth = norm_ratio(rep.layers.back().ffn_out_grad_norm, rep.layers.front().ffn_out_grad_norm);
  report_progress("analyze dynamics", steps, steps, "");  // (done: a terminal's line cleared)
  return rep;
}

template DynamicsReport analyze_dynamics(Model<float>&, const std::vector<int32_t>&, int, int, int, uint64_t, int32_t);
template DynamicsReport analyze_dynamics(Model<double>&, const std::vector<int32_t>&, int, int, int, uint64_t, int32_t);
template DynamicsReport analyze_dynamics(Model<float>&, const std::vector<Batch>&, double);
template DynamicsReport analyze_dynamics(Model<double>&, const std::vector<Batch>&, double);

nlohmann::json to_json(const DynamicsReport& r) {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& d : r.layers)
    layers.push_back({{"layer", d.layer}, {"placement", d.placement}, {"stream_rms", d.stream_rms},
                      {"attn_branch_ratio", d.attn_branch_ratio}, {"mlp_branch_ratio", d.mlp_branch_ratio},
                      {"grad_norm", d.grad_norm}, {"ffn_out_grad_norm", d.ffn_out_grad_norm},
                      {"residual_rank", d.residual_rank}, {"largest_token_share", d.largest_token_share},
                      {"streams_rms", d.streams_rms.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.streams_rms)},
                      {"composite_gain", d.streams_rms.empty() ? nlohmann::json(nullptr)
                                                               : nlohmann::json{{"forward", d.composite_forward},
                                                                                {"backward", d.composite_backward},
                                                                                {"spectral", d.composite_spectral}}},
                      {"depth_weights", d.depth_weights_attn.empty() ? nlohmann::json(nullptr)
                                                                     : nlohmann::json{{"attn", d.depth_weights_attn},
                                                                                      {"mlp", d.depth_weights_mlp}}}});
  nlohmann::json tokens = nlohmann::json::array();  // one record per (stream point, position)
  for (size_t l = 0; l < r.tokens.size(); l++)
    for (size_t t = 0; t < r.tokens[l].stream_rms.size(); t++)
      tokens.push_back({{"layer", l}, {"token", t},  // layer L: after the last
                        {"stream_rms", r.tokens[l].stream_rms[t]},
                        {"attn_branch_ratio", r.tokens[l].attn_branch_ratio[t]},
                        {"mlp_branch_ratio", r.tokens[l].mlp_branch_ratio[t]}});
  nlohmann::json params = nlohmann::json::array();
  for (const auto& p : r.params) params.push_back({{"name", p.name}, {"grad_norm", p.grad_norm}});
  nlohmann::json collapse = nlohmann::json::array();
  for (const auto& v : r.rank_collapse)
    collapse.push_back({{"skips", v.skips}, {"mlp", v.mlp}, {"residual_rank", v.residual_rank}, {"ratio", v.ratio}});
  return {{"batches", r.batches}, {"B", r.B}, {"T", r.T}, {"precision", r.precision}, {"res_floor", r.res_floor},
          {"loss", r.loss}, {"has_loss", r.has_loss}, {"layers", layers},
          {"final_stream_rms", r.final_stream_rms}, {"final_residual_rank", r.final_residual_rank},
          {"final_depth_weights", r.final_depth_weights.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.final_depth_weights)},
          {"grad_norm_last_over_first", r.grad_growth}, {"ffn_out_grad_norm_last_over_first", r.ffn_out_grad_growth},
          {"rank_collapse", collapse}, {"param_grad_norms", params}, {"tokens", tokens}};
}

void print_report(const DynamicsReport& r) {
  fmt::print("Depth dynamics over {} batches of {} x {} (mean loss {:.4f})\n", r.batches, r.B, r.T, r.loss);
  if (!r.has_loss)
    fmt::print("the model has no head (head = none): no loss, so no gradient norms (shown as -)\n");
  fmt::print("{:>5} {:<9} {:>12} {:>12} {:>12} {:>12} {:>10}\n", "layer", "placement", "rms(x_l)",
             "|F|/|x| attn", "|F|/|x| mlp", "grad norm", "res(X_l)");
  for (const auto& d : r.layers)
    fmt::print("{:>5} {:<9} {:>12.4f} {:>12.4f} {:>12} {:>12.4e} {:>10.4f}\n", d.layer, d.placement,
               d.stream_rms, d.attn_branch_ratio,
               std::isnan(d.mlp_branch_ratio) ? std::string("-") : fmt::format("{:.4f}", d.mlp_branch_ratio),
               d.grad_norm, d.residual_rank);
  fmt::print("{:>5} {:<9} {:>12.4f} {:>12} {:>12} {:>12} {:>10.4f}\n", "out", "", r.final_stream_rms, "", "", "",
             r.final_residual_rank);
  fmt::print("columns: layer (out: after the last); placement; rms(x_l): the stream entering the layer, RMS over its d channels (||x_l|| / sqrt(d), the unit of the training logs and the report), mean over tokens; "
             "|F|/|x| attn, mlp: branch-to-stream ratio ||F(x)||/||x|| of each sub-layer; grad norm: ||dL/d theta|| of "
             "the layer's parameters; res(X_l): ||X - 1 mean(X)^T||_F / ||X||_F, distance from rank one\n");
  if (!r.layers.empty() && !r.layers[0].streams_rms.empty()) {
    fmt::print("hyper-connected, {} streams: rms(x_l) is their sum's (x_0: the embedding output every stream starts "
               "as), |F|/|x| the branch output against its input read from the streams\n",
               r.layers[0].streams_rms.size());
    fmt::print("{:>5} {:>30} {:>12} {:>12} {:>12}\n", "layer", "rms of each stream entering", "mix gain fwd", "bwd",
               "spectral");
    for (const auto& d : r.layers) {
      std::string each;
      for (double x : d.streams_rms) each += fmt::format(" {:.4g}", x);
      fmt::print("{:>5} {:>30} {:>12.4g} {:>12.4g} {:>12.4g}\n", d.layer, each, d.composite_forward,
                 d.composite_backward, d.composite_spectral);
    }
    fmt::print("columns: mix gain: of the composite residual mix H^res through the layer's sub-layers (the branches "
               "left out), the largest row sum (fwd), column sum (bwd) and singular value, maximum over the tokens "
               "(mHC's doubly stochastic mixes keep them near 1); in the rank-collapse ablations below, \"skips off\" "
               "drops the residual mix (every stream holds only what the sub-layer writes) and \"MLP off\" passes the "
               "streams through the MLP sub-layers unchanged\n");
  }
  if (!r.layers.empty() && !r.layers[0].depth_weights_attn.empty()) {
    fmt::print("Attention Residuals: the depth weights each sub-layer reads its sources with (stream 0 the "
               "embedding, stream k the k-th block; - where it does not read), mean over tokens\n");
    for (const auto& d : r.layers)
      for (int kind = 0; kind < 2; kind++) {
        std::string each;
        bool reads = true;
        for (size_t s = 0; s < d.depth_weights_attn.size(); s++) {
          const double w = (kind == 0 ? d.depth_weights_attn : d.depth_weights_mlp)[s];
          reads = reads && w > 0;
          each += reads ? fmt::format(" {:.3f}", w) : std::string("     -");
        }
        fmt::print("{:>5} {:<5}{}\n", d.layer, kind == 0 ? "attn" : "mlp", each);
      }
    std::string each;
    for (double w : r.final_depth_weights) each += fmt::format(" {:.3f}", w);
    fmt::print("{:>5} {:<5}{}\n", "out", "read", each);
  }
  std::vector<int> dominated;  // layers whose stream-norm mean is mostly one token's
  double most = 0;
  for (const auto& d : r.layers)
    if (d.largest_token_share > 0.5) dominated.push_back(d.layer), most = std::max(most, d.largest_token_share);
  if (!dominated.empty())
    fmt::print("note: one token carries more than half of a sequence's squared stream norm entering layers {} (share "
               "up to {:.3f}; 1/T = {:.3f} when the tokens are alike): rms(x_l) there is mostly that token's (analyze "
               "sinks names it)\n",
               fmt::join(dominated, " "), most, 1.0 / r.T);
  fmt::print("gradient norm, last layer / first layer: {}; of the MLP output weights W2 (Xiong et al.'s "
             "W^(2,l): grows toward the output for post, flat for pre): {}\n",
             ratio_text(r.grad_growth, 4, kNoGradientRatio), ratio_text(r.ffn_out_grad_growth, 4, kNoGradientRatio));
  fmt::print("rank collapse res(X_l) by layer, the model's own weights with sub-layers removed (Dong et al.):\n");
  for (const auto& v : r.rank_collapse) {
    std::string row;
    for (double x : v.residual_rank) row += fmt::format(" {:.3g}", x);
    fmt::print("  skips {:<3} MLP {:<3} res(X_L)/res(X_0) = {:<10} by layer:{}\n", v.skips ? "on" : "off",
               v.mlp ? "on" : "off", ratio_text(v.ratio, 3, "undefined (res(X_0) = 0: the input rows are equal)"), row);
  }
  bool floored = false;
  for (const auto& v : r.rank_collapse)
    for (double x : v.residual_rank) floored = floored || x < r.res_floor;
  if (floored)
    fmt::print("note: res(X) below {:g} is {} rounding, not the model's: such a collapse is only bounded by it "
               "(--precision float64 resolves it)\n", r.res_floor, r.precision);
}

}  // namespace normlab::analysis
