// plateau.h: the one rule for "trained to a validation plateau", used by the trainer
// (train.stop_patience) and by the theory table's trained models (theory/models.cpp): the
// validation loss has not gone below (1 - min_improvement) x the last loss that did (the reference)
// in `patience` evaluations in a row. Evaluations at steps up to `uncounted_until` (the warm-up, with
// train.stop_after_warmup) move the reference and the lowest loss but never count toward a plateau.
#pragma once

#include <limits>

namespace normlab {

struct Plateau {
  double min_improvement = 0.005;  // an improvement smaller than this share of the best loss is none
  int patience = 0;                // evaluations without one make a plateau; 0: never
  long uncounted_until = 0;        // evaluations at steps <= this do not count (0: all count)
  double reference = std::numeric_limits<double>::infinity();  // the last loss that was an improvement
  int since = 0;                   // evaluations since it
  double lowest = std::numeric_limits<double>::infinity();     // the lowest loss seen, and its step
  long lowest_step = 0;

  // Takes the validation loss of step `step`; true when it completes a plateau. A non-finite loss
  // is no improvement.
  bool update(double val, long step) {
    if (val < lowest) lowest = val, lowest_step = step;
    if (val < reference * (1 - min_improvement)) {
      reference = val;
      since = 0;
      return false;
    }
    if (step <= uncounted_until) return false;
    return reached_after(++since);
  }
  bool reached() const { return reached_after(since); }

 private:
  bool reached_after(int n) const { return patience > 0 && n >= patience; }
};

}  // namespace normlab
