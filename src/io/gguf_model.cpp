// gguf_model.cpp: GGUF files of the llama, qwen2, qwen3, gemma, gemma2, gemma3, phi3 and olmo2 architectures
// as normlab models (gguf_model.h). Where llama.cpp decides something the file does not state (Gemma's attention
// scale by model size, Gemma 3's local RoPE base and layer pattern), normlab decides it as llama.cpp does.
#include "io/gguf_model.h"

#include <cmath>
#include <fmt/format.h>
#include <set>

#include "io/families.h"
#include "ops/rope.h"
#include "util/error.h"

namespace normlab::gguf {

namespace {

// The <arch>.* keys normlab reads, or knows to change nothing: any other is refused by name.
const std::set<std::string> kLlamaKeys = {
    "block_count", "context_length", "embedding_length", "feed_forward_length", "attention.head_count",
    "attention.head_count_kv", "attention.layer_norm_rms_epsilon", "rope.freq_base", "rope.dimension_count",
    "vocab_size", "attention.key_length", "attention.value_length", "rope.scaling.type", "rope.scaling.factor",
    "expert_count", "expert_used_count"};

// The keys only some architectures have (llama.cpp's convert_hf_to_gguf.py writes them).
const std::set<std::string> kGemma2Keys = {"attention.sliding_window", "attn_logit_softcapping", "final_logit_softcapping"};
const std::set<std::string> kGemma3Keys = {"attention.sliding_window", "final_logit_softcapping"};
const std::set<std::string> kPhi3Keys = {"attention.sliding_window", "rope.scaling.attn_factor",
                                         "rope.scaling.original_context_length"};

// What an architecture is beyond the llama block they all start from (RMSNorm before each branch,
// RoPE, a gated MLP, grouped-query attention).
struct Family {
  bool known = false;
  bool interleaved = false;  // llama: the converter permuted q and k rows to llama.cpp's interleaved RoPE pairs
  bool qkv_bias = false;     // qwen2
  bool qk_norm = false;      // qwen3, gemma3: q and k RMS-normalized per head (attn_q_norm, attn_k_norm)
  bool gemma = false;        // GeGLU, the embedding times sqrt(d), norm gains stored as 1 + w (used as stored)
  bool sandwich = false;     // gemma2, gemma3: a norm on each branch's output (post_attention_norm, post_ffw_norm)
  bool fused = false;        // phi3: q, k, v in one matrix (attn_qkv) and gate, up in another (ffn_up)
  bool reordered = false;    // olmo2: a norm on each branch's output and none before (post_attention_norm,
                             // post_ffw_norm), q and k RMS-normalized over their whole projections
  int layers_27b = 0;        // gemma2 / gemma3: the layer count at which llama.cpp takes the 27B model's score scale
  const std::set<std::string>* keys = nullptr;  // the keys beyond kLlamaKeys
};

// The architecture's row of the families table (io/families.h), with what its GGUF files add.
Family family_of(const std::string& arch) {
  const LlamaFamily* row = family_of_gguf(arch);
  if (!row) return {};
  Family f{.known = true,
           .interleaved = row->gguf_interleaved,
           .qkv_bias = row->bias == FamilyBias::Qkv,
           .qk_norm = row->qk_norm == QkNorm::Heads,
           .gemma = row->gemma,
           .sandwich = row->placement == Placement::Sandwich,
           .fused = row->fused,
           .reordered = row->placement == Placement::Reordered,
           .layers_27b = row->gguf_layers_27b};
  // the keys llama.cpp's converter writes for the windows and LongRoPE
  if (row->window == FamilyWindow::EveryOther) f.keys = &kGemma2Keys;
  else if (row->gemma && row->window == FamilyWindow::LayerTypes) f.keys = &kGemma3Keys;
  else if (row->fused) f.keys = &kPhi3Keys;
  return f;
}

// The RoPE divisors tensor `name` holds, one per rotated pair, each in [1e-6, 1e6] (model.rope_freq_factors):
// rope_freqs.weight (Llama 3.1's llama3 scaling) and LongRoPE's rope_factors_short.weight.
std::vector<double> read_divisors(const File& f, const TensorInfo& t, int pairs) {
  if (t.ne.size() != 1 || t.ne[0] != pairs)
    throw Error(fmt::format("{}: tensor '{}' must hold one divisor per rotated pair ({} values)", f.path, t.name, pairs));
  std::vector<double> out;
  for (float x : f.dequantize(t)) {
    if (!(x >= 1e-6f && x <= 1e6f))
      throw Error(fmt::format("{}: tensor '{}' holds {}; a RoPE divisor must be in [1e-6, 1e6]", f.path, t.name, x));
    out.push_back(x);
  }
  return out;
}

// A key under "<arch>." that only tells normlab nothing new when it has its neutral value.
void refuse_unless(bool ok, const File& f, const std::string& what) {
  if (!ok)
    throw Error(fmt::format("{}: {}; normlab represents the {} architecture without it", f.path, what,
                            f.text("general.architecture")));
}

// What Gemma's blocks add, as llama.cpp runs them: GeGLU with GELU's tanh form, the embedding times
// sqrt(d), for gemma2 and gemma3 the sandwich and q.k scaled by 1/sqrt(head size) (by 1/sqrt(d / heads) in
// the 27B models, which llama.cpp tells by their layer count: the file does not say it); gemma2's soft caps
// (absent: 50 on the scores, 30 on the logits, llama.cpp's defaults) and its sliding window on every other
// layer (absent: 4096); gemma3's QK-norm, optional final soft cap, and with a sliding window its local layers
// (five of every six, llama.cpp's fixed pattern) rotating with base 10000 unscaled (model_config caps the
// sequences at the window).
void read_gemma(const File& f, const std::string& arch, const Family& fam, ModelConfig& c) {
  const std::string p = arch + ".";
  c.activation = Activation::GeGlu;
  c.embed_scale = std::sqrt(double(c.d_model));
  if (!fam.sandwich) return;
  c.placement = {Placement::Sandwich};
  if (c.n_layers == fam.layers_27b) c.attn_scale = 1.0 / std::sqrt(double(c.d_model / c.n_heads));
  const auto cap = [&](const std::string& key, double absent) {
    const double v = f.real_or(p + key).value_or(absent);
    if (!(v >= 0 && v <= 1e6)) throw Error(fmt::format("{}: {}{} is {}; a soft cap is in [0, 1e6] (0: none)", f.path, p, key, v));
    return v;
  };
  const int64_t window = sliding_window(f);
  if (arch == "gemma2") {
    c.attn_softcap = cap("attn_logit_softcapping", 50.0);
    c.logit_softcap = cap("final_logit_softcapping", 30.0);
  } else {
    c.logit_softcap = cap("final_logit_softcapping", 0.0);
    if (window > 0) {
      c.rope_local_base = 10000.0;
      c.rope_global_every = 6;
    }
  }
}

// LongRoPE (Phi-3's 128k models, Phi-3.5, Phi-4-mini) as the converter writes it: rope_factors_short.weight
// and rope_factors_long.weight (a divisor per rotated pair each) and rope.scaling.attn_factor, the factor m
// on cos and sin (absent: sqrt(1 + ln(s) / ln(original)) with s = context / original, as transformers). Up to
// rope.scaling.original_context_length the short factors apply, so normlab reads them and caps sequences
// there (model.rope_freq_factors, rope_mscale, seq_len); past it the long ones would.
void read_longrope(const File& f, const std::string& p, int64_t context, ModelConfig& c) {
  const TensorInfo* shrt = f.find("rope_factors_short.weight");
  const TensorInfo* lng = f.find("rope_factors_long.weight");
  const std::optional<double> attn_factor = f.real_or(p + "rope.scaling.attn_factor");
  if (!shrt && !lng) {
    refuse_unless(attn_factor.value_or(1.0) == 1.0, f, "rope.scaling.attn_factor is not 1 without LongRoPE's factors");
    return;
  }
  const int pairs = c.rope_dims() / 2;
  for (const TensorInfo* t : {shrt, lng})
    if (!t || t->ne.size() != 1 || t->ne[0] != pairs)
      throw Error(fmt::format("{}: LongRoPE needs rope_factors_short.weight and rope_factors_long.weight of one "
                              "divisor per rotated pair ({} values)",
                              f.path, pairs));
  if (!c.rope_freq_factors.empty())
    throw Error(fmt::format("{}: both rope_freqs.weight and LongRoPE's factors; a file has one or the other", f.path));
  c.rope_freq_factors = read_divisors(f, *shrt, pairs);
  const int64_t original = f.integer_or(p + "rope.scaling.original_context_length", 2, 1 << 24).value_or(context);
  const double s = double(context) / double(original);
  c.rope_mscale = attn_factor.value_or(ops::longrope_mscale(s, double(original)));
  if (!(c.rope_mscale >= 1e-3 && c.rope_mscale <= 1e3))
    throw Error(fmt::format("{}: rope.scaling.attn_factor {} must be in [1e-3, 1e3]", f.path, c.rope_mscale));
  if (original < c.seq_len) c.seq_len = int(original);
}

}  // namespace

int64_t sliding_window(const File& f) {
  const std::string arch = f.text("general.architecture");
  if (arch == "phi3")  // (0: none, as the converter writes Phi-4's)
    return f.integer_or(arch + ".attention.sliding_window", 0, 1 << 24).value_or(0);
  if (arch != "gemma2" && arch != "gemma3") return 0;
  return f.integer_or(arch + ".attention.sliding_window", arch == "gemma2" ? 1 : 0, 1 << 24)
      .value_or(arch == "gemma2" ? 4096 : 0);
}

ModelConfig model_config(const File& f) {
  const std::string arch = f.text("general.architecture");
  const Family fam = family_of(arch);
  if (!fam.known)
    throw Error(fmt::format("{}: general.architecture is '{}'; normlab imports GGUF files of the llama (Llama, "
                            "SmolLM2, TinyLlama, Mistral, ...), qwen2, qwen3, gemma, gemma2, gemma3, phi3 and "
                            "olmo2 architectures",
                            f.path, arch));
  const std::string p = arch + ".";
  for (const auto& [key, value] : f.metadata)
    if (key.rfind(p, 0) == 0 && !kLlamaKeys.count(key.substr(p.size())) &&
        !(fam.keys && fam.keys->count(key.substr(p.size()))))
      throw Error(fmt::format("{}: metadata '{}' is not something normlab's {} import knows; refused rather than "
                              "ignored",
                              f.path, key, arch));
  ModelConfig c;
  c.arch = Arch::Gpt;
  c.n_layers = int(f.integer(p + "block_count", 1, kMaxLayers));
  c.d_model = int(f.integer(p + "embedding_length", 1, 1 << 20));
  c.d_ff = int(f.integer(p + "feed_forward_length", 1, 1 << 22));
  c.n_heads = int(f.integer(p + "attention.head_count", 1, c.d_model));
  // the head size: attention.key_length (= value_length), else embedding_length / head_count
  const std::optional<int64_t> key_length = f.integer_or(p + "attention.key_length", 1, 1 << 16);
  if (key_length && *key_length * c.n_heads != c.d_model) c.head_dim = int(*key_length);
  else if (c.d_model % c.n_heads != 0)
    throw Error(fmt::format("{}: embedding_length {} is not a multiple of head_count {}", f.path, c.d_model, c.n_heads));
  const int hs = c.head_size();
  c.n_kv_heads = int(f.integer_or(p + "attention.head_count_kv", 1, c.n_heads).value_or(c.n_heads));
  c.eps = f.real_or(p + "attention.layer_norm_rms_epsilon").value_or(1e-5);
  if (!(c.eps > 0 && c.eps < 1)) throw Error(fmt::format("{}: layer_norm_rms_epsilon {} is outside (0, 1)", f.path, c.eps));
  c.norm = NormKind::RMSNorm;
  c.placement = {Placement::Pre};
  c.positions = Positions::Rope;
  c.rope_base = f.real_or(p + "rope.freq_base").value_or(10000.0);
  if (!(c.rope_base > 1)) throw Error(fmt::format("{}: rope.freq_base {} must be > 1", f.path, c.rope_base));
  // partial rotary (Phi-4-mini): the first R dimensions of each head rotate, rotate-half as llama.cpp's "neox"
  // RoPE does; not in the llama architecture's interleaved layout, whose converter permuted whole heads
  const int64_t rotated = f.integer_or(p + "rope.dimension_count", 0, 1 << 20).value_or(hs);
  // RoPE turns pairs of dimensions: an odd head size has a dimension no pair holds (the llama layout's
  // rows would be left unfilled)
  if (rotated == hs && hs % 2 != 0)
    throw Error(fmt::format("{}: the head size is {} (embedding_length {} over head_count {}): RoPE rotates pairs of "
                            "dimensions and needs an even head size",
                            f.path, hs, c.d_model, c.n_heads));
  refuse_unless(rotated == hs || (!fam.interleaved && rotated >= 2 && rotated < hs && rotated % 2 == 0), f,
                fmt::format("rope.dimension_count is {} of the head size {} (partial rotary: an even number of "
                            "dimensions, not in the llama architecture's interleaved layout)",
                            rotated, hs));
  if (rotated < hs) c.set_rope_dims(int(rotated));
  refuse_unless(f.integer_or(p + "attention.value_length", 0, 1 << 20).value_or(hs) == hs, f,
                "attention.value_length differs from attention.key_length (the head size)");
  // RoPE scaling: linear (llama.cpp's rope.scaling.type "linear": positions divided by the factor) and
  // a divisor per frequency (the tensor rope_freqs.weight, as llama.cpp writes Llama 3.1's llama3 scaling)
  const std::string scaling = f.text_or(p + "rope.scaling.type").value_or("none");
  refuse_unless(scaling == "none" || scaling == "linear", f,
                fmt::format("rope.scaling.type is '{}' (normlab's RoPE scaling is linear or per-frequency)", scaling));
  const double factor = f.real_or(p + "rope.scaling.factor").value_or(1.0);
  if (scaling == "linear") {
    if (!(factor >= 1 && factor <= 1e6))
      throw Error(fmt::format("{}: rope.scaling.factor {} must be in [1, 1e6] (positions are divided by it)", f.path, factor));
    c.rope_scale = factor;
  } else {
    refuse_unless(factor == 1.0, f, "rope.scaling.factor is not 1 without a rope.scaling.type");
  }
  if (const TensorInfo* t = f.find("rope_freqs.weight")) c.rope_freq_factors = read_divisors(f, *t, c.rope_dims() / 2);
  const int64_t context = f.integer_or(p + "context_length", 1, 1 << 24).value_or(2048);
  c.seq_len = int(std::min<int64_t>(context, kMaxImportedSeqLen));
  read_longrope(f, p, context, c);
  refuse_unless(f.integer_or(p + "expert_count", 0, 1 << 20).value_or(0) == 0, f, "expert_count > 0 (mixture of experts)");
  c.activation = Activation::SwiGlu;
  c.bias = fam.qkv_bias ? LinearBias::Qkv : LinearBias::None;
  if (fam.qk_norm) c.qk_norm = QkNorm::Heads;
  if (fam.reordered) {  // OLMo 2: x + N(F(x))
    c.placement = {Placement::Reordered};
    c.qk_norm = QkNorm::Whole;
  }
  c.head = f.find("output.weight") ? Head::Untied : Head::Tied;  // an output matrix of its own, or tied
  const TensorInfo* embd = f.find("token_embd.weight");
  if (!embd || embd->ne.size() != 2 || embd->ne[0] != c.d_model)
    throw Error(fmt::format("{}: no token_embd.weight of row length {}", f.path, c.d_model));
  c.vocab = int(f.integer_or(p + "vocab_size", 1, kMaxVocab).value_or(embd->ne[1]));
  if (fam.gemma) read_gemma(f, arch, fam, c);
  // a sliding window (gemma2, gemma3, phi3) caps the sequences, where it masks nothing (normlab's attention
  // is full)
  if (const int64_t window = sliding_window(f); window > 0 && window < c.seq_len) c.seq_len = int(window);
  c.seq_len = std::min(c.seq_len, c.longest_sequence_within_limit());  // (a note below says so)
  c.validate();
  return c;
}

namespace {

// llama.cpp's converter permutes the rows of q and k of each head from the rotate-half layout (pairs
// i and i + hs/2, as Hugging Face's Llama) to the interleaved one (pairs 2i and 2i + 1, as llama.cpp's
// RoPE); normlab's RoPE is rotate-half, so the permutation is undone: row h hs + j hs/2 + i of the
// result is row h hs + 2 i + j of the file (i < hs/2, j in {0, 1}).
std::vector<float> unpermute_rows(const std::vector<float>& w, int heads, int hs, int row_len) {
  std::vector<float> out(w.size());
  for (int h = 0; h < heads; h++)
    for (int i = 0; i < hs / 2; i++)
      for (int j = 0; j < 2; j++) {
        const size_t to = size_t(h * hs + j * (hs / 2) + i) * row_len, from = size_t(h * hs + 2 * i + j) * row_len;
        std::copy(w.begin() + long(from), w.begin() + long(from + row_len), out.begin() + long(to));
      }
  return out;
}

// Row blocks one after another ([q; k; v] of the fused qkv, [gate; up] of fc).
std::vector<float> concat(std::initializer_list<std::vector<float>> parts) {
  std::vector<float> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace

Imported import_model(const File& f) {
  Imported im;
  im.config = model_config(f);
  const ModelConfig& c = im.config;
  // llama.cpp's RoPE pairs (2i, 2i + 1) for the llama architecture, whose q and k rows its converter
  // permutes; the others use its "neox" RoPE, rotate-half like normlab's, with rows as trained
  const std::string arch = f.text("general.architecture");
  const Family fam = family_of(arch);
  const bool interleaved = fam.interleaved;
  const int C = c.d_model, hs = c.head_size(), F = c.ff(), KV = c.kv_heads() * hs, A = c.attn_width();
  std::set<std::string> used;
  auto take = [&](const std::string& name, std::vector<int64_t> shape) {
    const TensorInfo* t = f.find(name);
    if (!t) throw Error(fmt::format("{}: no tensor '{}' (a {} model of {} layers has one)", f.path, name, arch, c.n_layers));
    if (t->shape() != shape) {
      std::string want, got;
      for (int64_t d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
      for (int64_t d : t->shape()) got += (got.empty() ? "" : ", ") + std::to_string(d);
      throw Error(fmt::format("{}: tensor '{}' has shape [{}], the metadata implies [{}]", f.path, name, got, want));
    }
    used.insert(name);
    std::vector<float> v = f.dequantize(*t);
    for (size_t i = 0; i < v.size(); i++)
      if (!std::isfinite(v[i]))
        throw Error(fmt::format("{}: tensor '{}' holds a non-finite value ({}) at flat index {}", f.path, name, v[i], i));
    return v;
  };
  im.params["wte.weight"] = take("token_embd.weight", {c.vocab_size(), C});
  if (c.head == Head::Untied) im.params["lm_head.weight"] = take("output.weight", {c.vocab_size(), C});
  for (int l = 0; l < c.n_layers; l++) {
    const std::string b = fmt::format("blk.{}.", l), a = fmt::format("h.{}.attn.", l), m = fmt::format("h.{}.mlp.", l);
    if (!fam.reordered) im.params[a + "ln_in.weight"] = take(b + "attn_norm.weight", {C});
    if (fam.fused) {  // phi3: [q; k; v] and [gate; up] rows, normlab's own fused layout
      im.params[a + "qkv.weight"] = take(b + "attn_qkv.weight", {A + 2 * KV, C});
    } else {
      std::vector<float> q = take(b + "attn_q.weight", {A, C}), k = take(b + "attn_k.weight", {KV, C});
      if (interleaved) {
        q = unpermute_rows(q, c.n_heads, hs, C);
        k = unpermute_rows(k, c.kv_heads(), hs, C);
      }
      im.params[a + "qkv.weight"] = concat({q, k, take(b + "attn_v.weight", {KV, C})});
    }
    if (c.bias == LinearBias::Qkv)
      im.params[a + "qkv.bias"] = concat({take(b + "attn_q.bias", {A}), take(b + "attn_k.bias", {KV}),
                                          take(b + "attn_v.bias", {KV})});
    if (c.qk_norm != QkNorm::None) {  // one gain per head dimension (qwen3, gemma3) or per column (olmo2)
      const bool whole = c.qk_norm == QkNorm::Whole;
      im.params[a + "q_norm.weight"] = take(b + "attn_q_norm.weight", {whole ? A : hs});
      im.params[a + "k_norm.weight"] = take(b + "attn_k_norm.weight", {whole ? KV : hs});
    }
    im.params[a + "proj.weight"] = take(b + "attn_output.weight", {C, A});
    if (fam.sandwich || fam.reordered) {
      im.params[a + "ln_branch.weight"] = take(b + "post_attention_norm.weight", {C});
      im.params[m + "ln_branch.weight"] = take(b + "post_ffw_norm.weight", {C});
    }
    if (!fam.reordered) im.params[m + "ln_in.weight"] = take(b + "ffn_norm.weight", {C});
    im.params[m + "fc.weight"] = fam.fused ? take(b + "ffn_up.weight", {2 * F, C})
                                           : concat({take(b + "ffn_gate.weight", {F, C}), take(b + "ffn_up.weight", {F, C})});
    im.params[m + "proj.weight"] = take(b + "ffn_down.weight", {C, F});
  }
  im.params["ln_f.weight"] = take("output_norm.weight", {C});
  used.insert("rope_freqs.weight");  // read by model_config (model.rope_freq_factors, and LongRoPE's:
  used.insert("rope_factors_short.weight");  // the short ones; the long ones apply past the original length,
  used.insert("rope_factors_long.weight");   // which normlab's sequences do not reach)
  for (const TensorInfo& t : f.tensors)
    if (!used.count(t.name))
      throw Error(fmt::format("{}: tensor '{}' is not part of the {} architecture as normlab represents it", f.path,
                              t.name, arch));
  const int64_t context = f.integer_or(f.text("general.architecture") + ".context_length", 1, 1 << 24).value_or(c.seq_len);
  if (context > c.seq_len)
    im.notes.push_back(fmt::format("context_length {} read; normlab takes sequences of up to {} tokens of it "
                                   "(model.seq_len{})",
                                   context, c.seq_len,
                                   c.seq_len == sliding_window(f)
                                       ? ": the sliding window of its local layers, past which normlab's full "
                                         "attention would differ"
                                       : ""));
  return im;
}

std::unique_ptr<Model<float>> load_model(const std::string& path, bool quiet, bool forward_only) {
  const File f = read(path);
  Imported im = import_model(f);
  auto model = unset_model<float>(im.config, forward_only);
  const ParamTable& table = model->table();
  if (im.params.size() != table.specs.size())
    throw Error(fmt::format("{}: {} tensors mapped, the config has {} parameters", path, im.params.size(), table.specs.size()));
  for (const ParamSpec& p : table.specs) {
    auto it = im.params.find(p.name);
    if (it == im.params.end() || it->second.size() != p.numel)
      throw Error(fmt::format("{}: parameter '{}' does not match the model config", path, p.name));
    std::copy(it->second.begin(), it->second.end(), model->params().begin() + long(p.offset));
  }
  if (!quiet)
    for (const auto& note : im.notes) fmt::print(stderr, "normlab: {}: {}\n", path, note);
  return model;
}

}  // namespace normlab::gguf
