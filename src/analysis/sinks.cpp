// sinks.cpp: massive activations and attention sinks over windows of input (sinks.h).
#include "analysis/sinks.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>

#include "analysis/linalg.h"
#include "analysis/stats.h"
#include "model/methods.h"
#include "ops/common.h"
#include "util/error.h"
#include "util/interrupt.h"

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

}  // namespace

SinksReport analyze_sinks(Model<double>& model, const std::vector<Batch>& batches) {
  if (batches.empty()) throw Error("analyze sinks: no input windows");
  require_one_stream(model.config(), "analyze sinks");
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
  std::vector<std::vector<double>> vals(size_t(L) + 1);  // every stream point's entries, window by window
  std::vector<double> importance(size_t(L) * NH * T, 0.0);  // mean over windows, by layer, head, key
  std::vector<double> first_mean(size_t(L) * NH, 0.0), first_sinks(size_t(L) * NH, 0.0);
  for (const Batch& b : batches) {
    throw_if_interrupted();
    const std::vector<int32_t> labels(b.ids.size(), ops::kIgnoreLabel);
    model.forward(b.ids.data(), labels.data(), b.B, T, b.types_or_null(), nullptr);
    const size_t n = size_t(b.B) * T * C;
    for (int l = 0; l <= L; l++) {
      const double* x = model.stream(l < L ? 2 * l : cfg.n_slots());
      vals[size_t(l)].insert(vals[size_t(l)].end(), x, x + n);
    }
    for (int l = 0; l < L; l++) {
      if (!cfg.has_sublayer(2 * l) || !model.acts(2 * l).att) continue;
      const double* att = model.acts(2 * l).att;  // (B, NH, T, T): [query][key]
      for (int r = 0; r < b.B; r++)
        for (int h = 0; h < NH; h++) {
          const double* A = att + (size_t(r) * NH + h) * T * T;
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
        }
    }
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
      rep.heads.push_back({l, h, first_mean[i], first_sinks[i] / windows, top, imp[top]});
      layer_sinks += first_sinks[i];
    }
    rep.layer_sink_rate.push_back(100.0 * layer_sinks / (double(windows) * NH));
    sinks += layer_sinks;
  }
  rep.sink_rate = 100.0 * sinks / (double(windows) * L * NH);
  return rep;
}

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
                     {"sink_share", h.sink_share}, {"top_key", h.top_key}, {"top_importance", h.top_importance}});
  return {{"windows", r.windows}, {"T", r.T}, {"d_model", r.d_model}, {"n_heads", r.n_heads}, {"causal", r.causal},
          {"epsilon", r.epsilon}, {"massive_min", r.massive_min}, {"massive_ratio", r.massive_ratio},
          {"streams", streams}, {"heads", heads}, {"layer_sink_rate", r.layer_sink_rate}, {"sink_rate", r.sink_rate},
          {"first_massive_layer", r.first_massive_layer >= 0 ? json(r.first_massive_layer) : json()}};
}

void print_report(const SinksReport& r) {
  fmt::print("Massive activations and attention sinks over {} windows of {} tokens\n", r.windows, r.T);
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
}

}  // namespace normlab::analysis
