// spikes.cpp: spike scores (spikes.h).
#include "train/spikes.h"

#include <cmath>
#include <deque>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

namespace normlab {

namespace {

// Whether x is a spike against the previous values (the last kSpikeWindow of them), which it then joins.
class SpikeDetector {
 public:
  bool next(double x) {
    bool spike = false;
    if (history_.size() == size_t(kSpikeWindow)) {
      double mean = 0;
      for (double v : history_) mean += v / kSpikeWindow;
      double var = 0;
      for (double v : history_) var += (v - mean) * (v - mean) / kSpikeWindow;
      const double sd = std::sqrt(var);
      spike = sd >= 1e-10 && x > mean + kSpikeSd * sd;
      history_.pop_front();
    }
    history_.push_back(x);
    return spike;
  }

 private:
  std::deque<double> history_;
};

}  // namespace

SpikeScores spike_scores(const std::vector<long>& steps, const std::vector<double>& loss,
                         const std::vector<double>& grad_norm) {
  SpikeScores s;
  s.steps = long(steps.size());
  SpikeDetector on_loss, on_grad;
  long n_loss = 0, n_grad = 0, n_any = 0;
  for (size_t i = 0; i < steps.size(); i++) {
    const bool a = on_loss.next(loss[i]), b = on_grad.next(grad_norm[i]);
    n_loss += a, n_grad += b, n_any += a || b;
    if (a && s.first_loss_spike < 0) s.first_loss_spike = steps[i];
    if (b && s.first_grad_norm_spike < 0) s.first_grad_norm_spike = steps[i];
  }
  if (s.steps >= kSpikeWindow) {
    s.loss = double(n_loss) / double(s.steps);
    s.grad_norm = double(n_grad) / double(s.steps);
    s.any = double(n_any) / double(s.steps);
  }
  return s;
}

SpikeScores spike_scores_of_metrics(const std::string& metrics_path) {
  std::map<long, std::pair<double, double>> by_step;  // the last record of each step
  std::ifstream in(metrics_path);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json r = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    // a hand-edited or torn line is not a step (it is skipped, never an exception)
    if (!r.is_object() || !r.contains("type") || r["type"] != "train" || !r.contains("step") ||
        !r["step"].is_number_integer() || !r.contains("loss") || !r["loss"].is_number() || !r.contains("grad_norm") ||
        !r["grad_norm"].is_number())
      continue;
    by_step[r["step"].get<long>()] = {r["loss"].get<double>(), r["grad_norm"].get<double>()};
  }
  std::vector<long> steps;
  std::vector<double> loss, grad_norm;
  for (const auto& [step, v] : by_step) steps.push_back(step), loss.push_back(v.first), grad_norm.push_back(v.second);
  return spike_scores(steps, loss, grad_norm);
}

}  // namespace normlab
