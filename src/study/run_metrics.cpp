// run_metrics.cpp: a study run's record read from its metrics.jsonl (run_metrics.h).
#include "study/run_metrics.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fstream>
#include <string>
#include <vector>

#include "util/error.h"
#include "util/json_reader.h"

namespace normlab::study {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr size_t kMaxLayerLogs = 60;  // layer records per run kept in results.json (evenly spaced, first and last)

// x to 4 significant digits (the report draws them; metrics.jsonl keeps every digit); null stays null
nlohmann::json four_digits(const nlohmann::json& x) {
  if (!x.is_number()) return x;
  const double v = x.get<double>();
  return v == 0 || !std::isfinite(v) ? x : nlohmann::json(std::stod(fmt::format("{:.4g}", v)));
}

// Whether a run's per-layer log read log Z from the forward (records before the fix read the logits'
// gradient, which the backward had written over them: not log Z)
bool first_head_reads_forward(const std::vector<nlohmann::json>& records) {
  const nlohmann::json head = records.front().value("head", nlohmann::json(nullptr));
  return head.is_object() && head.value("log_z_of", std::string()) == "forward";
}

// The per-layer records of a run ({"type": "layers"}, train.log_every_layers) as the report wants
// them: one row per sub-layer, each quantity a (logged step, row) table, the model update per step;
// at most kMaxLayerLogs steps, 4 significant digits (deepnet-mechanism: 6 runs of 48 sub-layers, 2.3 MB).
nlohmann::json layer_series(const std::vector<nlohmann::json>& records) {
  using json = nlohmann::json;
  std::vector<size_t> keep;
  for (size_t k = 0; k < records.size(); k++)
    if (records.size() <= kMaxLayerLogs ||
        k == size_t(std::llround(double(keep.size()) * double(records.size() - 1) / double(kMaxLayerLogs - 1))))
      keep.push_back(k);
  static const char* quantities[] = {"grad_norm_total", "update_ratio_total", "stream_rms", "branch_ratio",
                                     "ln_in_input_rms", "ln_branch_input_rms", "ln_out_input_rms", "attn_entropy",
                                     "attn_max_logit", "attn_sink_share", "stream_max_ratio"};
  json out = {{"step", json::array()}, {"rows", json::array()}, {"values", json::object()},
              {"logged", records.size()}};
  for (const json& s : records.front()["sublayers"])
    out["rows"].push_back({{"slot", s["slot"]}, {"layer", s["layer"]}, {"sub", s["sub"]}, {"stack", s["stack"]}});
  for (const char* q : quantities) out["values"][q] = json::array();
  // hyper-connections: the composite gain of the residual mixes up to each sub-layer (its forward: the
  // largest row sum), only in the runs that log it
  const bool hyper = records.front()["sublayers"].size() && records.front()["sublayers"][0].contains("composite_gain");
  if (hyper) out["values"]["composite_gain"] = json::array();
  json update = json::array(), stack_out = json::array(), z_mean = json::array(), z_max = json::array();
  for (size_t k : keep) {
    const json& r = records[k];
    out["step"].push_back(r["step"]);
    for (const char* q : quantities) {
      json row = json::array();
      for (const json& s : r["sublayers"]) row.push_back(four_digits(s.value(q, json(nullptr))));
      out["values"][q].push_back(std::move(row));
    }
    if (hyper) {
      json row = json::array();
      for (const json& s : r["sublayers"]) {
        const json g = s.value("composite_gain", json(nullptr));
        row.push_back(g.is_object() ? four_digits(g.value("forward", json(nullptr))) : json(nullptr));
      }
      out["values"]["composite_gain"].push_back(std::move(row));
    }
    json ends = json::array();
    for (const json& st : r["stacks"]) ends.push_back(four_digits(st["output_rms"]));
    stack_out.push_back(std::move(ends));
    update.push_back(four_digits(r.value("model_update", json(nullptr))));
    const json head = r.value("head", json(nullptr));
    z_mean.push_back(head.is_object() ? four_digits(head["log_z_mean"]) : json(nullptr));
    z_max.push_back(head.is_object() ? four_digits(head["log_z_max"]) : json(nullptr));
  }
  // Attention Residuals: the depth weights each sub-layer read its sources with, at the last logged step
  const json& last = records.back();
  if (last["sublayers"].size() && last["sublayers"][0].contains("depth_weights")) {
    json rows = json::array();
    for (const json& s : last["sublayers"]) {
      json w = json::array();
      for (const json& v : s.value("depth_weights", json::array())) w.push_back(four_digits(v));
      rows.push_back(std::move(w));
    }
    out["depth_weights"] = {{"step", last["step"]}, {"values", std::move(rows)}};
  }
  // the two instability signals at every logged step, not only the kept ones (study/onsets.h orders
  // them against the loss, to the log's own spacing): the largest |attention logit| over the sub-layers
  // and the mean log Z (only from logs that read it from the forward)
  const bool forward_log_z = first_head_reads_forward(records);
  json all_steps = json::array(), attn = json::array(), log_z = json::array();
  for (const json& r : records) {
    all_steps.push_back(r["step"]);
    double top = -1;
    for (const json& s : r["sublayers"]) {
      const json v = s.value("attn_max_logit", json(nullptr));
      if (v.is_number() && std::isfinite(v.get<double>())) top = std::max(top, std::abs(v.get<double>()));
    }
    attn.push_back(top >= 0 ? four_digits(top) : json(nullptr));
    const json head = r.value("head", json(nullptr));
    log_z.push_back(forward_log_z && head.is_object() ? four_digits(head.value("log_z_mean", json(nullptr))) : json(nullptr));
  }
  out["signals"] = {{"step", all_steps}, {"max_attn_logit", attn}};
  if (forward_log_z) out["signals"]["log_z_mean"] = log_z;
  out["stack_output_rms"] = std::move(stack_out);
  if (records.front().contains("model_update")) out["model_update"] = std::move(update);
  // (runs logged before log Z have none; runs logged before log_z_of read it from the logits' gradient,
  // which the backward had written over them: not log Z, dropped)
  if (forward_log_z) {
    out["log_z_mean"] = std::move(z_mean);
    out["log_z_max"] = std::move(z_max);
    out["log_z_of"] = "forward";
  }
  return out;
}

// The curves and records of a run's metrics.jsonl, as the report wants them.
}  // namespace

void read_metrics(const fs::path& path, nlohmann::json& run) {
  nlohmann::json train = {{"step", nlohmann::json::array()}, {"loss", nlohmann::json::array()},
                          {"grad_norm", nlohmann::json::array()}, {"lr", nlohmann::json::array()}};
  nlohmann::json val = {{"step", nlohmann::json::array()}, {"loss", nlohmann::json::array()}};
  std::vector<nlohmann::json> layers;
  if (fs::exists(path)) require_regular_file(path.string(), "a run's metrics");  // a FIFO would block the read
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j;
    try {
      j = parse_json(line, path.string());
    } catch (const Error&) {
      continue;  // a torn last line of a stopped run
    }
    const std::string type = j.value("type", "");
    if (type == "bleu") {
      run["bleu"] = j;  // {step, bleu, sentences, detail, decoding}
    } else if (type == "train") {
      for (const char* k : {"step", "loss", "grad_norm", "lr"}) train[k].push_back(j[k]);
    } else if (type == "val") {
      val["step"].push_back(j["step"]);
      val["loss"].push_back(j["loss"]);
    } else if (type == "diverged") {
      run["diverged"] = j;
    } else if (type == "summary") {
      run["summary"] = j;
    } else if (type == "layers") {
      layers.push_back(j);
    }
  }
  if (!layers.empty()) run["layer_log"] = layer_series(layers);
  run["train"] = train;
  run["val"] = val;
}

// A translation run: an encoder-decoder trained on a parallel corpus (data.parallel); its result is a
// validation loss and a BLEU. Its unigram entropy is that of the decoder's labels (the target bytes
// and EOS of the training pairs): the loss of a decoder that learned only target byte frequencies.

}  // namespace normlab::study
