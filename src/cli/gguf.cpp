// gguf.cpp: `normlab gguf` (cli/gguf.h).
#include "cli/gguf.h"

#include <algorithm>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/gguf_model.h"
#include "io/gguf_tokenizer.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "util/error.h"

namespace normlab::cli {

namespace st = normlab::safetensors;

void add_gguf_command(CLI::App& app, GgufCommand& cmd) {
  cmd.gguf = app.add_subcommand("gguf", "what a GGUF file holds (metadata, tensors, whether normlab loads it)");
  cmd.gguf->add_option("file", cmd.path, "the .gguf file")->required();
  cmd.gguf->add_option("--dequantize", cmd.dequantize_out,
                       "write every tensor as float32 into this .safetensors (GGUF names, PyTorch order)");
  cmd.gguf->add_flag("--force", cmd.force, "replace --dequantize's file if it exists");
  cmd.gguf->add_flag("--json", cmd.json, "print the summary as JSON");
}

namespace {

// A metadata value in one short line (arrays by their length and first elements).
nlohmann::json value_json(const gguf::Value& v) {
  using gguf::ValueType;
  if (v.type == ValueType::String) return v.text;
  if (v.type == ValueType::Bool) return v.number != 0;
  if (v.type == ValueType::F32 || v.type == ValueType::F64) return v.number;
  if (v.type != ValueType::Array) return int64_t(v.number);  // an integer type: whole, |n| <= 2^53
  nlohmann::json a = {{"array", gguf::to_string(v.element)},
                      {"length", v.element == ValueType::String ? v.strings.size() : v.numbers.size()}};
  return a;
}

// ", positions divided by 8" / ", a RoPE divisor per frequency in [1, 8]" / ", 96 of each head's 128
// dimensions rotated, cos and sin x 1.19": the RoPE a file states, beyond its base.
std::string rope_scaling(const ModelConfig& c) {
  std::string out;
  if (c.rope_fraction != 1.0) out += fmt::format(", {} of each head's {} dimensions rotated", c.rope_dims(), c.head_size());
  if (c.rope_scale != 1.0)
    out += fmt::format(", positions divided by {:g}{}", c.rope_scale, c.rope_local_base > 0 ? " on the global layers" : "");
  if (!c.rope_freq_factors.empty()) {
    const auto [lo, hi] = std::minmax_element(c.rope_freq_factors.begin(), c.rope_freq_factors.end());
    out += fmt::format(", a divisor per frequency in [{:g}, {:g}]", *lo, *hi);
  }
  if (c.rope_mscale != 1.0) out += fmt::format(", cos and sin x {:.6g} (LongRoPE's attention factor)", c.rope_mscale);
  return out;
}

// What a Gemma block adds, as normlab will run it: "; sandwich norms, GeGLU, embedding x 48, local layers (5 of
// every 6) at RoPE base 10000 unscaled, scores capped at 50, logits capped at 30, sequences up to 4096 (the
// sliding window)".
std::string gemma_pieces(const ModelConfig& c, int64_t window) {
  if (c.activation != Activation::GeGlu) return "";
  std::string out = c.placement_of(0) == Placement::Sandwich ? "; sandwich norms, GeGLU" : "; GeGLU";
  out += fmt::format(", embedding x {:g}", c.embed_scale);
  if (c.rope_local_base > 0)
    out += fmt::format(", local layers ({} of every {}) at RoPE base {:g} unscaled", c.rope_global_every - 1,
                       c.rope_global_every, c.rope_local_base);
  if (c.attn_scale) out += fmt::format(", q.k x {:g} (not 1/sqrt(head size))", *c.attn_scale);
  if (c.attn_softcap > 0) out += fmt::format(", scores capped at {:g}", c.attn_softcap);
  if (c.logit_softcap > 0) out += fmt::format(", logits capped at {:g}", c.logit_softcap);
  if (window > 0 && c.seq_len == window) out += fmt::format(", sequences up to {} (the sliding window)", c.seq_len);
  return out;
}

}  // namespace

int run_gguf(const GgufCommand& cmd) {
  const gguf::File f = gguf::read(cmd.path);
  if (!cmd.dequantize_out.empty()) {
    std::vector<std::vector<float>> values;
    values.reserve(f.tensors.size());
    std::vector<st::TensorView> views;
    for (const gguf::TensorInfo& t : f.tensors) {
      values.push_back(f.dequantize(t));
      views.push_back({t.name, st::DType::F32, t.shape(), values.back().data()});
    }
    st::write(cmd.dequantize_out, views, {{"source", cmd.path}}, cmd.force);
    fmt::print("{} tensors dequantized to float32 -> {}\n", f.tensors.size(), cmd.dequantize_out);
    return 0;
  }
  nlohmann::json doc = {{"file", cmd.path}, {"version", f.version}};
  nlohmann::json meta = nlohmann::json::object();
  for (const auto& [key, v] : f.metadata) meta[key] = value_json(v);
  doc["metadata"] = meta;
  nlohmann::json tensors = nlohmann::json::array();
  for (const gguf::TensorInfo& t : f.tensors)
    tensors.push_back({{"name", t.name}, {"type", gguf::type_name(uint32_t(t.type))}, {"shape", t.shape()},
                       {"bytes", t.bytes}});
  doc["tensors"] = tensors;
  try {
    const ModelConfig c = gguf::model_config(f);
    doc["model"] = {{"loads", true},
                    {"summary", fmt::format("{}: {} layers, d_model {}, {} heads ({} key-value){}, d_ff {}, vocab {}, "
                                            "RoPE base {:g}{}, RMSNorm eps {:g}{}",
                                            f.text("general.architecture"), c.n_layers, c.d_model, c.n_heads, c.kv_heads(),
                                            c.wide_heads() ? fmt::format(" of {}", c.head_size()) : std::string(),
                                            c.ff(), c.vocab_size(), c.rope_base, rope_scaling(c), c.eps,
                                            gemma_pieces(c, gguf::sliding_window(f)))}};
  } catch (const Error& e) {
    doc["model"] = {{"loads", false}, {"why", e.what()}};
  }
  try {
    const Tokenizer tok(gguf::tokenizer_parts(f));
    doc["tokenizer"] = {{"loads", true}, {"summary", tok.description()}, {"vocab_size", tok.vocab_size()}};
  } catch (const Error& e) {
    doc["tokenizer"] = {{"loads", false}, {"why", e.what()}};
  }
  if (cmd.json) {
    fmt::print("{}\n", doc.dump(2));
    return 0;
  }
  fmt::print("{}: GGUF version {}, {} metadata entries, {} tensors\n", cmd.path, f.version, f.metadata.size(),
             f.tensors.size());
  for (const auto& [key, v] : meta.items()) {
    std::string text = v.dump();
    if (text.size() > 100) text = text.substr(0, 97) + "...";
    fmt::print("  {} = {}\n", key, text);
  }
  std::map<std::string, int> types;
  for (const gguf::TensorInfo& t : f.tensors) types[gguf::type_name(uint32_t(t.type))]++;
  std::string counts;
  for (const auto& [name, n] : types) counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", n, name);
  fmt::print("tensors: {}\n", counts);
  const auto& m = doc["model"];
  fmt::print("model: {}\n", m["loads"].get<bool>() ? m["summary"].get<std::string>() : "not loadable: " + m["why"].get<std::string>());
  const auto& t = doc["tokenizer"];
  fmt::print("tokenizer: {}\n", t["loads"].get<bool>() ? t["summary"].get<std::string>() : "not loadable: " + t["why"].get<std::string>());
  return 0;
}

}  // namespace normlab::cli
