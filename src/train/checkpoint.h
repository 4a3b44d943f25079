// checkpoint.h: a model (and optionally its AdamW state) to and from safetensors. Parameters are
// stored as float32 under their docs/MODEL.md names; the model config is JSON under the metadata key
// "config"; optimizer moments (training checkpoints) under "optimizer.m.<name>" and
// "optimizer.v.<name>", with the step in metadata "step" (a training run's checkpoints add the
// resume state under metadata "resume", train/resume.h). Loading checks every name, dtype and shape
// against the config and refuses anything else with an Error naming the file.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "model/model.h"
#include "train/optimizer.h"

namespace normlab {

void save_checkpoint(const std::string& path, const Model<float>& model, AdamW* optimizer, long step,
                     bool overwrite, const std::map<std::string, std::string>& extra_metadata = {});

// Loads a training checkpoint at `path` (a file) into `model` and `optimizer` (whose moments it must
// hold: Error otherwise) and returns its metadata.
std::map<std::string, std::string> load_training_checkpoint(const std::string& path, Model<float>& model,
                                                            AdamW& optimizer);

// Every `path` below may also be a Hugging Face model directory (config.json + model.safetensors,
// see io/hf.h), read with the same strictness, a GGUF file (io/gguf_model.h),
// a normlab run directory (the checkpoint.safetensors inside it), or a directory without config.json
// holding one GGUF file (what scripts/fetch_model.sh writes): that file.
std::string model_file_of(const std::string& path);  // the last case's file; any other path as given
// Reads the config from a checkpoint's metadata (Error if missing or invalid).
ModelConfig checkpoint_config(const std::string& path);

// Loads a checkpoint into a new model built from its own config; forward_only: without parameter
// gradients (Model::ForwardOnly), for commands that never call backward; quiet: no note of what a
// Hugging Face or GGUF import read. Commands and studies open models with open_model
// (train/model_source.h), which also gives the model's tokenizer and its run's data.
std::unique_ptr<Model<float>> load_model(const std::string& path, bool forward_only = false, bool quiet = false);

// The same model in float64, for the instruments that read it so: a normlab checkpoint is read straight
// into it, tensor by tensor (the load holds the float64 model and one float32 tensor: 8 bytes a
// parameter without gradients, not the float32 model's 4 beside it); a Hugging Face directory or a GGUF
// file is imported as float32 first and widened.
std::unique_ptr<Model<double>> load_model_double(const std::string& path, bool forward_only = false, bool quiet = false);

// Loads the parameters of `path` into `model`, whose config must describe the same tensors.
void load_params(const std::string& path, Model<float>& model);

}  // namespace normlab
