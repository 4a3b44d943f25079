// sinks.cpp: massive activations and attention sinks over windows of input (sinks.h).
#include "analysis/sinks.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <type_traits>

#include "analysis/linalg.h"
#include "analysis/norm_gain.h"
#include "analysis/stats.h"
#include "model/methods.h"
#include "model/norm_of.h"
#include "ops/common.h"
#include "util/error.h"
#include "util/interrupt.h"
#include "util/progress.h"

namespace normlab::analysis {

namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + ptrdiff_t(mid), v.end());
  const double hi = v[mid];
  if (v.size() % 2) return hi;
  return 0.5 * (hi + *std::max_element(v.begin(), v.begin() + ptrdiff_t(mid)));
}

// One stream point's readings from its entries over every window: vals (windows, T, C), row-major
StreamSinks stream_readings(int layer, const std::vector<double>& vals, int windows, int T, int C) {
  StreamSinks s;
  s.layer = layer;
  std::vector<double> abs_vals(vals.size());
  for (size_t i = 0; i < vals.size(); i++) abs_vals[i] = std::fabs(vals[i]);
  // the three largest |x|
  std::vector<size_t> idx(vals.size());
  for (size_t i = 0; i < idx.size(); i++) idx[i] = i;
  const size_t k = std::min<size_t>(3, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + ptrdiff_t(k), idx.end(),
                    [&](size_t a, size_t b) { return abs_vals[a] > abs_vals[b] || (abs_vals[a] == abs_vals[b] && a < b); });
  for (size_t j = 0; j < k; j++) {
    const size_t i = idx[j];
    s.top.push_back({vals[i], int(i / (size_t(T) * C)), int(i / C % T), int(i % C)});
  }
  s.median_abs = median_of(abs_vals);
  s.ratio = s.top.empty() ? std::nan("") : norm_ratio(std::fabs(s.top[0].value), s.median_abs);
  // kurtosis E[(x - m)^4] / Var^2
  double mean = 0;
  for (double x : vals) mean += x;
  mean /= double(vals.size());
  double m2 = 0, m4 = 0;
  for (double x : vals) {
    const double d = (x - mean) * (x - mean);
    m2 += d;
    m4 += d * d;
  }
  m2 /= double(vals.size());
  m4 /= double(vals.size());
  s.kurtosis = norm_ratio(m4, m2 * m2);
  // massive dimensions: an entry above both thresholds
  std::map<int, MassiveDim> dims;
  for (size_t i = 0; i < vals.size(); i++) {
    if (!(abs_vals[i] > kMassiveMin && abs_vals[i] > kMassiveRatio * s.median_abs)) continue;
    MassiveDim& d = dims[int(i % C)];
    d.dim = int(i % C);
    d.entries++;
    if (i / C % T == 0) d.first_position++;
    d.largest = std::max(d.largest, abs_vals[i]);
  }
  for (const auto& [dim, d] : dims) s.massive.push_back(d);
  std::sort(s.massive.begin(), s.massive.end(), [](const MassiveDim& a, const MassiveDim& b) { return a.largest > b.largest; });
  // token norms
  std::vector<double> norms(size_t(windows) * T);
  for (size_t n = 0; n < norms.size(); n++) norms[n] = row_norm(vals.data() + n * C, C);
  s.token_norm_median = median_of(norms);
  for (int w = 0; w < windows; w++) {
    const double* row = norms.data() + size_t(w) * T;
    const int at = int(std::max_element(row, row + T) - row);
    double total = 0;
    for (int t = 0; t < T; t++) total += row[t] * row[t];
    s.largest_norm_share += norm_ratio(row[at] * row[at], total) / windows;
    if (at == 0) s.first_position_largest += 1.0 / windows;
    if (row[at] > s.token_norm_max) s.token_norm_max = row[at], s.token_norm_max_window = w, s.token_norm_max_token = at;
  }
  return s;
}

// The gradient readings of one stream point from ||d(loss)/d(x_t)|| over every window: norms (windows, T)
StreamGradient gradient_readings(int layer, const std::vector<double>& norms, int windows, int T) {
  StreamGradient g;
  g.layer = layer;
  std::vector<double> by_position(size_t(T), 0.0);
  for (int w = 0; w < windows; w++)
    for (int t = 0; t < T; t++) by_position[size_t(t)] += norms[size_t(w) * T + t] / windows;
  g.first = by_position[0];
  g.median = median_of(norms);
  g.ratio = norm_ratio(g.first, g.median);
  g.top_token = int(std::max_element(by_position.begin(), by_position.end()) - by_position.begin());
  g.top = by_position[size_t(g.top_token)];
  return g;
}

// The Jacobian of the norm `site` (parameters p) that reads stream point `layer`, whose entries over
// every window are vals (windows, T, C): at the token of the largest ||x_t|| and of the median one.
NormGain norm_gain(const ModelConfig& cfg, int layer, const std::string& site, const NormParams<double>& p,
                   const std::vector<double>& vals, int T, int C) {
  const size_t n = vals.size() / size_t(C);
  std::vector<double> norms(n);
  for (size_t k = 0; k < n; k++) norms[k] = row_norm(vals.data() + k * C, C);
  std::vector<size_t> order(n);
  for (size_t k = 0; k < n; k++) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return norms[a] < norms[b] || (norms[a] == norms[b] && a < b); });
  const size_t top = order.back(), mid = order[(n - 1) / 2];
  const auto gain_at = [&](size_t k) {
    return norm_jacobian_gain(cfg.norm, vals.data() + k * C, p, C, cfg.eps);
  };
  NormGain g;
  g.layer = layer;
  g.site = site;
  g.max_window = int(top / size_t(T)), g.max_token = int(top % size_t(T));
  g.median_window = int(mid / size_t(T)), g.median_token = int(mid % size_t(T));
  g.norm_max = norms[top], g.norm_median = norms[mid];
  g.gain_max = gain_at(top), g.gain_median = gain_at(mid);
  g.gain_ratio = norm_ratio(g.gain_max, g.gain_median);
  g.predicted = norm_ratio(g.norm_median, g.norm_max);
  return g;
}

// A norm's parameters widened to double (the closed-form Jacobian's), owning their values.
struct WideNorm {
  std::vector<double> weight, bias, alpha, shift;
  NormParams<double> params;
  WideNorm(const NormParams<float>& p, int C) {
    const auto take = [](const float* from, size_t n, std::vector<double>& to) -> double* {
      if (!from) return nullptr;
      to.assign(from, from + n);
      return to.data();
    };
    params.weight = take(p.weight, size_t(C), weight);
    params.bias = take(p.bias, size_t(C), bias);
    params.alpha = take(p.alpha, 1, alpha);
    params.shift = take(p.shift, 1, shift);
    params.scale = p.scale;
  }
  WideNorm(const NormParams<double>& p, int) : params(p) {}
};

// Sets the model's gradient readers (the stream's, the branch inputs') for one backward pass and
// always clears them.
template <typename S>
class StreamGradientReading {
 public:
  StreamGradientReading(Model<S>& model, typename Model<S>::StreamGradientReader stream,
                        typename Model<S>::StreamGradientReader branch_input)
      : model_(model) {
    model_.read_stream_gradients(std::move(stream));
    model_.read_branch_input_gradients(std::move(branch_input));
  }
  ~StreamGradientReading() {
    model_.read_stream_gradients({});
    model_.read_branch_input_gradients({});
  }
  StreamGradientReading(const StreamGradientReading&) = delete;
  StreamGradientReading& operator=(const StreamGradientReading&) = delete;

 private:
  Model<S>& model_;
};

}  // namespace

template <typename S>
SinksReport analyze_sinks(Model<S>& model, const std::vector<Batch>& batches, bool with_gradients) {
  if (batches.empty()) throw Error("analyze sinks: no input windows");
  refuse_second_stream(model.config(), "analyze sinks");
  const ModelConfig& cfg = model.config();
  if (cfg.encdec()) throw Error("analyze sinks reads a GPT or an encoder; this model is an encoder-decoder");
  const int T = batches[0].T, C = cfg.d_model, L = cfg.n_layers, NH = cfg.n_heads;
  int windows = 0;
  for (const Batch& b : batches) {
    if (b.T != T) throw Error("analyze sinks: every window must have the same length");
    if (!b.mask.empty()) throw Error("analyze sinks reads windows without padding (an attention mask was given)");
    windows += b.B;
  }
  SinksReport rep;
  rep.windows = windows;
  rep.T = T;
  rep.d_model = C;
  rep.n_heads = NH;
  rep.causal = cfg.causal();
  rep.hyper_streams = cfg.n_streams();
  if constexpr (std::is_same_v<S, float>) rep.precision = "float32";
  std::vector<std::vector<double>> vals(size_t(L) + 1);  // every stream point's entries, window by window
  // hyper-connections: what each layer's input norm reads (the mix of the streams), window by window
  std::vector<std::vector<double>> norm_inputs(cfg.hyper_connected() ? size_t(L) : 0);
  std::vector<double> importance(size_t(L) * NH * T, 0.0);  // mean over windows, by layer, head, key
  std::vector<double> first_mean(size_t(L) * NH, 0.0), first_sinks(size_t(L) * NH, 0.0);
  std::vector<double> null_mass(size_t(L) * NH, 0.0);  // 1 - a row's sum: the learned sink's share
  // gradient sinks: the next-token loss of a causal model with a head
  if (!with_gradients) rep.no_gradients = "not asked for";
  else if (!rep.causal) rep.no_gradients = "an encoder has no next-token loss";
  else if (!cfg.has_logits()) rep.no_gradients = "the model has no output head (head = none), so no loss";
  else if (T < 2) rep.no_gradients = "windows of one token have no next token to predict";
  const bool gradients = rep.no_gradients.empty();
  std::vector<std::vector<double>> grad_norms(size_t(L) + 1);  // ||d(loss)/d(x_t)|| per stream point, window by window
  std::vector<std::vector<double>> attn_in_norms(static_cast<size_t>(L));  // ||d(loss)/d(h_t)|| at each attention's normalized input
  // One window at a time (the activations of one sequence, not of a batch: a model's readings need
  // its batch's activations only one row at a time); the gradients of each batch's mean loss, so the
  // row's are scaled by 1 / B (every row has T - 1 labels).
  report_progress("analyze sinks", 0, windows, "");
  int done = 0;
  for (const Batch& batch : batches)
    for (int row = 0; row < batch.B; row++) {
      throw_if_interrupted();
      report_progress("analyze sinks", done++, windows, "windows");
      Batch b;
      b.B = 1, b.T = T;
      b.ids.assign(batch.ids.begin() + long(row) * T, batch.ids.begin() + long(row + 1) * T);
      if (!batch.types.empty()) b.types.assign(batch.types.begin() + long(row) * T, batch.types.begin() + long(row + 1) * T);
      std::vector<int32_t> labels(b.ids.size(), ops::kIgnoreLabel);
      if (gradients)
        for (int t = 0; t + 1 < T; t++) labels[size_t(t)] = b.ids[size_t(t) + 1];
      model.forward(b.ids.data(), labels.data(), b.B, T, b.types_or_null(), nullptr);
      const size_t n = size_t(b.B) * T * C;
      for (int l = 0; l <= L; l++) {
        const S* x = model.stream(l < L ? 2 * l : cfg.n_slots());
        vals[size_t(l)].insert(vals[size_t(l)].end(), x, x + n);
      }
      for (int l = 0; l < int(norm_inputs.size()); l++)
        if (cfg.has_sublayer(2 * l))
          norm_inputs[size_t(l)].insert(norm_inputs[size_t(l)].end(), model.acts(2 * l).x_in, model.acts(2 * l).x_in + n);
      for (int l = 0; l < L; l++) {
        if (!cfg.has_sublayer(2 * l) || !model.acts(2 * l).att) continue;
        const S* att = model.acts(2 * l).att;  // (B, NH, T, T): [query][key]
        for (int r = 0; r < b.B; r++)
          for (int h = 0; h < NH; h++) {
            const S* A = att + (size_t(r) * NH + h) * T * T;
            for (int k = 0; k < T; k++) {
              double sum = 0;
              for (int q = 0; q < T; q++) sum += A[size_t(q) * T + k];
              const double imp = sum / double(rep.causal ? T - k : T);
              importance[(size_t(l) * NH + h) * T + k] += imp / windows;
              if (k == 0) {
                first_mean[size_t(l) * NH + h] += imp / windows;
                if (imp > kSinkEpsilon) first_sinks[size_t(l) * NH + h] += 1;
              }
            }
            if (cfg.attn_sink)
              for (int q = 0; q < T; q++) {
                double row = 0;
                for (int k = 0; k < T; k++) row += A[size_t(q) * T + k];
                null_mass[size_t(l) * NH + h] += (1.0 - row) / (double(T) * windows);
              }
          }
      }
      if (gradients) {
        const int last = cfg.n_slots();
        model.zero_grad();
        const size_t rows = size_t(b.B) * T;
        StreamGradientReading<S> reading(
            model,
            [&](int slot, const S* dx) {
              if (slot % 2 && slot != last) return;  // an MLP's input: not a stream point
              std::vector<double>& out = grad_norms[size_t(slot == last ? L : slot / 2)];
              for (size_t k = 0; k < rows; k++) out.push_back(row_norm(dx + k * C, C));
            },
            [&](int slot, const S* dh) {
              if (cfg.slot(slot).kind != Sublayer::Attn) return;
              std::vector<double>& out = attn_in_norms[size_t(cfg.slot(slot).layer)];
              for (size_t k = 0; k < rows; k++) out.push_back(row_norm(dh + k * C, C));
            });
        model.backward(1.0 / batch.B);
      }
    }
  for (int l = 0; l <= L && gradients; l++)
    rep.gradients.push_back(gradient_readings(l, grad_norms[size_t(l)], windows, T));
  for (int l = 0; l < L && gradients; l++)
    if (!attn_in_norms[size_t(l)].empty())
      rep.attn_input_gradients.push_back(gradient_readings(l, attn_in_norms[size_t(l)], windows, T));
  for (int l = 0; l <= L; l++) {  // the norm that reads each stream point: a pre-norm input norm, the final norm
    if (l == L) {
      if (cfg.has_final_norm())
        rep.norm_gains.push_back(norm_gain(cfg, l, "ln_f", WideNorm(model.final_norm(), C).params, vals[size_t(l)], T, C));
      continue;
    }
    if (!cfg.has_sublayer(2 * l)) continue;
    const Slot slot = cfg.slot(2 * l);
    if (!norm_sites(cfg.placement_of(slot.layer), slot.kind).in) continue;
    rep.norm_gains.push_back(norm_gain(cfg, l, fmt::format("h.{}.{}.ln_in", l, to_string(slot.kind)),
                                       WideNorm(model.sublayer_params_of(2 * l).ln_in, C).params,
                                       cfg.hyper_connected() ? norm_inputs[size_t(l)] : vals[size_t(l)], T, C));
  }
  for (int l = 0; l <= L; l++) {
    rep.streams.push_back(stream_readings(l, vals[size_t(l)], windows, T, C));
    if (rep.first_massive_layer < 0 && !rep.streams.back().massive.empty()) rep.first_massive_layer = l;
  }
  double sinks = 0;
  for (int l = 0; l < L; l++) {
    double layer_sinks = 0;
    for (int h = 0; h < NH; h++) {
      const size_t i = size_t(l) * NH + h;
      const double* imp = importance.data() + i * T;
      const int top = int(std::max_element(imp, imp + T) - imp);
      rep.heads.push_back({l, h, first_mean[i], first_sinks[i] / windows, top, imp[top], null_mass[i]});
      layer_sinks += first_sinks[i];
    }
    rep.layer_sink_rate.push_back(100.0 * layer_sinks / (double(windows) * NH));
    sinks += layer_sinks;
  }
  rep.sink_rate = 100.0 * sinks / (double(windows) * L * NH);
  report_progress("analyze sinks", windows, windows, "");  // (done: a terminal's line cleared)
  return rep;
}

template SinksReport analyze_sinks(Model<float>&, const std::vector<Batch>&, bool);
template SinksReport analyze_sinks(Model<double>&, const std::vector<Batch>&, bool);

nlohmann::json to_json(const SinksReport& r) {
  using json = nlohmann::json;
  json streams = json::array(), heads = json::array();
  for (const StreamSinks& s : r.streams) {
    json top = json::array(), massive = json::array();
    for (const StreamEntry& a : s.top) top.push_back({{"value", a.value}, {"window", a.window}, {"token", a.token}, {"dim", a.dim}});
    for (const MassiveDim& d : s.massive)
      massive.push_back({{"dim", d.dim}, {"entries", d.entries}, {"at_first_position", d.first_position}, {"largest", d.largest}});
    streams.push_back({{"layer", s.layer}, {"top", top}, {"median_abs", s.median_abs}, {"ratio", s.ratio},
                       {"kurtosis", s.kurtosis}, {"massive", massive}, {"token_norm_max", s.token_norm_max},
                       {"token_norm_max_window", s.token_norm_max_window}, {"token_norm_max_token", s.token_norm_max_token},
                       {"token_norm_median", s.token_norm_median}, {"first_position_largest", s.first_position_largest},
                       {"largest_norm_share", s.largest_norm_share}});
  }
  for (const HeadSinks& h : r.heads)
    heads.push_back({{"layer", h.layer}, {"head", h.head}, {"first_importance", h.first_importance},
                     {"sink_share", h.sink_share}, {"top_key", h.top_key}, {"top_importance", h.top_importance},
                     {"null_mass", h.null_mass}});
  json gradients = json::array(), attn_input = json::array(), gains = json::array();
  const auto gradient_row = [](const StreamGradient& g) {
    return json{{"layer", g.layer}, {"first", g.first}, {"median", g.median}, {"ratio", g.ratio},
                {"top_token", g.top_token}, {"top", g.top}};
  };
  for (const StreamGradient& g : r.gradients) gradients.push_back(gradient_row(g));
  for (const StreamGradient& g : r.attn_input_gradients) attn_input.push_back(gradient_row(g));
  for (const NormGain& g : r.norm_gains)
    gains.push_back({{"layer", g.layer}, {"site", g.site}, {"max_window", g.max_window}, {"max_token", g.max_token},
                     {"median_window", g.median_window}, {"median_token", g.median_token}, {"norm_max", g.norm_max},
                     {"norm_median", g.norm_median}, {"gain_max", g.gain_max}, {"gain_median", g.gain_median},
                     {"gain_ratio", g.gain_ratio}, {"predicted", g.predicted}});
  return {{"windows", r.windows}, {"precision", r.precision}, {"T", r.T}, {"d_model", r.d_model}, {"n_heads", r.n_heads}, {"causal", r.causal},
          {"hyper_streams", r.hyper_streams},
          {"gradients", gradients}, {"attn_input_gradients", attn_input}, {"no_gradients", r.no_gradients.empty() ? json() : json(r.no_gradients)},
          {"norm_gains", gains},
          {"epsilon", r.epsilon}, {"massive_min", r.massive_min}, {"massive_ratio", r.massive_ratio},
          {"streams", streams}, {"heads", heads}, {"layer_sink_rate", r.layer_sink_rate}, {"sink_rate", r.sink_rate},
          {"first_massive_layer", r.first_massive_layer >= 0 ? json(r.first_massive_layer) : json()}};
}

namespace {

void print_gradient_sinks(const SinksReport& r) {
  const auto name = [&](int layer) { return layer == int(r.streams.size()) - 1 ? std::string("out") : std::to_string(layer); };
  if (r.gradients.empty()) {
    fmt::print("gradient sinks: not read ({})\n", r.no_gradients);
  } else {
    fmt::print("\nGradient sinks: ||d(loss)/d(x_t)|| for the next-token loss (each batch's mean over its windows' "
               "{} labelled positions each: the last has no next token)\n", r.T - 1);
    fmt::print("{:>5} {:>12} {:>12} {:>10} {:>8} {:>12}\n", "layer", "first", "median", "first/med", "top pos",
               "top");
    for (const StreamGradient& g : r.gradients)
      fmt::print("{:>5} {:>12.4g} {:>12.4g} {:>10} {:>8} {:>12.4g}\n", name(g.layer), g.first, g.median,
                 ratio_text(g.ratio, 4), g.top_token, g.top);
    fmt::print("columns: the gradient reaching the stream entering each layer (out: the last block's output): at "
               "the first position (mean over windows), the median over every position, their ratio, and the "
               "position whose mean over windows is largest\n");
    if (!r.attn_input_gradients.empty()) {
      fmt::print("\nBefore the norm: ||d(loss)/d(h_t)|| at each self-attention's normalized input h = ln_in(x)\n");
      fmt::print("{:>5} {:>12} {:>12} {:>10} {:>8} {:>12} {:>10}\n", "layer", "first", "median", "first/med",
                 "top pos", "top", "sink %");
      for (const StreamGradient& g : r.attn_input_gradients)
        fmt::print("{:>5} {:>12.4g} {:>12.4g} {:>10} {:>8} {:>12.4g} {:>10.1f}\n", g.layer, g.first, g.median,
                   ratio_text(g.ratio, 4), g.top_token, g.top, r.layer_sink_rate[size_t(g.layer)]);
      fmt::print("columns: as above, for the gradient the attention sub-layer sends to its normalized input (the "
                 "pressure on each token before the norm's Jacobian scales it by about 1 / ||x_t||), beside the "
                 "layer's sink rate\n");
    }
  }
  if (r.norm_gains.empty()) {
    fmt::print("norm gains: no norm reads a stream point (no pre-norm input norm, no final norm)\n");
    return;
  }
  fmt::print("\nThe norm's Jacobian at the largest token against the median one (largest singular value)\n");
  fmt::print("{:>5} {:>18} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}\n", "layer", "site", "max ||x_t||",
             "med ||x_t||", "gain there", "gain med", "gain ratio", "med/max");
  for (const NormGain& g : r.norm_gains)
    fmt::print("{:>5} {:>18} {:>11.4g} {:>11.4g} {:>11.4g} {:>11.4g} {:>11} {:>11}\n", name(g.layer), g.site,
               g.norm_max, g.norm_median, g.gain_max, g.gain_median, ratio_text(g.gain_ratio, 4),
               ratio_text(g.predicted, 4));
  fmt::print("columns: the norm that reads the stream entering each layer, at the token of the largest ||x_t|| "
             "and of the median one: the norm of each, the largest singular value of the norm's Jacobian at each, "
             "the ratio of those gains, and med/max, the ratio a gain of 1 / ||x|| would give\n");
}

}  // namespace

void print_report(const SinksReport& r) {
  fmt::print("Massive activations and attention sinks over {} windows of {} tokens\n", r.windows, r.T);
  if (r.hyper_streams > 1)
    fmt::print("hyper-connected, {} streams: a stream point below is their sum (what the final norm reads), an input "
               "norm's gain is read at its own input (the mix of the streams the sub-layer reads), and a gradient at "
               "a stream point is that of a shift added to every stream\n",
               r.hyper_streams);
  fmt::print("{:>5} {:>11} {:>6} {:>5} {:>10} {:>10} {:>9} {:>11} {:>11} {:>7} {:>7}  {}\n", "layer", "max |x|", "dim",
             "pos", "median|x|", "ratio", "kurtosis", "max ||x_t||", "med ||x_t||", "pos0 %", "share", "massive dims");
  for (const StreamSinks& s : r.streams) {
    std::string dims;
    for (size_t i = 0; i < s.massive.size() && i < 4; i++)
      dims += fmt::format("{}{} ({:.0f})", i ? ", " : "", s.massive[i].dim, s.massive[i].largest);
    if (s.massive.size() > 4) dims += fmt::format(" and {} more", s.massive.size() - 4);
    const StreamEntry top = s.top.empty() ? StreamEntry{} : s.top[0];
    fmt::print("{:>5} {:>11.4g} {:>6} {:>5} {:>10.4g} {:>10} {:>9.4g} {:>11.4g} {:>11.4g} {:>7.1f} {:>7.3f}  {}\n",
               s.layer == int(r.streams.size()) - 1 ? std::string("out") : std::to_string(s.layer), std::fabs(top.value),
               top.dim, top.token, s.median_abs, ratio_text(s.ratio, 4), s.kurtosis, s.token_norm_max,
               s.token_norm_median, 100 * s.first_position_largest, s.largest_norm_share, dims.empty() ? "-" : dims);
  }
  fmt::print("columns: the stream entering each layer (out: after the last block); max |x|, its dimension and "
             "position; the median |x| of every entry and the ratio; the kurtosis of the entries; the largest and "
             "median norm of a token's vector; pos0 %: windows whose largest token norm is at position 0; share: "
             "the largest token's share of a window's squared norm (1/T = {:.3f} when every token is alike); massive "
             "dims: dimensions with an entry above {:g} and {:g} x the median (their largest |x|)\n",
             1.0 / r.T, r.massive_min, r.massive_ratio);
  std::vector<std::string> dominated;  // the stream points where one token carries most of the norm
  double most = 0;
  for (const StreamSinks& s : r.streams)
    if (s.largest_norm_share > 0.5) {
      dominated.push_back(s.layer == int(r.streams.size()) - 1 ? "out" : std::to_string(s.layer));
      most = std::max(most, s.largest_norm_share);
    }
  if (!dominated.empty())
    fmt::print("note: one token carries more than half of a window's squared norm entering layers {} (share up to "
               "{:.3f}): a mean over tokens there (the stream norm of analyze dynamics) is mostly that token's\n",
               fmt::join(dominated, " "), most);
  if (r.first_massive_layer >= 0)
    fmt::print("massive activations first appear in the stream entering layer {}\n", r.first_massive_layer);
  else
    fmt::print("no massive activations (no entry above {:g} and {:g} x its layer's median)\n", r.massive_min,
               r.massive_ratio);
  fmt::print("attention sinks (Gu et al.: a head of a window has one when the first token's mean attention from the "
             "queries that see it exceeds {:g}): sink rate {:.1f}% of {} windows x {} layers x {} heads\n",
             r.epsilon, r.sink_rate, r.windows, r.layer_sink_rate.size(), r.n_heads);
  std::string rates;
  for (size_t l = 0; l < r.layer_sink_rate.size(); l++) rates += fmt::format(" {:.0f}", r.layer_sink_rate[l]);
  fmt::print("sink rate by layer (%):{}\n", rates);
  if (!r.heads.empty() && std::any_of(r.heads.begin(), r.heads.end(), [](const HeadSinks& h) { return h.null_mass > 0; })) {
    std::string mass;  // learned sink logits: the mass that went to no token, mean over each layer's heads
    for (size_t i = 0; i < r.heads.size(); i += size_t(r.n_heads)) {
      double sum = 0;
      for (int h = 0; h < r.n_heads; h++) sum += r.heads[i + size_t(h)].null_mass;
      mass += fmt::format(" {:.3f}", sum / r.n_heads);
    }
    fmt::print("learned sink logits: attention mass on no token by layer (mean over queries and heads):{}\n", mass);
  }
  print_gradient_sinks(r);
}

}  // namespace normlab::analysis
