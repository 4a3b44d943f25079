// layer_log.cpp: the per-layer instruments of a training step (train.log_every_layers) and
// DeepNet's model update (train.log_model_update). Reductions accumulate in double.
#include "train/layer_log.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/hyper.h"
#include "model/methods.h"
#include "ops/common.h"

namespace normlab {

namespace {

using json = nlohmann::json;

const char* sublayer_name(Sublayer k) { return k == Sublayer::Attn ? "attn" : k == Sublayer::Cross ? "cross" : "mlp"; }

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

std::string strip_suffix(std::string s) {
  for (const char* suffix : {".weight", ".bias"}) {
    const std::string x = suffix;
    if (s.size() > x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0) return s.substr(0, s.size() - x.size());
  }
  return s;
}

// a number, or null when it is not finite (an update ratio of a tensor that starts at zero)
json finite_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

double sum_squares(const float* v, size_t n) {
  double s = 0;
  for (size_t k = 0; k < n; k++) s += double(v[k]) * double(v[k]);
  return s;
}

double sum_squared_difference(const float* a, const float* b, size_t n) {
  double s = 0;
  for (size_t k = 0; k < n; k++) {
    const double d = double(a[k]) - double(b[k]);
    s += d * d;
  }
  return s;
}

}  // namespace

std::vector<ParamGroup> param_groups(const ParamTable& table, const ModelConfig& cfg) {
  // the sub-layer prefixes ("h.3.attn"), and each layer's first present slot (for its rezero scalar)
  std::vector<std::string> prefixes;
  for (int i = 0; i < cfg.n_slots(); i++) prefixes.push_back(slot_prefix(cfg, i) + ".");
  std::vector<ParamGroup> groups;
  auto group_of = [&](const std::string& name, int slot) -> ParamGroup& {
    for (ParamGroup& g : groups)
      if (g.slot == slot && g.name == name) return g;
    groups.push_back({name, slot, {}});
    return groups.back();
  };
  for (size_t s = 0; s < table.specs.size(); s++) {
    const std::string& name = table.specs[s].name;
    int slot = -1;
    std::string rest = name;
    for (int i = 0; i < cfg.n_slots() && slot < 0; i++)
      if (cfg.slot(i).present && starts_with(name, prefixes[size_t(i)])) {
        slot = i;
        rest = name.substr(prefixes[size_t(i)].size());
      }
    for (int i = 0; i < cfg.n_slots() && slot < 0; i++)  // "h.3.rezero": the layer's first sub-layer
      if (cfg.slot(i).present && name == layer_prefix(cfg, cfg.slot(i).layer) + ".rezero") {
        slot = i;
        rest = "rezero";
      }
    group_of(strip_suffix(rest), slot).specs.push_back(s);
  }
  return groups;
}

double mean_token_rms(const float* v, long rows, int C) {
  double sum = 0;
  for (long r = 0; r < rows; r++) sum += std::sqrt(sum_squares(v + size_t(r) * C, size_t(C)) / C);
  return rows > 0 ? sum / double(rows) : std::numeric_limits<double>::quiet_NaN();
}

double mean_token_ratio(const float* f, const float* x, long rows, int C) {
  double sum = 0;
  long n = 0;
  for (long r = 0; r < rows; r++) {
    const double nx = sum_squares(x + size_t(r) * C, size_t(C));
    if (nx <= 0) continue;
    sum += std::sqrt(sum_squares(f + size_t(r) * C, size_t(C)) / nx);
    n++;
  }
  return n > 0 ? sum / double(n) : std::numeric_limits<double>::quiet_NaN();
}

double mean_row_entropy(const float* p, long rows, int keys) {
  double sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static) if (rows * keys > ops::kParallelMinWork)
  for (long r = 0; r < rows; r++) {
    const float* row = p + size_t(r) * size_t(keys);
    double h = 0;
    for (int k = 0; k < keys; k++)
      if (row[k] > 0) h -= double(row[k]) * std::log(double(row[k]));
    sum += h;
  }
  return rows > 0 ? sum / double(rows) : std::numeric_limits<double>::quiet_NaN();
}

double max_attention_logit(const float* qkv, int B, int T, int QW, int A, int NH, int KVH, int HS, double scale,
                           bool causal, const uint8_t* key_mask) {
  const int group = NH / KVH;
  double best = -std::numeric_limits<double>::infinity();
#pragma omp parallel for collapse(2) reduction(max : best) schedule(static) \
    if (long(B) * NH * T * T * HS > ops::kParallelMinWork)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < T; i++) {
        const float* q = qkv + (size_t(b) * T + i) * QW + size_t(h) * HS;
        for (int j = 0; j < (causal ? i + 1 : T); j++) {
          if (key_mask && !key_mask[size_t(b) * T + j]) continue;
          const float* k = qkv + (size_t(b) * T + j) * QW + A + size_t(h / group) * HS;
          double dot = 0;
          for (int c = 0; c < HS; c++) dot += double(q[c]) * k[c];
          best = std::max(best, scale * dot);
        }
      }
  return best;
}

StreamPeak stream_peak(const float* x, size_t n) {
  if (n == 0) return {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  std::vector<float> a(n);
  for (size_t k = 0; k < n; k++) a[k] = std::fabs(x[k]);
  const double top = *std::max_element(a.begin(), a.end());
  const size_t mid = n / 2;
  std::nth_element(a.begin(), a.begin() + ptrdiff_t(mid), a.end());
  double median = a[mid];
  if (n % 2 == 0) median = 0.5 * (median + *std::max_element(a.begin(), a.begin() + ptrdiff_t(mid)));
  return {top, median > 0 ? top / median : std::numeric_limits<double>::quiet_NaN()};
}

double first_key_sink_share(const float* att, int B, int NH, int T, double epsilon) {
  if (long(B) * NH * T == 0) return std::numeric_limits<double>::quiet_NaN();
  long sinks = 0;
  for (long bh = 0; bh < long(B) * NH; bh++) {
    const float* A = att + size_t(bh) * T * T;
    double sum = 0;
    for (int q = 0; q < T; q++) sum += A[size_t(q) * T];
    sinks += sum / T > epsilon;
  }
  return double(sinks) / double(long(B) * NH);
}

LogPartition log_partition(const float* logits, long rows, int V) {
  LogPartition z{0, -std::numeric_limits<double>::infinity()};
  for (long r = 0; r < rows; r++) {
    const float* row = logits + size_t(r) * V;
    const double m = *std::max_element(row, row + V);
    double sum = 0;
    for (int v = 0; v < V; v++) sum += std::exp(double(row[v]) - m);
    const double lse = m + std::log(sum);
    z.mean += lse / double(rows);
    z.max = std::max(z.max, lse);
  }
  return z;
}

double model_update_norm(const std::vector<float>& before, const float* after, long positions, int V) {
  double sum = 0;
  for (long r = 0; r < positions; r++)
    sum += std::sqrt(sum_squared_difference(after + size_t(r) * V, before.data() + size_t(r) * V, size_t(V)));
  return positions > 0 ? sum / double(positions) : std::numeric_limits<double>::quiet_NaN();
}

LayerLogger::LayerLogger(const Model<float>& model) : groups_(param_groups(model.table(), model.config())) {}

void LayerLogger::begin(const Model<float>& model) {
  const ModelConfig& cfg = model.config();
  const ParamTable& table = model.table();
  const int C = cfg.d_model, NH = cfg.n_heads, B = model.planned_B();
  before_ = model.params();
  auto rows_of = [&](const Slot& s) { return cfg.encdec() && s.encoder ? model.planned_S() : model.planned_T(); };

  // hyper-connections: the residual mixes' gains, each slot's own and the composite up to it
  std::vector<int> hyper_slots;
  std::vector<const float*> mixes;
  for (int i = 0; i < cfg.n_slots() && cfg.hyper_connected(); i++)
    if (cfg.slot(i).present) {
      hyper_slots.push_back(i);
      mixes.push_back(model.acts(i).hmix);
    }
  const HyperGains gains = hyper_gains(cfg.hyper_streams, mixes, long(B) * model.planned_T());
  auto gain_json = [](const HyperGain& g) {
    return json{{"forward", g.forward}, {"backward", g.backward}, {"spectral", g.spectral}};
  };

  json sublayers = json::array();
  for (int i = 0; i < cfg.n_slots(); i++) {
    const Slot slot = cfg.slot(i);
    if (!slot.present) continue;
    const SublayerActs<float>& a = model.acts(i);
    const NormSites sites = norm_sites(cfg.placement_of(slot.layer), slot.kind);
    const int T = rows_of(slot);
    const long N = long(B) * T;
    json s = {{"slot", i}, {"layer", slot.layer}, {"stack", slot.encoder ? "encoder" : "decoder"},
              {"sub", sublayer_name(slot.kind)}};
    s["stream_rms"] = mean_token_rms(a.x_in, N, C);
    const StreamPeak peak = stream_peak(a.x_in, size_t(N) * C);
    s["stream_max_abs"] = finite_or_null(peak.max_abs);
    s["stream_max_ratio"] = finite_or_null(peak.ratio);
    s["branch_ratio"] = finite_or_null(mean_token_ratio(a.f, a.x_in, N, C));
    s["ln_in_input_rms"] = sites.in ? json(mean_token_rms(a.x_in, N, C)) : json(nullptr);
    s["ln_branch_input_rms"] = sites.branch ? json(mean_token_rms(a.f, N, C)) : json(nullptr);
    s["ln_out_input_rms"] = sites.out ? json(mean_token_rms(a.r, N, C)) : json(nullptr);
    if (slot.kind == Sublayer::Attn) s["attn_entropy"] = mean_row_entropy(a.att, long(B) * NH * T, T);
    else if (slot.kind == Sublayer::Cross) s["attn_entropy"] = mean_row_entropy(a.att, long(B) * NH * T, model.planned_S());
    else s["attn_entropy"] = nullptr;
    s["attn_max_logit"] = slot.kind == Sublayer::Attn
                              ? json(max_attention_logit(a.hid, B, T, cfg.qkv_width(), cfg.attn_width(), NH,
                                                         cfg.kv_heads(), cfg.head_size(),
                                                         model.score_map().scale_for(cfg.head_size()), !slot.encoder,
                                                         model.self_attention_mask(i)))
                              : json(nullptr);
    s["attn_sink_share"] = slot.kind == Sublayer::Attn ? json(first_key_sink_share(a.att, B, NH, T)) : json(nullptr);
    if (cfg.hyper_connected()) {  // each stream's RMS entering the slot; the mixes' gains
      const long n = cfg.hyper_streams;
      json rms = json::array();
      for (long t = 0; t < n; t++) {
        double sum = 0;
        for (long r = 0; r < N; r++) sum += std::sqrt(sum_squares(a.hs_in + (r * n + t) * C, size_t(C)) / C);
        rms.push_back(sum / double(N));
      }
      s["streams_rms"] = std::move(rms);
      const size_t k = size_t(std::find(hyper_slots.begin(), hyper_slots.end(), i) - hyper_slots.begin());
      s["mix_gain"] = gain_json(gains.own[k]);
      s["composite_gain"] = gain_json(gains.composite[k]);
      if (cfg.hyper == HyperMix::AttnRes) {  // the depth weights P_s over the sources, mean over tokens
        json w = json::array();
        for (long t = 0; t < n; t++) {
          double sum = 0;
          for (long r = 0; r < N; r++) sum += a.hmix[(r * n + t) * (n + 1)];
          w.push_back(sum / double(N));
        }
        s["depth_weights"] = std::move(w);
      }
    }
    s["grad_norm"] = json::object();
    sublayers.push_back(std::move(s));
  }

  // gradient norms by group; the totals of a sub-layer and of the model outside the blocks
  json other = {{"grad_norm", json::object()}};
  std::vector<double> total(size_t(cfg.n_slots()), 0.0);
  for (const ParamGroup& g : groups_) {
    double sq = 0;
    for (size_t k : g.specs) sq += sum_squares(model.grads().data() + table.specs[k].offset, table.specs[k].numel);
    if (g.slot < 0) {
      other["grad_norm"][g.name] = std::sqrt(sq);
      continue;
    }
    total[size_t(g.slot)] += sq;
    for (json& s : sublayers)
      if (s["slot"] == g.slot) s["grad_norm"][g.name] = std::sqrt(sq);
  }
  for (json& s : sublayers) s["grad_norm_total"] = std::sqrt(total[s["slot"].get<size_t>()]);

  // each stack's end: the last block's output, ln_f's input (the second stream in a two-stream
  // stack) and the stack's output (what the head or the cross-attention reads)
  json stacks = json::array();
  for (bool encoder : {true, false}) {
    if (encoder && !cfg.encdec()) continue;
    const int first = encoder || !cfg.encdec() ? 0 : cfg.first_decoder_slot();
    const int last = encoder ? cfg.first_decoder_slot() : cfg.n_slots();
    const long N = long(B) * (encoder ? model.planned_S() : model.planned_T());
    const float* x = model.acts(last - 1).x_out;  // an absent last slot aliases its input
    const float* xd = model.dual_stream(encoder);
    const bool final_norm = encoder ? cfg.has_enc_final_norm() : cfg.has_final_norm();
    const float* y = encoder ? model.memory() : model.final_hidden();
    stacks.push_back({{"stack", encoder || cfg.arch == Arch::Encoder ? "encoder" : "decoder"},
                      {"first_slot", first},
                      {"output_rms", mean_token_rms(x, N, C)},
                      {"dual_rms", xd ? json(mean_token_rms(xd, N, C)) : json(nullptr)},
                      {"ln_f_input_rms", final_norm ? json(mean_token_rms(xd ? xd : x, N, C)) : json(nullptr)},
                      {"final_rms", mean_token_rms(y, N, C)}});
  }
  // log Z of the output logits of every position (the decoder's in an encoder-decoder), as the forward
  // computed it: begin() runs after backward, which has turned the logits themselves into their gradient
  json head = nullptr;
  if (const float* lse = model.log_partitions()) {
    const long rows = long(B) * model.planned_T();
    LogPartition z{0, -std::numeric_limits<double>::infinity()};
    for (long r = 0; r < rows; r++) z.mean += double(lse[r]) / double(rows), z.max = std::max(z.max, double(lse[r]));
    // log_z_of: what log Z was read from (records without it read the backward's gradient; not log Z)
    head = {{"log_z_mean", z.mean}, {"log_z_max", z.max}, {"log_z_of", "forward"}};
  }
  record_ = {{"type", "layers"}, {"micro_batch", "last"}, {"sublayers", std::move(sublayers)},
             {"stacks", std::move(stacks)}, {"head", std::move(head)}, {"other", std::move(other)}};
}

json LayerLogger::finish(const Model<float>& model, long step) {
  const ParamTable& table = model.table();
  const ModelConfig& cfg = model.config();
  std::vector<double> d_total(size_t(cfg.n_slots()), 0.0), p_total(size_t(cfg.n_slots()), 0.0);
  json& sublayers = record_["sublayers"];
  json& other = record_["other"];
  other["update_ratio"] = json::object();
  for (json& s : sublayers) s["update_ratio"] = json::object();
  for (const ParamGroup& g : groups_) {
    double dd = 0, pp = 0;
    for (size_t k : g.specs) {
      const ParamSpec& spec = table.specs[k];
      dd += sum_squared_difference(model.params().data() + spec.offset, before_.data() + spec.offset, spec.numel);
      pp += sum_squares(before_.data() + spec.offset, spec.numel);
    }
    const json ratio = finite_or_null(std::sqrt(dd) / std::sqrt(pp));
    if (g.slot < 0) {
      other["update_ratio"][g.name] = ratio;
      continue;
    }
    d_total[size_t(g.slot)] += dd;
    p_total[size_t(g.slot)] += pp;
    for (json& s : sublayers)
      if (s["slot"] == g.slot) s["update_ratio"][g.name] = ratio;
  }
  for (json& s : sublayers) {
    const size_t i = s["slot"].get<size_t>();
    s["update_ratio_total"] = finite_or_null(std::sqrt(d_total[i]) / std::sqrt(p_total[i]));
  }
  json out = {{"type", "layers"}, {"step", step}};
  for (auto& [k, v] : record_.items())
    if (k != "type") out[k] = std::move(v);
  record_ = json();
  return out;
}

}  // namespace normlab
