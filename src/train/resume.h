// resume.h: what lets a training run continue exactly where it stopped (`normlab train --resume`):
// the run directory's checkpoint files (checkpoints/step-<N>.safetensors, the newest
// train.keep_checkpoints kept, and checkpoint.safetensors, a hard link to the newest one), the resume
// state inside each (the resolved run config, the data sampler's RNG state and the next token-file
// row; the model, AdamW moments and step are tensors and metadata of the checkpoint itself), the
// metrics file cut back to a checkpoint's step, the config check at resume (what may change and what
// may not), and the removal of temporary files that a killed run left behind.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/model.h"
#include "train/optimizer.h"
#include "train/plateau.h"

namespace normlab {

// Everything of a run's state that is not a tensor. The dropout masks need nothing: they are seeded
// by (model.seed, step, micro-batch); validation, probe and Admin-profile batches are drawn from
// generators made afresh from train.seed each time.
struct ResumeState {
  long step = 0;                        // optimizer steps done (AdamW's t of the last update)
  std::array<uint64_t, 4> data_rng{};   // the training-batch generator after that step's draws
  long next_row = 0;                    // a token file of rows: the first row of the next batch
  nlohmann::json run_config;            // run_config_to_json of the resolved config
  int ranks = 1;                        // MPI ranks that trained it (a resume must use as many)
  Plateau plateau;                      // train.stop_patience's count so far (train/plateau.h)
};

// The metadata key a checkpoint keeps the resume state under.
inline constexpr const char* kResumeMetadataKey = "resume";
std::string resume_state_to_text(const ResumeState& state);
// Error naming `path` if the metadata holds no resume state or a malformed one.
ResumeState resume_state_from_metadata(const std::map<std::string, std::string>& metadata, const std::string& path);

// Saves a training checkpoint of step state.step: checkpoints/step-<N>.safetensors (atomic), then
// checkpoint.safetensors replaced atomically by a hard link to it (a copy where links fail), then
// all but the newest `keep` step files removed. A kill at any moment leaves the newest complete
// checkpoint loadable: every file appears whole through a rename or not at all.
void save_run_checkpoint(const std::filesystem::path& dir, const Model<float>& model, AdamW& optimizer,
                         const ResumeState& state, int keep);

// The newest complete checkpoint of a run directory: the step file with the largest step, else
// checkpoint.safetensors; nullopt if there is none.
std::optional<std::string> newest_checkpoint(const std::filesystem::path& dir);

// Removes the step files of a run being replaced (`train --force`).
void remove_step_checkpoints(const std::filesystem::path& dir);

// Removes the temporary files (<name>.tmp.<pid>) that runs killed in this directory left behind:
// only names this trainer writes, and only when process <pid> no longer exists, is a zombie (it
// exited: it writes nothing more) or is this one.
// Returns how many were removed.
int remove_stale_temporaries(const std::filesystem::path& dir);

// Cuts metrics.jsonl back to `step`: keeps every record without a step (admin_profile) or with
// step <= `step`, drops summaries, BLEU records and an unterminated last line (a kill mid-write).
// Atomic: the new file is written beside it and renamed over it, so the old one stays whole until
// the new one is. Returns the last kept train and validation losses (NaN if none). Error (nothing
// changed) if a complete line is not JSON.
struct KeptMetrics {
  double last_train_loss, last_val_loss;
};
KeptMetrics truncate_metrics(const std::filesystem::path& path, long step);

// Writes a text file atomically (temporary file, fsync, rename).
void write_text_atomically(const std::filesystem::path& path, const std::string& text);

// The differences between the run config a checkpoint was written with and the one a resume asks
// for, one "key: checkpoint <old>, now <new>" each, leaving out what may change at resume
// (train.steps, train.log_every, train.checkpoint_every, train.keep_checkpoints, train.out_dir).
std::vector<std::string> resume_config_differences(const nlohmann::json& saved, const nlohmann::json& wanted);

// The run config (as JSON) in the newest checkpoint of run directory `dir`, for `train --resume DIR`
// without --config. Errors say what `dir` is: missing, not a run, a run without a checkpoint yet, a
// checkpoint without resume state.
nlohmann::json resume_run_config(const std::string& dir);

}  // namespace normlab
