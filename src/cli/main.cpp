// main.cpp: the `normlab` command. Subcommands: compare, report, train, sample, grads, init, export,
// tokenize, analyze, theory, corpus, bleu, translate, help. With no arguments it runs `normlab
// compare` with the default study on the built-in corpus. Exit codes (docs/USAGE.md "Exit codes"): 0 done;
// 1 for every user error (each Error, and every command-line error CLI11 reports, as one message on
// stderr); 2 a diverged training run; 130 a run stopped by Ctrl-C (train, compare). Under mpirun
// (src/dist/dist.h) train and compare run over the ranks; the other commands are refused.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <strings.h>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iostream>

#include "cli/analyze.h"
#include "cli/bleu.h"
#include "cli/compare.h"
#include "cli/corpus.h"
#include "cli/gguf.h"
#include "cli/help.h"
#include "util/interrupt.h"
#include "cli/sample.h"
#include "cli/theory.h"
#include "cli/tokenize.h"
#include "cli/translate.h"
#include "dist/dist.h"
#include "model/model.h"
#include "ops/gemm_backend.h"
#include "ops/isa.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/resume.h"
#include "train/run_config.h"
#include "io/hf.h"
#include "io/safetensors.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/files.h"

using namespace normlab;

namespace {

RunConfig load_run_config(const std::string& config_path, const std::vector<std::string>& sets) {
  nlohmann::json doc = config_path.empty() ? nlohmann::json::object() : read_toml(config_path);
  apply_overrides(doc, sets);
  return run_config_from_json(doc, config_path.empty() ? "(command line)" : "'" + config_path + "'");
}

// train --resume DIR: the config of the newest checkpoint in DIR (or --config, which must then agree
// with it; the trainer checks), with the --set overrides; the run directory is DIR.
RunConfig load_resume_config(const std::string& dir, const std::string& config_path,
                             const std::vector<std::string>& sets) {
  nlohmann::json doc = resume_run_config(dir);  // also says why DIR cannot be resumed
  if (!config_path.empty()) doc = read_toml(config_path);
  apply_overrides(doc, sets);
  RunConfig cfg = run_config_from_json(doc, config_path.empty() ? "(the checkpoint's config in '" + dir + "')"
                                                                : "'" + config_path + "'");
  cfg.train.out_dir = dir;
  return cfg;
}

// Ctrl-C stops after the current step (cli/interrupt.h); the run's files are then complete.
int run_train(const RunConfig& cfg, TrainOptions options) {
  const StopOnInterrupt interrupt;
  options.stop = interrupt.flag();
  const TrainResult r = train(cfg, options);
  if (!options.comm.root())  // rank 0 speaks for the run; every rank leaves with the same code
    return r.interrupted ? kInterruptedExitCode : r.diverged ? 2 : 0;
  if (r.interrupted) {
    std::cerr << fmt::format("normlab: interrupted after step {} of {}: {} in {} (a second Ctrl-C kills at once){}\n",
                             r.steps_done, cfg.train.steps,
                             r.steps_done > 0 ? "the checkpoint, metrics and summary are" : "no step done; the metrics and summary are",
                             cfg.train.out_dir,
                             r.steps_done > 0 ? fmt::format("; continue it with: normlab train --resume {}", cfg.train.out_dir)
                                              : std::string());
    return kInterruptedExitCode;
  }
  if (r.diverged) {
    std::cerr << fmt::format("normlab: training diverged at step {} (non-finite {})\n",
                             r.diverged_step, r.diverged_tensor);
    return 2;
  }
  fmt::print("done: {} steps in {:.1f} s, {:.0f} tokens/s, final train loss {:.4f}", r.steps_done,
             r.seconds, r.tokens_per_s, r.last_train_loss);
  if (std::isfinite(r.last_val_loss)) fmt::print(", validation loss {:.4f}", r.last_val_loss);
  if (std::isfinite(r.last_val_loss) && std::isfinite(r.unigram_entropy))
    fmt::print(" ({} unigram entropy {:.4f} nats per {})", r.unigram_unit, r.unigram_entropy, r.unigram_unit);
  if (std::isfinite(r.bleu)) fmt::print(", validation BLEU {:.2f}", r.bleu);
  if (std::isfinite(r.test_loss)) fmt::print(", test loss {:.4f}", r.test_loss);
  fmt::print("\n");
  return 0;
}

// grads: loss, logits and every parameter gradient of a checkpoint on a token file, and the hidden
// states (hidden.<l>: the stream entering layer l, l = 0..L; hidden.final: what the head reads; an
// encoder-decoder writes memory, the encoder output the cross-attention reads).
// A headless model (head = none) has no loss: only the hidden states are written.
int run_grads(const std::string& ckpt, const std::string& tokens, const std::string& out, bool force) {
  namespace st = safetensors;
  if (!force && std::filesystem::exists(out))
    throw Error(fmt::format("--out '{}' already exists; pass --force to replace it", out));
  auto model = load_model(ckpt);
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
int run_export(const std::string& ckpt, const std::string& hf_dir, bool force) {
  auto model = load_model(ckpt, /*forward_only=*/true);
  const std::string arch = hf::write_model_dir(hf_dir, *model, force);
  fmt::print("{} ({} parameters) -> {} (config.json, model.safetensors; load with "
             "transformers' from_pretrained)\n",
             arch, model->table().total, hf_dir);
  return 0;
}

int run_init(const RunConfig& cfg, const std::string& out, bool force) {
  if (!cfg.model_given && cfg.train.init_from.empty())
    fmt::print("no [model] given: using the default model config\n");
  Model<float> model(cfg.model);
  save_checkpoint(out, model, nullptr, 0, force);
  fmt::print("initialized {} parameters ({}) -> {}\n", model.table().total,
             to_string(model.config().resolved_init()), out);
  return 0;
}

}  // namespace

// Two libraries read their settings from the environment when they are loaded, before main, so
// setting them here needs one re-exec (if it fails normlab simply runs on; a value the user set is
// always kept):
// - OpenMP threads that spin while they wait (libgomp's default) collapse when processes share the
//   cores: two normlab processes on 2 cores, or one beside a build, ran 30x slower (docs/USAGE.md,
//   "Several processes on one machine"): OMP_WAIT_POLICY=PASSIVE.
// - OpenBLAS gives a CPU model newer than its table its SSE3 kernels: OPENBLAS_CORETYPE from the CPU's
//   own features instead (ops::openblas_coretype), when OpenBLAS chose other kernels.
static void set_library_environment(char** argv) {
  bool changed = false;
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT"))
    changed |= ::setenv("OMP_WAIT_POLICY", "PASSIVE", 0) == 0;
  if (!std::getenv("OPENBLAS_CORETYPE")) {
    try {
      const char* want = ops::openblas_coretype(ops::active_isa());
      if (::strcasecmp(ops::openblas_core().c_str(), want) != 0) changed |= ::setenv("OPENBLAS_CORETYPE", want, 0) == 0;
    } catch (const Error&) {  // a bad NORMLAB_ISA: reported by the command itself
    }
  }
  if (changed) ::execv("/proc/self/exe", argv);
}

static int run_command(int argc, char** argv);

int main(int argc, char** argv) {
  set_library_environment(argv);
  try {
    dist::init(&argc, &argv);  // MPI under a launcher; refused when built without it
  } catch (const Error& e) {
    return dist::exit_after_error(e.what());
  }
  // "~/..." in an argument the shell left alone (quoted, --out=~/x, data.corpus=~/x): util/files.h
  std::vector<std::string> args = expand_home_in_arguments(argc, argv);
  std::vector<char*> expanded;
  for (std::string& a : args) expanded.push_back(a.data());
  expanded.push_back(nullptr);
  const int code = run_command(argc, expanded.data());
  dist::finalize();
  return code;
}

static int run_command(int argc, char** argv) {
  CLI::App app{"normlab: build, train and dissect Transformers with any normalization placement"};
  app.name("normlab");
  app.require_subcommand(0, 1);
  // --version also says which kernels run (ops/isa.h): the CPU's choice or NORMLAB_ISA's, and which
  // libraries' kernels run the GEMMs (ops/gemm_backend.h).
  app.set_version_flag("--version", [] {
    try {
      const ops::IsaChoice& isa = ops::isa_choice();
      return fmt::format("normlab {}\nkernels: {} ({})\ngemm: {}", NORMLAB_VERSION, ops::to_string(isa.isa),
                         isa.reason, ops::gemm_kernels());
    } catch (const Error& e) {
      return fmt::format("normlab {}\nkernels: error: {}", NORMLAB_VERSION, e.what());
    }
  });
  app.footer("normlab help CMD (or normlab CMD --help) explains a command. Exit codes: 0 done, 1 a user error "
             "(bad option, config or file), 2 a diverged training run, 130 stopped by Ctrl-C.");

  std::string config_path, ckpt, tokens, out;
  std::vector<std::string> sets;
  bool force = false, quiet = false;

  auto* train_cmd = app.add_subcommand("train", "train a model (TOML config plus --set overrides)");
  train_cmd->add_option("--config,-c", config_path, "TOML config with [model], [train], [data]");
  train_cmd->add_option("--set", sets, "override, e.g. --set train.lr=3e-4 --set model.placement=post");
  train_cmd->add_flag("--force", force, "replace a run already in train.out_dir");
  std::string resume_dir;
  train_cmd->add_option("--resume", resume_dir,
                        "continue the run in DIR from its newest checkpoint, bit for bit (its own config; --set "
                        "train.steps=N trains longer)");
  train_cmd->add_flag("--quiet,-q", quiet, "no progress lines");

  auto* grads_cmd = app.add_subcommand("grads", "loss, logits and gradients of a checkpoint on a token file");
  grads_cmd->add_option("--checkpoint", ckpt, "model checkpoint (.safetensors), Hugging Face directory or .gguf")->required();
  grads_cmd->add_option("--tokens", tokens, "int32 input_ids and labels (B, T) (.safetensors)")->required();
  grads_cmd->add_option("--out", out, "output .safetensors: loss, logits, grad.<param>")->required();
  grads_cmd->add_flag("--force", force, "replace --out if it exists");

  auto* init_cmd = app.add_subcommand("init", "write a freshly initialized checkpoint");
  init_cmd->add_option("--config,-c", config_path, "TOML config ([model] is used)");
  init_cmd->add_option("--set", sets, "override, e.g. --set model.n_layers=6");
  init_cmd->add_option("--out", out, "output .safetensors")->required();
  init_cmd->add_flag("--force", force, "replace --out if it exists");

  auto* export_cmd = app.add_subcommand("export", "write a checkpoint as a Hugging Face model directory");
  std::string hf_dir;
  export_cmd->add_option("--checkpoint", ckpt, "model checkpoint (.safetensors) or Hugging Face directory")->required();
  export_cmd->add_option("--hf", hf_dir, "output directory (config.json + model.safetensors)")->required();
  export_cmd->add_flag("--force", force, "replace config.json / model.safetensors in --hf if present");

  cli::TheoryCommand theory;
  cli::add_theory_command(app, theory);

  cli::AnalyzeCommand analyze;
  cli::add_analyze_command(app, analyze);
  cli::CompareCommand compare;
  cli::add_compare_command(app, compare);
  cli::TokenizeCommand tokenize;
  cli::add_tokenize_command(app, tokenize);
  cli::CorpusCommand corpus;
  cli::add_corpus_command(app, corpus);
  cli::BleuCommand bleu;
  cli::add_bleu_command(app, bleu);
  cli::TranslateCommand translate;
  cli::add_translate_command(app, translate);
  cli::SampleCommand sample;
  cli::add_sample_command(app, sample);
  cli::GgufCommand gguf;
  cli::add_gguf_command(app, gguf);
  cli::HelpCommand help;
  cli::add_help_command(app, help);

  // Every rank of an MPI job parses the same arguments: a parse error, --help or --version is the
  // same on all of them, and only rank 0 prints it.
  if (const auto unknown = cli::unknown_command(app, argc, argv)) {
    if (dist::world().root()) std::cerr << "normlab: error: " << *unknown << "\n";
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (!dist::world().root()) return e.get_exit_code() == 0 ? 0 : 1;
    return cli::parse_error_exit(app, e, argc, argv);
  }

  try {
    ops::isa_choice();  // a bad NORMLAB_ISA is one clear error before any work
    const bool distributed = train_cmd->parsed() || compare.compare->parsed() || app.get_subcommands().empty();
    if (dist::world().size() > 1 && !distributed)
      throw Error(fmt::format("normlab {} runs in one process: only train and compare run over MPI ranks; run it "
                              "without mpirun",
                              app.get_subcommands().front()->get_name()));
    if (train_cmd->parsed()) {
      TrainOptions options;
      options.overwrite = force;
      options.quiet = quiet;
      if (resume_dir.empty()) return run_train(load_run_config(config_path, sets), options);
      if (force) throw Error("--resume continues a run and --force replaces it: give one of them");
      options.resume = true;
      const int code = run_train(load_resume_config(resume_dir, config_path, sets), options);
      // a run of a study (STUDY/runs/NAME): its results.json and report are the study's to rebuild
      std::filesystem::path run = std::filesystem::absolute(resume_dir).lexically_normal();
      if (run.filename().empty()) run = run.parent_path();  // (a trailing '/')
      const std::filesystem::path study = run.parent_path();
      if (study.filename() == "runs" && std::filesystem::is_regular_file(study.parent_path() / "study.json") &&
          dist::world().root())
        fmt::print("note: this run belongs to the study in '{}'; its results.json and report do not change with "
                   "train --resume: `normlab compare --resume {}` (with the study's --study or --config) takes the "
                   "run's new records into them\n",
                   study.parent_path().string(), study.parent_path().string());
      return code;
    }
    if (grads_cmd->parsed()) return run_grads(ckpt, tokens, out, force);
    if (export_cmd->parsed()) return run_export(ckpt, hf_dir, force);
    if (init_cmd->parsed()) return run_init(load_run_config(config_path, sets), out, force);
    if (analyze.analyze->parsed()) return cli::run_analyze(analyze);
    if (theory.theory->parsed()) return cli::run_theory(theory);
    if (compare.compare->parsed()) return cli::run_compare(compare);
    if (compare.report->parsed()) return cli::run_report(compare);
    if (tokenize.tokenize->parsed()) return cli::run_tokenize(tokenize);
    if (corpus.corpus->parsed()) return cli::run_corpus(corpus);
    if (bleu.bleu->parsed()) return cli::run_bleu(bleu);
    if (translate.translate->parsed()) return cli::run_translate(translate);
    if (sample.sample->parsed()) return cli::run_sample(sample);
    if (gguf.gguf->parsed()) return cli::run_gguf(gguf);
    if (help.help->parsed()) return cli::run_help(app, help);
    // no subcommand: the default study
    fmt::print("normlab: no subcommand given; running the default study (`normlab compare`; see `normlab --help`)\n");
    return cli::run_compare(compare);
  } catch (const Error& e) {
    return dist::exit_after_error(e.what());
  } catch (const std::bad_alloc&) {
    return dist::exit_after_error("out of memory (the model or batch is too large for this machine)");
  } catch (const std::exception& e) {
    return dist::exit_after_error(e.what());
  }
}
