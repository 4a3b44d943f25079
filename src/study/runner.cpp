// runner.cpp: running a study: the runs (language-model runs on a byte corpus, translation runs of an
// encoder-decoder on a parallel corpus), their instruments, the theory claims, progress and Ctrl-C;
// under mpirun the runs spread over the ranks, one run per rank at a time (assign_runs).
#include "util/clock.h"
#include "study/runner.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <omp.h>
#include <optional>
#include <unistd.h>

#include "theory/theory.h"
#include "distributed/comm.h"
#include "model/decode.h"
#include "model/model.h"
#include "study/jobs.h"
#include "study/lr_sensitivity.h"
#include "study/onsets.h"
#include "study/probe.h"
#include "study/report.h"
#include "study/reproduce.h"
#include "study/run_metrics.h"
#include "study/results_view.h"
#include "study/resume.h"
#include "study/start.h"
#include "study/summary.h"
#include "train/checkpoint.h"
#include "train/model_source.h"
#include "train/data.h"
#include "train/resume.h"
#include "train/trainer.h"
#include "train/translation.h"
#include "util/error.h"
#include "util/files.h"
#include "util/interrupt.h"
#include "util/json_reader.h"

namespace normlab::study {

namespace fs = std::filesystem;

namespace {

constexpr double kTheorySecondsGuess = 12;  // for the ETA only (measured: ~10 s on 2 cores)

// util/clock.h's format_duration, or "?" for an estimate not yet known
std::string clock_text(double s) { return !std::isfinite(s) || s < 0 ? "?" : format_duration(s); }

// Relative cost of a run (training FLOPs; the instruments scale roughly alike), for the ETA.
double run_cost(const RunConfig& c) {
  const ModelConfig& m = c.model;
  const double d = m.d_model, L = m.total_layers(), T = c.train.seq_len > 0 ? c.train.seq_len : m.seq_len;
  const double per_token = 6.0 * (L * (4 * d * d + 2 * d * m.ff()) + d * m.vocab_size()) + 6.0 * L * T * d;
  return double(c.train.steps) * c.train.batch_size * c.train.grad_accum * T * per_token;
}

// The progress display: one status line, redrawn in place on a terminal, a line per tenth of a run
// otherwise (logs, CI).
class Progress {
 public:
  // costs: of every run of the study, 0 for those another rank runs. rank_tag: "" alone, else
  // "rank r: " (every rank prints its own runs' first and last lines; rank 0 alone the steps).
  // shares_terminal: a job of `--jobs` (jobs.h), whose lines go to job 0's terminal.
  Progress(std::vector<double> costs, std::string rank_tag, bool steps, bool shares_terminal = false)
      : costs_(std::move(costs)), tty_(isatty(fileno(stdout))), steps_shown_(steps),
        shares_terminal_(shares_terminal), tag_(std::move(rank_tag)) {
    for (double c : costs_) total_ += c;
  }
  void begin_run(size_t i, const std::string& label, long steps) {
    run_ = i;
    label_ = label;
    steps_ = steps;
    next_line_ = 0;
    first_step_ = -1;
    run_t0_ = Clock::now();
    fmt::print("{}{}[{}/{}] {}\n", line_start(), tag_, i + 1, costs_.size(), label);
    std::fflush(stdout);
  }
  void stage(const std::string& what) {
    if (!steps_shown_) return;
    clear();
    fmt::print("        {}\n", what);
    std::fflush(stdout);
  }
  void step(const StepInfo& s) {
    if (!steps_shown_) return;
    if (first_step_ < 0) {  // a run resumed from its checkpoint starts past step 1: an earlier process
      first_step_ = s.step - 1;  // did the steps before, so they count as done but not in the rates
      done_before_ += costs_[run_] * double(first_step_) / double(std::max(1L, s.steps));
    }
    const double done = done_ + costs_[run_] * double(s.step) / double(std::max(1L, s.steps));
    const double elapsed = seconds_since(t0_), done_here = done - done_before_;
    const double rate = done_here > 0 ? elapsed / done_here : NAN;
    // before a run has a few steps behind it its rate is mostly start-up cost: no estimate (for the
    // study, only until the first run has them)
    const bool starting = s.step - first_step_ < 10;
    const double study_left =
        done_ == 0 && starting ? NAN : (total_ - done) * rate + (theory_pending_ ? kTheorySecondsGuess : 0);
    const double run_left =
        starting && s.step < s.steps ? NAN
                                     : seconds_since(run_t0_) / double(s.step - first_step_) * double(s.steps - s.step);
    const std::string line = fmt::format(
        "        step {}/{} | loss {:.4f} | run {} left | study {:.0f}% done, {} left (elapsed {})", s.step,
        s.steps, s.loss, clock_text(run_left), 100 * done / total_, clock_text(study_left), clock_text(elapsed));
    if (tty_) {
      if (s.step == s.steps || seconds_since(last_draw_) > 0.2) {
        fmt::print("\r\033[K{}", line);
        std::fflush(stdout);
        drawn_ = true;
        last_draw_ = Clock::now();
      }
    } else if (double(s.step) >= next_line_ * double(s.steps) / 10.0 || s.step == s.steps) {
      fmt::print("{}\n", line);
      std::fflush(stdout);
      next_line_ = std::floor(10.0 * double(s.step) / double(s.steps)) + 1;
    }
  }
  void end_run(const std::string& outcome) {
    done_ += costs_[run_];
    clear();
    fmt::print("{}{}        {}{} ({})\n", line_start(), tag_, tag_.empty() ? "" : label_ + ": ", outcome,
               clock_text(seconds_since(run_t0_)));
    std::fflush(stdout);
  }
  // The cost of the runs done so far by every job (--jobs: the others' runs count for the estimate).
  void set_done(double cost) { done_ = cost; }
  void theory_done() { theory_pending_ = false; }
  void set_theory(bool pending) { theory_pending_ = pending; }
  double elapsed() const { return seconds_since(t0_); }

 private:
  void clear() {
    if (drawn_) fmt::print("\r\033[K");
    drawn_ = false;
  }
  // a job's line first clears job 0's status line on their terminal
  const char* line_start() const { return tty_ && shares_terminal_ ? "\r\033[K" : ""; }
  std::vector<double> costs_;
  double total_ = 0, done_ = 0, next_line_ = 0;
  double done_before_ = 0;  // the share of done_ that resumed runs had done before this process began
  long first_step_ = -1;    // the last step done before this process took the run up (0 if fresh)
  bool tty_, steps_shown_, shares_terminal_, drawn_ = false, theory_pending_ = false;
  std::string tag_;
  size_t run_ = 0;
  long steps_ = 0;
  std::string label_;
  Clock::time_point t0_ = Clock::now(), run_t0_ = Clock::now(), last_draw_ = Clock::now();
};

bool stopped(const CompareOptions& o) { return o.stop && o.stop->load(); }

void write_atomically(const fs::path& path, const std::string& text) { write_file_atomic(path.string(), text); }

bool is_translation(const RunConfig& cfg) { return cfg.model.encdec() || !cfg.data.parallel.empty(); }

int run_seq_len(const RunConfig& cfg) { return cfg.train.seq_len > 0 ? cfg.train.seq_len : cfg.model.seq_len; }

// The data of every run, read once per distinct corpus before anything is written (a bad corpus fails
// the study at once): byte corpora for the language-model runs, and for the translation runs the
// parallel corpus's sizes and target unigram entropy and its validation pairs, which the instruments
// read (the trainer reads the pairs itself).
struct StudyData {
  std::map<std::string, Corpus> corpora;
  std::map<std::string, nlohmann::json> parallel;
  std::map<std::string, std::vector<TokenPair>> valid_pairs;  // same keys as parallel
};

std::string parallel_key(const RunConfig& cfg) { return fmt::format("{}|{}", cfg.data.parallel, run_seq_len(cfg)); }

const nlohmann::json& parallel_for(const RunConfig& cfg, StudyData& data) {
  if (!cfg.model.encdec())
    throw Error(fmt::format("data.parallel is a translation corpus: it needs model.arch = \"encdec\" (this model is {})",
                            to_string(cfg.model.arch)));
  if (cfg.data.parallel.empty())
    throw Error("an encoder-decoder (model.arch = \"encdec\") trains on a parallel corpus: set data.parallel");
  const std::string key = parallel_key(cfg);
  auto it = data.parallel.find(key);
  if (it == data.parallel.end()) {
    const TranslationData d = load_translation(cfg.data.parallel, run_seq_len(cfg));
    std::vector<int32_t> labels;
    for (const TokenPair& p : d.train) {
      labels.insert(labels.end(), p.tgt.begin(), p.tgt.end());
      labels.push_back(kEosToken);
    }
    it = data.parallel
             .emplace(key, nlohmann::json{{"dir", d.dir}, {"train_pairs", d.train.size()}, {"valid_pairs", d.valid.size()},
                                          {"dropped_train", d.dropped_train}, {"dropped_valid", d.dropped_valid},
                                          {"seq_len", run_seq_len(cfg)}, {"target_unigram_entropy", unigram_entropy(labels)}})
             .first;
    data.valid_pairs[key] = d.valid;
  }
  return it->second;
}

const Corpus& corpus_for(const RunConfig& cfg, std::map<std::string, Corpus>& cache) {
  const int T = cfg.train.seq_len > 0 ? cfg.train.seq_len : cfg.model.seq_len;
  const std::string key =
      fmt::format("{}|{}|{}|{}|{}|{}", cfg.data.corpus, cfg.data.val_fraction, cfg.data.test_fraction, T,
                  cfg.data.tokenizer, cfg.data.max_bytes);
  auto it = cache.find(cfg.data.tokens.empty() ? key : cfg.data.tokens + "|" + key);
  if (it == cache.end() && !cfg.data.tokens.empty())  // a token stream (study.cpp refuses rows)
    it = cache.emplace(cfg.data.tokens + "|" + key, load_token_stream(cfg.data.tokens, cfg.data.val_fraction, T,
                                                                           cfg.data.test_fraction)).first;
  else if (it == cache.end())
    it = cache.emplace(key, load_corpus(cfg.data.corpus, cfg.data.val_fraction, T, cfg.data.tokenizer,
                                        size_t(cfg.data.max_bytes), cfg.data.test_fraction)).first;
  if (cfg.train.init_from.empty()) check_model_fits_corpus(cfg.model, it->second);
  return it->second;
}

// One run: instruments at initialization, training, instruments of the trained model. What does not
// apply to a run is recorded under "skipped" with the reason, never left out silently.
nlohmann::json run_one(const Study& study, const StudyRun& spec, const fs::path& dir, const CompareOptions& options,
                       Progress& progress, StudyData& data) {
  RunConfig cfg = spec.config;
  cfg.train.out_dir = dir.string();
  nlohmann::json run = {{"name", spec.name}, {"label", spec.label}, {"grid", spec.grid},
                        {"config", run_config_to_json(cfg)}, {"status", "running"}};
  nlohmann::json skipped = nlohmann::json::object();
  const bool translation = is_translation(cfg);
  const Corpus* corpus = nullptr;
  if (translation) {
    run["task"] = "translation";
    run["parallel"] = parallel_for(cfg, data);
    run["unigram_entropy"] = run["parallel"]["target_unigram_entropy"];
    run["unigram_unit"] = "target byte";  // nats per byte of the target (and its EOS)
  } else {
    corpus = &corpus_for(cfg, data.corpora);
    run["task"] = "language model";
    run["unigram_entropy"] = unigram_entropy(corpus->train);
    run["unigram_unit"] = corpus->unit();  // nats per byte, or per token with data.tokenizer
    run["input"] = corpus->description();
  }
  // a run that starts from a user's checkpoint says so where it says what it trained on
  if (!cfg.train.init_from.empty())
    run["input"] = run.value("input", std::string("the parallel corpus")) + view::kFromCheckpoint + cfg.train.init_from + "'";
  const double target = std::isnan(study.loss_target) ? run["unigram_entropy"].get<double>() - 0.5 : study.loss_target;
  run["loss_target"] = target;
  fs::create_directories(dir);

  const bool probe = study.instruments;
  if (probe) skipped.update(probe_omissions(cfg.model, study.probe_seq_len));
  if (!skipped.empty()) run["skipped"] = skipped;
  // the instruments on a model: an encoder-decoder on the validation pairs, any other on a window of
  // the validation text
  const auto probe_one = [&](Model<double>& m) {
    return translation ? probe_encdec(m, data.valid_pairs.at(parallel_key(cfg)), study.probe_seq_len)
                       : probe_model(m, corpus->val, study.probe_seq_len, 11);
  };

  nlohmann::json instruments = nlohmann::json::object();
  const auto probe_t0 = Clock::now();
  if (probe) {
    progress.stage("instruments at initialization");
    Model<float> fresh(cfg.model);
    if (!cfg.train.init_from.empty()) load_params(cfg.train.init_from, fresh);
    auto m = widen(fresh);
    instruments["init"] = probe_one(*m);
  }
  double probe_seconds = seconds_since(probe_t0);
  if (stopped(options)) {
    run["status"] = "interrupted";
    return run;
  }

  TrainOptions topts;
  topts.overwrite = options.force;
  if (options.resume) {  // a stopped study: continue this run from its checkpoint, or start it again
    topts.resume = newest_checkpoint(dir).has_value();
    topts.overwrite = !topts.resume;
  }
  topts.quiet = true;
  topts.comm = dist::self();  // a run trains on one rank (run_study spreads the runs)
  topts.stop = options.stop;
  topts.on_step = [&](const StepInfo& s) { progress.step(s); };
  const TrainResult r = train(cfg, topts);
  read_metrics(dir / "metrics.jsonl", run);
  run["status"] = r.interrupted ? "interrupted" : r.diverged ? "diverged" : "finished";
  run["steps_to_target"] = steps_to_target(run["train"], target);

  const fs::path ckpt = dir / "checkpoint.safetensors";
  if (probe && !stopped(options) && fs::exists(ckpt)) {
    progress.stage("instruments after training");
    const auto t1 = Clock::now();
    const ModelSource trained = open_model(ckpt.string(), {.forward_only = true});  // widened next
    auto m = widen(*trained.model);
    instruments["final"] = probe_one(*m);
    probe_seconds += seconds_since(t1);
  }
  run["instruments_seconds"] = probe_seconds;
  if (!instruments.empty()) {
    run["instruments"] = instruments;
    write_atomically(dir / "instruments.json", instruments.dump(1) + "\n");
  }
  return run;
}

// A run's record before (or without) its results.
nlohmann::json run_record(const StudyRun& spec, const std::string& status) {
  return {{"name", spec.name}, {"label", spec.label}, {"grid", spec.grid},
          {"config", run_config_to_json(spec.config)}, {"status", status}};
}

// Run i of the study (run_one) between its progress lines; a run that throws (an Error, or out of
// memory) is recorded as failed and the study goes on.
nlohmann::json run_and_report(const Study& study, size_t i, const fs::path& out, const CompareOptions& options,
                              Progress& progress, StudyData& data) {
  const StudyRun& spec = study.runs[i];
  progress.begin_run(i, spec.label, spec.config.train.steps);
  nlohmann::json run;
  try {
    run = run_one(study, spec, out / "runs" / spec.name, options, progress, data);
  } catch (const std::exception& e) {
    run = run_record(spec, "failed");
    run["error"] = dynamic_cast<const std::bad_alloc*>(&e) ? std::string("out of memory") : std::string(e.what());
  }
  const std::string status = run["status"];
  std::string outcome = status;
  if (status == "diverged") outcome = fmt::format("diverged at step {}", run["diverged"].value("step", 0L));
  if (status == "failed") outcome = "FAILED: " + run.value("error", std::string());
  if (run.contains("summary") && run["summary"]["val_loss"].is_number())
    outcome += fmt::format(", validation loss {:.4f}", run["summary"]["val_loss"].get<double>());
  if (run.contains("bleu") && run["bleu"]["bleu"].is_number())
    outcome += fmt::format(", BLEU {:.2f} (greedy, {} validation pairs)", run["bleu"]["bleu"].get<double>(),
                           run["bleu"].value("sentences", 0));
  progress.end_run(outcome);
  return run;
}

// How many processes run the study's runs side by side (jobs.h): --jobs, or by default one per core
// OpenMP may use; never more than there are runs to run; 1 under MPI (the ranks spread the runs) and
// where no command can be started (the Python module).
int local_jobs(const CompareOptions& options, const dist::Comm& comm, size_t runs) {
  if (comm.size() > 1 || options.worker_exe.empty() || dist::under_launcher()) return 1;
  const int wanted = options.jobs > 0 ? options.jobs : omp_get_max_threads();
  return int(std::max<size_t>(1, std::min<size_t>(size_t(wanted), runs)));
}

// OpenMP's thread count for this scope (OpenBLAS's OpenMP build follows it too).
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : before_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ScopedThreads() { omp_set_num_threads(before_); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int before_;
};

// results.json's record of the study itself, before its runs
nlohmann::json results_header(const Study& study) {
  return {{"study", {{"name", study.name}, {"title", study.title}, {"description", study.description},
                     {"varying", study.varying}, {"instruments", study.instruments},
                     {"probe_seq_len", study.probe_seq_len}, {"document", study.document}}},
          {"runs", nlohmann::json::array()}};
}

// compare --worker K: job K of a study started with --jobs (jobs.h): runs from the queue until it is
// empty or Ctrl-C, its records written after every run.
int run_worker(const Study& study, const CompareOptions& given) {
  const fs::path out(given.out_dir);
  RunQueue queue(out);
  const WorkerStop stop(out, given.stop);
  CompareOptions options = given;
  options.stop = stop.flag();
  std::vector<double> costs;
  for (const auto& r : study.runs) costs.push_back(run_cost(r.config));
  Progress progress(costs, fmt::format("job {}: ", options.worker), false, true);
  StudyData data;
  nlohmann::json part = {{"runs", nlohmann::json::object()}, {"interrupted", false}};
  while (!stopped(options)) {
    const std::optional<size_t> i = queue.take(options.worker);
    if (!i) break;
    nlohmann::json run = run_and_report(study, *i, out, options, progress, data);
    const bool interrupted = run["status"] == "interrupted";
    part["runs"][std::to_string(*i)] = std::move(run);
    write_job_part(out, options.worker, part);
    queue.done(*i);
    if (interrupted) break;
  }
  part["interrupted"] = stopped(options);
  write_job_part(out, options.worker, part);
  return stopped(options) ? kInterruptedExitCode : 0;
}

}  // namespace

void write_outputs(nlohmann::json& results_in, const std::filesystem::path& dir) {
  // Every text is made before any file is written: a results.json the summary cannot read (normlab
  // report on a damaged file) fails here and changes nothing.
  nlohmann::json results = results_in;
  // a study without training (the pretrained one) brings its own summary
  if (results["study"].value("kind", std::string()) != "pretrained") {
    results["seed_groups"] = seed_groups(results);
    results["lr_sensitivity"] = lr_sensitivity(results);
    results["best_lr_shift"] = best_lr_shift(results["lr_sensitivity"]);
    results["onsets"] = instability_onsets(results, results["lr_sensitivity"]);
    results["spikes"] = classify_spikes(results);
    results["headline"] = headline(results);
    results["reproductions"] = reproductions(results);
    results["summary"] = written_summary(results);
  }
  const std::string results_text = dump_json(results, 1) + "\n";
  const std::string summary_text = headline_text(results) + "\n" + summary_table(results) + "\n" +
                                   fmt::format("{}\n", fmt::join(results["summary"], "\n")) +
                                   (results.contains("reproductions") ? "\n" + reproductions_text(results) : "");
  const std::string page = report_page(results);
  write_atomically(dir / "results.json", results_text);
  write_atomically(dir / "summary.txt", summary_text);
  write_atomically(dir / "report.html", page);
  results_in = std::move(results);
}

// The rank that runs each run (-1: none, kept from before --resume): the longest runs first, each to
// the rank with the least work so far (ties to the lowest rank). Every rank computes the same plan
// from the same study.
std::vector<int> assign_runs(const std::vector<double>& costs, const std::vector<bool>& to_run, int ranks) {
  std::vector<size_t> order;
  for (size_t i = 0; i < costs.size(); i++)
    if (to_run[i]) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return costs[a] > costs[b]; });
  std::vector<double> load(size_t(ranks), 0.0);
  std::vector<int> owner(costs.size(), -1);
  for (size_t i : order) {
    const size_t r = size_t(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = int(r);
    load[r] += costs[i];
  }
  return owner;
}

int run_study(const Study& given, const CompareOptions& options) {
  const ResolvedStarts starts = resolve_starts(given);  // "start:<name>" -> the run directory it starts from
  const Study& study = starts.study;
  if (options.worker > 0)  // (a job started to train the starts side by side, or to run runs)
    return start_queue_in(options.out_dir) ? train_queued_starts(starts.missing, options.out_dir, options.worker, options.stop)
                                           : run_worker(study, options);
  const dist::Comm comm = dist::world();
  // every corpus is read before anything is written: a bad corpus fails the study at once
  StudyData data;
  for (const auto& r : study.runs) {
    if (is_translation(r.config)) parallel_for(r.config, data);
    else corpus_for(r.config, data.corpora);
  }

  const fs::path out(options.out_dir);
  std::error_code ec;
  if (!options.resume && (fs::exists(out / "results.json") || fs::exists(out / "runs")) && !options.force)
    throw Error(fmt::format("'{}' already holds a study; choose another --out or pass --force to replace it",
                            options.out_dir));
  // --resume: the runs that finished before, and the time the study took before (study/resume.h)
  const KeptRuns before = options.resume ? kept_runs(study, options.out_dir) : KeptRuns{};
  const std::map<std::string, nlohmann::json>& kept = before.runs;
  const double elapsed_before = before.elapsed_s;
  comm.barrier();  // every rank has checked before rank 0 changes anything
  if (comm.root()) {
    if (!options.resume) fs::remove_all(out / "runs", ec);  // (--force)
    fs::create_directories(out / "runs", ec);
    if (ec || !fs::is_directory(out / "runs"))
      throw Error(fmt::format("--out '{}': cannot create the output directory ({})", options.out_dir,
                              ec ? ec.message() : "a file is in the way"));
    // on --resume the document differs from study.json at most in what changes no run (cli/compare.cpp)
    write_atomically(out / "study.json", study.document.dump(2) + "\n");
    if (!options.resume) write_atomically(out / "overrides.json", nlohmann::json{{"set", options.sets}}.dump(1) + "\n");
  }
  comm.barrier();

  std::vector<double> costs;
  std::vector<bool> to_run;
  for (const auto& r : study.runs) {
    costs.push_back(run_cost(r.config));
    to_run.push_back(!kept.count(r.name));
  }
  // the starts the runs still to run need whose directories are gone: trained again first (start.h), by
  // rank 0 with the threads each run of their study had, side by side in the study's jobs (--jobs)
  std::vector<MissingStart> missing;
  std::vector<size_t> needed;  // (their indices in starts.missing)
  for (size_t k = 0; k < starts.missing.size(); k++)
    for (size_t i = 0; i < study.runs.size(); i++)
      if (to_run[i] && study.runs[i].config.train.init_from == starts.missing[k].dir) {
        missing.push_back(starts.missing[k]);
        needed.push_back(k);
        break;
      }
  long starts_stopped = 0;  // (1: stopped; 2: failed, an Error on rank 0 the others leave with)
  if (comm.root() && !missing.empty()) {
    const int start_jobs = local_jobs(options, comm, missing.size());
    const int start_threads = starts.threads > 0 ? starts.threads : std::max(1, omp_get_max_threads() / start_jobs);
    const ScopedThreads scoped(starts.threads > 0 ? starts.threads : omp_get_max_threads());
    try {
      starts_stopped = (start_jobs > 1 ? train_starts_side_by_side(starts.missing, needed, out, start_jobs, start_threads,
                                                                   options.worker_exe, options.stop)
                                       : train_missing_starts(missing, options.stop))
                           ? 0
                           : 1;
    } catch (...) {
      comm.broadcast(2L);
      throw;
    }
  }
  starts_stopped = comm.broadcast(starts_stopped);
  if (starts_stopped == 2) throw Error("compare: rank 0 could not train a start the study needs (its message above)");
  if (starts_stopped == 1) {
    if (comm.root())
      fmt::print("interrupted before the study's runs; nothing else changed. Go on with: normlab compare --resume {}\n",
                 out.string());
    return 130;
  }
  const int jobs = local_jobs(options, comm, size_t(std::count(to_run.begin(), to_run.end(), true)));
  const int threads = std::max(1, omp_get_max_threads() / jobs);
  const std::vector<int> owner = assign_runs(costs, to_run, comm.size());
  std::vector<double> my_costs = costs;
  for (size_t i = 0; i < costs.size(); i++)
    if ((jobs == 1 && owner[i] != comm.rank()) || !to_run[i]) my_costs[i] = 0;
  Progress progress(my_costs, comm.size() > 1 ? fmt::format("rank {}: ", comm.rank()) : "", comm.root());
  progress.set_theory(study.theory && comm.root());
  if (comm.root()) {
    const std::string spread = comm.size() > 1 ? fmt::format(", spread over {} MPI ranks", comm.size())
                               : jobs > 1      ? fmt::format(", {} at a time with {} thread{} each", jobs, threads,
                                                             threads == 1 ? "" : "s")
                                               : "";
    fmt::print("normlab compare: study '{}' ({} runs{}) -> {}\n", study.name, study.runs.size(), spread, options.out_dir);
    if (!study.description.empty()) fmt::print("{}\n", study.description);
  }

  if (comm.root())
    for (size_t i = 0; i < study.runs.size(); i++)
      if (auto it = kept.find(study.runs[i].name); it != kept.end())
        fmt::print("[{}/{}] {}\n        kept: {} before --resume\n", i + 1, study.runs.size(), study.runs[i].label,
                   it->second["status"].get<std::string>());

  // this rank's runs, by index in the study
  nlohmann::json mine = nlohmann::json::object();
  bool interrupted = false;
  // After each run this process ends (one process, no MPI): the study so far as results.json, summary.txt
  // and report.html, marked "running" (the other jobs' runs from their records, the rest "not run"), so
  // that the report can be read and the state kept while the study runs, and a study killed outright
  // resumes with every run that had finished. A snapshot that cannot be written is said once, and the
  // study goes on.
  bool snapshot_failed = false;
  const auto snapshot = [&](int jobs_running) {
    if (comm.size() > 1 || snapshot_failed) return;
    std::vector<nlohmann::json> parts;
    for (int job = 1; job < jobs_running; job++) parts.push_back(peek_job_part(out, job));
    nlohmann::json results = results_header(study);
    for (size_t i = 0; i < study.runs.size(); i++) {
      const std::string key = std::to_string(i);
      nlohmann::json run = run_record(study.runs[i], "not run");
      if (auto it = kept.find(study.runs[i].name); it != kept.end()) run = it->second;
      else if (mine.contains(key)) run = mine[key];
      else
        for (const nlohmann::json& part : parts)
          if (part.contains("runs") && part["runs"].is_object() && part["runs"].contains(key)) run = part["runs"][key];
      results["runs"].push_back(run["status"] == "interrupted" ? run_record(study.runs[i], "not run") : run);
    }
    results["running"] = true;
    results["interrupted"] = false;
    results["elapsed_s"] = elapsed_before + progress.elapsed();
    try {
      write_outputs(results, out);
    } catch (const std::exception& e) {
      snapshot_failed = true;
      fmt::print(stderr, "normlab: could not write the study's snapshot ({}); the study goes on and writes its "
                         "results at the end\n", e.what());
    }
  };
  if (jobs > 1) {  // side by side in `jobs` processes, this one job 0 (jobs.h)
    std::vector<size_t> order;
    for (size_t i = 0; i < study.runs.size(); i++)
      if (to_run[i]) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return costs[a] > costs[b]; });
    RunQueue::create(out, order);
    const ScopedThreads scoped(threads);
    Workers workers(options.worker_exe, out, jobs - 1, threads);
    RunQueue queue(out);
    const auto done_cost = [&] {
      double sum = 0;
      for (size_t i : queue.done_runs()) sum += my_costs[i];
      return sum;
    };
    while (!interrupted && !stopped(options)) {
      const std::optional<size_t> i = queue.take(0);
      if (!i) break;
      progress.set_done(done_cost());
      nlohmann::json run = run_and_report(study, *i, out, options, progress, data);
      interrupted = run["status"] == "interrupted";
      mine[std::to_string(*i)] = std::move(run);
      queue.done(*i);
      if (!interrupted) snapshot(jobs);
    }
    if (interrupted || stopped(options)) queue.stop();  // the other jobs too (a kill -INT reaches job 0 alone)
    std::vector<std::string> ends = workers.wait();
    for (int job = 1; job < jobs; job++) {
      const JobPart part = take_job_part(out, job);
      if (!part.problem.empty()) {
        fmt::print(stderr, "normlab: job {} of the study: {}; its runs are recorded as failed\n", job, part.problem);
        ends[size_t(job - 1)] = part.problem;
      }
      const nlohmann::json& records = part.records;
      if (records.contains("runs") && records["runs"].is_object())
        for (const auto& [index, run] : records["runs"].items()) mine[index] = run;
      interrupted |= records.value("interrupted", false);
    }
    for (const auto& [i, job] : queue.taken())  // a worker that ended without its record of a run
      if (!mine.contains(std::to_string(i))) {
        nlohmann::json run = run_record(study.runs[i], "failed");
        run["error"] = fmt::format("job {} of the study ended while running it ({})", job,
                                   job > 0 && !ends[size_t(job - 1)].empty() ? ends[size_t(job - 1)] : "no record");
        mine[std::to_string(i)] = run;
      }
    RunQueue::remove(out);
    for (size_t i : order)  // never taken: Ctrl-C
      if (!mine.contains(std::to_string(i))) {
        interrupted = true;
        mine[std::to_string(i)] = run_record(study.runs[i], "not run");
      }
  } else {  // one at a time (under mpirun: this rank's share, assign_runs)
    for (size_t i = 0; i < study.runs.size(); i++) {
      const StudyRun& spec = study.runs[i];
      if (kept.count(spec.name) || owner[i] != comm.rank()) continue;
      if (interrupted || stopped(options)) {
        interrupted = true;
        mine[std::to_string(i)] = run_record(spec, "not run");
        continue;
      }
      nlohmann::json run = run_and_report(study, i, out, options, progress, data);
      if (run["status"] == "interrupted") interrupted = true;
      mine[std::to_string(i)] = std::move(run);
      if (!interrupted) snapshot(1);
    }
  }

  // rank 0 gathers every rank's runs and writes the one report
  const std::vector<std::string> texts =
      comm.gather_text(dump_json(nlohmann::json{{"runs", mine}, {"interrupted", interrupted}}));
  if (!comm.root()) return int(comm.broadcast(0L));
  std::map<size_t, nlohmann::json> by_index;
  for (const std::string& text : texts) {
    const nlohmann::json part = parse_json(text, "a rank's results");
    interrupted |= part["interrupted"].get<bool>();
    for (const auto& [index, run] : part["runs"].items()) by_index[std::stoul(index)] = run;
  }
  nlohmann::json results = results_header(study);
  bool failed = false;
  for (size_t i = 0; i < study.runs.size(); i++) {
    const auto it = kept.find(study.runs[i].name);
    results["runs"].push_back(it != kept.end() ? it->second : by_index.at(i));
    failed |= results["runs"].back()["status"] == "failed";
  }

  interrupted |= stopped(options);  // (a Ctrl-C after the last run: the theory table waits for the resume)
  bool theory_stopped = false;
  if (study.theory && !interrupted) {
    // the answer is known once the runs are: said now, not after the theory table's minutes
    nlohmann::json known = results;
    known["headline"] = headline(known);
    fmt::print("\n{}\n", headline_text(known));
    // after the runs with every core (its linear algebra uses them all; small models do not)
    fmt::print("[theory] the claims of the source documents, on fresh and on trained models (normlab theory)\n");
    std::fflush(stdout);
    const auto t0 = Clock::now();
    theory::TheoryOptions claims;
    claims.seeds = study.theory_seeds;
    claims.trained_seeds = study.theory_trained_seeds;
    claims.cache_dir = normlab_cache_dir();  // trained models: reused from and kept for later runs
    try {
      const InterruptibleCall interruptible;  // Ctrl-C stops the claims within a group of them
      results["theory"] = theory::to_json(theory::run_theory_fresh_and_trained(claims, study.theory_steps));
      results["theory_seconds"] = seconds_since(t0);
    } catch (const Interrupted&) {
      interrupted = theory_stopped = true;  // the resume computes the table (every run is kept)
    }
    progress.theory_done();
  }
  if (jobs > 1) results["jobs"] = {{"processes", jobs}, {"threads_each", threads}};
  results["interrupted"] = interrupted;
  results["elapsed_s"] = elapsed_before + progress.elapsed();
  int code = 0;
  try {
    write_outputs(results, out);
  } catch (...) {
    comm.broadcast(1L);  // the other ranks leave with the same code
    throw;
  }

  fmt::print("\n{}\n{}\n", headline_text(results), summary_table(results));
  for (const auto& line : results["summary"]) fmt::print("- {}\n", line.get<std::string>());
  if (const std::string r = reproductions_text(results); !r.empty()) fmt::print("\n{}", r);
  fmt::print("\nreport: {}\nresults: {}\n", (out / "report.html").string(), (out / "results.json").string());
  if (theory_stopped) {
    fmt::print("interrupted during the theory table: every run finished, the claims were not kept. Compute them "
               "with: normlab compare --resume {}\n",
               out.string());
    code = kInterruptedExitCode;
  } else if (interrupted) {
    fmt::print("interrupted: the report covers the runs that finished; the rest were not run. Finish the study "
               "with: normlab compare --resume {}\n",
               out.string());
    code = kInterruptedExitCode;
  } else if (failed) {
    for (const auto& r : results["runs"])
      if (r["status"] == "failed")
        fmt::print(stderr, "normlab: error: run {} failed: {}\n", r["name"].get<std::string>(), r.value("error", ""));
    code = 1;
  }
  return int(comm.broadcast(long(code)));
}

}  // namespace normlab::study
