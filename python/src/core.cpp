// core.cpp: the compiled part of the Python module `normlab` (normlab._core), a thin pybind11 layer
// over the same library the `normlab` command is built from. Nothing is computed here: every call
// goes to the function the command calls (load_model, Model::forward/backward, the analyze_* instruments
// and their to_json, run_theory, train, run_study), with the GIL released while it runs. Results
// cross as numpy arrays (copied out of the model's buffers, which the next call reuses; the parameters
// as zero-copy views) or as the command's own --json text, which normlab/__init__.py parses: the
// numbers are the command's, bit for bit. The Python-facing API and its docs are in python/normlab/.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <atomic>
#include <omp.h>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "analysis/attention.h"
#include "analysis/dynamics.h"
#include "analysis/sinks.h"
#include "analysis/jacobian.h"
#include "analysis/precision.h"
#include "theory/theory.h"
#include "distributed/comm.h"
#include "io/hf.h"
#include "io/safetensors.h"
#include "ops/gemm_backend.h"
#include "io/tokenizer.h"
#include "model/decode.h"
#include "model/generate.h"
#include "model/model.h"
#include "ops/common.h"
#include "study/resume.h"
#include "study/runner.h"
#include "study/study.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/resume.h"
#include "train/model_source.h"
#include "train/run_config.h"
#include "train/trainer.h"
#include "train/translation.h"
#include "util/error.h"
#include "util/interrupt.h"
#include "util/resources.h"
#include "util/json_reader.h"

namespace py = pybind11;
using namespace normlab;

namespace {

using Ids = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

// A model as the module holds it: the float32 model the commands train, sample and take gradients
// with, and its float64 copy, which the instruments measure (as `analyze` does).
// A model opened once (train/model_source.h): its float model, its path (or what it was made from),
// its tokenizer, loaded on first use and kept for the model's life, and its run's data.
struct PyModel : ModelSource {
  std::unique_ptr<Model<double>> wide;
  // one call at a time on a model (its buffers are shared by the calls), taken with the GIL released
  // (lock_model) so that a thread waiting for it never holds the GIL another thread needs
  std::unique_ptr<std::mutex> busy = std::make_unique<std::mutex>();

  // the float64 model holding the float32 parameters as they are now (params() views may have changed
  // them since the last call: the copy is redone each time; it costs one pass over the parameters)
  Model<double>& widened() {
    if (!wide) wide = std::make_unique<Model<double>>(model->config(), Model<double>::Unset{});
    std::copy(model->params().begin(), model->params().end(), wide->params().begin());
    return *wide;
  }
};

std::unique_lock<std::mutex> lock_model(PyModel& m) {
  py::gil_scoped_release release;
  return std::unique_lock<std::mutex>(*m.busy);
}

// Error naming the first parameter that holds NaN or inf: the command refuses such a checkpoint when it
// loads it; here params() views can write one later, so every entry point that computes checks.
void require_finite_params(const PyModel& m, const char* what) {
  const std::vector<float>& p = m.model->params();
  for (const ParamSpec& s : m.model->table().specs)
    for (size_t i = s.offset; i < s.offset + s.numel; i++)
      if (!std::isfinite(p[i]))
        throw Error(fmt::format("{}: parameter '{}' holds a non-finite value ({}) at index {}", what, s.name, p[i],
                                i - s.offset));
}

// (B, T) ids of a 1-D or 2-D array, every id checked against the vocabulary.
Batch batch_of(const Ids& ids, const ModelConfig& cfg, const char* what) {
  if (ids.ndim() != 1 && ids.ndim() != 2)
    throw Error(fmt::format("{}: ids must be a 1-D (T) or 2-D (B, T) array of token ids, not {}-D", what, ids.ndim()));
  Batch b;
  b.B = ids.ndim() == 2 ? int(ids.shape(0)) : 1;
  b.T = int(ids.shape(ids.ndim() - 1));
  if (b.B < 1 || b.T < 1) throw Error(fmt::format("{}: ids are empty", what));
  if (b.T > cfg.seq_len)
    throw Error(fmt::format("{}: {} tokens per row, more than the model's seq_len {}", what, b.T, cfg.seq_len));
  b.ids.assign(ids.data(), ids.data() + size_t(b.B) * b.T);
  for (int32_t id : b.ids)
    if (id < 0 || id >= cfg.vocab_size())
      throw Error(fmt::format("{}: token id {} is outside the model's vocabulary of {}", what, id, cfg.vocab_size()));
  b.labels.assign(b.ids.size(), ops::kIgnoreLabel);
  return b;
}

// An encoder-decoder's source rows for the batch's rows (a 1-D array: one row), every id checked
// against the source vocabulary; every other model takes none.
void add_source(Batch& b, const std::optional<Ids>& source, const ModelConfig& cfg, const char* what) {
  if (!cfg.encdec()) {
    if (source)
      throw Error(fmt::format("{}: source= is an encoder-decoder model's input; this one is {}", what,
                              to_string(cfg.arch)));
    return;
  }
  if (!source)
    throw Error(fmt::format("{}: an encoder-decoder model needs its source: source= the encoder's ids (1-D (S) or "
                            "(B, S); translation_pair makes them from text)", what));
  const Ids& s = *source;
  if (s.ndim() != 1 && s.ndim() != 2)
    throw Error(fmt::format("{}: source must be a 1-D (S) or 2-D (B, S) array of token ids, not {}-D", what, s.ndim()));
  const int B = s.ndim() == 2 ? int(s.shape(0)) : 1;
  if (B != b.B) throw Error(fmt::format("{}: source has {} rows and ids {}: one source row per target row", what, B, b.B));
  b.S = int(s.shape(s.ndim() - 1));
  if (b.S < 1) throw Error(fmt::format("{}: source is empty", what));
  if (b.S > cfg.seq_len)
    throw Error(fmt::format("{}: {} source tokens per row, more than the model's seq_len {}", what, b.S, cfg.seq_len));
  b.src.assign(s.data(), s.data() + size_t(B) * b.S);
  for (int32_t id : b.src)
    if (id < 0 || id >= cfg.src_vocab_size())
      throw Error(fmt::format("{}: source token id {} is outside the model's source vocabulary of {}", what, id,
                              cfg.src_vocab_size()));
}

template <class S>
py::array_t<S> copy_array(const S* data, std::vector<py::ssize_t> shape) {
  py::array_t<S> out(shape);
  std::copy(data, data + out.size(), out.mutable_data());
  return out;
}

PyModel load(const std::string& path) {
  PyModel m;
  {
    py::gil_scoped_release release;
    // without gradients (half the memory: a 1 B model's 5 GB): loss_and_grads adds them when first asked
    static_cast<ModelSource&>(m) = open_model(path, {.forward_only = true});
  }
  return m;
}

// A transformers state dict (name -> float32 array) and its config.json text as a model.
PyModel from_state(const std::string& config_json, const std::map<std::string, py::array>& state,
                   const std::string& what) {
  std::map<std::string, safetensors::Tensor> tensors;
  for (const auto& [name, a] : state) {
    auto f = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
    if (!f) throw Error(fmt::format("{}: tensor '{}' is not a float array", what, name));
    safetensors::Tensor t;
    t.dtype = safetensors::DType::F32;
    for (py::ssize_t i = 0; i < f.ndim(); i++) t.shape.push_back(f.shape(i));
    const auto* p = reinterpret_cast<const unsigned char*>(f.data());
    t.bytes.assign(p, p + f.size() * sizeof(float));
    tensors.emplace(name, std::move(t));
  }
  const nlohmann::json config = parse_json(config_json, what + " config");
  PyModel m;
  {
    py::gil_scoped_release release;
    m.model = hf::load_model_state(config, std::move(tensors), what, /*quiet=*/true);
  }
  m.path = what;
  return m;
}

// forward: the logits (B, T, V) (None for a headless model), every hidden state (L + 1 streams at the
// block boundaries, as `normlab grads` writes hidden.0 .. hidden.L; an encoder-decoder's decoder) and
// the final normed hidden state; an encoder-decoder's also its memory (B, S, C: the encoder's output
// after its final norm, as `normlab grads` writes it) and the streams entering its encoder's layers.
// A batch whose activations exceed analysis::kPassActivationBytes (a 1 B model's 8 x 128 tokens: about
// 4 GB) runs in passes of fewer sequences (analysis/passes.h), each pass's outputs copied into the
// whole batch's arrays; an encoder-decoder runs whole.
py::tuple forward(PyModel& m, const Ids& ids, const std::optional<Ids>& source, double activation_memory) {
  const auto lock = lock_model(m);
  require_finite_params(m, "forward");
  if (!(activation_memory > 0)) throw Error("forward: activation_memory must be a positive number of bytes");
  const ModelConfig& cfg = m.model->config();
  Batch b = batch_of(ids, cfg, "forward");
  add_source(b, source, cfg, "forward");
  const py::ssize_t B = b.B, T = b.T, C = cfg.d_model, V = cfg.vocab_size();
  // the decoder's block boundaries: every 2 slots (gpt, encoder) or 3 (an encdec's decoder: self, cross, mlp)
  const int first = cfg.first_decoder_slot() < cfg.n_slots() ? cfg.first_decoder_slot() : 0;
  const int per_block = cfg.encdec() ? 3 : 2, blocks = cfg.encdec() ? cfg.decoder_layers() : cfg.n_layers;
  int per_pass = b.B;
  {
    py::gil_scoped_release release;
    if (!cfg.encdec()) per_pass = analysis::rows_per_pass(*m.model, b.B, b.T, activation_memory);
    if (per_pass == b.B) m.model->forward(b.ids.data(), b.labels.data(), b.B, b.T, nullptr, nullptr, b.source());
  }
  py::object logits = py::none(), memory = py::none();
  py::list hidden, encoder_hidden;
  if (per_pass < b.B) {
    std::vector<py::array_t<float>> streams;
    for (int l = 0; l <= blocks; l++) streams.emplace_back(std::vector<py::ssize_t>{B, T, C});
    py::array_t<float> final_hidden(std::vector<py::ssize_t>{B, T, C});
    py::array_t<float> all_logits(cfg.has_logits() ? std::vector<py::ssize_t>{B, T, V} : std::vector<py::ssize_t>{0});
    std::vector<float*> stream_out;  // (taken with the GIL held)
    for (auto& a : streams) stream_out.push_back(a.mutable_data());
    float* const final_out = final_hidden.mutable_data();
    float* const logits_out = all_logits.mutable_data();
    {
      py::gil_scoped_release release;
      for (int row = 0; row < b.B; row += per_pass) {
        const int rows = std::min(per_pass, b.B - row);
        const Batch part = batch_rows(b, row, rows);
        const size_t n = size_t(rows) * size_t(T), at = size_t(row) * size_t(T);
        m.model->forward(part.ids.data(), part.labels.data(), rows, b.T, nullptr, nullptr, part.source());
        if (cfg.has_logits()) std::copy_n(m.model->logits(), n * size_t(V), logits_out + at * size_t(V));
        for (int l = 0; l <= blocks; l++)
          std::copy_n(m.model->stream(first + per_block * l), n * size_t(C), stream_out[size_t(l)] + at * size_t(C));
        std::copy_n(m.model->final_hidden(), n * size_t(C), final_out + at * size_t(C));
      }
    }
    if (cfg.has_logits()) logits = all_logits;
    for (auto& a : streams) hidden.append(a);
    return py::make_tuple(logits, hidden, final_hidden, memory, encoder_hidden);
  }
  if (cfg.has_logits()) logits = copy_array(m.model->logits(), {B, T, V});
  for (int l = 0; l <= blocks; l++) hidden.append(copy_array(m.model->stream(first + per_block * l), {B, T, C}));
  if (cfg.encdec()) {
    memory = copy_array(m.model->memory(), {B, py::ssize_t(b.S), C});
    for (int l = 0; l < cfg.n_layers; l++) encoder_hidden.append(copy_array(m.model->stream(2 * l), {B, py::ssize_t(b.S), C}));
  }
  return py::make_tuple(logits, hidden, copy_array(m.model->final_hidden(), {B, T, C}), memory, encoder_hidden);
}

// loss_and_grads: the mean loss over labelled positions (float32, as `normlab grads`) and every
// parameter's gradient by name.
py::tuple loss_and_grads(PyModel& m, const Ids& ids, const Ids& labels, const std::optional<Ids>& source) {
  const auto lock = lock_model(m);
  require_finite_params(m, "loss_and_grads");
  const ModelConfig& cfg = m.model->config();
  if (!cfg.has_logits()) throw Error("loss_and_grads: the model has no head (model.head = none): no loss");
  Batch b = batch_of(ids, cfg, "loss_and_grads");
  add_source(b, source, cfg, "loss_and_grads");
  if (labels.ndim() != ids.ndim() || labels.size() != ids.size())
    throw Error("loss_and_grads: labels must have the shape of ids (-100: no loss at that position)");
  b.labels.assign(labels.data(), labels.data() + labels.size());
  check_batch(b, cfg, "loss_and_grads", true);
  float loss = 0;
  {
    py::gil_scoped_release release;
    m.model->enable_gradients();  // (a loaded model has none until here)
    loss = float(m.model->forward(b.ids.data(), b.labels.data(), b.B, b.T, nullptr, nullptr, b.source()));
    m.model->zero_grad();
    m.model->backward();
  }
  py::dict grads;
  for (const ParamSpec& p : m.model->table().specs) {
    std::vector<py::ssize_t> shape(p.shape.begin(), p.shape.end());
    grads[py::str(p.name)] = copy_array(m.model->grads().data() + p.offset, shape);
  }
  return py::make_tuple(loss, grads);
}

// The parameters as numpy views into the model (writable; the model stays alive while a view does).
py::dict params(py::object self) {
  PyModel& m = self.cast<PyModel&>();
  const auto lock = lock_model(m);
  py::dict out;
  for (const ParamSpec& p : m.model->table().specs) {
    std::vector<py::ssize_t> shape(p.shape.begin(), p.shape.end());
    out[py::str(p.name)] = py::array_t<float>(shape, m.model->params().data() + p.offset, self);
  }
  return out;
}

const std::optional<Tokenizer>& tokenizer_of(const PyModel& m, const std::string& given) { return m.tokenizer(given); }

// The text's ids through the model's own tokenizer (or `given`); bytes for a byte-level model.
py::array_t<int32_t> tokenize(const PyModel& m, const std::string& text, const std::string& given, bool special) {
  const std::optional<Tokenizer>& tok = tokenizer_of(m, given);
  std::vector<int32_t> ids;
  if (tok) ids = tok->encode(text, special);
  else for (unsigned char c : text) ids.push_back(int32_t(c));
  return copy_array(ids.data(), {py::ssize_t(ids.size())});
}

// The bytes of ids (bytes: a byte-level model's ids may end mid-character or be no UTF-8 at all; the
// package decodes them with U+FFFD where they are not UTF-8, as translate does).
py::bytes decode(const PyModel& m, const std::vector<int32_t>& ids, const std::string& given) {
  const std::optional<Tokenizer>& tok = tokenizer_of(m, given);
  if (tok) return py::bytes(tok->decode(ids, false));
  std::string out;
  for (int32_t id : ids) out += id < 256 ? std::string(1, char(id)) : fmt::format("<{}>", id);
  return py::bytes(out);
}

std::vector<int32_t> sample(PyModel& m, const std::vector<int32_t>& prompt, int max_new, double temperature, int top_k,
                            long seed) {
  const auto lock = lock_model(m);
  require_finite_params(m, "sample");
  const ModelConfig& cfg = m.model->config();
  if (cfg.arch != Arch::Gpt || !cfg.has_logits())
    throw Error(cfg.encdec() ? "sample needs a gpt model with a head; an encoder-decoder translates (translate)"
                             : "sample needs a gpt model with a head");
  // a run that started every window with data.bos reads the prompt after it, as `normlab sample` does
  const int32_t first = m.run_data && m.run_data->bos >= 0 ? m.run_data->bos : -1;
  const int room = cfg.seq_len - (first >= 0 ? 1 : 0);
  if (prompt.empty() || int(prompt.size()) > room)
    throw Error(fmt::format("sample: the prompt has {} tokens; it needs 1 to {}{}", prompt.size(), room,
                            first >= 0 ? " (seq_len, after the run's first token, data.bos)" : " (seq_len)"));
  for (int32_t id : prompt)
    if (id < 0 || id >= cfg.vocab_size())
      throw Error(fmt::format("sample: token id {} is outside the model's vocabulary of {}", id, cfg.vocab_size()));
  if (max_new < 1 || max_new > 100000) throw Error(fmt::format("sample: max_new {} must be in [1, 100000]", max_new));
  if (!(temperature >= 0 && temperature <= 100)) throw Error("sample: temperature must be in [0, 100] (0: greedy)");
  if (top_k < 0 || top_k > cfg.vocab_size()) throw Error("sample: top_k must be in [0, vocabulary]");
  if (seed < 0) throw Error("sample: seed must be >= 0");
  SampleOptions o;
  o.max_new = max_new;
  o.temperature = temperature;
  o.top_k = top_k;
  o.seed = uint64_t(seed);
  o.first = first;
  py::gil_scoped_release release;
  return generate(*m.model, prompt, o);
}

// The instruments on one sequence (the command's `analyze jacobian|attention`) or on given rows with
// their labels (`analyze dynamics`): the command's --json text, without "input" and "model". An
// encoder-decoder's take its source rows too (the command's --source-text, or a seq2seq --tokens).
std::string instrument(PyModel& m, const std::string& kind, const Ids& ids, const std::optional<Ids>& labels,
                       int token, bool full, long full_max_dim, int lanczos_k, const std::optional<Ids>& source,
                       const std::string& precision) {
  const auto lock = lock_model(m);
  const InterruptibleCall interruptible;  // Ctrl-C: KeyboardInterrupt within one product or batch
  require_finite_params(m, kind.c_str());
  const ModelConfig& cfg = m.model->config();
  Batch b = batch_of(ids, cfg, kind.c_str());
  add_source(b, source, cfg, kind.c_str());
  // the command's --precision: attention, dynamics and sinks of a GPT or encoder may read the model's own
  // float32 parameters (no copy; gradients added for a backward pass); the rest read a float64 copy
  const bool may_narrow = !cfg.encdec() && kind != "jacobian";
  const bool wanted = analysis::instruments_in_float32(precision, m.model->params().size(), kind != "attention");
  if (!may_narrow && precision == "float32")
    throw Error(fmt::format("{}: precision float32 is for attention, dynamics and sinks of a GPT or encoder; {} reads "
                            "a float64 copy", kind, cfg.encdec() ? "an encoder-decoder's instruments" : "jacobian"));
  const bool narrow = may_narrow && wanted;
  if (narrow && kind != "attention") m.model->enable_gradients();
  nlohmann::json results;
  if (kind == "dynamics") {
    if (labels) {
      if (labels->size() != ids.size()) throw Error("dynamics: labels must have the shape of ids");
      b.labels.assign(labels->data(), labels->data() + labels->size());
    } else if (cfg.causal() || cfg.encdec()) {  // as `analyze dynamics --text`: the next tokens, or the tokens themselves
      for (int r = 0; r < b.B; r++)
        for (int t = 0; t + 1 < b.T; t++) b.labels[size_t(r) * b.T + t] = b.ids[size_t(r) * b.T + t + 1];
    } else {
      b.labels = b.ids;
    }
    check_batch(b, cfg, "dynamics", cfg.has_logits());
    if (narrow) {
      py::gil_scoped_release release;
      results = analysis::to_json(analysis::analyze_dynamics(*m.model, std::vector<Batch>{b}));
    } else {
      Model<double>& model = m.widened();
      py::gil_scoped_release release;
      results = cfg.encdec() ? analysis::to_json(analysis::analyze_dynamics_encdec(model, {b}))
                             : analysis::to_json(analysis::analyze_dynamics(model, std::vector<Batch>{b}));
    }
  } else if (kind == "sinks") {
    if (cfg.encdec()) throw Error("sinks reads a GPT or an encoder; this model is an encoder-decoder");
    py::gil_scoped_release release;
    results = narrow ? analysis::to_json(analysis::analyze_sinks(*m.model, std::vector<Batch>{b}))
                     : analysis::to_json(analysis::analyze_sinks(m.widened(), std::vector<Batch>{b}));
  } else if (kind == "attention" && narrow) {
    if (b.B != 1) throw Error(fmt::format("{}: one sequence (1-D ids), not {} rows", kind, b.B));
    py::gil_scoped_release release;
    m.model->forward(b.ids.data(), b.labels.data(), 1, b.T);
    results = analysis::to_json(analysis::analyze_attention(*m.model));
    results["input_ids"] = b.ids;
  } else if (kind == "jacobian" || kind == "attention") {
    if (b.B != 1) throw Error(fmt::format("{}: one sequence (1-D ids), not {} rows", kind, b.B));
    if (cfg.encdec() && token != -1)
      throw Error("jacobian: token picks a token-local block Jacobian; an encoder-decoder's are end-to-end (no token)");
    Model<double>& model = m.widened();
    py::gil_scoped_release release;
    model.forward(b.ids.data(), b.labels.data(), 1, b.T, nullptr, nullptr, b.source());
    if (kind == "jacobian") {
      analysis::JacobianOptions o;
      o.token = token;
      o.full = full;
      o.full_max_dim = full_max_dim;
      o.lanczos_k = lanczos_k;
      results = cfg.encdec() ? analysis::to_json(analysis::analyze_jacobian_encdec(model, o))
                             : analysis::to_json(analysis::analyze_jacobian(model, o));
    } else {
      results = analysis::to_json(analysis::analyze_attention(model));
    }
    results["input_ids"] = b.ids;
    if (cfg.encdec()) results["source_ids"] = b.src;
  } else {
    throw Error(fmt::format("no instrument '{}' (jacobian, attention, dynamics, sinks)", kind));
  }
  return dump_json(results, 1);
}

void need_encdec(const ModelConfig& cfg, const char* what) {
  if (!cfg.encdec())
    throw Error(fmt::format("{} needs an encoder-decoder model (model.arch = \"encdec\"); this one is {}", what,
                            to_string(cfg.arch)));
}

// A source-target pair of text as an encoder-decoder reads it (UTF-8 bytes, as translation training
// and the command's analyze --source-text / --text): source bytes + EOS, decoder input BOS + target
// bytes, labels the target bytes + EOS.
py::tuple translation_pair(const PyModel& m, const std::string& source, const std::string& target) {
  const ModelConfig& cfg = m.model->config();
  need_encdec(cfg, "translation_pair");
  TokenPair pair{source_ids(source), {}};
  for (unsigned char c : target) pair.tgt.push_back(int32_t(c));
  if (int(pair.src.size()) > cfg.seq_len)
    throw Error(fmt::format("translation_pair: the source is {} tokens ({} bytes + EOS), more than the model's "
                            "seq_len {}", pair.src.size(), pair.src.size() - 1, cfg.seq_len));
  if (int(pair.tgt.size()) + 1 > cfg.seq_len)
    throw Error(fmt::format("translation_pair: the target is {} tokens (BOS + {} bytes), more than the model's "
                            "seq_len {}", pair.tgt.size() + 1, pair.tgt.size(), cfg.seq_len));
  const Batch b = translation_batch({pair}, 0, 1);
  return py::make_tuple(copy_array(b.src.data(), {py::ssize_t(b.S)}), copy_array(b.ids.data(), {py::ssize_t(b.T)}),
                        copy_array(b.labels.data(), {py::ssize_t(b.T)}));
}

// `normlab translate`: each text's translation (greedy, or beam search), as the command prints it.
// Bytes: a byte-level model's output need not be UTF-8 (the Python side decodes it, replacing what is not).
std::vector<py::bytes> translate_texts(PyModel& m, const std::vector<std::string>& texts, int beam,
                                       double length_penalty, int max_len) {
  const auto lock = lock_model(m);
  require_finite_params(m, "translate");
  need_encdec(m.model->config(), "translate");
  std::vector<std::vector<int32_t>> sources;
  for (const std::string& text : texts) sources.push_back(source_ids(text));
  DecodeOptions o;
  o.beam = beam;
  o.length_penalty = length_penalty;
  o.max_len = max_len;
  std::vector<std::vector<int32_t>> out;
  {
    py::gil_scoped_release release;
    out = translate(*m.model, sources, o);
  }
  std::vector<py::bytes> lines;
  for (const auto& ids : out) lines.emplace_back(target_text(ids));
  return lines;
}

// `normlab theory --checkpoint`'s claims on this model: the --json text.
// precision: as the command's --precision (float32: the claims read the model's own float32 parameters,
// gradients added, instead of float64 copies). The claims read the module's model itself, as the
// command reads the checkpoint it opened: no copy (at 1.7B a copy with gradients was 13.7 GB more). The
// lock keeps every other call out; a claim that ablates a weight restores it before the call returns.
std::string theory_of(PyModel& m, int seeds, const std::string& corpus, const std::string& tokenizer, int seq_len,
                      const std::string& precision) {
  const auto lock = lock_model(m);
  const InterruptibleCall interruptible;
  require_finite_params(m, "theory");
  if (seeds < 1 || seeds > 100) throw Error(fmt::format("theory: seeds {} must be in [1, 100]", seeds));
  theory::TheoryOptions o;
  o.seeds = seeds;
  o.corpus = corpus;
  o.tokenizer = tokenizer;
  o.seq_len = seq_len;
  o.float32 = theory::claims_in_float32(precision, m.model->params().size());
  auto given = std::make_shared<theory::TheoryModel>();
  given->name = m.path;
  given->config = m.model->config();
  if (o.float32) m.model->enable_gradients();  // (a loaded model has none until a backward needs them)
  given->model = std::shared_ptr<Model<float>>(m.model.get(), [](Model<float>*) {});  // not owned: the module's
  py::gil_scoped_release release;
  o = theory::theory_options_for(given, m, o);
  return dump_json(theory::to_json(theory::run_theory_fresh_and_trained(o, 0)), 1);
}

// The run config: a TOML file's path or a dict's JSON text, then the overrides (as --config / --set).
RunConfig run_config_of(const std::string& path, const std::string& doc_json, const std::vector<std::string>& sets) {
  nlohmann::json doc = !path.empty() ? read_toml(path)
                       : doc_json.empty() ? nlohmann::json::object() : parse_json(doc_json, "the config dict");
  apply_overrides(doc, sets);
  return run_config_from_json(doc, !path.empty() ? "'" + path + "'" : "the config dict");
}

// train: as `normlab train` (resume: `normlab train --resume DIR`), the records of metrics.jsonl
// handed to `on_record` (as JSON text) as they are written. Ctrl-C stops after the current step
// exactly as in the command (the files complete); the caller then raises KeyboardInterrupt. An
// exception in on_record stops the run the same way and is raised after it.
py::dict train_run(const std::string& path, const std::string& doc_json, const std::vector<std::string>& sets,
               const std::string& resume_dir, bool overwrite, py::object on_record) {
  RunConfig cfg;
  if (!resume_dir.empty()) {
    nlohmann::json doc = resume_run_config(resume_dir);
    if (!path.empty()) doc = read_toml(path);
    apply_overrides(doc, sets);
    cfg = run_config_from_json(doc, "(the checkpoint's config in '" + resume_dir + "')");
    cfg.train.out_dir = resume_dir;
  } else {
    cfg = run_config_of(path, doc_json, sets);
  }
  TrainOptions options;
  options.overwrite = overwrite;
  options.resume = !resume_dir.empty();
  options.quiet = true;
  options.comm = dist::self();
  std::optional<py::error_already_set> raised;
  const StopOnInterrupt interrupt;
  std::atomic<bool> stop{false};
  options.stop = &stop;
  options.on_step = [&](const StepInfo&) {
    if (interrupt.interrupted()) stop = true;
  };
  if (!on_record.is_none())
    options.on_record = [&](const nlohmann::json& record) {
      if (interrupt.interrupted()) stop = true;
      if (raised) return;
      py::gil_scoped_acquire acquire;
      try {
        on_record(dump_json(record));
      } catch (py::error_already_set& e) {
        raised.emplace(std::move(e));
        stop = true;
      }
    };
  TrainResult r;
  {
    py::gil_scoped_release release;
    r = train(cfg, options);
  }
  if (raised) throw std::move(*raised);
  py::dict out;
  out["out_dir"] = cfg.train.out_dir;
  out["steps_done"] = r.steps_done;
  out["steps"] = cfg.train.steps;
  out["last_train_loss"] = r.last_train_loss;
  out["last_val_loss"] = r.last_val_loss;
  out["diverged"] = r.diverged;
  out["diverged_step"] = r.diverged_step;
  out["diverged_tensor"] = r.diverged_tensor;
  out["interrupted"] = r.interrupted;
  out["seconds"] = r.seconds;
  out["tokens_per_s"] = r.tokens_per_s;
  out["unigram_entropy"] = r.unigram_entropy;
  out["bleu"] = r.bleu;
  return out;
}

// compare: as `normlab compare --study NAME | --config FILE --out DIR [--set ...] [--force]`, or, with
// `resume` a stopped study's directory, as `normlab compare --resume DIR` (a name, a file or sets given
// too must be that study or extend it: study/resume.h); returns the exit code (130: interrupted by
// Ctrl-C, the study resumable).
int compare_study(const std::string& name, const std::string& path, const std::string& out_dir,
                  const std::optional<std::vector<std::string>>& sets, bool force, const std::string& resume) {
  if (!name.empty() && !path.empty()) throw Error("compare: give a study name or a study file, not both");
  if (name == "pretrained") throw Error("compare: the pretrained study runs from the command (normlab compare --study pretrained)");
  study::CompareOptions o;
  study::Study s;
  if (!resume.empty()) {
    if (force) throw Error("compare: resume continues a study and force replaces it: give one of them");
    if (!out_dir.empty() && std::filesystem::path(out_dir) != std::filesystem::path(resume))
      throw Error("compare: resume=DIR is the output directory: leave out out_dir");
    study::ResumeRequest request;
    request.dir = resume;
    const std::vector<std::string> given_sets = sets.value_or(std::vector<std::string>{});
    if (!name.empty() || !path.empty())
      request.given = (path.empty() ? study::builtin_study(name, given_sets) : study::read_study_file(path, given_sets))
                          .document;
    if (request.given || sets) request.sets = given_sets;
    study::Resumed resumed = study::resume_study(request);
    s = std::move(resumed.study);
    o.out_dir = resume;
    o.resume = true;
    o.sets = resumed.sets;
  } else {
    if (out_dir.empty()) throw Error("compare: give the output directory");
    o.sets = sets.value_or(std::vector<std::string>{});
    s = path.empty() ? study::builtin_study(name.empty() ? "default" : name, o.sets) : study::read_study_file(path, o.sets);
    o.out_dir = out_dir;
    o.force = force;
  }
  const StopOnInterrupt interrupt;
  o.stop = interrupt.flag();
  py::gil_scoped_release release;
  return study::run_study(s, o);
}

}  // namespace

PYBIND11_MODULE(_core, mod) {
  mod.doc() = "normlab's compiled core (use the normlab package, not this module)";
  use_signal_stacks();  // Python's Ctrl-C handler (SA_ONSTACK) then never runs on a GEMM's stack pointer
  py::register_exception<Error>(mod, "Error", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {  // an instrument or theory stopped by Ctrl-C
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Interrupted&) {
      PyErr_SetNone(PyExc_KeyboardInterrupt);
    }
  });
  mod.attr("interrupted_exit_code") = kInterruptedExitCode;

  py::class_<PyModel>(mod, "Model")
      .def_readonly("source", &PyModel::path)
      .def_property_readonly("config_json",
                             [](const PyModel& m) { return dump_json(model_config_to_json(m.model->config())); })
      .def_property_readonly("n_params", [](const PyModel& m) { return m.model->table().total; })
      .def("forward", &forward, py::arg("ids"), py::arg("source") = std::nullopt,
           py::arg("activation_memory") = analysis::kPassActivationBytes)
      .def("loss_and_grads", &loss_and_grads, py::arg("ids"), py::arg("labels"), py::arg("source") = std::nullopt)
      .def("params", &params)
      .def("tokenize", &tokenize, py::arg("text"), py::arg("tokenizer") = "", py::arg("special") = true)
      .def("decode", &decode, py::arg("ids"), py::arg("tokenizer") = "")
      .def("sample", &sample, py::arg("prompt"), py::arg("max_new"), py::arg("temperature"), py::arg("top_k"),
           py::arg("seed"))
      .def("instrument", &instrument, py::arg("kind"), py::arg("ids"), py::arg("labels") = std::nullopt,
           py::arg("token") = -1, py::arg("full") = true, py::arg("full_max_dim") = 4096, py::arg("lanczos_k") = 5,
           py::arg("source") = std::nullopt, py::arg("precision") = "auto")
      .def("translation_pair", &translation_pair, py::arg("source"), py::arg("target"))
      .def("translate", &translate_texts, py::arg("texts"), py::arg("beam"), py::arg("length_penalty"),
           py::arg("max_len"))
      .def("theory", &theory_of, py::arg("seeds"), py::arg("corpus"), py::arg("tokenizer"), py::arg("seq_len"),
           py::arg("precision"));
  mod.def("load", &load, py::arg("path"));
  mod.def("from_state", &from_state, py::arg("config_json"), py::arg("state"), py::arg("what"));
  mod.def("train", &train_run, py::arg("path"), py::arg("doc_json"), py::arg("sets"), py::arg("resume_dir"),
          py::arg("overwrite"), py::arg("on_record"));
  mod.def("compare", &compare_study, py::arg("name"), py::arg("path"), py::arg("out_dir"), py::arg("sets"),
          py::arg("force"), py::arg("resume"));
  mod.def("version", [] { return std::string(NORMLAB_VERSION); });
  mod.def("resource_dir", [] { return resource_dir(); });
  mod.def("set_resource_dir", [](const std::string& dir) { set_resource_dir(dir); }, py::arg("dir"));
  mod.def("num_threads", [] { return omp_get_max_threads(); });
  mod.def("openblas_core", [] { return ops::openblas_core(); });
  mod.def("set_num_threads", [](int n) {
    if (n < 1 || n > 1024) throw Error(fmt::format("set_num_threads: {} must be in [1, 1024]", n));
    omp_set_num_threads(n);
  });
}
