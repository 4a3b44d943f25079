// encdec.cpp: the claims made on encoder-decoder translation models, measured at
// initialization on translation pairs in their papers' settings: Xiong et al. 2020 (the gradient of
// the FFN output weights W^(2,l) grows toward the output in Post-LN, is flat in Pre-LN; their Fig. 3:
// d = 512, FFN 1024, 4 heads, 6-6 layers, Xavier, ReLU, fairseq's inputs; and their Theorem 1: the
// last layer's W^2 gradient is independent of the depth L in Post-LN and shrinks like 1/sqrt(L) in
// Pre-LN), Liu et al. 2020 (the change of the model output after one update grows like O(N) with
// depth for Post-LN and O(log N) for Pre-LN and Admin, measured here on the logits after one Adam step
// at a small learning rate, where the change is linear in it) and DeepNet's Thm 4.2 (with DeepNorm's
// constants the update does not grow with depth).
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "theory/checks.h"
#include "util/error.h"
#include "util/rng.h"

namespace normlab::theory::detail {

namespace {

ModelConfig encdec_config(int d, int heads, int ff, int layers, int seq_len, Placement p, uint64_t seed) {
  ModelConfig c;
  c.arch = Arch::EncDec;
  c.d_model = d;
  c.n_heads = heads;
  c.d_ff = ff;
  c.n_layers = layers;
  c.dec_layers = layers;
  c.seq_len = seq_len;
  c.placement = {p};
  c.activation = Activation::Relu;
  c.init = InitScheme::Xavier;
  c.seed = long(seed);
  return c;
}

// B pairs picked by the seed
Batch pairs_batch(const Bench& b, int B, uint64_t stream) {
  Rng rng(uint64_t(b.opt.seed), stream);
  return sample_translation_batch(*b.pairs, B, rng);
}

double forward_backward(Model<double>& m, const Batch& batch) {
  m.zero_grad();
  const double loss = m.forward(batch.ids.data(), batch.labels.data(), batch.B, batch.T, nullptr, batch.mask_or_null(),
                                batch.source());
  m.backward();
  return loss;
}

double grad_norm_of(const Model<double>& m, const std::string& name) {
  const ParamSpec* p = m.table().find(name);
  double s = 0;
  for (size_t i = 0; i < p->numel; i++) s += m.grads()[p->offset + i] * m.grads()[p->offset + i];
  return std::sqrt(s);
}

double* tensor_of(Model<double>& m, const std::string& name) {
  const ParamSpec* p = m.table().find(name);
  if (!p) throw Error("theory: the parameter " + name + " is missing");
  return m.params().data() + p->offset;
}

// Xiong et al.'s Theorem 1 setting: W^Q = W^K = 0 (every attention row uniform): the query and key
// rows of each fused self-attention qkv, the whole cross-attention query map and the key half of kv.
void zero_queries_and_keys(Model<double>& m) {
  const ModelConfig& c = m.config();
  const size_t C = size_t(c.d_model), kvw = size_t(c.kv_heads()) * c.head_size();
  for (const ParamSpec& p : m.table().specs) {
    size_t rows = 0;
    if (p.name.ends_with(".attn.qkv.weight") || p.name.ends_with(".attn.qkv.bias")) rows = C + kvw;
    else if (p.name.ends_with(".cross.q.weight") || p.name.ends_with(".cross.q.bias")) rows = C;
    else if (p.name.ends_with(".cross.kv.weight") || p.name.ends_with(".cross.kv.bias")) rows = C;
    else continue;
    const size_t cols = p.shape.size() == 2 ? size_t(p.shape[1]) : 1;
    std::fill(m.params().begin() + long(p.offset), m.params().begin() + long(p.offset + rows * cols), 0.0);
  }
}

}  // namespace

void use_fairseq_inputs(Model<double>& m, uint64_t seed) {
  const ModelConfig& c = m.config();
  if (c.head != Head::Untied || !c.shared_embeddings || c.positions != Positions::Learned)
    throw Error("theory: fairseq's inputs need an untied head, one shared table and a position table");
  const int d = c.d_model, V = c.vocab_size();
  double* wte = tensor_of(m, "wte.weight");
  double* head = tensor_of(m, "lm_head.weight");
  Rng rng(seed, 41);
  const double sd = 1.0 / std::sqrt(double(d)), scale = std::sqrt(double(d));
  for (size_t i = 0; i < size_t(V) * d; i++) {
    head[i] = sd * rng.normal();
    wte[i] = scale * head[i];
  }
  const int half = d / 2;
  const double step = std::log(10000.0) / (half - 1);
  for (const char* name : {"wpe.weight", "enc.wpe.weight"}) {
    double* wpe = tensor_of(m, name);
    for (int t = 0; t < c.seq_len; t++) {
      const double pos = t + 2;  // fairseq counts positions from padding_idx + 1 = 2
      for (int k = 0; k < half; k++) {
        wpe[size_t(t) * d + k] = std::sin(pos * std::exp(-step * k));
        wpe[size_t(t) * d + half + k] = std::cos(pos * std::exp(-step * k));
      }
      if (d % 2) wpe[size_t(t) * d + d - 1] = 0;  // fairseq pads an odd width with a zero column
    }
  }
}

namespace {

constexpr int kPairsLen = 128;  // the longest pair a batch holds
const char* const kFairseq = "fairseq's inputs (token embeddings N(0, 1/d) times sqrt(d), sinusoidal positions, the output "
                             "projection the unscaled table)";

}  // namespace

void xiong_fig3_checks(const Bench& b, std::vector<Measurement>& out) {
  if (b.given) {  // one given model: these need fresh models built in their papers' settings
    attempt(b, out, {"Xiong et al. 2020"}, [] {
      throw NotApplicable("a statement about initialization, measured on fresh encoder-decoders of its paper's "
                          "setting (Fig. 3), encoder and decoder; not run on a given model");
    });
    return;
  }
  if (!b.fresh || !b.pairs) return;  // statements about initialization, on translation pairs
  const int seq_len = kPairsLen;
  const uint64_t seed = uint64_t(b.opt.seed);
  const std::string fairseq = kFairseq;
  {  // Xiong et al. 2020, Fig. 3
    const int N = 6;
    const Batch batch = pairs_batch(b, 4, 31);
    const int d = b.opt.paper_d_model;
    const std::string setting = fmt::format("encoder-decoder {}-{}, d = {}, FFN {}, 4 heads, ReLU, Xavier, {}, "
                                            "eps = 1e-5, at init; 4 pairs of {}",
                                            N, N, d, 2 * d, fairseq, b.pairs_name);
    for (Placement p : {Placement::Post, Placement::Pre}) {
      ModelConfig c = encdec_config(d, 4, 2 * d, N, seq_len, p, seed);
      c.head = Head::Untied;
      Model<double> m(c);
      use_fairseq_inputs(m, seed);
      forward_backward(m, batch);
      std::vector<double> enc, dec;
      for (int l = 0; l < N; l++) {
        enc.push_back(grad_norm_of(m, fmt::format("enc.h.{}.mlp.proj.weight", l)));
        dec.push_back(grad_norm_of(m, fmt::format("h.{}.mlp.proj.weight", l)));
      }
      const bool post = p == Placement::Post;
      for (bool decoder : {false, true}) {
        const auto& g = decoder ? dec : enc;
        // the change over the stack from a fit of log ||dL/dW2|| against the layer, all N layers (not the
        // two ends alone): Post-LN's "grows" is an effect (its sign); Pre-LN's "about flat" a law (flat
        // against growth)
        std::vector<double> layer, log_g;
        for (int l = 0; l < N; l++) layer.push_back(l + 1), log_g.push_back(std::log(g[size_t(l)]));
        double slope = 0;
        fit_rss(layer, log_g, [](double v) { return v; }, &slope);
        const double change = std::exp(slope * (N - 1));
        const std::string stack = decoder ? "decoder" : "encoder";
        const std::string detail = fmt::format("{} layers 1..{}: [{:.3g}]; last / first {:.3f}; fitted change {:.3f}",
                                               stack, N, fmt::join(g, ", "), g.back() / g.front(), change);
        const nlohmann::json nums = {{"encoder", enc}, {"decoder", dec}, {"fitted_change", change}};
        const Said head{"Xiong et al. 2020",
                        post ? "at init, ||dL/dW2|| of the FFN output weights grows with the layer index in Post-LN"
                             : "at init, ||dL/dW2|| is about flat across layers in Pre-LN",
                        fmt::format("{}, {}", post ? "Post-LN" : "Pre-LN", setting),
                        post ? fmt::format("{} ||dL/dW2||: log of its fitted change from the first layer to the last "
                                           "(the slope of log ||dL/dW2|| against the layer, times {}; > 0: it grows)",
                                           stack, N - 1)
                             : fmt::format("{} log ||dL/dW2|| against the layer l = 1 .. {}", stack, N)};
        if (post)
          out.push_back(effect(head, {std::log(change)}, EffectRule::towards(1), detail, nums));
        else
          out.push_back(law(head,
                            {"l (layer)", "log ||dL/dW2||",
                             {Law::flat("flat (the claim)"), exponential_law("exponential in l"), power_law("a power of l")}},
                            Series{layer, log_g}, detail, nums));
        out.back().reported = post ? "Fig. 3 (IWSLT14 De-En, d 512, 6-6, 10 seeds): the W2 gradient norm grows with the layer "
                                     "index; the last layer's stays about 1.6 from 6-6 to 14-14 layers"
                                   : "Fig. 3: about flat across layers; the last layer's decreases with depth";
      }
    }
  }
}

void xiong_thm1_checks(const Bench& b, std::vector<Measurement>& out) {
  if (b.given) {
    attempt(b, out, {"Xiong et al. 2020 Thm 1"}, [] {
      throw NotApplicable("needs a family of depths of fresh encoder-decoders, not one model");
    });
    return;
  }
  if (!b.fresh || !b.pairs) return;
  const int seq_len = kPairsLen;
  const uint64_t seed = uint64_t(b.opt.seed);
  const std::string fairseq = kFairseq;
  {  // Xiong et al. 2020, Theorem 1: the last layer's W2 gradient against the depth
    const std::vector<int> depths = {2, 4, 8, 16};
    const int d = b.opt.family_d_model;
    const Batch batch = pairs_batch(b, 4, 33);
    const std::string setting =
        fmt::format("encoder-decoder N-N for N in [{}], d = {}, one head, every matrix d x d (FFN {}), W^Q = W^K = 0 "
                    "(uniform attention), ReLU, Xavier, {}, eps = 1e-5, at init; 4 pairs of {}",
                    fmt::join(depths, ", "), d, d, fairseq, b.pairs_name);
    for (Placement p : {Placement::Post, Placement::Pre}) {
      std::vector<double> log_n, log_g, dec, enc;
      for (int N : depths) {
        ModelConfig c = encdec_config(d, 1, d, N, seq_len, p, seed);
        c.head = Head::Untied;
        Model<double> m(c);
        use_fairseq_inputs(m, seed);
        zero_queries_and_keys(m);
        forward_backward(m, batch);
        dec.push_back(grad_norm_of(m, fmt::format("h.{}.mlp.proj.weight", N - 1)));
        enc.push_back(grad_norm_of(m, fmt::format("enc.h.{}.mlp.proj.weight", N - 1)));
        log_n.push_back(std::log(double(N)));
        log_g.push_back(std::log(dec.back()));
      }
      double slope = 0;
      fit_rss(log_n, log_g, [](double v) { return v; }, &slope);
      const bool post = p == Placement::Post;
      std::vector<double> n_x(depths.begin(), depths.end());
      const Law flat = Law::flat("independent of L"), shrink = fixed_power(-0.5, "~ L^(-1/2)");
      out.push_back(law({"Xiong et al. 2020 Thm 1",
                         post ? "at init, the last layer's ||dL/dW2|| is O(d sqrt(ln d)), independent of the depth L, in "
                                "Post-LN"
                              : "at init, the last layer's ||dL/dW2|| is O(d sqrt(ln d / L)): it shrinks like 1/sqrt(L) in "
                                "Pre-LN",
                         fmt::format("{}, {}", post ? "Post-LN" : "Pre-LN", setting),
                         "log of the decoder's last-layer ||dL/dW2|| against the depth N"},
                        {"N (depth)", "log ||dL/dW2|| (decoder, last layer)",
                         {post ? flat : shrink, post ? shrink : flat, power_law("~ N^s, s free")}},
                        Series{n_x, log_g},
                        fmt::format("decoder last layer [{:.3g}], encoder last layer [{:.3g}] at N = [{}]; as a free "
                                    "power ~ N^{:.2f}",
                                    fmt::join(dec, ", "), fmt::join(enc, ", "), fmt::join(depths, ", "), slope),
                        {{"depths", depths}, {"decoder_last", dec}, {"encoder_last", enc}, {"exponent", slope}}));
      out.back().reported = post ? "Theorem 1 (a bound; W^Q = W^K = 0, Xavier): independent of L; Fig. 3: the last layer's "
                                   "stays about 1.6 from 6-6 to 14-14 layers"
                                 : "Theorem 1: O(d sqrt(ln d / L)); Fig. 3: the last layer's decreases with depth";
    }
  }
}

// The update-size claims, one attempt() each (long because the claims are many: each block reads alone).
void update_size_checks(const Bench& b, std::vector<Measurement>& out) {
  if (b.given) {
    attempt(b, out, {"Liu et al. 2020", "DeepNet Thm 4.2"}, [] {
      throw NotApplicable("needs a family of depths of fresh encoder-decoders, not one model");
    });
    return;
  }
  if (!b.fresh || !b.pairs) return;
  const int seq_len = kPairsLen;
  const uint64_t seed = uint64_t(b.opt.seed);
  {  // Liu et al. 2020 and DeepNet Thm 4.2: output change of one update against depth
    const std::vector<int> depths = {1, 2, 4, 8, 16};
    const double lr = 1e-5;
    const Batch batch = pairs_batch(b, 4, 32);
    const int d = b.opt.family_d_model;
    const std::string models = fmt::format("encoder-decoder N-N for N in [{}], d = {}, FFN {}, 4 heads, ReLU, Xavier; "
                                           "4 pairs of {}", fmt::join(depths, ", "), d, 4 * d, b.pairs_name);
    const std::string setting =
        fmt::format("{}; one Adam step (lr {:g}, the first step: lr * g / (|g| + 1e-8))", models, lr);
    constexpr int kDraws = 3;  // random perturbations per model (the theorem's setting)
    // ||F(W*) - F(W)||^2 of the logits at each depth after the Adam step, and (draws > 0) the mean over
    // random-sign perturbations of the same size, independent of W
    struct Changes {
      std::vector<double> n, adam, random;
    };
    auto changes = [&](Placement p, int draws) {
      Changes ch;
      for (int N : depths) {
        ModelConfig c = encdec_config(d, 4, 4 * d, N, seq_len, p, seed);
        if (p == Placement::Admin) c.admin_init = AdminInit::Profile;
        if (p == Placement::DeepNorm) c.init = InitScheme::DeepNet;
        Model<double> m(c);
        if (p == Placement::Admin)  // Admin's own initialization: omega profiled on the batch
          m.profile_admin(batch.ids.data(), batch.B, batch.T, batch.mask_or_null(), batch.source());
        forward_backward(m, batch);
        const size_t nl = size_t(batch.B) * batch.T * m.config().vocab_size();
        m.forward(batch.ids.data(), batch.labels.data(), batch.B, batch.T, nullptr, batch.mask_or_null(), batch.source());
        const std::vector<double> before(m.logits(), m.logits() + nl);
        const std::vector<double> w0 = m.params();
        auto change_at = [&](const std::vector<double>& w) {  // ||F(W*) - F(W)||^2 of the logits
          std::copy(w.begin(), w.end(), m.params().begin());
          m.forward(batch.ids.data(), batch.labels.data(), batch.B, batch.T, nullptr, batch.mask_or_null(), batch.source());
          double d2 = 0;
          for (size_t i = 0; i < nl; i++) d2 += (m.logits()[i] - before[i]) * (m.logits()[i] - before[i]);
          return d2;
        };
        std::vector<double> w = w0;
        for (size_t i = 0; i < w.size(); i++) w[i] -= lr * m.grads()[i] / (std::abs(m.grads()[i]) + 1e-8);
        ch.n.push_back(double(N));
        ch.adam.push_back(change_at(w));
        // the theorem assumes a perturbation independent of W: random signs of the same size (lr per
        // parameter, as Adam's first step), averaged over the draws; the Adam step follows the
        // gradient, so its layers add coherently
        double mean = 0;
        for (int draw = 0; draw < draws; draw++) {
          Rng r(seed, uint64_t(100 + 16 * draw + N));
          for (size_t i = 0; i < w.size(); i++) w[i] = w0[i] + (r.uniform() < 0.5 ? -lr : lr);
          mean += change_at(w) / draws;
        }
        if (draws > 0) ch.random.push_back(mean);
      }
      return ch;
    };
    // the fitted exponent p of ||dF||^2 ~ N^p (log-log slope over N), and log(RSS of a log N + b / RSS
    // of a N + b) (< 0: the logarithmic law fits better)
    auto exponent = [&](const std::vector<double>& n, const std::vector<double>& change) {
      std::vector<double> log_n, log_change;
      for (size_t i = 0; i < n.size(); i++) log_n.push_back(std::log(n[i])), log_change.push_back(std::log(change[i]));
      double slope = 0;
      fit_rss(log_n, log_change, [](double v) { return v; }, &slope);
      return slope;
    };
    auto log_vs_linear = [](const std::vector<double>& n, const std::vector<double>& change) {
      return log_rss_ratio(n, change, [](double v) { return v; }, [](double v) { return std::log(v); });
    };
    auto describe = [&](const std::vector<double>& change, double p, double lin_vs_log, const char* what) {
      return fmt::format("{} at N = [{}]: [{:.3g}] (x{:.1f} from N = 1 to 16); exponent p = {:.2f}; "
                         "log(RSS log / RSS linear) = {:.2f} (> 0: linear fits better)",
                         what, fmt::join(depths, ", "), fmt::join(change, ", "), change.back() / change.front(), p,
                         lin_vs_log);
    };
    auto numbers = [&](const std::vector<double>& change, double p, double lin_vs_log) {
      return nlohmann::json{{"depths", depths}, {"change", change}, {"exponent", p}, {"log_rss_log_over_linear", lin_vs_log}};
    };
    auto random_setting = [&](const std::string& method) {
      return fmt::format("{}, {}; the theorem's setting: W* = W + a random-sign perturbation of the Adam step's size ({:g} "
                         "per parameter, independent of W), mean of {} draws", method, models, lr, kDraws);
    };
    // O(N) against O(log N) (and no growth), fitted to ||dF||^2 itself: the theorem's quantity
    auto liu_rule = [](bool linear) {
      const Law lin{Law::Shape, "a N + b: O(N)", [](double v) { return v; }};
      const Law log{Law::Shape, "a log N + b: O(log N)", [](double v) { return std::log(v); }};
      return LawRule{"N (depth)", "||F(W*) - F(W)||^2 of the logits", {linear ? lin : log, linear ? log : lin,
                                                                       Law::flat("no growth")}, 0, 1};
    };
    auto liu = [&](const std::string& statement, const std::string& row_setting, const char* quantity, bool linear,
                   const Changes& ch, bool random) {
      const std::vector<double>& change = random ? ch.random : ch.adam;
      const double slope = exponent(ch.n, change), lin_vs_log = log_vs_linear(ch.n, change);
      out.push_back(law({"Liu et al. 2020", statement, row_setting, quantity}, liu_rule(linear), Series{ch.n, change},
                        describe(change, slope, lin_vs_log, random ? "E||dF||^2" : "||dF||^2"),
                        numbers(change, slope, lin_vs_log)));
    };
    const Changes post = changes(Placement::Post, kDraws), pre = changes(Placement::Pre, kDraws);
    for (const Changes* ch : {&post, &pre}) {
      const bool is_post = ch == &post;
      const std::string method = is_post ? "Post-LN" : "Pre-LN";
      liu(is_post ? "the output change of one update grows like O(N) with depth in Post-LN"
                  : "the output change of one update grows like O(log N) with depth in Pre-LN",
          fmt::format("{}, {}", method, setting), "||F(W*) - F(W)||^2 of the logits against the depth N", is_post, *ch,
          false);
      out.back().reported = is_post ? "Theorem 2: the output change E||F(x, W) - F(x, W*)||^2 is O(N) for an N-layer Post-LN"
                                    : "Theorem 2: O(log N) for Pre-LN (and for Admin)";
      // the same claim in the theorem's own setting: the random perturbation
      liu(is_post ? "the output change of a perturbation independent of W grows like O(N) with depth in Post-LN"
                  : "the output change of a perturbation independent of W grows like O(log N) with depth in Pre-LN",
          random_setting(method), "E||F(W*) - F(W)||^2 of the logits against the depth N (random perturbation)", is_post,
          *ch, true);
      out.back().reported = is_post ? "Theorem 2 (its assumption: W* - W independent of W): O(N) for Post-LN"
                                    : "Theorem 2 (its assumption: W* - W independent of W): O(log N) for Pre-LN";
    }
    {  // Admin: Post-LN with omega on the shortcut, profiled as in the paper; the Adam step and the theorem's setting
      const Changes ch = changes(Placement::Admin, kDraws);
      const std::string method = "Admin (x <- LN(omega x + F(x)), omega profiled on the batch)";
      liu("with Admin's profiled omega, the output change of one update grows like O(log N)", method + ", " + setting,
          "||F(W*) - F(W)||^2 of the logits against the depth N (Admin)", false, ch, false);
      out.back().reported = "Theorem 2 and Sec. 4: Admin's profiled omega makes the dependency O(log N) (O(1) with omega = "
                            "sqrt(S))";
      liu("with Admin's profiled omega, the output change of a perturbation independent of W grows like O(log N)",
          random_setting(method), "E||F(W*) - F(W)||^2 of the logits against the depth N (Admin; random perturbation)",
          false, ch, true);
      out.back().reported = "Theorem 2 (its assumption: W* - W independent of W): O(log N) for Admin";
    }
    {  // DeepNet Thm 4.2: the same update with DeepNorm's constants and init; its bound is on ||dF||, not its square
      const Changes ch = changes(Placement::DeepNorm, 0);
      const double slope = exponent(ch.n, ch.adam) / 2, lin_vs_log = log_vs_linear(ch.n, ch.adam);
      const double post_slope = exponent(post.n, post.adam) / 2;
      std::vector<double> log_change;
      for (double v : ch.adam) log_change.push_back(0.5 * std::log(v));
      out.push_back(law({"DeepNet Thm 4.2",
                         "with DeepNorm's alpha and beta, the model update of one step does not grow with depth (bounded "
                         "by a constant times the step), unlike Post-LN's",
                         "DeepNorm (LN(alpha x + F(x)), the encoder-decoder's alpha and beta, DeepNet's init), " + setting,
                         "log ||F(W*) - F(W)|| of the logits against the depth N"},
                        {"N (depth)", "log ||F(W*) - F(W)||",
                         {Law::flat("independent of N (the claim)"), fixed_power(0.5, "~ N^(1/2): Post-LN's O(N) in ||dF||^2"),
                          power_law("~ N^q, q free")}},
                        Series{ch.n, log_change},
                        fmt::format("{}; ||dF|| ~ N^{:.2f}, Post-LN's (the Liu et al. row's models) ~ N^{:.2f}",
                                    describe(ch.adam, 2 * slope, lin_vs_log, "||dF||^2"), slope, post_slope),
                        {{"depths", depths}, {"change_squared", ch.adam}, {"exponent", slope}, {"post_exponent", post_slope}}));
      out.back().reported = "DeepNet (Wang et al. 2022) Thm 4.2: ||dF|| <= sum_i sqrt(v_i^2 + w_i^2) / alpha ||theta_i* - "
                            "theta_i||; with DeepNorm's constants the update is O(eta), independent of N (Fig. 4: "
                            "Post-LN's early updates grow with depth)";
    }
  }
}

}  // namespace normlab::theory::detail
