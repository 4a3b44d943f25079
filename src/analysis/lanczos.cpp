// lanczos.cpp: J^T J as a Spectra operator over the model's jvp and vjp.
#include "analysis/lanczos.h"

#include <Spectra/SymEigsSolver.h>

#include <algorithm>
#include <cmath>

namespace normlab::analysis {

namespace {

// y = J^T J x for x over the in_tokens' channels, J from sub-layers [first, last).
class GramOperator {
 public:
  using Scalar = double;
  GramOperator(Model<double>& m, int first, int last, const std::vector<int>& in,
               const std::vector<int>& out)
      : model_(m), first_(first), last_(last), in_(in), out_(out),
        C_(m.config().d_model), NTC_(size_t(m.planned_B()) * m.planned_T() * C_),
        x_(NTC_), jx_(NTC_), back_(NTC_) {}
  Eigen::Index rows() const { return Eigen::Index(in_.size()) * C_; }
  Eigen::Index cols() const { return rows(); }
  void perform_op(const double* x, double* y) const {
    std::fill(x_.begin(), x_.end(), 0.0);
    for (size_t a = 0; a < in_.size(); a++)
      std::copy(x + a * C_, x + (a + 1) * C_, x_.begin() + size_t(in_[a]) * C_);
    model_.jvp_sublayers(jx_.data(), x_.data(), 1, first_, last_);
    // keep only the output tokens, then pull back
    std::vector<double> masked(NTC_, 0.0);
    for (int t : out_) std::copy(jx_.begin() + size_t(t) * C_, jx_.begin() + size_t(t + 1) * C_, masked.begin() + size_t(t) * C_);
    model_.vjp_sublayers(back_.data(), masked.data(), first_, last_);
    for (size_t a = 0; a < in_.size(); a++)
      std::copy(back_.begin() + size_t(in_[a]) * C_, back_.begin() + size_t(in_[a] + 1) * C_, y + a * C_);
    products_++;
  }
  long products() const { return products_; }

 private:
  Model<double>& model_;
  int first_, last_;
  std::vector<int> in_, out_;
  int C_;
  size_t NTC_;
  mutable std::vector<double> x_, jx_, back_;
  mutable long products_ = 0;
};

// c I - J^T J: its largest eigenvalues are c minus the smallest of J^T J, and Lanczos resolves them
// relative to c (about sigma_max^2) instead of relative to eigenvalues near zero, where it stalls.
class ShiftedGram {
 public:
  using Scalar = double;
  ShiftedGram(const GramOperator& gram, double shift) : gram_(gram), shift_(shift) {}
  Eigen::Index rows() const { return gram_.rows(); }
  Eigen::Index cols() const { return gram_.cols(); }
  void perform_op(const double* x, double* y) const {
    gram_.perform_op(x, y);
    for (Eigen::Index i = 0; i < rows(); i++) y[i] = shift_ * x[i] - y[i];
  }

 private:
  const GramOperator& gram_;
  double shift_;
};

template <class Op>
std::vector<double> largest_eigenvalues(Op& op, int k, bool* ok) {
  const int n = int(op.rows());
  const int ncv = std::min(n, std::max(2 * k + 1, 60));
  Spectra::SymEigsSolver<Op> solver(op, k, ncv);
  solver.init();
  // bounded work: a run that has not converged says so instead of running for many minutes
  solver.compute(Spectra::SortRule::LargestAlge, 300, 1e-13);
  *ok = *ok && solver.info() == Spectra::CompInfo::Successful;
  std::vector<double> out;
  for (Eigen::Index i = 0; i < solver.eigenvalues().size(); i++) out.push_back(solver.eigenvalues()[i]);
  return out;
}

}  // namespace

ExtremeSingularValues extreme_singular_values(Model<double>& model, int first, int last,
                                              const std::vector<int>& in_tokens,
                                              const std::vector<int>& out_tokens, int k) {
  GramOperator op(model, first, last, in_tokens, out_tokens);
  ExtremeSingularValues r;
  r.n = int(op.rows());
  k = std::max(1, std::min(k, r.n / 2 - 1));
  r.converged = true;
  if (r.n < 4) return r;  // too small for Lanczos; use the dense path
  for (double lambda : largest_eigenvalues(op, k, &r.converged))
    r.largest.push_back(std::sqrt(std::max(0.0, lambda)));
  if (!r.largest.empty()) {
    const double shift = r.largest.front() * r.largest.front() * (1 + 1e-3);
    ShiftedGram shifted(op, shift);
    for (double mu : largest_eigenvalues(shifted, k, &r.converged))
      r.smallest.push_back(std::sqrt(std::max(0.0, shift - mu)));
  }
  std::sort(r.largest.begin(), r.largest.end(), std::greater<>());
  std::sort(r.smallest.begin(), r.smallest.end());
  r.products = op.products();
  return r;
}

}  // namespace normlab::analysis
