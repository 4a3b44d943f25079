// model_files.cpp: `normlab grads`, `normlab init` and `normlab export` (model_files.h).
#include "cli/model_files.h"

#include <filesystem>
#include <fmt/format.h>

#include "cli/train.h"
#include "io/hf.h"
#include "io/safetensors.h"
#include "model/init.h"
#include "model/model.h"
#include "train/checkpoint.h"
#include "train/model_source.h"
#include "train/data.h"
#include "train/run_config.h"
#include "util/error.h"

namespace normlab::cli {

void add_grads_command(CLI::App& app, GradsCommand& cmd) {
  cmd.grads = app.add_subcommand("grads", "loss, logits and gradients of a checkpoint on a token file");
  cmd.grads->add_option("--checkpoint", cmd.checkpoint, "model checkpoint (.safetensors), Hugging Face directory or .gguf")->required();
  cmd.grads->add_option("--tokens", cmd.tokens, "int32 input_ids and labels (B, T) (.safetensors)")->required();
  cmd.grads->add_option("--out", cmd.out, "output .safetensors: loss, logits, grad.<param>")->required();
  cmd.grads->add_flag("--force", cmd.force, "replace --out if it exists");
}

void add_init_command(CLI::App& app, InitCommand& cmd) {
  cmd.init = app.add_subcommand("init", "write a freshly initialized checkpoint");
  cmd.init->add_option("--config,-c", cmd.config_path, "TOML config ([model] is used)");
  cmd.init->add_option("--set", cmd.sets, "override, e.g. --set model.n_layers=6");
  cmd.init->add_option("--out", cmd.out, "output .safetensors")->required();
  cmd.init->add_flag("--force", cmd.force, "replace --out if it exists");
}

void add_export_command(CLI::App& app, ExportCommand& cmd) {
  cmd.exp = app.add_subcommand("export", "write a checkpoint as a Hugging Face model directory");
  cmd.exp->add_option("--checkpoint", cmd.checkpoint, "model checkpoint (.safetensors) or Hugging Face directory")->required();
  cmd.exp->add_option("--hf", cmd.hf_dir, "output directory (config.json + model.safetensors)")->required();
  cmd.exp->add_flag("--force", cmd.force, "replace config.json / model.safetensors in --hf if present");
}

// grads: loss, logits and every parameter gradient of a checkpoint on a token file, and the hidden
// states (hidden.<l>: the stream entering layer l, l = 0..L; hidden.final: what the head reads; an
// encoder-decoder writes memory, the encoder output the cross-attention reads).
// A headless model (head = none) has no loss: only the hidden states are written.
int run_grads(const GradsCommand& cmd) {
  const std::string &ckpt = cmd.checkpoint, &tokens = cmd.tokens, &out = cmd.out;
  const bool force = cmd.force;
  namespace st = safetensors;
  if (!force && std::filesystem::exists(out))
    throw Error(fmt::format("--out '{}' already exists; pass --force to replace it", out));
  const ModelSource source = open_model(ckpt);
  const auto& model = source.model;
  const ModelConfig& cfg = model->config();
  const Batch batch = load_token_file(tokens);
  check_batch(batch, cfg, tokens, cfg.has_logits());
  const float loss = float(model->forward(batch.ids.data(), batch.labels.data(), batch.B, batch.T,
                                          batch.types_or_null(), batch.mask_or_null(), batch.source()));
  const int V = cfg.vocab_size(), C = cfg.d_model, L = cfg.n_layers;
  std::vector<st::TensorView> views;
  std::vector<float> logits;
  if (cfg.has_logits()) {
    logits.assign(model->logits(), model->logits() + size_t(batch.B) * batch.T * V);
    views.push_back({"loss", st::DType::F32, {}, &loss});
    views.push_back({"logits", st::DType::F32, {batch.B, batch.T, V}, logits.data()});
  }
  if (cfg.encdec()) {
    views.push_back({"memory", st::DType::F32, {batch.B, batch.S, C}, model->memory()});
  } else {
    for (int l = 0; l <= L; l++)
      views.push_back({fmt::format("hidden.{}", l), st::DType::F32, {batch.B, batch.T, C}, model->stream(2 * l)});
    views.push_back({"hidden.final", st::DType::F32, {batch.B, batch.T, C}, model->final_hidden()});
  }
  if (cfg.has_logits()) {
    model->zero_grad();
    model->backward();
    for (const ParamSpec& p : model->table().specs)
      views.push_back({"grad." + p.name, st::DType::F32, p.shape, model->grads().data() + p.offset});
  }
  st::write(out, views, {{"config", model_config_to_json(cfg).dump()}}, force);
  if (cfg.has_logits())
    fmt::print("loss {:.6f} over {} labelled positions -> {}\n", loss, model->label_count(), out);
  else
    fmt::print("headless model (head = none): hidden states only -> {}\n", out);
  return 0;
}

// export: a normlab checkpoint as a Hugging Face directory (GPT2LMHeadModel, BertForMaskedLM, BertModel).
int run_export(const ExportCommand& cmd) {
  const std::string &ckpt = cmd.checkpoint, &hf_dir = cmd.hf_dir;
  const bool force = cmd.force;
  const ModelSource source = open_model(ckpt, {.forward_only = true});
  const auto& model = source.model;
  const std::string arch = hf::write_model_dir(hf_dir, *model, force);
  fmt::print("{} ({} parameters) -> {} (config.json, model.safetensors; load with "
             "transformers' from_pretrained)\n",
             arch, model->table().total, hf_dir);
  return 0;
}

int run_init(const InitCommand& cmd) {
  const RunConfig cfg = load_run_config(cmd.config_path, cmd.sets);
  const std::string& out = cmd.out;
  const bool force = cmd.force;
  if (!cfg.model_given && cfg.train.init_from.empty())
    fmt::print("no [model] given: using the default model config\n");
  // the parameters alone (no gradients: a 1.7B model's 6.8 GB, not twice that), initialized as Model(cfg) does
  Model<float> model(cfg.model, Model<float>::Unset{}, Model<float>::ForwardOnly{});
  init_params(model.params().data(), model.table(), model.config());
  save_checkpoint(out, model, nullptr, 0, force);
  fmt::print("initialized {} parameters ({}) -> {}\n", model.table().total,
             to_string(model.config().resolved_init()), out);
  return 0;
}

}  // namespace normlab::cli
