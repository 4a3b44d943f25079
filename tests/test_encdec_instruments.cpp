// test_encdec_instruments.cpp: the instruments on encoder-decoder models against independent oracles,
// with odd sizes (d 9, 3 heads, F 13, 2 encoder and 3 decoder layers) and padding: rectangular
// attention statistics against Eigen's Jacobi SVD and closed forms; every attention matrix the report
// reads against a naive recomputation from the parameters and the saved norm outputs; the per-stack
// dynamics against central finite differences of the loss and closed forms of the embedding streams;
// the decoder and source stream Jacobians against central finite differences (perturbing the learned
// positions, which add to the streams), and their matrix-free extremes against the dense SVD.
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>
#include <fmt/format.h>

#include "analysis/attention.h"
#include "analysis/dynamics.h"
#include "analysis/jacobian.h"
#include "analysis/lanczos.h"
#include "analysis/linalg.h"
#include "check.h"
#include "model/model.h"
#include "model/params.h"
#include "ops/common.h"
#include "util/error.h"

using namespace normlab;
using namespace normlab::analysis;
using namespace normlab::test;

namespace {

// Odd sizes: C = 9 with 3 heads of 3, F = 13, N = 2 encoder and M = 3 decoder layers.
ModelConfig small_encdec(Placement p) {
  ModelConfig c;
  c.arch = Arch::EncDec;
  c.d_model = 9;
  c.n_heads = 3;
  c.n_layers = 2;
  c.dec_layers = 3;
  c.d_ff = 13;
  c.vocab = 17;
  c.seq_len = 8;
  c.placement = {p};
  c.init_std = 0.3;  // attention far from uniform, so every path carries signal
  return c;
}

// A batch of B rows: source row b keeps S - pad - b tokens, target row b keeps T - b (right padding,
// no label there); seeded ids.
Batch pair_batch(const ModelConfig& c, int B, int S, int T, int src_pad, uint64_t seed) {
  Rng rng(seed);
  Batch x;
  x.B = B;
  x.S = S;
  x.T = T;
  for (int b = 0; b < B; b++) {
    for (int s = 0; s < S; s++) {
      x.src.push_back(int32_t(rng.below(c.src_vocab_size())));
      x.src_mask.push_back(s < S - src_pad - b);
    }
    for (int t = 0; t < T; t++) {
      x.ids.push_back(int32_t(rng.below(c.vocab_size())));
      x.mask.push_back(t < T - b);
      x.labels.push_back(t < T - b ? int32_t(rng.below(c.vocab_size())) : ops::kIgnoreLabel);
    }
  }
  return x;
}

double run(Model<double>& m, const Batch& x) {
  return m.forward(x.ids.data(), x.labels.data(), x.B, x.T, nullptr, x.mask.data(), x.source());
}

double jacobi_norm2(const double* a, int rows, int cols) {
  const Eigen::MatrixXd A = Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(a, rows, cols);
  return Eigen::JacobiSVD<Eigen::MatrixXd>(A).singularValues()(0);
}

}  // namespace

TEST(EncDecAttentionStats, RectangularClosedFormsAndRandomMatrices) {
  // one query over k uniform keys among S: ||A|| = 1/sqrt(k) = sqrt(T/k), the chain's lower end
  for (auto [T, S, k] : {std::tuple{1, 5, 5}, {1, 5, 3}, {7, 3, 3}, {5, 11, 8}}) {
    std::vector<double> a(size_t(T) * S, 0.0);
    for (int i = 0; i < T; i++)
      for (int j = 0; j < k; j++) a[size_t(i) * S + j] = 1.0 / k;
    const AttentionMatrixStats s = attention_matrix_stats(a.data(), T, S);
    EXPECT_EQ(s.keys, k);
    EXPECT_NEAR(s.norm2, std::sqrt(double(T) / k), 1e-13) << T << "x" << S;
    EXPECT_NEAR(s.lower, std::sqrt(double(T) / k), 1e-13);
    EXPECT_TRUE(s.chain_holds);
  }
  // every query on one key: ||A|| = sqrt(c_max) = sqrt(T)
  std::vector<double> one(size_t(7) * 4, 0.0);
  for (int i = 0; i < 7; i++) one[size_t(i) * 4 + 2] = 1.0;
  const AttentionMatrixStats s1 = attention_matrix_stats(one.data(), 7, 4);
  EXPECT_NEAR(s1.norm2, std::sqrt(7.0), 1e-13);
  EXPECT_NEAR(s1.c_max, 7.0, 1e-13);
  EXPECT_TRUE(s1.chain_holds);
  // random softmax rows, some columns padded (probability exactly 0): the chain holds and ||A||_2
  // equals Eigen's Jacobi SVD (another algorithm than LAPACK's dgesdd)
  Rng rng(9);
  for (int trial = 0; trial < 60; trial++) {
    const int T = 1 + int(rng.below(9)), S = 1 + int(rng.below(11)), pad = int(rng.below(uint64_t(S)));
    std::vector<double> a(size_t(T) * S, 0.0);
    for (int i = 0; i < T; i++) {
      double sum = 0;
      for (int j = 0; j < S - pad; j++) sum += a[size_t(i) * S + j] = std::exp(3 * rng.normal());
      for (int j = 0; j < S - pad; j++) a[size_t(i) * S + j] /= sum;
    }
    const AttentionMatrixStats s = attention_matrix_stats(a.data(), T, S);
    EXPECT_TRUE(s.chain_holds) << "trial " << trial << " " << T << "x" << S;
    EXPECT_EQ(s.keys, S - pad);
    EXPECT_NEAR(s.norm2, jacobi_norm2(a.data(), T, S), 1e-13 * std::sqrt(double(T)));
    EXPECT_LE(s.row_sum_dev, 1e-14);
  }
  // the softmax-margin bound: scores in [-M, M] over k keys; at its extreme (one key at +M, the rest
  // at -M in every row) c_max equals T / (1 + (k-1) e^-2M)
  for (int trial = 0; trial < 40; trial++) {
    const int T = 1 + int(rng.below(8)), k = 1 + int(rng.below(9));
    const double M = 0.1 + 2 * rng.uniform();
    std::vector<double> a(size_t(T) * k);
    for (int i = 0; i < T; i++) {
      double sum = 0;
      for (int j = 0; j < k; j++) sum += a[size_t(i) * k + j] = std::exp(M * (2 * rng.uniform() - 1));
      for (int j = 0; j < k; j++) a[size_t(i) * k + j] /= sum;
    }
    EXPECT_LE(attention_matrix_stats(a.data(), T, k).norm2, softmax_margin_bound(T, k, M) * (1 + 1e-14));
    for (int i = 0; i < T; i++)
      for (int j = 0; j < k; j++) a[size_t(i) * k + j] = (j == 0 ? std::exp(M) : std::exp(-M)) / (std::exp(M) + (k - 1) * std::exp(-M));
    EXPECT_NEAR(attention_matrix_stats(a.data(), T, k).c_max, std::pow(softmax_margin_bound(T, k, M), 2), 1e-12);
  }
}

// Every attention matrix the report reads is the softmax recomputed naively from the saved inputs of
// each sub-layer (its norm output h, the memory) and the parameters; the spectra match Jacobi SVD.
TEST(EncDecAttentionStats, ModelHeadsMatchANaiveRecomputation) {
  for (Placement p : {Placement::Pre, Placement::Post}) {
    SCOPED_TRACE(to_string(p));
    const ModelConfig c = small_encdec(p);
    Model<double> m(c);
    const Batch x = pair_batch(c, 1, 7, 5, 2, 3);  // 5 real source tokens of 7
    run(m, x);
    const AttentionReport r = analyze_attention(m);
    const int C = c.d_model, NH = c.n_heads, HS = C / NH, S = x.S, T = x.T, dec0 = c.first_decoder_slot();
    ASSERT_EQ(r.heads_by_layer.size(), size_t(NH) * (c.n_layers + 2 * 3));
    ASSERT_EQ(r.S, S);
    size_t k = 0;
    for (int i = 0; i < c.n_slots(); i++) {
      const Slot sl = c.slot(i);
      if (sl.kind == Sublayer::Mlp) continue;
      const bool cross = sl.kind == Sublayer::Cross;
      const int rows = sl.encoder ? S : T, cols = cross ? S : rows;
      const SublayerParams<double>& pp = m.sublayer_params_of(i);
      const double* h = m.acts(i).h;
      const double* keys_from = cross ? m.memory() : h;
      const double* wk = cross ? pp.wkv : pp.w1 + size_t(C) * C;
      const double* bk = cross ? pp.bkv : pp.b1 + C;
      for (int hd = 0; hd < NH; hd++, k++) {
        const HeadReport& rep = r.heads_by_layer[k];
        EXPECT_EQ(rep.kind, cross ? "cross" : "self");
        EXPECT_EQ(rep.stack, sl.encoder ? "encoder" : "decoder");
        EXPECT_EQ(rep.causal, !sl.encoder && !cross);
        ASSERT_EQ(rep.stats.rows, rows);
        ASSERT_EQ(rep.stats.cols, cols);
        // naive: q_t = h_t Wq^T + bq, k_j likewise, softmax over the allowed keys
        std::vector<double> a(size_t(rows) * cols, 0.0);
        for (int t = 0; t < rows; t++) {
          std::vector<double> sc(size_t(cols), -INFINITY);
          double mx = -INFINITY;
          for (int j = 0; j < cols; j++) {
            const bool masked = (sl.encoder || cross) ? !x.src_mask[size_t(j)] : (j > t || !x.mask[size_t(j)]);
            if (masked) continue;
            double dotp = 0;
            for (int e = 0; e < HS; e++) {
              const int row = hd * HS + e;
              double q = pp.b1[row], kk = bk[row];
              for (int cc = 0; cc < C; cc++) {
                q += h[size_t(t) * C + cc] * pp.w1[size_t(row) * C + cc];
                kk += keys_from[size_t(j) * C + cc] * wk[size_t(row) * C + cc];
              }
              dotp += q * kk;
            }
            sc[size_t(j)] = dotp / std::sqrt(double(HS));
            mx = std::max(mx, sc[size_t(j)]);
          }
          double sum = 0;
          for (int j = 0; j < cols; j++) sum += a[size_t(t) * cols + j] = std::isinf(sc[size_t(j)]) ? 0.0 : std::exp(sc[size_t(j)] - mx);
          for (int j = 0; j < cols; j++) a[size_t(t) * cols + j] /= sum;
        }
        const double* got = m.acts(i).att + size_t(hd) * rows * cols;
        expect_close(fmt::format("slot {} head {} probabilities", i, hd), std::vector<double>(got, got + a.size()), a, 1e-12, 1e-14);
        EXPECT_NEAR(rep.stats.norm2, jacobi_norm2(a.data(), rows, cols), 1e-12);
        EXPECT_EQ(rep.stats.keys, (sl.encoder || cross) ? S - 2 : T);
        EXPECT_TRUE(rep.stats.chain_holds);
        // every query reads a norm's output at init (no biases, beta 0) except the decoder's and
        // encoder's first self-attention in post (the embedding feeds it)
        const bool fed = p == Placement::Pre || cross || !(i == 0 || i == dec0);
        EXPECT_EQ(rep.seed_bound.has_value(), fed) << rep.bound_verdict;
        if (fed && !rep.causal) {
          EXPECT_LE(rep.stats.norm2, *rep.seed_bound * (1 + 1e-12)) << rep.bound_verdict;
        }
      }
    }
  }
}

// Per-stack gradient norms against central finite differences of the loss; stream norms of the
// first layers against the embeddings in closed form; branch ratios against the streams; padding
// ignored.
TEST(EncDecDynamics, MatchFiniteDifferencesAndClosedForms) {
  const ModelConfig c = small_encdec(Placement::Pre);
  Model<double> m(c);
  const Batch x = pair_batch(c, 2, 5, 6, 1, 5);
  const EncDecDynamicsReport r = analyze_dynamics_encdec(m, {x});
  ASSERT_EQ(r.encoder.layers.size(), 2u);
  ASSERT_EQ(r.decoder.layers.size(), 3u);
  const int C = c.d_model;
  // gradient norms of every sub-layer of encoder layer 1 and decoder layer 0 by central differences
  for (const auto* layer : {&r.encoder.layers[1], &r.decoder.layers[0]})
    for (const SublayerDynamicsEncDec& s : layer->sublayers) {
      double fd2 = 0;
      for (const ParamSpec& p : m.table().specs) {
        if (p.name.rfind(s.prefix + ".", 0) != 0) continue;
        for (size_t i = 0; i < p.numel; i++) {
          double& v = m.params()[p.offset + i];
          const double saved = v, h = 1e-5;
          v = saved + h;
          const double lp = run(m, x);
          v = saved - h;
          const double lm = run(m, x);
          v = saved;
          fd2 += std::pow((lp - lm) / (2 * h), 2);
        }
      }
      EXPECT_NEAR(s.grad_norm, std::sqrt(fd2), 1e-6 * std::sqrt(fd2) + 1e-9) << s.prefix;
    }
  // the layer's norm is the root sum of squares of its sub-layers' (pre has no per-layer gate)
  for (const StackDynamics* st : {&r.encoder, &r.decoder})
    for (const auto& l : st->layers) {
      double sq = 0;
      for (const auto& s : l.sublayers) sq += s.grad_norm * s.grad_norm;
      EXPECT_NEAR(l.grad_norm, std::sqrt(sq), 1e-12 * l.grad_norm);
      EXPECT_EQ(l.sublayers.size(), st == &r.encoder ? 2u : 3u);
    }
  // layer 0 of each stack reads the embeddings: wte[id] + wpe[t] (enc.wpe for the source; shared wte), its
  // RMS over the C channels
  const auto embed_norm = [&](const std::vector<int32_t>& ids, const std::vector<uint8_t>& mask, int len,
                              const char* pos) {
    const double* wte = m.params().data() + m.table().find("wte.weight")->offset;
    const double* wpe = m.params().data() + m.table().find(pos)->offset;
    double sum = 0;
    int n = 0;
    for (size_t i = 0; i < ids.size(); i++) {
      if (!mask[i]) continue;
      double s2 = 0;
      for (int cc = 0; cc < C; cc++) s2 += std::pow(wte[size_t(ids[i]) * C + cc] + wpe[(i % size_t(len)) * C + cc], 2);
      sum += std::sqrt(s2 / C);
      n++;
    }
    return sum / n;
  };
  EXPECT_NEAR(r.encoder.layers[0].stream_rms, embed_norm(x.src, x.src_mask, x.S, "enc.wpe.weight"), 1e-12);
  EXPECT_NEAR(r.decoder.layers[0].stream_rms, embed_norm(x.ids, x.mask, x.T, "wpe.weight"), 1e-12);
  // pre: x_out = x_in + f, so the branch ratio is ||x_out - x_in|| / ||x_in|| over real tokens
  run(m, x);
  for (int i = 0; i < c.n_slots(); i++) {
    const Slot sl = c.slot(i);
    const std::vector<uint8_t>& mask = sl.encoder ? x.src_mask : x.mask;
    const double* in = m.stream(i);
    const double* out = i + 1 == c.first_decoder_slot() ? m.acts(i).x_out : m.stream(i + 1);
    double sum = 0;
    int n = 0;
    for (size_t t = 0; t < mask.size(); t++) {
      if (!mask[t]) continue;
      double d2 = 0, x2 = 0;
      for (int cc = 0; cc < C; cc++) {
        d2 += std::pow(out[t * C + cc] - in[t * C + cc], 2);
        x2 += in[t * C + cc] * in[t * C + cc];
      }
      sum += std::sqrt(d2 / x2);
      n++;
    }
    const auto& layer = sl.encoder ? r.encoder.layers[size_t(sl.layer)] : r.decoder.layers[size_t(sl.layer - c.n_layers)];
    const SublayerDynamicsEncDec* s = nullptr;
    for (const auto& q : layer.sublayers)
      if (q.slot == i) s = &q;
    ASSERT_NE(s, nullptr);
    EXPECT_NEAR(s->branch_ratio, sum / n, 1e-12 * (sum / n)) << s->prefix;
  }
  // padded tokens (source and target) change nothing the report says
  Batch y = x;
  y.src[size_t(2) * y.S - 1] = (y.src[size_t(2) * y.S - 1] + 3) % 17;
  y.ids[size_t(2) * y.T - 1] = (y.ids[size_t(2) * y.T - 1] + 5) % 17;
  EXPECT_EQ(to_json(analyze_dynamics_encdec(m, {y})).dump(), to_json(r).dump());
  // refusals
  EXPECT_THROW(analyze_dynamics_encdec(m, {}), Error);
  Batch no_src = x;
  no_src.src.clear();
  EXPECT_THROW(analyze_dynamics_encdec(m, {no_src}), Error);
  ModelConfig g = c;
  g.arch = Arch::Gpt;
  g.dec_layers.reset();
  Model<double> gpt(g);
  EXPECT_THROW(analyze_dynamics_encdec(gpt, {x}), Error);
}

// The decoder's and the source's stream Jacobians: forward mode against central differences (the
// learned positions add to the streams, so d out / d wpe[t] is the Jacobian's column block t),
// causal structure, padded source columns exactly 0, and the matrix-free extremes against the dense
// SVD. Shapes: more source than target (the output side of J J^T, structural zeros for post) and
// fewer (the input side).
TEST(EncDecJacobian, DenseMatchesFiniteDifferencesAndLanczosTheDenseSvd) {
  for (Placement p : {Placement::Pre, Placement::Post})
    for (auto [S, T, pad] : {std::tuple{7, 4, 2}, {3, 6, 0}}) {
      SCOPED_TRACE(fmt::format("{} S {} T {}", to_string(p), S, T));
      const ModelConfig c = small_encdec(p);
      Model<double> m(c);
      const Batch x = pair_batch(c, 1, S, T, pad, 21);
      const int C = c.d_model, dec0 = c.first_decoder_slot(), last = c.n_slots();
      const auto out_at = [&](const char* pos, int col, double h) {
        double& v = m.params()[m.table().find(pos)->offset + size_t(col)];
        const double saved = v;
        v = saved + h;
        run(m, x);
        std::vector<double> out(m.stream(last), m.stream(last) + size_t(T) * C);
        v = saved;
        return out;
      };
      const auto fd_jacobian = [&](const char* pos, int in_len) {
        std::vector<double> J(size_t(T) * C * in_len * C);
        const double h = 1e-6;
        for (int k = 0; k < in_len * C; k++) {
          const std::vector<double> plus = out_at(pos, k, h), minus = out_at(pos, k, -h);
          for (int r = 0; r < T * C; r++) J[size_t(r) * in_len * C + k] = (plus[size_t(r)] - minus[size_t(r)]) / (2 * h);
        }
        return J;
      };
      const std::vector<double> fd_dec = fd_jacobian("wpe.weight", T), fd_src = fd_jacobian("enc.wpe.weight", S);
      run(m, x);
      std::vector<int> tgt(static_cast<size_t>(T)), src(static_cast<size_t>(S));
      for (int t = 0; t < T; t++) tgt[size_t(t)] = t;
      for (int s = 0; s < S; s++) src[size_t(s)] = s;
      const std::vector<double> jd = stream_jacobian(m, dec0, last, tgt, tgt), js = source_jacobian(m, src, tgt);
      expect_close("decoder Jacobian vs finite differences", jd, fd_dec, 1e-6, 1e-8);
      expect_close("source Jacobian vs finite differences", js, fd_src, 1e-6, 1e-8);
      for (int r = 0; r < T * C; r++) {
        for (int k = 0; k < T * C; k++) {
          if (k / C > r / C) {
            EXPECT_EQ(jd[size_t(r) * T * C + k], 0.0) << "the decoder is causal";
          }
        }
        for (int k = (S - pad) * C; k < S * C; k++) EXPECT_EQ(js[size_t(r) * S * C + k], 0.0) << "padded source column";
      }
      JacobianOptions o;
      o.lanczos_k = 3;
      const EncDecJacobianReport rep = analyze_jacobian_encdec(m, o);
      for (const auto& [e, fd, cols] : {std::tuple{&rep.decoder, &fd_dec, T * C}, {&rep.source, &fd_src, S * C}}) {
        SCOPED_TRACE(e->name);
        const std::vector<double> sv = singular_values(*fd, T * C, cols);
        ASSERT_TRUE(e->dense);
        ASSERT_EQ(e->dense->sv.size(), sv.size());
        for (size_t i = 0; i < sv.size(); i++) EXPECT_NEAR(e->dense->sv[i], sv[i], 1e-6 * sv[0]);
        // a source Jacobian with more rows than columns (target longer than source) has a cluster of
        // exact zeros on the input side (here >= S of them, to ~1e-16 in the dense SVD) that the
        // shifted solver cannot lock: it must say so (only its smallest are then missing)
        if (e->rows <= e->cols) {
          EXPECT_TRUE(e->lanczos_converged) << e->lanczos_reason;
        } else if (!e->lanczos_converged) {
          EXPECT_FALSE(e->lanczos_reason.empty());
          EXPECT_LT(e->dense->sv.back(), 1e-12 * sv[0]) << "not converged, yet no zero cluster (forward-mode SVD)";
        }
        ASSERT_FALSE(e->lanczos_largest.empty());
        for (size_t i = 0; i < e->lanczos_largest.size(); i++)
          EXPECT_NEAR(e->lanczos_largest[i], e->dense->sv[i], 1e-8 * sv[0]);
        if (e->lanczos_converged) {
          EXPECT_EQ(e->lanczos_smallest.size(), 3u);
        }
        for (size_t i = 0; i < e->lanczos_smallest.size(); i++)
          EXPECT_NEAR(e->lanczos_smallest[i], e->dense->sv[sv.size() - 1 - i], 1e-8 * sv[0] + 1e-6 * e->lanczos_smallest[i]);
        // post ends the decoder in a LayerNorm: T structural zeros, seen on the output side only
        EXPECT_EQ(e->lanczos_structural_zeros, p == Placement::Post && e->rows <= e->cols ? T : 0);
      }
    }
}
