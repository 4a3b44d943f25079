// init.cpp: parameter initialization (docs/MODEL.md "Initialization" and "Methods").
#include "model/init.h"

#include "ops/common.h"

#include <cmath>
#include <cstdlib>

#include "model/activation_of.h"
#include "model/hyper.h"
#include "model/methods.h"
#include "model/norm_of.h"
#include "model/params.h"
#include "util/rng.h"

namespace normlab {

namespace {


// The global layer a parameter belongs to ("h.3.attn.qkv.weight", "enc.h.0.rezero"), or -1.
int layer_of(const ModelConfig& cfg, const std::string& name) {
  const bool enc = name.starts_with("enc.h.");
  if (!enc && !name.starts_with("h.")) return -1;
  const int local = std::atoi(name.c_str() + (enc ? 6 : 2));
  return cfg.encdec() && !enc ? cfg.n_layers + local : local;
}

// Rows [first, last) of a fused weight that are value maps (the v rows of qkv, the v half of kv), and
// the rows of one of its key or value projections (C; grouped-query: kv_heads head_size). The qkv's
// value rows follow q (n_heads head_size) and k.
struct ValueRows {
  int64_t first = 0, last = 0;
  int64_t kv = 0;
};
ValueRows value_rows(const ModelConfig& cfg, const std::string& name, int64_t C) {
  const int64_t kvw = int64_t(cfg.kv_heads()) * cfg.head_size();
  const int64_t A = cfg.attn_width();
  if (name.ends_with(".qkv.weight")) return {A + kvw, A + 2 * kvw, kvw};
  if (name.ends_with(".kv.weight")) return {C, 2 * C, C};
  return {};
}

// The initial value of a method's scale (ParamRole::Gate).
double gate_init(const ModelConfig& cfg, const std::string& name, int layer) {
  if (name == "embed_scale") return cfg.embed_scale;  // model.embed_scale_learned
  if (name.ends_with(".attn.sinks")) return 0.0;  // sink logits (see docs/METHODS.md for why 0)
  for (const char* which : {"eigen_lr", "sqk", "suv", "sz"})  // nGPT's scaled parameters
    if (name == which || name.ends_with(std::string(".") + which)) return sphere_scale(which, cfg.d_model).init;
  if (name.ends_with(".omega")) return admin_omega(cfg.admin_init, cfg.stack_sublayers(layer));
  if (method_of(cfg.placement_of(layer)).gain == BranchGain::Channel) return layerscale_init(cfg.stack_depth(layer));
  return 0.0;  // ReZero and SkipInit start as the identity
}

// T-Fixup's scale of a matrix in `layer`'s stack: 0.67 N^(-1/4) in an encoder stack of N layers,
// (9M)^(-1/4) in a decoder stack of M layers. Applies to attn.proj, mlp.fc, mlp.proj, cross.proj and
// the value rows; 1 for everything else.
double tfixup_scale(const ModelConfig& cfg, int layer) {
  const double depth = cfg.stack_depth(layer);
  return cfg.encoder_layer(layer) ? 0.67 * std::pow(depth, -0.25) : std::pow(9.0 * depth, -0.25);
}

}  // namespace

template <class S>
void init_params(S* params, const ParamTable& table, const ModelConfig& cfg) {
  const InitScheme scheme = cfg.resolved_init();
  const int C = cfg.d_model;
  for (size_t i = 0; i < table.specs.size(); i++) {
    const ParamSpec& p = table.specs[i];
    S* w = params + p.offset;
    Rng rng(uint64_t(cfg.seed), i + 1);
    const int layer = layer_of(cfg, p.name);
    switch (p.role) {
      case ParamRole::NormGain:
        for (size_t j = 0; j < p.numel; j++) w[j] = S(1);
        continue;
      case ParamRole::NormScalar: {
        const double v = norm_scalar_init(cfg.norm, cfg, p.name);
        for (size_t j = 0; j < p.numel; j++) w[j] = S(v);
        continue;
      }
      case ParamRole::NormBias:
      case ParamRole::LinearBias:
        for (size_t j = 0; j < p.numel; j++) w[j] = S(0);
        continue;
      case ParamRole::Gate: {
        if (init_hyper_param(cfg, p, layer, w, rng)) continue;
        const double v = gate_init(cfg, p.name, layer);
        for (size_t j = 0; j < p.numel; j++) w[j] = S(v);
        continue;
      }
      case ParamRole::Embedding: {
        // T-Fixup: token embeddings N(0, C^(-1/2)) times (9 x stack depth)^(-1/4); positions keep init_std.
        // As the official code (layer6ai-labs/T-Fixup): a table shared by encoder and decoder takes the
        // encoder's (9N)^(-1/4) (the encoder scales it, the decoder skips it); the decoder's own wte (9M).
        double std = cfg.init_std;
        if (scheme == InitScheme::TFixup && (p.name == "wte.weight" || p.name == "enc.wte.weight")) {
          const bool decoder_own = p.name == "wte.weight" && cfg.encdec() && !cfg.shared_embeddings;
          const int depth = decoder_own ? cfg.decoder_layers() : cfg.n_layers;
          std = std::pow(double(C), -0.5) * std::pow(9.0 * depth, -0.25);
        }
        for (size_t j = 0; j < p.numel; j++) w[j] = S(std * rng.normal());
        continue;
      }
      case ParamRole::LinearWeight:
        break;
    }
    const int64_t rows = p.shape[0], cols = p.shape[1];
    const ValueRows vrows = value_rows(cfg, p.name, C);
    const bool fused = vrows.last > 0;
    const bool residual_out = p.name.ends_with(".proj.weight");
    const bool head = p.name.starts_with("head.") || p.name == "lm_head.weight";  // output maps, no branch
    const bool query_map = p.name.ends_with(".cross.q.weight");
    // fans of one projection: the fused qkv and kv are their (C, C) query and (kv, C) key and value
    // projections stacked, a gated fc its (F, C) gate and up projections
    const bool gated_fc = p.name.ends_with(".mlp.fc.weight") && activation_width(cfg.activation) == 2;
    const double fan_in = double(cols);
    // muP: a hidden matrix starts at its scheme's scale at the base width, times sqrt(base / width) (the
    // variance of 1 / fan_in; Xavier's already falls so, the constant-std schemes' does not)
    const double mup = cfg.mup_base_width > 0 && mup_hidden(p, cfg) && scheme != InitScheme::Xavier
                           ? 1.0 / std::sqrt(cfg.mup_width_mult())
                           : 1.0;
    for (int64_t r = 0; r < rows; r++) {
      const bool value_row = r >= vrows.first && r < vrows.last;
      const bool query_row = p.name.ends_with(".qkv.weight") && r < cfg.attn_width();  // the (A, C) query map
      const double fan_out = fused ? double(query_row ? cfg.attn_width() : vrows.kv) : gated_fc ? double(rows / 2)
                                                                                               : double(rows);
      for (int64_t c = 0; c < cols; c++) {
        double v = 0;
        switch (scheme) {
          case InitScheme::Auto:  // resolved above; unreachable
          case InitScheme::Normal:
            v = cfg.init_std * rng.normal();
            break;
          case InitScheme::Gpt2:
            v = (residual_out ? cfg.init_std / std::sqrt(2.0 * cfg.total_layers()) : cfg.init_std) *
                rng.normal();
            break;
          case InitScheme::Xavier:
          case InitScheme::TFixup: {
            const double a = std::sqrt(6.0 / (fan_in + fan_out));
            v = a * (2.0 * rng.uniform() - 1.0);
            // T-Fixup scales the value maps, the output projections and the FFN of every layer; the
            // query and key maps keep fairseq's Xavier gain 1/sqrt(2), as the official code (its value
            // map is drawn at 1/sqrt(2) too, then multiplied by sqrt(2) and the scale)
            const bool scaled = value_row || residual_out || p.name.ends_with(".mlp.fc.weight");
            if (scheme == InitScheme::TFixup && scaled && !head) v *= tfixup_scale(cfg, layer);
            if (scheme == InitScheme::TFixup && fused && !value_row) v *= std::sqrt(0.5);
            if (scheme == InitScheme::TFixup && query_map) v *= std::sqrt(0.5);
            break;
          }
          case InitScheme::DeepNet: {
            // queries and keys keep gain 1; values, every proj and the FFN get beta of their stack
            // (the MLM head and an untied output matrix are no residual branch: gain 1)
            const bool gate_map = p.name.ends_with(".attn.gate.weight");  // gated attention's: a map of h, no branch
            const bool unit = (fused && !value_row) || query_map || head || gate_map;
            const double gain = unit ? 1.0 : cfg.deepnet_beta(layer);
            v = gain * std::sqrt(2.0 / (fan_in + fan_out)) * rng.normal();
            break;
          }
        }
        w[r * cols + c] = S(v * mup);
      }
    }
  }
  project_to_sphere(params, table, cfg);  // nGPT starts on the sphere (the reference normalizes before step 1)
}

template <class S>
void project_to_sphere(S* params, const ParamTable& table, const ModelConfig& cfg) {
  if (!cfg.on_sphere()) return;
  // each row of wte, lm_head, qkv and fc, each column of the proj matrices: a unit vector of C entries
  // (nGPT's normalize_matrices; a zero vector is left as it is)
  const auto unit = [](S* w, long n, long stride) {
    double ss = 0;
    for (long k = 0; k < n; k++) ss += double(w[k * stride]) * w[k * stride];
    if (ss == 0) return;
    const double r = 1.0 / std::sqrt(ss);
    for (long k = 0; k < n; k++) w[k * stride] = S(w[k * stride] * r);
  };
  for (const ParamSpec& p : table.specs) {
    if (p.shape.size() != 2) continue;
    S* w = params + p.offset;
    const long rows = long(p.shape[0]), cols = long(p.shape[1]);
    if (p.name == "wte.weight" || p.name == "lm_head.weight" || p.name.ends_with(".qkv.weight") ||
        p.name.ends_with(".fc.weight")) {
#pragma omp parallel for schedule(static) if(rows * cols > ops::kParallelMinWork)
      for (long r = 0; r < rows; r++) unit(w + r * cols, cols, 1);
    } else if (p.name.ends_with(".proj.weight")) {
#pragma omp parallel for schedule(static) if(rows * cols > ops::kParallelMinWork)
      for (long c = 0; c < cols; c++) unit(w + c, rows, cols);
    }
  }
}

template void init_params<float>(float*, const ParamTable&, const ModelConfig&);
template void init_params<double>(double*, const ParamTable&, const ModelConfig&);
template void project_to_sphere<float>(float*, const ParamTable&, const ModelConfig&);
template void project_to_sphere<double>(double*, const ParamTable&, const ModelConfig&);

}  // namespace normlab
