// test_theory.cpp: `normlab theory` (theory/theory.h): every claim is measured and its verdict is
// the rule applied to the seeds' numbers (vacuous when a bound says nothing on every seed, void when a
// trained model did not learn), seeds in parallel give the serial numbers, 004's effective-depth
// quantity against the sub-layers recomputed by hand, the collapse-rate law on sequences of known law,
// fairseq's inputs against their formulas, the windows of a given model's claims (the verdict rules and
// the statistics behind them: test_theory_rules.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <set>
#include <unistd.h>
#include <filesystem>
#include <numbers>
#include <stdexcept>

#include "analysis/lanczos.h"
#include "analysis/linalg.h"
#include "analysis/fake_depth.h"
#include "analysis/stats.h"
#include "theory/checks.h"
#include "theory/rules.h"
#include "theory/theory.h"
#include "analysis_models.h"
#include "check.h"
#include "ops/common.h"
#include "util/error.h"
#include "util/files.h"
#include "util/rng.h"

using namespace normlab;
using namespace normlab::analysis;
using namespace normlab::theory;
using namespace normlab::test;

namespace {

// Small models for the whole table: d = 16, 2 heads, T = 8, the enc-dec claims at d = 16.
TheoryOptions small_theory(int layers, int deep_layers, int seeds) {
  TheoryOptions o;
  o.d_model = 16;
  o.n_heads = 2;
  o.n_layers = layers;
  o.deep_layers = deep_layers;
  o.seq_len = 8;
  o.seeds = seeds;
  o.paper_d_model = 16;
  o.family_d_model = 16;
  return o;
}

}  // namespace

TEST(Theory, VerdictsFollowFromTheNumbers) {
  TheoryOptions o = small_theory(3, 8, 3);
  o.paper_d_model = 32;  // the enc-dec claims' width (512 in the papers)
  const auto claims = run_theory(o);
  std::map<std::string, const Claim*> by;
  for (const auto& c : claims) by[c.source + " | " + c.quantity] = by[c.source] = &c;
  for (const char* s : {"000 Lemma 2.1", "000 Thm 2.2", "000 Remark 1.2", "000 Thm 3.2", "000 Thm 3.6",
                        "000 Thm 4.6", "000 Thm 6.3", "000 Thm 6.4", "002 spectral bounds", "002 bound in M",
                        "002 rank collapse", "003/004 stream growth", "004 branch ratio", "004 effective depth",
                        "004 DeepNet constant", "004 dNorm/dz", "003 Post-LN input growth", "003 kappa^L gradient decay",
                        "Xiong et al. 2020", "Liu et al. 2020", "000 Pre-LN full rank", "000 Pre-LN final LayerNorm rank",
                        "002 collapse rate", "Xiong et al. 2020 Thm 1", "DeepNet Thm 4.2", "004 Thm 2 Pre-LN Lipschitz",
                        "004 Prop. 2 shares", "004 Prop. 2 effective depth", "004 Post-LN gradients uniform",
                        "HC init is Pre-LN"})
    ASSERT_TRUE(by.count(s)) << s;
  // each kind's verdicts are its rule's, and the rule's numbers are in the claim
  const std::map<Kind, std::set<Verdict>> allowed = {
      {Kind::Identity, {Verdict::Exact, Verdict::Fails, Verdict::Vacuous}},
      {Kind::Bound, {Verdict::Satisfied, Verdict::Counterexample, Verdict::Vacuous}},
      {Kind::Law, {Verdict::Holds, Verdict::Violated, Verdict::NotDistinguishable, Verdict::NoLawFits}},
      {Kind::Effect, {Verdict::Holds, Verdict::Violated, Verdict::NotDistinguishable}},
      {Kind::Comparison, {Verdict::Holds, Verdict::Violated, Verdict::NotDistinguishable}}};
  for (const auto& c : claims) {
    EXPECT_EQ(c.numbers["seeds"].size(), 3u) << c.source;
    EXPECT_TRUE(allowed.at(c.kind).count(c.verdict)) << c.source << ": " << to_string(c.verdict);
    EXPECT_FALSE(c.setting.empty()) << c.source;
    EXPECT_FALSE(c.rule.empty()) << c.source;
    if (c.kind == Kind::Law) {
      EXPECT_TRUE(c.numbers["rule"].contains("laws")) << c.source;
    } else if (c.kind == Kind::Effect || c.kind == Kind::Comparison) {
      EXPECT_TRUE(c.numbers["rule"].contains("effect")) << c.source;
    } else {
      EXPECT_LE(c.summary.n, 3) << c.source;
    }
  }
  // the kinds the claims declare
  EXPECT_EQ(by["000 Lemma 2.1"]->kind, Kind::Identity);
  EXPECT_EQ(by["004 Thm 2 Pre-LN Lipschitz"]->kind, Kind::Bound);
  EXPECT_EQ(by["004 Post-LN gradients uniform"]->kind, Kind::Bound);
  EXPECT_EQ(by["003 additive, not multiplicative"]->kind, Kind::Law);
  EXPECT_EQ(by["004 lower layers larger gradients"]->kind, Kind::Effect);
  EXPECT_EQ(by["002 skips prevent collapse"]->kind, Kind::Comparison);
  // a bound measured at one token cannot exceed Thm 2's product of the sub-layers' local constants
  EXPECT_EQ(by["004 Thm 2 Pre-LN Lipschitz"]->verdict, Verdict::Satisfied);
  for (const auto& seed : by["004 Thm 2 Pre-LN Lipschitz"]->numbers["seeds"])
    EXPECT_LE(std::exp(seed["log_lipschitz"].back().get<double>()), seed["bound"].get<double>() * (1 + 1e-9));
  // the source states one decade for the gradients' fall: the size is judged against it apart from the direction
  EXPECT_NE(by["004 lower layers larger gradients"]->size, Size::NotClaimed);
  EXPECT_EQ(by["004 effective depth"]->size, Size::NotClaimed);
  // the ones the math decides regardless of the model's weights
  // a reference, not a copy: a range-for over a member of a returned temporary reads freed memory
  const auto first = [&](const char* s) -> const nlohmann::json& { return by[s]->numbers["seeds"][0]; };
  EXPECT_EQ(by["000 Remark 1.2"]->verdict, Verdict::Fails);
  EXPECT_LT(first("000 Remark 1.2")["left_rel_err"].get<double>(), 1e-12);
  EXPECT_EQ(by["004 DeepNet constant"]->verdict, Verdict::Fails);
  EXPECT_EQ(by["HC init is Pre-LN"]->verdict, Verdict::Exact);  // (every stream carries Pre-LN's x; test_hyper)
  EXPECT_LT(first("004 DeepNet constant")["same_form_err"].get<double>(), 1e-12);
  // Lemma 2.1 in its setting (no eps) is exact to rounding; at eps = 1e-5 the formula with sigma =
  // sqrt(var + eps) is
  EXPECT_EQ(by["000 Lemma 2.1"]->verdict, Verdict::Exact);
  EXPECT_LT(first("000 Lemma 2.1")["eps0_rel_err"].get<double>(), 1e-12);
  EXPECT_LT(first("000 Lemma 2.1")["eps_autodiff_rel_err"].get<double>(), 1e-12);
  // the product bound of Thm 6.4 is vacuous exactly when it is <= 0 on every seed
  int says_nothing = 0;
  for (const auto& seed : by["000 Thm 6.4"]->numbers["seeds"])
    says_nothing += seed["product_bound"].is_null() || seed["product_bound"].get<double>() <= 0;
  EXPECT_EQ(by["000 Thm 6.4"]->verdict == Verdict::Vacuous, says_nothing == 3) << by["000 Thm 6.4"]->measured;
  EXPECT_EQ(by["000 Thm 2.2"]->verdict, Verdict::Exact);
  EXPECT_EQ(by["000 Thm 3.6"]->verdict, Verdict::Exact);
  EXPECT_EQ(first("000 Thm 4.6")["violated"].get<int>(), 0);
  // 000's Pre-LN contrast: the stack alone has full rank (the claim, as the source describes it), through
  // its final LayerNorm (eps = 0) exactly d - 2 (a separate row)
  EXPECT_EQ(by["000 Pre-LN full rank"]->verdict, Verdict::Exact);
  EXPECT_EQ(by["000 Pre-LN final LayerNorm rank"]->verdict, Verdict::Exact);
  for (const auto& seed : by["000 Pre-LN full rank"]->numbers["seeds"]) {
    EXPECT_EQ(seed["rank_stack"].get<int>(), o.d_model);
    EXPECT_EQ(seed["rank_through_final_norm"].get<int>(), o.d_model - 2);
  }
  // the depth families: one number per depth
  EXPECT_EQ(first("Xiong et al. 2020 Thm 1")["decoder_last"].size(), 4u);
  EXPECT_EQ(first("DeepNet Thm 4.2")["change_squared"].size(), 5u);
  // 004 Prop. 2: the share's k is at most L, the document's at most L + 1 (never reached)
  const nlohmann::json& prop2 = first("004 Prop. 2 effective depth");
  for (size_t i = 0; i < prop2["depths"].size(); i++) {
    EXPECT_LE(prop2["k_share"][i].get<int>(), prop2["depths"][i].get<int>());
    EXPECT_LE(prop2["k_document"][i].get<int>(), prop2["depths"][i].get<int>() + 1);
  }
  // Xiong's Fig. 3: the fitted change over the stack is exp of the least-squares slope of log ||dL/dW2||
  // against the layer, times N - 1 (by hand here), for the stack the row names
  int xiong_rows = 0;
  for (const auto& c : claims) {
    if (c.source != "Xiong et al. 2020") continue;
    const bool decoder = c.quantity.starts_with("decoder");
    const nlohmann::json& seed = c.numbers["seeds"][0];
    const std::vector<double> g = seed[decoder ? "decoder" : "encoder"].get<std::vector<double>>();
    const double n = double(g.size()), mx = (n - 1) / 2;
    double my = 0, sxy = 0, sxx = 0;
    for (double v : g) my += std::log(v) / n;
    for (size_t l = 0; l < g.size(); l++) sxy += (double(l) - mx) * (std::log(g[l]) - my), sxx += (double(l) - mx) * (double(l) - mx);
    EXPECT_NEAR(seed["fitted_change"].get<double>(), std::exp(sxy / sxx * (n - 1)), 1e-9) << c.quantity;
    xiong_rows++;
  }
  EXPECT_EQ(xiong_rows, 4);  // Post-LN and Pre-LN, encoder and decoder
  // Dong et al.'s MLP claim: the ratio of the two fitted collapse rates
  ASSERT_TRUE(by.count("002 MLP Lipschitz slows collapse"));
  for (const auto& seed : by["002 MLP Lipschitz slows collapse"]->numbers["seeds"]) {
    if (seed["rate_ratio"].is_number()) {
      EXPECT_NEAR(seed["rate_ratio"].get<double>(), seed["rate_scaled"].get<double>() / seed["rate_original"].get<double>(),
                  1e-12);
    }
  }
  // the LayerNorm's bulk singular value is 1/sigma whatever the width: not the claimed d^(-1/2)
  EXPECT_EQ(by["004 dNorm/dz"]->verdict, Verdict::Violated) << by["004 dNorm/dz"]->rule;
  for (double v : first("004 dNorm/dz")["bulk_times_sigma"]) EXPECT_NEAR(v, 1.0, 1e-6);
  EXPECT_EQ(first("004 dNorm/dz")["widths"].size(), 4u);
}

// A claim measured on trained models that did not learn (2 AdamW steps: nowhere near 10% below the
// unigram entropy) is void, never holds or violated; fresh models' claims are untouched.
TEST(Theory, ModelsThatDidNotLearnVoidTheirClaims) {
  TheoryOptions o = small_theory(2, 4, 2);
  o.trained_seeds = 2;
  o.train_steps = 2;
  int claims = 0;
  bool gain = false, growth = false;  // (the trained-only claims about hyper-connections are among them)
  for (const auto& c : run_theory(o)) {  // every claim on trained models, also those sharing a cached model
    claims++;
    gain = gain || c.source == "mHC bounds the composite gain";
    growth = growth || c.source == "AttnRes bounds the output growth";
    EXPECT_EQ(c.verdict, Verdict::Void) << c.source << ": " << c.measured;
    EXPECT_NE(c.measured.find("unigram entropy"), std::string::npos) << c.measured;
  }
  EXPECT_GE(claims, 15);
  EXPECT_TRUE(gain);
  EXPECT_TRUE(growth);
  o.train_steps = 0;
  for (const auto& c : run_theory(o)) EXPECT_NE(c.verdict, Verdict::Void) << c.source;
}

// Trained models are kept in the cache and read back exactly: a second run gives the same claims and
// rewrites nothing; a truncated or foreign file is not read but replaced by a retrained model.
TEST(Theory, TrainedModelsAreCachedAndACorruptCacheIsReplaced) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("normlab_theory_cache_{}", ::getpid());
  fs::remove_all(dir);
  TheoryOptions o = small_theory(2, 4, 1);
  o.trained_seeds = 1;
  o.train_steps = 200;  // two validation evaluations
  o.cache_dir = dir.string();
  const auto first = run_theory(o);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir / "theory-models")) files.push_back(e.path());
  ASSERT_GE(files.size(), 3u);  // the 6-layer post and pre, the 24-layer pre and post (GPT-2 and Xavier init)
  std::map<fs::path, fs::file_time_type> written;
  std::map<fs::path, uintmax_t> sizes;
  for (const auto& f : files) written[f] = fs::last_write_time(f), sizes[f] = fs::file_size(f);
  auto same_claims = [&](const std::vector<Claim>& again) {
    ASSERT_EQ(again.size(), first.size());
    for (size_t i = 0; i < first.size(); i++) {
      EXPECT_EQ(again[i].verdict, first[i].verdict) << first[i].source;
      EXPECT_EQ(again[i].summary.values, first[i].summary.values) << first[i].source;
      EXPECT_EQ(again[i].numbers.dump(), first[i].numbers.dump()) << first[i].source;  // (NaN != NaN; dumped: null)
    }
  };
  same_claims(run_theory(o));
  for (const auto& f : files) EXPECT_EQ(fs::last_write_time(f), written[f]) << f << " was rewritten";
  fs::resize_file(files[0], sizes[files[0]] / 2);  // truncated
  const std::string original = read_file(files[1].string(), "cache");
  std::string foreign = original;
  foreign[20] ^= 1;  // the first byte of the key: another model's file
  write_file_atomic(files[1].string(), foreign);
  same_claims(run_theory(o));
  EXPECT_EQ(fs::file_size(files[0]), sizes[files[0]]);  // replaced by the retrained model
  EXPECT_EQ(read_file(files[1].string(), "cache"), original);
  o.cache_dir = "";  // no cache: trained again, the same numbers
  same_claims(run_theory(o));
  fs::remove_all(dir);
}

TEST(Theory, SeedsInParallelGiveTheSerialNumbers) {
  TheoryOptions o = small_theory(2, 4, 2);
  const auto parallel = run_theory(o);
  o.parallel_seeds = false;
  const auto serial = run_theory(o);
  // equal up to the summation order of the threaded kernels (a serial run threads inside each op)
  ASSERT_EQ(parallel.size(), serial.size());
  for (size_t i = 0; i < serial.size(); i++) {
    EXPECT_EQ(parallel[i].quantity, serial[i].quantity);
    EXPECT_EQ(parallel[i].verdict, serial[i].verdict) << serial[i].source;
    if (serial[i].kind == Kind::Law) {  // the fitted laws' numbers
      EXPECT_NEAR(parallel[i].numbers["rule"]["laws"][0]["rss"].get<double>(),
                  serial[i].numbers["rule"]["laws"][0]["rss"].get<double>(),
                  1e-9 * (std::abs(serial[i].numbers["rule"]["laws"][0]["rss"].get<double>()) + 1e-6))
          << serial[i].source;
    }
    for (size_t k = 0; k < serial[i].summary.values.size(); k++) {
      const double a = parallel[i].summary.values[k], b = serial[i].summary.values[k];
      EXPECT_NEAR(a, b, 1e-9 * (std::abs(b) + 1e-6)) << serial[i].source << " " << serial[i].quantity << " seed " << k;
    }
  }
}

namespace {

// A parameter's values by name, its shape checked against the PyTorch layout the hand math assumes.
const double* param_of(const Model<double>& m, const std::string& name, std::vector<int64_t> shape) {
  const ParamSpec* p = m.table().find(name);
  if (!p) throw std::runtime_error("no parameter " + name);
  EXPECT_EQ(p->shape, shape) << name;
  return m.params().data() + p->offset;
}

// y (N, OC) = x (N, IC) W^T + b, with W (OC, IC) row-major
std::vector<double> linear_rows(const std::vector<double>& x, const double* W, const double* b, int N, int IC, int OC) {
  std::vector<double> y(size_t(N) * OC);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double acc = b[o];
      for (int i = 0; i < IC; i++) acc += W[size_t(o) * IC + i] * x[size_t(n) * IC + i];
      y[size_t(n) * OC + o] = acc;
    }
  return y;
}

// F_slot(N(x)) of a Pre-LN GPT sub-layer, written out from its parameters, for x (T, C):
//   N(x) = (x - mean) / sqrt(var + eps) * ln_in.weight + ln_in.bias, each token row on its own
//   MLP:  proj(gelu(fc(N(x)))), gelu(u) = 0.5 u (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3))) (GPT-2's)
//   attention: qkv = [q | k | v] = qkv(N(x)); per head h (columns h HS .. (h+1) HS of each third)
//   P = softmax over keys j <= i of q_i . k_j / sqrt(HS); out_i = sum_j P_ij v_j; then proj(out)
std::vector<double> pre_ln_branch_by_hand(const Model<double>& m, int slot, const std::vector<double>& x) {
  const ModelConfig& c = m.config();
  const int C = c.d_model, F = c.ff(), T = int(x.size()) / C, NH = c.n_heads, HS = c.head_size();
  const std::string p = slot_prefix(c, slot);
  const double* gain = param_of(m, p + ".ln_in.weight", {C});
  const double* bias = param_of(m, p + ".ln_in.bias", {C});
  std::vector<double> nx(x.size());
  for (int t = 0; t < T; t++) {
    const double* row = x.data() + size_t(t) * C;
    double mean = 0, var = 0;
    for (int k = 0; k < C; k++) mean += row[k] / C;
    for (int k = 0; k < C; k++) var += (row[k] - mean) * (row[k] - mean) / C;
    for (int k = 0; k < C; k++) nx[size_t(t) * C + k] = (row[k] - mean) / std::sqrt(var + c.eps) * gain[k] + bias[k];
  }
  std::vector<double> mixed;  // (T, F) or (T, C): what the output projection reads
  int width = 0;
  if (c.slot(slot).kind == Sublayer::Mlp) {
    mixed = linear_rows(nx, param_of(m, p + ".fc.weight", {F, C}), param_of(m, p + ".fc.bias", {F}), T, C, F);
    for (double& u : mixed) u = 0.5 * u * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (u + 0.044715 * u * u * u)));
    width = F;
  } else {
    const std::vector<double> qkv =
        linear_rows(nx, param_of(m, p + ".qkv.weight", {3 * C, C}), param_of(m, p + ".qkv.bias", {3 * C}), T, C, 3 * C);
    auto at = [&](int t, int third, int h, int e) { return qkv[size_t(t) * 3 * C + size_t(third) * C + h * HS + e]; };
    mixed.assign(size_t(T) * C, 0.0);
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < T; i++) {
        std::vector<double> score(size_t(i) + 1);
        double top = -INFINITY, sum = 0;
        for (int j = 0; j <= i; j++) {
          for (int e = 0; e < HS; e++) score[size_t(j)] += at(i, 0, h, e) * at(j, 1, h, e) / std::sqrt(double(HS));
          top = std::max(top, score[size_t(j)]);
        }
        for (double& v : score) {
          v = std::exp(v - top);
          sum += v;
        }
        for (int j = 0; j <= i; j++)
          for (int e = 0; e < HS; e++) mixed[size_t(i) * C + h * HS + e] += score[size_t(j)] / sum * at(j, 2, h, e);
      }
    width = C;
  }
  return linear_rows(mixed, param_of(m, p + ".proj.weight", {C, width}), param_of(m, p + ".proj.bias", {C}), T,
                     width, C);
}

// A 3-layer Pre-LN GPT in double at Xavier init with every parameter moved by 0.1 N(0, 1) (seeded), so
// norm gains and biases are away from 1 and 0; T = seq_len.
ModelConfig perturbed_pre_config(int seq_len) {
  ModelConfig c = small(Placement::Pre, NormKind::LayerNorm, 1e-5);
  c.n_layers = 3;
  c.seq_len = seq_len;
  c.init = InitScheme::Xavier;
  return c;
}

// T byte ids, an arithmetic sequence mod 256 (different steps give different inputs)
std::vector<int32_t> byte_window(int T, int step, int first) {
  std::vector<int32_t> ids(size_t(T), 0);
  for (int t = 0; t < T; t++) ids[size_t(t)] = (t * step + first) % 256;
  return ids;
}

void perturb(Model<double>& m, uint64_t seed) {
  Rng rng(seed);
  for (double& p : m.params()) p += 0.1 * rng.normal();
}

double norm_of_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); i++) s += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(s);
}

}  // namespace

TEST(Theory, EffectiveDepthShiftEqualsTheSubLayersByHand) {
  // 004 effective depth's quantity, ||F_{s+1}(N(x_{s+1})) - F_{s+1}(N(x_s))|| / ||F_{s+1}(N(x_{s+1}))||,
  // from next_branch_shift (which switches sub-layer s off and reruns the model) against the
  // sub-layer s+1 recomputed by hand on the streams x_s and x_{s+1} of one forward pass; MLP
  // sub-layers (s+1 odd) and attention sub-layers (s+1 even). A 3-layer Pre-LN GPT in double at
  // Xavier init (the claim's setting) with every parameter then moved by 0.1 N(0, 1), so the norm
  // gains and all biases are away from 1 and 0 and the hand math must read each of them; F = 20.
  ModelConfig c = perturbed_pre_config(7);
  c.d_ff = 20;
  Model<double> m(c);
  perturb(m, 41);
  const int T = 7, C = c.d_model, S = c.n_slots();
  std::vector<int32_t> ids(T), labels(T, ops::kIgnoreLabel);
  for (int t = 0; t < T; t++) ids[size_t(t)] = (t * 37 + 11) % 256;
  m.forward(ids.data(), labels.data(), 1, T);
  std::vector<std::vector<double>> x;  // x_s (T, C), s = 0 .. S
  for (int s = 0; s <= S; s++) x.emplace_back(m.stream(s), m.stream(s) + size_t(T) * C);

  const std::vector<double> shift = detail::next_branch_shift(m, ids);
  ASSERT_EQ(shift.size(), size_t(S - 1));
  std::vector<double> by_hand;
  for (int s = 0; s + 1 < S; s++) {
    SCOPED_TRACE(fmt::format("s = {}, sub-layer s+1 = {} ({})", s, s + 1, s % 2 == 0 ? "MLP" : "attention"));
    const std::vector<double> at_next = pre_ln_branch_by_hand(m, s + 1, x[size_t(s) + 1]);  // F_{s+1}(N(x_{s+1}))
    const std::vector<double> at_prev = pre_ln_branch_by_hand(m, s + 1, x[size_t(s)]);      // F_{s+1}(N(x_s))
    // the hand sub-layer is the model's: x_{s+2} - x_{s+1} (same math in double, summed in another order)
    std::vector<double> model_branch(at_next.size());
    for (size_t i = 0; i < at_next.size(); i++) model_branch[i] = x[size_t(s) + 2][i] - x[size_t(s) + 1][i];
    const double branch_norm = norm_of_difference(at_next, std::vector<double>(at_next.size(), 0.0));
    ASSERT_GT(branch_norm, 0.1);
    EXPECT_LE(norm_of_difference(at_next, model_branch), 1e-12 * branch_norm);
    by_hand.push_back(norm_of_difference(at_next, at_prev) / branch_norm);
    EXPECT_NEAR(shift[size_t(s)], by_hand.back(), 1e-10 * by_hand.back());
  }
  // the control: every sub-layer's value is far from every other's, so a shift of the wrong slot fails
  for (size_t s = 0; s < by_hand.size(); s++)
    for (size_t r = 0; r < by_hand.size(); r++)
      if (r != s) {
        EXPECT_GT(std::abs(by_hand[r] - by_hand[s]), 1e-3 * by_hand[s]) << "s = " << s << ", r = " << r;
      }
  // the weights are back: a forward reproduces the streams
  m.forward(ids.data(), labels.data(), 1, T);
  for (int s = 0; s <= S; s++) EXPECT_EQ(std::vector<double>(m.stream(s), m.stream(s) + size_t(T) * C), x[size_t(s)]);
}

// 004 Thm 2's prefix norms chain the token-local block Jacobians at the last token; each prefix against
// the same Jacobian by one forward-mode pass over the whole prefix (stream_jacobian, no chaining), on a
// causal Pre-LN stack at Xavier init with every parameter moved off its init.
TEST(Theory, PrefixLipschitzEqualsTheWholePrefixJacobian) {
  const ModelConfig c = perturbed_pre_config(6);
  Model<double> m(c);
  perturb(m, 43);
  const std::vector<int32_t> ids = byte_window(6, 29, 5);
  const std::vector<double> lip = detail::prefix_lipschitz(m, ids);
  ASSERT_EQ(lip.size(), 3u);
  for (int l = 1; l <= 3; l++) {
    const std::vector<double> whole = stream_jacobian(m, 0, 2 * l, {5}, {5});
    const double expected = singular_values(whole, c.d_model, c.d_model).front();
    EXPECT_NEAR(lip[size_t(l) - 1], expected, 1e-10 * expected) << "prefix of " << l << " layers";
  }
  EXPECT_GT(std::abs(lip[2] - lip[0]), 1e-3 * lip[0]);  // the prefixes differ: a wrong one would fail
}

// 004's fake depth by function: in Pre-LN, removing layer 1's branches of a 3-layer stack leaves exactly
// the 2-layer stack of layers 0 and 2 (built here from copied parameters); the angular distances against
// the streams computed by hand; the weights are restored.
TEST(Theory, FakeDepthRemovalIsTheShallowerStack) {
  const ModelConfig c = perturbed_pre_config(7);
  Model<double> m(c);
  perturb(m, 47);
  const std::vector<int32_t> ids = byte_window(7, 31, 3);
  const std::vector<double> before = m.params();
  const FakeDepth f = measure_fake_depth(m, ids);
  EXPECT_EQ(m.params(), before);
  ASSERT_TRUE(f.with_loss);
  ASSERT_EQ(f.ablation.size(), 3u);
  ModelConfig c2 = c;
  c2.n_layers = 2;
  Model<double> shallow(c2);
  for (const ParamSpec& p : shallow.table().specs) {  // h.1.* <- h.2.*, everything else by name
    std::string from = p.name;
    if (from.rfind("h.1.", 0) == 0) from = "h.2." + from.substr(4);
    const ParamSpec* q = m.table().find(from);
    ASSERT_TRUE(q) << from;
    std::copy_n(m.params().begin() + long(q->offset), p.numel, shallow.params().begin() + long(p.offset));
  }
  std::vector<int32_t> labels(7, ops::kIgnoreLabel);
  for (int t = 0; t + 1 < 7; t++) labels[size_t(t)] = ids[size_t(t) + 1];
  const double shallow_loss = shallow.forward(ids.data(), labels.data(), 1, 7);
  const double full_loss = m.forward(ids.data(), labels.data(), 1, 7);
  EXPECT_NEAR(f.loss, full_loss, 1e-12);
  EXPECT_NEAR(f.ablation[1], shallow_loss - full_loss, 1e-12);
  EXPECT_GT(std::abs(f.ablation[1] - f.ablation[0]), 1e-6);  // another layer's removal differs
  for (int l = 0; l < 3; l++) {  // angular distance by hand, mean over tokens
    double mean = 0;
    for (int t = 0; t < 7; t++) {
      const double* a = m.stream(2 * l) + size_t(t) * c.d_model;
      const double* b = m.stream(2 * l + 2) + size_t(t) * c.d_model;
      double ab = 0, aa = 0, bb = 0;
      for (int k = 0; k < c.d_model; k++) ab += a[k] * b[k], aa += a[k] * a[k], bb += b[k] * b[k];
      mean += std::acos(ab / std::sqrt(aa * bb)) / std::numbers::pi / 7;
    }
    EXPECT_NEAR(f.angular[size_t(l)], mean, 1e-12) << "layer " << l;
  }
  // the float32 measurement (what the pretrained study runs) agrees to float precision and also
  // restores the weights
  Model<float> mf(c);
  std::transform(m.params().begin(), m.params().end(), mf.params().begin(), [](double v) { return float(v); });
  const std::vector<float> before_f = mf.params();
  const FakeDepth ff = measure_fake_depth(mf, ids);
  EXPECT_EQ(mf.params(), before_f);
  EXPECT_NEAR(ff.loss, f.loss, 1e-5 * f.loss);
  for (int l = 0; l < 3; l++) {
    EXPECT_NEAR(ff.ablation[size_t(l)], f.ablation[size_t(l)], 1e-4 * std::abs(f.ablation[size_t(l)]) + 1e-5) << "layer " << l;
    EXPECT_NEAR(ff.angular[size_t(l)], f.angular[size_t(l)], 1e-5) << "layer " << l;
  }
}

// Dong et al.'s collapse rate tells the two laws apart on sequences of known law: a constant factor per
// layer (geometric) and res_l = exp(-c 3^l) (doubly exponential); layers at the rounding floor are not
// fitted. One series: no spread to test a fit, so AIC alone chooses.
TEST(Theory, CollapseRateTellsGeometricFromDoublyExponential) {
  std::vector<double> geometric, doubly;
  for (int l = 0; l <= 12; l++) geometric.push_back(0.9 * std::pow(0.5, l));
  for (int l = 0; l <= 5; l++) doubly.push_back(std::exp(-0.05 * std::pow(3.0, l)));
  const Series g = collapse_series(geometric);
  ASSERT_EQ(g.x.size(), 12u);
  for (size_t i = 0; i < g.x.size(); i++)  // log(res_0/res_l) = l log 2 exactly
    EXPECT_NEAR(g.y[i], std::log(g.x[i] * std::log(2.0)), 1e-12);
  const Judgement jg = judge_law(collapse_law(), {g});
  EXPECT_EQ(jg.verdict, Verdict::Violated) << jg.text;  // the claim is the doubly exponential law
  EXPECT_EQ(jg.numbers["best"], "geometric: a constant factor per layer");
  const Series d = collapse_series(doubly);
  EXPECT_EQ(d.x.size(), 5u);
  const Judgement jd = judge_law(collapse_law(), {d});
  EXPECT_EQ(jd.verdict, Verdict::Holds) << jd.text;
  // a collapse to the floor within two layers leaves no rate to fit
  EXPECT_EQ(collapse_series({1.0, 1e-3, 1e-14, 1e-15, 1e-16}).x.size(), 1u);
  EXPECT_EQ(collapse_series({1.0, 1e-3, 1e-5, 1e-6}, 1e-5).x.size(), 1u);  // (a float32 stream's floor)
  EXPECT_EQ(judge_law(collapse_law(), {collapse_series({1.0, 1e-3, 1e-14, 1e-15, 1e-16})}).verdict,
            Verdict::NotDistinguishable);
}

// Fake depth's readings over a batch of windows are the windows' readings averaged (each window has
// the same number of tokens and of next-token labels), so a unit of B windows reads what B single
// windows read; the weights are restored.
TEST(Theory, FakeDepthOverABatchIsTheMeanOfItsWindows) {
  const ModelConfig c = perturbed_pre_config(7);
  Model<double> m(c);
  perturb(m, 53);
  const std::vector<int32_t> w1 = byte_window(7, 31, 3), w2 = byte_window(7, 17, 9);
  std::vector<int32_t> both = w1;
  both.insert(both.end(), w2.begin(), w2.end());
  const FakeDepth f1 = measure_fake_depth(m, w1), f2 = measure_fake_depth(m, w2), fb = measure_fake_depth(m, both, true, 2);
  EXPECT_NEAR(fb.loss, (f1.loss + f2.loss) / 2, 1e-12);
  for (size_t l = 0; l < 3; l++) {
    EXPECT_NEAR(fb.ablation[l], (f1.ablation[l] + f2.ablation[l]) / 2, 1e-12) << "layer " << l;
    EXPECT_NEAR(fb.angular[l], (f1.angular[l] + f2.angular[l]) / 2, 1e-12) << "layer " << l;
  }
  EXPECT_GT(std::abs(f1.loss - f2.loss), 1e-6);  // the windows differ
  // the trend reads the interior layers only: the first and last do not move it
  EXPECT_NEAR(interior_trend({100, 3, 2, 1, -100}), -1.0, 1e-15);
  EXPECT_NEAR(interior_trend({-100, 1, 2, 3, 100}), 1.0, 1e-15);
  EXPECT_TRUE(std::isnan(interior_trend({1, 2, 3, 4})));  // two interior layers: no trend
}

// fairseq's inputs (Xiong et al.'s setting) against the formulas written out here: the sinusoidal table
// of fairseq's SinusoidalPositionalEmbedding (positions from 2; sin then cos halves; frequencies
// 10000^(-k / (half - 1))), token embeddings of unit variance, and the head the unscaled table.
TEST(Theory, FairseqInputsAreFairseqs) {
  ModelConfig c;
  c.arch = Arch::EncDec;
  c.d_model = 16;
  c.n_heads = 2;
  c.n_layers = 1;
  c.dec_layers = 1;
  c.seq_len = 6;
  c.head = Head::Untied;
  Model<double> m(c);
  detail::use_fairseq_inputs(m, 7);
  const auto tensor = [&](const char* name) {
    const ParamSpec* p = m.table().find(name);
    return std::vector<double>(m.params().begin() + long(p->offset), m.params().begin() + long(p->offset + p->numel));
  };
  const std::vector<double> wte = tensor("wte.weight"), head = tensor("lm_head.weight");
  double ss = 0;
  for (size_t i = 0; i < wte.size(); i++) {
    EXPECT_DOUBLE_EQ(wte[i], std::sqrt(16.0) * head[i]);
    ss += wte[i] * wte[i];
  }
  EXPECT_NEAR(ss / double(wte.size()), 1.0, 0.05);  // 258 x 16 draws of variance 1
  for (const char* name : {"wpe.weight", "enc.wpe.weight"}) {
    const std::vector<double> wpe = tensor(name);
    for (int t = 0; t < 6; t++)
      for (int k = 0; k < 8; k++) {
        const double angle = (t + 2) * std::pow(10000.0, -double(k) / 7.0);
        EXPECT_NEAR(wpe[size_t(t) * 16 + k], std::sin(angle), 1e-12) << name << " t " << t << " k " << k;
        EXPECT_NEAR(wpe[size_t(t) * 16 + 8 + k], std::cos(angle), 1e-12) << name << " t " << t << " k " << k;
      }
  }
  c.head = Head::Tied;  // the tied head would read the scaled table: refused
  Model<double> tied(c);
  EXPECT_THROW(detail::use_fairseq_inputs(tied, 7), Error);
}

// A given model whose run started every window with data.bos reads the claims' windows so too: each
// window is that id, then the T - 1 corpus tokens from the same start as without it.
TEST(TheoryWindows, AFirstTokenStartsEveryWindowOfAUnit) {
  std::vector<int32_t> corpus(500);
  for (size_t i = 0; i < corpus.size(); i++) corpus[i] = int32_t(i % 250);
  const auto plain = detail::window_units(corpus, 3, 2, 8, 7, 61);
  const auto first = detail::window_units(corpus, 3, 2, 8, 7, 61, 256);
  ASSERT_EQ(plain.size(), 3u);
  ASSERT_EQ(first.size(), 3u);
  for (size_t u = 0; u < 3; u++) {
    ASSERT_EQ(first[u].size(), plain[u].size());
    for (size_t w = 0; w < 2; w++) {
      EXPECT_EQ(first[u][w * 8], 256);
      for (size_t t = 1; t < 8; t++) EXPECT_EQ(first[u][w * 8 + t], plain[u][w * 8 + t - 1]) << u << " " << w << " " << t;
    }
  }
}
