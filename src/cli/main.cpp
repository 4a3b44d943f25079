// main.cpp: the `normlab` command. Subcommands: compare, report, train, sample, grads, init, export,
// tokenize, analyze, theory, corpus, bleu, translate, help. With no arguments it runs `normlab
// compare` with the default study on the built-in corpus. Exit codes (docs/USAGE.md "Exit codes"): 0 done;
// 1 for every user error (each Error, and every command-line error CLI11 reports, as one message on
// stderr); 2 a diverged training run; 130 a run stopped by Ctrl-C or SIGTERM (train, compare). Under mpirun
// (src/distributed/comm.h) train and compare run over the ranks; the other commands are refused.
#include <sys/prctl.h>
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
#include "cli/model_files.h"
#include "cli/sample.h"
#include "cli/theory.h"
#include "cli/tokenize.h"
#include "cli/train.h"
#include "cli/translate.h"
#include "distributed/comm.h"
#include "ops/gemm_backend.h"
#include "ops/isa.h"
#include "util/error.h"

using namespace normlab;

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

// A program started through /proc/self/exe (the re-exec above, a study's workers) is named "exe" by the
// kernel: ps, top and pkill would not find "normlab". The process takes its file's own name back.
static void name_process() {
  std::error_code ec;
  std::string name = std::filesystem::read_symlink("/proc/self/exe", ec).filename().string();
  if (ec || name.empty()) return;
  if (const auto cut = name.find(" (deleted)"); cut != std::string::npos) name.resize(cut);  // replaced since
  ::prctl(PR_SET_NAME, name.substr(0, 15).c_str());  // (the kernel keeps 15 characters)
}

static int run_command(int argc, char** argv);

int main(int argc, char** argv) {
  set_library_environment(argv);
  name_process();
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
             "(bad option, config or file), 2 a diverged training run, 130 stopped by Ctrl-C or SIGTERM.");

  cli::TrainCommand train;
  cli::add_train_command(app, train);
  cli::GradsCommand grads;
  cli::add_grads_command(app, grads);
  cli::InitCommand init;
  cli::add_init_command(app, init);
  cli::ExportCommand exportc;
  cli::add_export_command(app, exportc);

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
    const bool distributed = train.train->parsed() || compare.compare->parsed() || app.get_subcommands().empty();
    if (dist::world().size() > 1 && !distributed)
      throw Error(fmt::format("normlab {} runs in one process: only train and compare run over MPI ranks; run it "
                              "without mpirun",
                              app.get_subcommands().front()->get_name()));
    if (train.train->parsed()) return cli::run_train(train);
    if (grads.grads->parsed()) return cli::run_grads(grads);
    if (exportc.exp->parsed()) return cli::run_export(exportc);
    if (init.init->parsed()) return cli::run_init(init);
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
