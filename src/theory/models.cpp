// models.cpp: the models of `normlab theory`'s checks (ClaimModels, checks.h): fresh
// from their config, the given model (`--checkpoint`), or trained to a criterion and cached. The
// recipe of a trained model: AdamW at train_lr after a linear warm-up, then constant, on batches of 8
// windows of the corpus' training split; every kEvalEvery steps the loss on kValBatches fixed
// batches of the validation split; training stops at a validation plateau (the best loss has not
// improved by kPlateau of itself in kPatience evaluations after the warm-up) or at train_steps,
// whichever comes first.
// A trained model is kept in the normlab cache (theory-models/, keyed by its config, seed, recipe
// and corpus), so later runs and the default study reuse it; a cache file that does not match its
// key exactly is ignored and replaced.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>

#include "theory/checks.h"
#include "train/optimizer.h"
#include "train/plateau.h"
#include "train/step.h"
#include "util/error.h"
#include "util/files.h"
#include "util/rng.h"

namespace normlab::theory::detail {

namespace {

constexpr int kEvalEvery = 100;        // steps between validation evaluations
constexpr int kValBatches = 32;        // fixed batches of 8 windows of the validation split (4,096 tokens at
                                       // T = 16: the 0.5% rule needs more than a few hundred)
constexpr double kPlateau = 0.005;     // an improvement smaller than 0.5% of the best loss is none
constexpr int kPatience = 5;           // evaluations without one: a plateau (500 steps)
constexpr uint32_t kCacheVersion = 3;  // bump when the recipe or the models' numerics change

// The linear warm-up of a placement (at most a third of train_steps): Post-LN the 1,000 steps the
// practical study found it needs (docs/STUDIES.md, "The practical claim": with 100 it never learned at
// 4e-3), every other placement 100.
long warmup_of(Placement p, long train_steps) {
  return std::max(1L, std::min(p == Placement::Post ? 1000L : 100L, train_steps / 3));
}
constexpr char kMagic[8] = {'N', 'L', 'T', 'H', 'E', 'O', 'R', 'Y'};

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

template <class T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <class T>
bool get(const std::string& in, size_t& at, T& v) {
  if (in.size() - at < sizeof v) return false;
  std::memcpy(&v, in.data() + at, sizeof v);
  at += sizeof v;
  return true;
}

}  // namespace

std::string hyper_not_applicable(const ModelConfig& g) {
  return fmt::format("the claim is about one residual stream; this model carries {} hyper-connected streams "
                     "(model.hyper = \"{}\")",
                     g.hyper_streams, to_string(g.hyper));
}

std::string float64_only() {
  return "measured in float64 only (checked to float64 rounding through Jacobians or attention matrices); this run "
         "reads the checkpoint in float32 (theory --precision: float32, or auto where float64 copies would not fit): "
         "--precision float64 measures it";
}

ModelConfig ClaimModels::given_as(const ModelConfig& c, bool needs_loss, Norm norm) const {
  const ModelConfig& g = o_.model->config;
  const Placement want = c.placement_of(0);
  bool uniform = true;
  for (int l = 0; l < g.total_layers(); l++) uniform &= g.placement_of(l) == g.placement_of(0);
  // the claims measured on one stack hold for a stack of either attention (causal or bidirectional:
  // Dong et al. measured rank collapse on BERT); an encoder-decoder is two stacks and a cross-attention
  if (g.encdec())
    throw NotApplicable("the claim is measured on one stack (a gpt or an encoder); this model is an encoder-decoder");
  if (g.hyper_connected() && !c.hyper_connected())
    throw NotApplicable(hyper_not_applicable(g));
  if (norm == Norm::LayerNormOnly && g.norm != NormKind::LayerNorm)
    throw NotApplicable(fmt::format("the claim is about LayerNorm; this model uses {}", to_string(g.norm)));
  if (!uniform || g.placement_of(0) != want)
    throw NotApplicable(fmt::format("the claim needs placement {}; this model's is {}", to_string(want),
                                    uniform ? to_string(g.placement_of(0)) : std::string("a per-layer mix")));
  if (g.n_layers != c.n_layers)
    throw NotApplicable(fmt::format("the claim needs {} layers; this model has {}", c.n_layers, g.n_layers));
  if (needs_loss && !g.has_logits())
    throw NotApplicable("the claim needs gradients of a loss; this model has no head (head = none)");
  ModelConfig at = g;
  at.eps = c.eps;  // the claim's eps (e.g. 0 for 000's theorems), the model's weights
  return at;
}

ClaimModels::Measured ClaimModels::measured(const ModelConfig& c, bool needs_loss, Norm norm) {
  if (!o_.model || !o_.float32) return make(c, needs_loss, norm);
  const ModelConfig at = given_as(c, needs_loss, norm);
  o_.model->model->set_eps(at.eps);
  return o_.model->model.get();
}

ClaimModels::Measured ClaimModels::given_measured() {
  if (!o_.model || !o_.float32) return given();
  o_.model->model->set_eps(o_.model->config.eps);
  return o_.model->model.get();
}

std::unique_ptr<Model<double>> ClaimModels::make(const ModelConfig& c, bool needs_loss, Norm norm, bool gradients) {
  if (o_.model) {  // the given model, if it is the one the claim needs
    const ModelConfig at = given_as(c, needs_loss, norm);
    if (o_.float32) throw NotApplicable(float64_only());
    return model_with_params<double>(at, o_.model->params(), /*forward_only=*/!gradients);
  }
  if (o_.train_steps == 0) return std::make_unique<Model<double>>(c);
  Trained& t = trained(c);
  if (c.placement_of(0) != Placement::Pre && t.reference < 0) {  // learned is judged against the same-size Pre-LN
    ModelConfig twin = c;
    twin.placement = {Placement::Pre};
    t.reference = trained(twin).val_loss;
  }
  note_if_unlearned(t);
  return model_with_params<double>(c, t.params);
}

ClaimModels::Trained& ClaimModels::trained(const ModelConfig& c) {
  const std::string key = key_of(c);
  auto it = trained_.find(key);
  if (it == trained_.end()) it = trained_.emplace(key, train(c)).first;
  return it->second;
}

std::string ClaimModels::key_of(const ModelConfig& c) {
  nlohmann::json key = model_config_to_json(c);
  key.erase("eps");  // a model differing only in eps shares the trained parameters
  // keys the config's JSON once left out at these values stay out of the key, so a model's key (and the
  // name of its cache file) is the one computed before they were written, and cached models are found
  const std::pair<const char*, nlohmann::json> once_omitted[] = {
      {"rope_freq_factors", nlohmann::json::array()}, {"rope_mscale", 1.0}, {"nope_every", 0}, {"attn_res_block", 1}};
  for (const auto& [name, value] : once_omitted)
    if (key.contains(name) && key[name] == value) key.erase(name);
  if (!c.wide_heads()) key.erase("head_dim");
  if (std::none_of(c.placement.begin(), c.placement.end(), [](Placement p) { return p == Placement::Admin; }))
    key.erase("admin_init");
  return key.dump();
}

void ClaimModels::note_if_unlearned(const Trained& t) {
  const bool below_unigram = t.val_loss <= kLearnedFraction * t.unigram;
  const bool near_pre = t.reference < 0 || t.val_loss <= t.unigram - kLearnedShareOfPre * (t.unigram - t.reference);
  if (!below_unigram || !near_pre)
    unlearned_.push_back(fmt::format("{}: validation loss {:.3f} nats vs unigram entropy {:.3f}{}", t.name, t.val_loss,
                                     t.unigram,
                                     t.reference < 0 ? ""
                                                     : fmt::format(" and the same-size Pre-LN's {:.3f} (learned: at least "
                                                                   "{:.0f}% of the way from the unigram entropy to it)",
                                                                   t.reference, 100 * kLearnedShareOfPre)));
  trained_used_.push_back(fmt::format("{}: {} {} steps{}, validation loss {:.3f}", t.name,
                                      t.plateau ? "a plateau after" : "stopped at the cap of", t.steps,
                                      t.cached ? " (from the cache)" : "", t.val_loss));
}

void ClaimModels::used(const ModelConfig& c) {
  if (o_.model || o_.train_steps == 0) return;
  const auto it = trained_.find(key_of(c));
  if (it != trained_.end()) note_if_unlearned(it->second);
}

std::unique_ptr<Model<double>> ClaimModels::given() const {
  if (!o_.model) return nullptr;
  if (o_.float32) throw NotApplicable(float64_only());
  return model_with_params<double>(o_.model->config, o_.model->params());
}

namespace {

// what `notes` held, sorted and each once; `notes` is left empty
std::vector<std::string> take_sorted(std::vector<std::string>& notes) {
  std::vector<std::string> out;
  std::swap(out, notes);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

std::vector<std::string> ClaimModels::take_unlearned() { return take_sorted(unlearned_); }
std::vector<std::string> ClaimModels::take_trained() { return take_sorted(trained_used_); }

std::string ClaimModels::recipe() const {
  return fmt::format("AdamW at lr {:g} after a linear warm-up (Post-LN {} steps, the others {}), batches of 8 x {}, until "
                     "the validation loss on {} batches ({} tokens) has not improved by {:g}% in {} steps after the "
                     "warm-up (a plateau) or {} steps; learned: 10% below the unigram entropy and (not Pre-LN) at least "
                     "{:.0f}% of the way to the same-size Pre-LN's loss",
                     o_.train_lr, warmup_of(Placement::Post, o_.train_steps), warmup_of(Placement::Pre, o_.train_steps),
                     o_.seq_len, kValBatches, kValBatches * 8 * o_.seq_len, 100 * kPlateau, kPatience * kEvalEvery,
                     o_.train_steps, 100 * kLearnedShareOfPre);
}

std::string ClaimModels::cache_path(const std::string& key) const {
  if (o_.cache_dir.empty()) return "";
  // the config, the recipe, the seed and the corpus (its training and validation ids)
  const std::string full = fmt::format("v{} {} | {} | seed {} | clip 1", kCacheVersion, key, recipe(), o_.seed);
  uint64_t h = fnv1a(full.data(), full.size());
  h = fnv1a(ids_.data(), ids_.size() * sizeof(int32_t), h);
  h = fnv1a(val_.data(), val_.size() * sizeof(int32_t), h);
  return (std::filesystem::path(o_.cache_dir) / "theory-models" / fmt::format("{:016x}.bin", h)).string();
}

ClaimModels::Trained ClaimModels::train(ModelConfig c) {
  c.eps = std::max(c.eps, 1e-5);
  const std::string path = cache_path(key_of(c));
  Trained t;
  t.name = fmt::format("the trained {}-layer {}{} model", c.n_layers, to_string(c.placement_of(0)),
                       c.hyper_connected() ? fmt::format(" {} ({} streams)", to_string(c.hyper), c.hyper_streams)
                                           : std::string());
  t.unigram = unigram_entropy(ids_);
  Model<float> m(c);
  if (!path.empty() && read_cached(path, key_of(c), m.params(), t)) return t;
  AdamW opt(m.table(), AdamWConfig{}, adam_scaling(m.table(), m.config()));
  const ScheduleConfig sched{Schedule::Warmup, o_.train_lr, int(warmup_of(c.placement_of(0), o_.train_steps)),
                             o_.train_lr, int(o_.train_steps)};
  Rng rng(uint64_t(o_.seed), 21), vrng(uint64_t(o_.seed), 22);
  std::vector<Batch> val;
  for (int k = 0; k < kValBatches; k++) val.push_back(sample_batch(val_, Arch::Gpt, 8, o_.seq_len, vrng));
  auto val_loss = [&] {
    double v = 0;
    for (const Batch& b : val) v += m.forward(b.ids.data(), b.labels.data(), b.B, b.T) / kValBatches;
    return std::isfinite(v) ? v : std::numeric_limits<double>::infinity();
  };
  // evaluations within the warm-up do not count toward a plateau (a Post-LN sits at the unigram loss
  // for most of its 1,000 warm-up steps, and would stop there)
  Plateau plateau{kPlateau, kPatience, warmup_of(c.placement_of(0), o_.train_steps)};
  long step = 0;
  while (step < o_.train_steps) {
    const Batch b = sample_batch(ids_, Arch::Gpt, 8, o_.seq_len, rng);
    const BatchGradients g = batch_gradients(m, b);
    if (!std::isfinite(g.loss) || !std::isfinite(g.grad_norm)) break;  // keep the last finite parameters
    step++;
    apply_update(m, opt, learning_rate(sched, step), step, clip_scale(g.grad_norm, 1.0));
    if (step % kEvalEvery == 0) {
      if (plateau.update(val_loss(), step)) break;
    }
  }
  // did it learn? the loss on the validation batches against the unigram entropy of the training ids
  // (a model of the byte frequencies alone reaches that)
  t.val_loss = val_loss();
  t.steps = step;
  t.plateau = step < o_.train_steps;
  t.params = m.params();
  if (!path.empty()) write_cached(path, key_of(c), t);
  return t;
}

bool ClaimModels::read_cached(const std::string& path, const std::string& key, const std::vector<float>& shape,
                              Trained& t) const {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  // its size is known before reading: a file of another size is not read at all
  const uintmax_t expected = sizeof kMagic + sizeof(uint32_t) + sizeof(uint64_t) + key.size() + sizeof(double) +
                             sizeof(int64_t) + sizeof(uint8_t) + sizeof(uint64_t) + shape.size() * sizeof(float);
  if (std::filesystem::file_size(path, ec) != expected || ec) return false;
  std::string bytes;
  try {
    bytes = read_file(path, "theory model cache");
  } catch (const Error&) {
    return false;  // unreadable: retrain and replace
  }
  size_t at = 0;
  char magic[8];
  uint32_t version = 0;
  uint64_t key_len = 0, n = 0;
  int64_t steps = 0;
  uint8_t plateau = 0;
  if (!get(bytes, at, magic) || std::memcmp(magic, kMagic, 8) != 0 || !get(bytes, at, version) || version != kCacheVersion ||
      !get(bytes, at, key_len) || key_len != key.size() || bytes.size() - at < key_len ||
      bytes.compare(at, key_len, key) != 0)
    return false;
  at += key_len;
  if (!get(bytes, at, t.val_loss) || !get(bytes, at, steps) || !get(bytes, at, plateau) || !get(bytes, at, n) ||
      n != shape.size() || bytes.size() - at != n * sizeof(float))
    return false;
  t.params.resize(n);
  std::memcpy(t.params.data(), bytes.data() + at, n * sizeof(float));
  for (float v : t.params)
    if (!std::isfinite(v)) return false;
  t.steps = steps;
  t.plateau = plateau != 0;
  t.cached = true;
  return true;
}

void ClaimModels::write_cached(const std::string& path, const std::string& key, const Trained& t) const {
  std::string out;
  out.append(kMagic, 8);
  put(out, kCacheVersion);
  put(out, uint64_t(key.size()));
  out += key;
  put(out, t.val_loss);
  put(out, int64_t(t.steps));
  put(out, uint8_t(t.plateau));
  put(out, uint64_t(t.params.size()));
  out.append(reinterpret_cast<const char*>(t.params.data()), t.params.size() * sizeof(float));
  try {  // a cache that cannot be written costs time later, nothing else
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    write_file_atomic(path, out);
  } catch (const std::exception&) {
  }
}

}  // namespace normlab::theory::detail
