// theory.cpp: `normlab theory`: its options, their checks, the given model (--checkpoint: a
// checkpoint file, a run directory or a Hugging Face directory), the table of claims and --json.
#include "cli/theory.h"

#include <filesystem>
#include <fmt/format.h>
#include <fstream>

#include "model/model.h"
#include "train/model_source.h"
#include "train/data.h"
#include "train/run_config.h"
#include "io/tokenizer.h"
#include "util/error.h"
#include "util/progress.h"
#include "util/files.h"
#include "util/json_reader.h"

namespace normlab::cli {

void add_theory_command(CLI::App& app, TheoryCommand& cmd) {
  cmd.theory = app.add_subcommand(
      "theory", "measure each claim of docs/THEORY.md on fresh and trained models, or on one model (--checkpoint)");
  CLI::App* t = cmd.theory;
  theory::TheoryOptions& o = cmd.opts;
  t->add_option("--json", cmd.json_out, "write every claim with its numbers as JSON");
  t->add_flag("--force", cmd.force, "replace --json if it exists");
  t->add_option("--checkpoint", cmd.checkpoint,
                "measure this model only (a checkpoint, a run directory or a Hugging Face directory): every claim "
                "its architecture, norm, placement and depth can answer, over --seeds input windows; the others "
                "are skipped with the reason");
  t->add_option("--precision", cmd.precision,
                "with --checkpoint: float64 (each claim group measures a float64 copy: 8 or 16 bytes a parameter, "
                "two groups at a time), float32 (the claims read the model's own float32 parameters, opened with "
                "their gradients: 8 bytes a parameter in all, one group at a time; the claims checked to rounding "
                "through Jacobians are skipped, saying so) or auto (default: float64 when two float64 copies with "
                "gradients take at most half of this machine's memory)")
      ->check(CLI::IsMember({"auto", "float64", "float32"}));
  t->add_option("--corpus", o.corpus,
                "inputs of the byte-LM claims (and the data of the trained models): a text file (its bytes) or a "
                "token stream (.safetensors input_ids, .bin uint16); default the built-in corpus data/kjv.txt");
  t->add_option("--tokenizer", o.tokenizer,
                "with --checkpoint: read --corpus (or the built-in corpus) through this tokenizer (a file or "
                "directory, gpt2, bytes); default: the model's own (a Hugging Face directory's or GGUF file's, or the "
                "one its run read its data with), else bytes");
  t->add_option("--d-model", o.d_model, "width of the test models (default 64)");
  t->add_option("--layers", o.n_layers, "layers of the Jacobian models (default 6)");
  t->add_option("--deep-layers", o.deep_layers, "layers of the depth-growth models (default 24)");
  t->add_option("--trained-steps", cmd.trained_steps,
                "also measure every claim on trained models: trained to a validation plateau, at most this many "
                "steps (default 3000; 0: fresh only); kept in the normlab cache ($NORMLAB_CACHE or "
                "~/.cache/normlab/theory-models) and reused");
  t->add_option("--seeds", o.seeds, "seeds of the fresh models (default 5; with --checkpoint: input windows)");
  t->add_option("--trained-seeds", o.trained_seeds, "seeds of the trained models (default 3)");
  t->add_option("--paper-width", o.paper_d_model, "d_model of the Xiong et al. check (default 512, their Fig. 3; FFN 2 d)");
  t->add_option("--pairs", o.pairs,
                "translation pairs of the encoder-decoder claims: a built Bible pair or a corpus directory (default es-en)");
  t->footer(
      "Each claim prints: [claim name, models] KIND VERDICT, then claim (the statement), setting (where it was "
      "measured), reported (the paper's own result, if any), rule (the numbers the kind's rule read: a fit's quality, "
      "an interval, a bound's ratio) and measured (the first seed's or window's numbers). KIND and VERDICT: identity "
      "(a check of the algebra, tallied apart) EXACT / FAILS; bound SATISFIED / COUNTEREXAMPLE / VACUOUS; law HOLDS "
      "when the stated law fits and carries 95% of the Akaike weight, VIOLATED, NO LAW FITS or NOT DISTINGUISHABLE; "
      "effect and comparison HOLDS / VIOLATED when the 95% interval excludes 0 on the claimed / other side (the "
      "direction), then the size against the source's (or 'size not claimed'); VOID when a trained model did not "
      "learn; SKIPPED (with --checkpoint) with the premise that fails. The last lines tally each kind of model. Every "
      "claim name is a row of docs/THEORY.md, which gives the rules and why.");
}


int run_theory(TheoryCommand& cmd) {
  theory::TheoryOptions& opts = cmd.opts;
  if (!cmd.json_out.empty() && !cmd.force && std::filesystem::exists(cmd.json_out))
    throw Error(fmt::format("--json '{}' already exists; pass --force to replace it", cmd.json_out));
  if (cmd.trained_steps < 0 || cmd.trained_steps > 100000) throw Error("--trained-steps must be in [0, 100000]");
  if (opts.seeds < 1 || opts.seeds > 100 || opts.trained_seeds < 1 || opts.trained_seeds > 100)
    throw Error(fmt::format("--seeds {} and --trained-seeds {} must be in [1, 100]", opts.seeds, opts.trained_seeds));
  if (!cmd.checkpoint.empty()) {
    for (const char* o : {"--d-model", "--layers", "--deep-layers", "--trained-steps", "--trained-seeds", "--paper-width"})
      if (cmd.theory->count(o))
        throw Error(fmt::format("{} does not apply with --checkpoint: the model's own width and depth are measured", o));
    ModelSource source = open_model(cmd.checkpoint, {.forward_only = true});  // its parameters only
    auto given = std::make_shared<theory::TheoryModel>();
    given->name = cmd.checkpoint;
    given->config = source.model->config();
    given->model = std::move(source.model);  // (held once: the claims widen it, or read it in float32)
    std::string precision_line;
    opts.float32 = theory::claims_in_float32(cmd.precision, given->model->params().size(), &precision_line);
    fmt::print("{}\n", precision_line);
    if (opts.float32) given->model->enable_gradients();
    const ModelConfig& c = given->config;
    opts = theory::theory_options_for(given, source, opts);
    fmt::print("model: checkpoint '{}': {} {}, {} layers, d = {}, {} heads, {} placement, {} init{}\n", cmd.checkpoint,
               to_string(c.arch), to_string(c.norm), c.n_layers, c.d_model, c.n_heads, to_string(c.placement_of(0)),
               to_string(c.resolved_init()),
               c.hyper_connected() ? fmt::format(", {} hyper-connected streams ({})", c.hyper_streams, to_string(c.hyper))
                                   : std::string());
    if (opts.bos >= 0)
      fmt::print("input: every window starts with id {}, as its run's did (data.bos)\n", opts.bos);
  } else {
    if (!opts.tokenizer.empty())
      throw Error("--tokenizer applies with --checkpoint (the fresh models of the claims read bytes)");
    if (cmd.theory->count("--precision"))
      throw Error("--precision applies with --checkpoint (the fresh and trained models of the claims are float64)");
    if (opts.d_model < 8 || opts.d_model > 512 || opts.d_model % opts.n_heads != 0)
      throw Error(fmt::format("--d-model {} must be in [8, 512] and divisible by {}", opts.d_model, opts.n_heads));
    if (opts.n_layers < 2 || opts.n_layers > 64 || opts.deep_layers < 3 || opts.deep_layers > 256)
      throw Error("--layers must be in [2, 64] and --deep-layers in [3, 256]");
    if (opts.paper_d_model < 8 || opts.paper_d_model > 1024 || opts.paper_d_model % 4 != 0)
      throw Error(fmt::format("--paper-width {} must be in [8, 1024] and divisible by 4 (heads)", opts.paper_d_model));
  }
  opts.cache_dir = normlab_cache_dir();
  std::optional<ProgressDisplay> progress(std::in_place);  // (on stderr, gone before the table prints)
  const auto claims = theory::run_theory_fresh_and_trained(opts, cmd.trained_steps);
  progress.reset();
  theory::print_claims(claims);
  if (!cmd.json_out.empty()) {
    nlohmann::json j = theory::to_json(claims);
    try {
      write_file_atomic(cmd.json_out, dump_json(j, 1) + '\n');
    } catch (const Error& e) {
      throw Error(fmt::format("--json: {}", e.what()));
    }
  }
  return 0;
}

}  // namespace normlab::cli
