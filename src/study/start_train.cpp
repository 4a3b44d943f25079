// start_train.cpp: training a study's missing starts again (start.h), apart from start.cpp so that the
// study readers (and the fuzz harnesses that build them) need no trainer.
#include <filesystem>
#include <fmt/format.h>

#include "study/start.h"
#include "train/resume.h"
#include "train/run_config.h"
#include "train/trainer.h"
#include "util/clock.h"
#include "util/error.h"

namespace normlab::study {

namespace {

using json = nlohmann::json;

std::string loss_text(const json& summary, const char* key) {
  return summary.is_object() && summary.contains(key) && summary[key].is_number()
             ? fmt::format("{:.4f}", summary[key].get<double>())
             : std::string("none");
}

}  // namespace

bool train_missing_starts(const std::vector<MissingStart>& starts, const std::atomic<bool>* stop) {
  for (size_t k = 0; k < starts.size(); k++) {
    const MissingStart& start = starts[k];
    RunConfig cfg = run_config_from_json(start.record.at("config"), fmt::format("the record of '{}'", start.dir));
    cfg.train.out_dir = start.dir;
    TrainOptions topts;
    topts.resume = newest_checkpoint(start.dir).has_value();  // a stop part-way: continued
    topts.overwrite = !topts.resume;                          // (a directory without a checkpoint holds nothing)
    topts.quiet = true;
    topts.stop = stop;
    const long every = std::max(1L, cfg.train.steps / 10);
    topts.on_step = [&](const StepInfo& i) {
      if (i.step % every == 0 || i.step == i.steps) {
        fmt::print("        step {}/{}, training loss {:.4f}, {}\n", i.step, i.steps, i.loss,
                   format_duration(i.elapsed_s));
        std::fflush(stdout);
      }
    };
    fmt::print("[start {}/{}] {}: its directory holds no finished training (run directories stay on the machine "
               "that ran them); {} from the config its study recorded ({} steps)\n",
               k + 1, starts.size(), start.dir, topts.resume ? "continuing its training" : "training it again",
               cfg.train.steps);
    std::fflush(stdout);
    const TrainResult r = train(cfg, topts);
    if (r.interrupted) {
      fmt::print("        stopped at step {}: the next --resume continues it from there\n", r.steps_done);
      return false;
    }
    if (r.diverged)
      throw Error(fmt::format("start '{}' diverged when trained again at step {} ({}), though its study recorded it "
                              "as finished; the runs that start from it cannot run",
                              start.dir, r.diverged_step, r.diverged_tensor));
    const json now = last_run_summary(start.dir);
    const json was = start.record.value("summary", json::object());
    fmt::print("        trained: validation loss {} (its study recorded {}), test loss {} (recorded {})\n",
               loss_text(now, "val_loss"), loss_text(was, "val_loss"), loss_text(now, "test_loss"),
               loss_text(was, "test_loss"));
    if (loss_text(now, "val_loss") != loss_text(was, "val_loss"))
      fmt::print("        not the recorded model to 4 digits (another CPU's kernels or thread count); the runs "
                 "start from the model trained here\n");
    std::fflush(stdout);
  }
  return true;
}

}  // namespace normlab::study
