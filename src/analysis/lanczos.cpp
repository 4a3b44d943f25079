// lanczos.cpp: J^T J as a Spectra operator over the model's jvp and vjp.
#include "analysis/lanczos.h"

#include <Spectra/SymEigsSolver.h>

#include <Eigen/LU>

#include <algorithm>
#include <cmath>
#include <functional>

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

// GMRES (no restart) for A z = b with at most max_it iterations: Arnoldi with modified Gram-Schmidt
// done twice, Givens rotations for the least-squares problem. True when ||b - A z|| <= tol ||b||.
bool gmres(const std::function<void(const Eigen::VectorXd&, Eigen::VectorXd&)>& A, const Eigen::VectorXd& b,
           Eigen::VectorXd& z, int max_it, double tol) {
  const Eigen::Index n = b.size();
  const double beta = b.norm();
  z = Eigen::VectorXd::Zero(n);
  if (beta == 0) return true;
  const int m = int(std::min<Eigen::Index>(max_it, n));
  Eigen::MatrixXd V(n, m + 1), H = Eigen::MatrixXd::Zero(m + 1, m);
  Eigen::VectorXd g = Eigen::VectorXd::Zero(m + 1), cs(m), sn(m), w(n);
  V.col(0) = b / beta;
  g(0) = beta;
  int k = 0;
  double resid = beta;
  for (int j = 0; j < m; j++) {
    A(V.col(j), w);
    for (int pass = 0; pass < 2; pass++)
      for (int i = 0; i <= j; i++) {
        const double h = V.col(i).dot(w);
        H(i, j) += h;
        w -= h * V.col(i);
      }
    H(j + 1, j) = w.norm();
    if (H(j + 1, j) > 0) V.col(j + 1) = w / H(j + 1, j);
    for (int i = 0; i < j; i++) {  // the earlier rotations, then a new one that zeroes H(j+1, j)
      const double a = H(i, j), c = H(i + 1, j);
      H(i, j) = cs(i) * a + sn(i) * c;
      H(i + 1, j) = -sn(i) * a + cs(i) * c;
    }
    const double r = std::hypot(H(j, j), H(j + 1, j));
    cs(j) = r > 0 ? H(j, j) / r : 1.0;
    sn(j) = r > 0 ? H(j + 1, j) / r : 0.0;
    H(j, j) = r;
    H(j + 1, j) = 0;
    g(j + 1) = -sn(j) * g(j);
    g(j) = cs(j) * g(j);
    resid = std::abs(g(j + 1));
    k = j + 1;
    if (resid <= tol * beta || V.col(j + 1).hasNaN()) break;
  }
  const Eigen::VectorXd y = H.topLeftCorner(k, k).triangularView<Eigen::Upper>().solve(g.head(k));
  z = V.leftCols(k) * y;
  return resid <= tol * beta;
}

// (J^T J)^{-1} = J^{-1} J^{-T}, J over whole sequences, with the LU factors of its d x d diagonal
// blocks J_ii. Causal models: J is block lower triangular and block substitution solves exactly.
// Otherwise GMRES, preconditioned on the right by the block diagonal (J D^{-1} z = b, x = D^{-1} z).
class InverseGram {
 public:
  using Scalar = double;
  using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic>;
  static constexpr int kMaxGmres = 300;
  static constexpr double kGmresTol = 1e-13;
  InverseGram(Model<double>& m, int first, int last, bool triangular)
      : model_(m), first_(first), last_(last), T_(m.planned_T()), C_(m.config().d_model),
        NTC_(size_t(T_) * C_), triangular_(triangular), u_(NTC_), w_(NTC_), j_(NTC_) {
    // the diagonal blocks J_ii = dy_i / dx_i
    for (int i = 0; i < T_; i++) {
      const Mat J = Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
          token_local_jacobian(model_, first_, last_, i).data(), C_, C_);
      lu_.emplace_back(J);
      min_rcond_ = std::min(min_rcond_, lu_.back().rcond());
    }
  }
  // rcond of the worst diagonal block: the substitution is meaningful only well above 1e-16
  double min_rcond() const { return min_rcond_; }
  Eigen::Index rows() const { return Eigen::Index(NTC_); }
  Eigen::Index cols() const { return rows(); }
  void perform_op(const double* x, double* y) const {
    if (triangular_) {
      solve_transposed(x, w_.data());  // w = J^{-T} x
      solve(w_.data(), y);             // y = J^{-1} w
    } else if (!gmres_ok_) {  // a solve failed: the result is discarded, let the solver finish at once
      std::copy(x, x + NTC_, y);
    } else {
      gmres_solve(x, w_.data(), true);
      gmres_solve(w_.data(), y, false);
    }
    solves_++;
  }
  long solves() const { return solves_; }
  bool solves_converged() const { return gmres_ok_; }
  long gmres_iterations() const { return gmres_its_; }

 private:
  // y = J^{-1} b (transposed: J^{-T} b) by right-preconditioned GMRES
  void gmres_solve(const double* b, double* y, bool transposed) const {
    std::vector<double> in(NTC_), out(NTC_);
    auto precondition = [&](const Eigen::VectorXd& z, Eigen::VectorXd& x) {  // x = D^{-1} z (or D^{-T} z)
      x.resize(Eigen::Index(NTC_));
      for (int i = 0; i < T_; i++) {
        const auto zi = z.segment(Eigen::Index(i) * C_, C_);
        x.segment(Eigen::Index(i) * C_, C_) = transposed ? Eigen::VectorXd(lu_[size_t(i)].transpose().solve(zi))
                                                         : Eigen::VectorXd(lu_[size_t(i)].solve(zi));
      }
    };
    auto apply = [&](const Eigen::VectorXd& z, Eigen::VectorXd& out_vec) {  // J D^{-1} z (or J^T D^{-T} z)
      Eigen::VectorXd x;
      precondition(z, x);
      std::copy(x.data(), x.data() + NTC_, in.begin());
      if (transposed) model_.vjp_sublayers(out.data(), in.data(), first_, last_);
      else model_.jvp_sublayers(out.data(), in.data(), 1, first_, last_);
      out_vec = Eigen::Map<const Eigen::VectorXd>(out.data(), Eigen::Index(NTC_));
      gmres_its_++;
    };
    Eigen::VectorXd z, x;
    gmres_ok_ = gmres(apply, Eigen::Map<const Eigen::VectorXd>(b, Eigen::Index(NTC_)), z, kMaxGmres, kGmresTol) && gmres_ok_;
    precondition(z, x);
    std::copy(x.data(), x.data() + NTC_, y);
  }

  // y = J^{-1} b, token by token: y_i = J_ii^{-1} (b_i - sum_{j<i} J_ij y_j)
  void solve(const double* b, double* y) const {
    std::fill(u_.begin(), u_.end(), 0.0);
    for (int i = 0; i < T_; i++) {
      Eigen::Map<const Eigen::VectorXd> bi(b + size_t(i) * C_, C_);
      Eigen::VectorXd r = bi;
      if (i > 0) {  // u holds y_0 .. y_{i-1} and zeros: (J u)_i = sum_{j<i} J_ij y_j
        model_.jvp_sublayers(j_.data(), u_.data(), 1, first_, last_);
        r -= Eigen::Map<const Eigen::VectorXd>(j_.data() + size_t(i) * C_, C_);
      }
      const Eigen::VectorXd yi = lu_[size_t(i)].solve(r);
      std::copy(yi.data(), yi.data() + C_, u_.begin() + size_t(i) * C_);
    }
    std::copy(u_.begin(), u_.end(), y);
  }
  // y = J^{-T} b, from the last token back: y_i = J_ii^{-T} (b_i - sum_{j>i} J_ji^T y_j)
  void solve_transposed(const double* b, double* y) const {
    std::fill(u_.begin(), u_.end(), 0.0);
    for (int i = T_ - 1; i >= 0; i--) {
      Eigen::Map<const Eigen::VectorXd> bi(b + size_t(i) * C_, C_);
      Eigen::VectorXd r = bi;
      if (i < T_ - 1) {
        model_.vjp_sublayers(j_.data(), u_.data(), first_, last_);
        r -= Eigen::Map<const Eigen::VectorXd>(j_.data() + size_t(i) * C_, C_);
      }
      const Eigen::VectorXd yi = lu_[size_t(i)].transpose().solve(r);
      std::copy(yi.data(), yi.data() + C_, u_.begin() + size_t(i) * C_);
    }
    std::copy(u_.begin(), u_.end(), y);
  }

  Model<double>& model_;
  int first_, last_, T_, C_;
  size_t NTC_;
  bool triangular_;
  std::vector<Eigen::PartialPivLU<Mat>> lu_;
  double min_rcond_ = 1.0;
  mutable std::vector<double> u_, w_, j_;  // substitution, between-solve and product scratch
  mutable long solves_ = 0, gmres_its_ = 0;
  mutable bool gmres_ok_ = true;
};

// min_ncv: the Krylov subspace size; larger converges in fewer restarts but costs more products
template <class Op>
std::vector<double> largest_eigenvalues(Op& op, int k, bool* ok, int min_ncv = 60) {
  const int n = int(op.rows());
  const int ncv = std::min(n, std::max(2 * k + 1, min_ncv));
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

std::vector<double> stream_jacobian(const Model<double>& model, int first, int last,
                                    const std::vector<int>& in_tokens,
                                    const std::vector<int>& out_tokens) {
  const int T = model.planned_T(), C = model.config().d_model;
  const int K = int(in_tokens.size()) * C;
  std::vector<int64_t> unit(static_cast<size_t>(K));
  for (size_t a = 0; a < in_tokens.size(); a++)
    for (int c = 0; c < C; c++) unit[a * C + c] = int64_t(in_tokens[a]) * C + c;
  std::vector<double> tout(size_t(K) * T * C);
  model.jvp_sublayers_unit(tout.data(), unit.data(), K, first, last);
  const size_t rows = out_tokens.size() * C;
  std::vector<double> J(rows * K);
  for (int k = 0; k < K; k++)
    for (size_t b = 0; b < out_tokens.size(); b++)
      for (int c = 0; c < C; c++)
        J[(b * C + c) * K + k] = tout[size_t(k) * T * C + size_t(out_tokens[b]) * C + c];
  return J;
}

std::vector<double> token_local_jacobian(const Model<double>& model, int first, int last, int token) {
  const int C = model.config().d_model;
  // Whole blocks only; one block always, several only where token i's output ignores the other
  // tokens' tangents (causal: they stay at tokens > i, which token i never reads).
  const bool exact = first % 2 == 0 && last % 2 == 0 && (last - first <= 2 || model.config().causal());
  if (!exact) return stream_jacobian(model, first, last, {token}, {token});
  std::vector<double> t(size_t(C) * C, 0.0);  // (K = C, C): tangent k is the unit vector e_k
  for (int k = 0; k < C; k++) t[size_t(k) * C + k] = 1.0;
  for (int l = first / 2; l < last / 2; l++) model.jvp_block_token_local(t.data(), t.data(), C, l, token);
  std::vector<double> J(t.size());
  for (int k = 0; k < C; k++)
    for (int c = 0; c < C; c++) J[size_t(c) * C + k] = t[size_t(k) * C + c];
  return J;
}

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
  // the smallest: shift-invert, J^{-1} by block substitution where J is block lower triangular
  // (causal), else by preconditioned GMRES
  bool every_token = int(in_tokens.size()) == model.planned_T() && in_tokens == out_tokens && model.planned_B() == 1;
  for (size_t a = 0; every_token && a < in_tokens.size(); a++) every_token = in_tokens[a] == int(a);
  if (every_token) {
    const bool triangular = model.config().causal();
    InverseGram inverse(model, first, last, triangular);
    if (inverse.min_rcond() > 1e-12) {
      bool ok = true;
      std::vector<double> smallest;
      // 1/sigma^2 of the smallest are well separated: a small subspace converges in few restarts
      for (double mu : largest_eigenvalues(inverse, k, &ok, 4 * k))
        if (mu > 0) smallest.push_back(1.0 / std::sqrt(mu));
      if (inverse.solves_converged()) {
        r.smallest = smallest;
        r.converged = r.converged && ok;
        r.smallest_method = triangular ? "inverse (block substitution)" : "inverse (GMRES)";
        r.solves = inverse.solves();
      }
    }
  }
  if (r.smallest_method.empty() && !r.largest.empty()) {
    r.smallest_method = "shifted";
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
