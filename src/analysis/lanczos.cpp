// lanczos.cpp: the extreme singular values of a stream Jacobian from jvp and vjp products: Spectra
// for the largest, structure + block Davidson (block_eigs.h) + a Rayleigh-Ritz certificate for the
// smallest (see lanczos.h).
#include "analysis/lanczos.h"

#include <Spectra/SymEigsSolver.h>
#include <fmt/format.h>

#include <Eigen/Dense>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>

#include "analysis/block_eigs.h"
#include "analysis/gmres.h"
#include "model/norm_of.h"
#include "ops/common.h"
#include "util/error.h"
#include "util/interrupt.h"

namespace normlab::analysis {

namespace {

using Mat = Eigen::MatrixXd;

// Residual (relative to the operator's scale) at which the block solver locks a pair: the shifted
// Gram's products are exact to rounding; (J^T J)^{-1} through solves is exact only to ~1e-16
// cond(J).
constexpr double kShiftedLockTol = 1e-12;
constexpr double kInverseLockTol = 1e-12;

// Work done, in single passes: forward-mode tangents and reverse-mode passes.
struct Work {
  long tangents = 0, vjps = 0;
  double products() const { return 0.5 * double(tangents + vjps); }  // J^T J products
};

// J (out x in: the out_tokens' channels by the in_tokens' channels) of sub-layers [first, last) and
// its transpose, on blocks of vectors. In source mode (an encdec) J is the decoder's last stream by
// the encoder's input stream, through both stacks (Model::jvp_encdec / vjp_encdec); in_tokens are
// then source positions.
class StreamOps {
 public:
  StreamOps(Model<double>& m, int first, int last, const std::vector<int>& in,
            const std::vector<int>& out, Work& work, bool source = false)
      : model_(m),
        first_(first),
        last_(last),
        in_(in),
        out_(out),
        C_(m.state_width()),
        NTC_(size_t(m.planned_B()) * m.planned_T() * C_),
        NSC_(source ? size_t(m.planned_B()) * m.planned_S() * C_ : NTC_),
        source_(source),
        work_(work) {}
  Eigen::Index cols() const { return Eigen::Index(in_.size()) * C_; }
  Eigen::Index rows() const { return Eigen::Index(out_.size()) * C_; }
  // Y (rows x K) = J X (cols x K): one forward-mode pass with K tangents
  void jvp(const Mat& X, Mat& Y) const {
    const Eigen::Index K = X.cols();
    std::vector<double> tin(size_t(K) * NSC_, 0.0), tout(size_t(K) * NTC_);
    for (Eigen::Index k = 0; k < K; k++)
      for (size_t a = 0; a < in_.size(); a++)
        for (int c = 0; c < C_; c++)
          tin[size_t(k) * NSC_ + size_t(in_[a]) * C_ + c] = X(Eigen::Index(a) * C_ + c, k);
    if (source_) {
      const std::vector<double> ttgt(size_t(K) * NTC_, 0.0);  // the decoder's input stream held fixed
      model_.jvp_encdec(tout.data(), tin.data(), ttgt.data(), int(K));
    } else {
      model_.jvp_sublayers(tout.data(), tin.data(), int(K), first_, last_);
    }
    Y.resize(rows(), K);
    for (Eigen::Index k = 0; k < K; k++)
      for (size_t b = 0; b < out_.size(); b++)
        for (int c = 0; c < C_; c++)
          Y(Eigen::Index(b) * C_ + c, k) = tout[size_t(k) * NTC_ + size_t(out_[b]) * C_ + c];
    work_.tangents += K;
  }
  // Y (cols x K) = J^T X (rows x K): one reverse-mode pass per column
  void vjp(const Mat& X, Mat& Y) const {
    std::vector<double> dout(NTC_), din(NSC_), dtgt(source_ ? NTC_ : 0);
    Y.resize(cols(), X.cols());
    for (Eigen::Index k = 0; k < X.cols(); k++) {
      std::fill(dout.begin(), dout.end(), 0.0);
      for (size_t b = 0; b < out_.size(); b++)
        for (int c = 0; c < C_; c++)
          dout[size_t(out_[b]) * C_ + c] = X(Eigen::Index(b) * C_ + c, k);
      if (source_)
        model_.vjp_encdec(din.data(), dtgt.data(), dout.data());
      else
        model_.vjp_sublayers(din.data(), dout.data(), first_, last_);
      for (size_t a = 0; a < in_.size(); a++)
        for (int c = 0; c < C_; c++) Y(Eigen::Index(a) * C_ + c, k) = din[size_t(in_[a]) * C_ + c];
      work_.vjps++;
    }
  }
  // Y = G X with G = J J^T (output side) or J^T J (input side)
  void gram(const Mat& X, Mat& Y, bool output_side) const {
    throw_if_interrupted();  // each product: the unit of an instrument's longest loops
    Mat Z;
    if (output_side) {
      vjp(X, Z);
      jvp(Z, Y);
    } else {
      jvp(X, Z);
      vjp(Z, Y);
    }
  }

 private:
  Model<double>& model_;
  int first_, last_;
  std::vector<int> in_, out_;
  int C_;
  size_t NTC_, NSC_;  // (B, T, C) out; (B, S, C) in for source mode, else NTC_
  bool source_;
  Work& work_;
};

// J^T J as a Spectra operator
class GramOperator {
 public:
  using Scalar = double;
  explicit GramOperator(const StreamOps& ops) : ops_(ops) {}
  Eigen::Index rows() const { return ops_.cols(); }
  Eigen::Index cols() const { return ops_.cols(); }
  void perform_op(const double* x, double* y) const {
    Mat X = Eigen::Map<const Eigen::VectorXd>(x, rows()), Y;
    ops_.gram(X, Y, false);
    std::copy(Y.data(), Y.data() + rows(), y);
  }

 private:
  const StreamOps& ops_;
};

// (J^T J)^{-1} = J^{-1} J^{-T}, J over whole sequences, with the LU factors of its d x d diagonal
// blocks J_ii. Causal models: J is block lower triangular and block substitution solves exactly.
// Otherwise GMRES, preconditioned on the right by the block diagonal (J D^{-1} z = b, x = D^{-1} z).
// When [first, last) is one block that Model::block_jacobian builds and J has at most
// kDenseSolveMaxDim rows, J is built once, densely, and the products inside the solves are
// block rows of it (the same numbers to rounding; a product costs one read of the blocks it touches
// instead of a pass through the model); the work is counted as before, in tangents and vjps.
class InverseGram {
 public:
  using Scalar = double;
  using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic>;
  static constexpr int kMaxGmres = 300;
  static constexpr double kGmresTol = 1e-13;
  static constexpr long kDenseSolveMaxDim = 4096;  // 128 MiB of J
  InverseGram(Model<double>& m, int first, int last, bool triangular, Work& work)
      : model_(m), first_(first), last_(last), T_(m.planned_T()), C_(m.state_width()),
        NTC_(size_t(T_) * C_), triangular_(triangular), u_(NTC_), w_(NTC_), j_(NTC_), work_(work) {
    if (m.block_jacobian_covers(first, last) && long(NTC_) <= kDenseSolveMaxDim) {
      dense_.resize(NTC_ * NTC_);
      m.block_jacobian(dense_.data(), first / 2);
    }
    // the diagonal blocks J_ii = dy_i / dx_i
    for (int i = 0; i < T_; i++) {
      const Mat J = dense_.empty()
                        ? Mat(RowMap(token_local_jacobian(model_, first_, last_, i).data(), C_, C_))
                        : Mat(block(i, i, 1, 1));
      work_.tangents += C_;
      lu_.emplace_back(J);
      min_rcond_ = std::min(min_rcond_, lu_.back().rcond());
    }
  }
  // rcond of the worst diagonal block: the substitution is meaningful only well above 1e-16
  double min_rcond() const { return min_rcond_; }
  Eigen::Index rows() const { return Eigen::Index(NTC_); }
  Eigen::Index cols() const { return rows(); }
  void perform_op(const double* x, double* y) const {
    throw_if_interrupted();
    if (triangular_ && !dense_.empty()) {
      Mat Y;
      dense_solve_pair(Eigen::Map<const Mat>(x, Eigen::Index(NTC_), 1), Y);
      std::copy(Y.data(), Y.data() + NTC_, y);
    } else if (triangular_) {
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
  void apply(const Eigen::MatrixXd& X, Eigen::MatrixXd& Y) const {
    if (triangular_ && !dense_.empty()) {  // every column in one pass over J per solve
      dense_solve_pair(X, Y);
      return;
    }
    Y.resize(X.rows(), X.cols());
    for (Eigen::Index j = 0; j < X.cols(); j++) perform_op(X.col(j).data(), Y.col(j).data());
  }
  long solves() const { return solves_; }
  bool solves_converged() const { return gmres_ok_; }
  long gmres_iterations() const { return gmres_its_; }

 private:
  using RowMap = Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
  using RowBlock = Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0,
                              Eigen::OuterStride<>>;
  // the dense J's blocks of token rows [i, i + ni) by token columns [j, j + nj)
  RowBlock block(int i, int j, int ni, int nj) const {
    return RowBlock(dense_.data() + size_t(i) * C_ * NTC_ + size_t(j) * C_, Eigen::Index(ni) * C_,
                    Eigen::Index(nj) * C_, Eigen::OuterStride<>(Eigen::Index(NTC_)));
  }
  // Y = J^{-1} J^{-T} X for every column of X at once, by block substitution on the dense J: the
  // blocks are read once per solve whatever the number of columns (the solves are bound by reading
  // J's 64 MiB lower half, not by arithmetic)
  void dense_solve_pair(const Eigen::Ref<const Mat>& X, Mat& Y) const {
    Mat W;
    dense_solve(X, W, true);
    dense_solve(W, Y, false);
    solves_ += X.cols();
  }
  // Y = J^{-1} B (transposed: J^{-T} B), token by token: y_i = J_ii^{-1} (b_i - sum_{j<i} J_ij y_j),
  // or from the last token back y_i = J_ii^{-T} (b_i - sum_{j>i} J_ji^T y_j)
  void dense_solve(const Eigen::Ref<const Mat>& B, Mat& Y, bool transposed) const {
    const Eigen::Index k = B.cols(), C = C_;
    Y.setZero(B.rows(), k);
    for (int step = 0; step < T_; step++) {
      const int i = transposed ? T_ - 1 - step : step;
      Mat r = B.middleRows(i * C, C);
      if (step > 0 && !transposed) {
        subtract_row_blocks(r, i, Y);
        work_.tangents += k;
      } else if (step > 0) {
        subtract_column_blocks(r, i, Y);
        work_.vjps += k;
      }
      const auto& lu = lu_[size_t(i)];
      Y.middleRows(i * C, C) = transposed ? Mat(lu.transpose().solve(r)) : Mat(lu.solve(r));
    }
  }
  // r -= [J_i0 .. J_i,i-1] Y_{<i}: each of the C rows of J read once from memory for all k columns
  // (a library GEMM would pack the whole block row first, which costs as much as the product when k
  // is 1 or 2)
  void subtract_row_blocks(Mat& r, int i, const Mat& Y) const {
    const long len = long(i) * C_;
    const Eigen::Index k = Y.cols();
#pragma omp parallel for schedule(static) if (len * C_ * k > ops::kParallelMinWork)
    for (int c = 0; c < C_; c++) {
      const double* a = dense_.data() + (size_t(i) * C_ + size_t(c)) * NTC_;
      for (Eigen::Index j = 0; j < k; j++) {
        const double* y = Y.col(j).data();
        double sum = 0;
#pragma omp simd reduction(+ : sum)
        for (long t = 0; t < len; t++) sum += a[t] * y[t];
        r(c, j) -= sum;
      }
    }
  }
  // r -= [J_i+1,i .. J_T-1,i]^T Y_{>i}: the column of blocks row by row (each row's C entries are
  // contiguous), the C output columns split between the threads
  void subtract_column_blocks(Mat& r, int i, const Mat& Y) const {
    const long first_row = long(i + 1) * C_, rows = long(T_ - 1 - i) * C_;
    const Eigen::Index k = Y.cols();
#pragma omp parallel if (rows * C_ * k > ops::kParallelMinWork)
    {
      const int nt = omp_get_num_threads(), id = omp_get_thread_num();
      const int c0 = C_ * id / nt, c1 = C_ * (id + 1) / nt;
      // four rows per pass over the outputs: a quarter of the loads and stores of r
      auto row_ptr = [&](long row) { return dense_.data() + size_t(first_row + row) * NTC_ + size_t(i) * C_; };
      long row = 0;
      for (; row + 4 <= rows; row += 4) {
        const double *a0 = row_ptr(row), *a1 = row_ptr(row + 1), *a2 = row_ptr(row + 2), *a3 = row_ptr(row + 3);
        for (Eigen::Index j = 0; j < k; j++) {
          double* out = r.col(j).data();
          const double* y = Y.col(j).data() + first_row + row;
          const double y0 = y[0], y1 = y[1], y2 = y[2], y3 = y[3];
#pragma omp simd
          for (int c = c0; c < c1; c++) out[c] -= (a0[c] * y0 + a1[c] * y1) + (a2[c] * y2 + a3[c] * y3);
        }
      }
      for (; row < rows; row++) {
        const double* a = row_ptr(row);
        for (Eigen::Index j = 0; j < k; j++) {
          double* out = r.col(j).data();
          const double yr = Y(first_row + row, j);
#pragma omp simd
          for (int c = c0; c < c1; c++) out[c] -= a[c] * yr;
        }
      }
    }
  }
  // out = J in (transposed: J^T in), by the dense J or a pass through the model
  void product(double* out, const double* in, bool transposed) const {
    if (!dense_.empty()) {
      Eigen::Map<Eigen::VectorXd> y(out, Eigen::Index(NTC_));
      const Eigen::Map<const Eigen::VectorXd> x(in, Eigen::Index(NTC_));
      const RowMap Jd(dense_.data(), Eigen::Index(NTC_), Eigen::Index(NTC_));
      if (transposed)
        y.noalias() = Jd.transpose() * x;
      else
        y.noalias() = Jd * x;
    } else if (transposed) {
      model_.vjp_sublayers(out, in, first_, last_);
    } else {
      model_.jvp_sublayers(out, in, 1, first_, last_);
    }
    if (transposed)
      work_.vjps++;
    else
      work_.tangents++;
  }

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
      product(out.data(), in.data(), transposed);
      out_vec = Eigen::Map<const Eigen::VectorXd>(out.data(), Eigen::Index(NTC_));
      gmres_its_++;
    };
    Eigen::VectorXd z, x;
    gmres_ok_ = gmres(apply, Eigen::Map<const Eigen::VectorXd>(b, Eigen::Index(NTC_)), z, kMaxGmres, kGmresTol) && gmres_ok_;
    precondition(z, x);
    std::copy(x.data(), x.data() + NTC_, y);
  }

  // y = J^{-1} b through the model (no dense J), token by token: y_i = J_ii^{-1} (b_i - sum_{j<i} J_ij y_j)
  void solve(const double* b, double* y) const {
    std::fill(u_.begin(), u_.end(), 0.0);
    for (int i = 0; i < T_; i++) {
      Eigen::Map<const Eigen::VectorXd> bi(b + size_t(i) * C_, C_);
      Eigen::VectorXd r = bi;
      if (i > 0) {  // u holds y_0 .. y_{i-1} and zeros: (J u)_i = sum_{j<i} J_ij y_j
        product(j_.data(), u_.data(), false);
        r -= Eigen::Map<const Eigen::VectorXd>(j_.data() + size_t(i) * C_, C_);
      }
      const Eigen::VectorXd yi = lu_[size_t(i)].solve(r);
      std::copy(yi.data(), yi.data() + C_, u_.begin() + size_t(i) * C_);
    }
    std::copy(u_.begin(), u_.end(), y);
  }
  // y = J^{-T} b through the model, from the last token back: y_i = J_ii^{-T} (b_i - sum_{j>i} J_ji^T y_j)
  void solve_transposed(const double* b, double* y) const {
    std::fill(u_.begin(), u_.end(), 0.0);
    for (int i = T_ - 1; i >= 0; i--) {
      Eigen::Map<const Eigen::VectorXd> bi(b + size_t(i) * C_, C_);
      Eigen::VectorXd r = bi;
      if (i < T_ - 1) {
        product(j_.data(), u_.data(), true);
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
  std::vector<double> dense_;  // (T C, T C) row-major J when built (see above), else empty
  double min_rcond_ = 1.0;
  mutable std::vector<double> u_, w_, j_;  // substitution, between-solve and product scratch
  mutable long solves_ = 0, gmres_its_ = 0;
  mutable bool gmres_ok_ = true;
  Work& work_;
};

// The k largest eigenvalues (descending) by implicitly restarted Lanczos with at most
// ncv + max_restarts (ncv - k) products.
template <class Op>
std::vector<double> largest_eigenvalues(Op& op, int k, long max_products, bool* ok) {
  const int n = int(op.rows());
  const int ncv = std::min(n, std::max(2 * k + 1, 60));
  const long restarts = std::clamp<long>((max_products - ncv) / std::max(1, ncv - k), 1, 300);
  Spectra::SymEigsSolver<Op> solver(op, k, ncv);
  solver.init();
  solver.compute(Spectra::SortRule::LargestAlge, restarts, 1e-13);
  *ok = solver.info() == Spectra::CompInfo::Successful;
  std::vector<double> out;
  for (Eigen::Index i = 0; i < solver.eigenvalues().size(); i++)
    out.push_back(solver.eigenvalues()[i]);
  return out;
}

// Orthonormal basis (rows x S) of the left null space that the norm ending the last sub-layer of
// [first, last) gives J (lanczos.h, step 1); no columns when that sub-layer has no output norm.
Mat structural_left_null(const Model<double>& m, int first, int last,
                         const std::vector<int>& out_tokens) {
  const ModelConfig& cfg = m.config();
  const int C = cfg.d_model;
  const Eigen::Index rows = Eigen::Index(out_tokens.size()) * m.state_width();  // (hyper-connected: no output norm)
  int i = last - 1;
  while (i >= first && !cfg.has_sublayer(i)) i--;  // an absent sub-layer is the identity
  if (i < first || !norm_sites(cfg.placement_of(cfg.slot(i).layer), cfg.slot(i).kind).out) return Mat(rows, 0);
  // the site's gain per channel (a parameterless kind, L2: 1; SSNorm: its scalar, repeated)
  const std::vector<double> gains = effective_gain(cfg.norm, m.sublayer_params_of(i).ln_out, C);
  const double* gamma = gains.data();
  std::vector<int> zero_gain;
  for (int c = 0; c < C; c++)
    if (gamma[c] == 0.0) zero_gain.push_back(c);
  std::vector<Eigen::VectorXd> cols;
  std::vector<Eigen::Index> col_token;
  for (size_t b = 0; b < out_tokens.size(); b++) {
    const double* z = m.acts(i).r + size_t(out_tokens[b]) * C;  // the norm's input at this token
    // null space of the symmetric J_1 (gamma = 1)
    Mat N(C, 0);
    const auto append = [&N](const Eigen::VectorXd& v) {
      N.conservativeResize(Eigen::NoChange, N.cols() + 1);
      N.rightCols(1) = v;
    };
    for (const std::vector<double>& v : norm_structural_kernel(cfg.norm, z, C, cfg.eps))
      append(Eigen::Map<const Eigen::VectorXd>(v.data(), C));
    // null(J_1 diag(gamma)) = {u : gamma o u in span(N)}: e_c for every gamma_c = 0, and N w /
    // gamma for the w with (N w)_c = 0 wherever gamma_c = 0
    Mat W = Mat::Identity(N.cols(), N.cols());
    if (!zero_gain.empty() && N.cols() > 0) {
      Mat Nz(Eigen::Index(zero_gain.size()), N.cols());
      for (size_t r = 0; r < zero_gain.size(); r++) Nz.row(Eigen::Index(r)) = N.row(zero_gain[r]);
      W = Eigen::FullPivLU<Mat>(Nz).kernel();
      if (W.cols() == 1 && W.norm() == 0)
        W.resize(N.cols(), 0);  // Eigen's kernel of a full-rank matrix
    }
    Mat B(C, Eigen::Index(zero_gain.size()) + W.cols());
    B.setZero();
    for (size_t r = 0; r < zero_gain.size(); r++) B(zero_gain[r], Eigen::Index(r)) = 1.0;
    for (Eigen::Index j = 0; j < W.cols(); j++) {
      const Eigen::VectorXd v = N * W.col(j);
      for (int c = 0; c < C; c++)
        B(c, Eigen::Index(zero_gain.size()) + j) = gamma[c] == 0.0 ? 0.0 : v(c) / gamma[c];
    }
    if (B.cols() == 0) continue;
    Eigen::ColPivHouseholderQR<Mat> qr(B);
    const Mat Q = qr.householderQ() * Mat::Identity(C, qr.rank());
    for (Eigen::Index j = 0; j < Q.cols(); j++) {
      cols.push_back(Q.col(j));
      col_token.push_back(Eigen::Index(b));
    }
  }
  Mat U = Mat::Zero(rows, Eigen::Index(cols.size()));
  for (size_t j = 0; j < cols.size(); j++)
    U.block(col_token[j] * C, Eigen::Index(j), C, 1) = cols[j];
  return U;
}

// Rayleigh-Ritz of G (J J^T on the output side, J^T J on the input side) on the span of the
// orthonormal columns of X, from fresh products (lanczos.h, step 3). next_lambda: the next
// eigenvalue of G above the span's (the guard; +inf when there is none), next_residual its
// residual.
struct Certificate {
  std::vector<double> sigma, bound;  // ascending; bound on |sigma - sigma_true|
};
Certificate certify(const StreamOps& ops, const Mat& X, bool output_side, double next_lambda,
                    double next_residual) {
  Certificate c;
  const Eigen::Index q = X.cols();
  if (q == 0) return c;
  Mat Y, GX;  // Y = J^T X or J X; G X = J Y or J^T Y
  if (output_side) {
    ops.vjp(X, Y);
    ops.jvp(Y, GX);
  } else {
    ops.jvp(X, Y);
    ops.vjp(Y, GX);
  }
  // the singular values of Y are the square roots of the Ritz values, to rounding relative to ||Y||
  // (not to ||Y||^2, as eigenvalues of Y^T Y would be)
  Eigen::JacobiSVD<Mat> svd(Y, Eigen::ComputeThinV);
  const Eigen::VectorXd s = svd.singularValues().reverse();  // ascending
  const Mat Z = svd.matrixV().rowwise().reverse();
  const Mat R = GX * Z - (X * Z) * s.array().square().matrix().asDiagonal();
  // Quadratic residual bound for the block (e.g. Li and Li, 2013): every Ritz value is within
  // ||R||^2 / gap of an eigenvalue, gap = the distance from the block's Ritz values to the rest of
  // the spectrum, which starts at the guard (within its residual); and always within ||R|| (Kahan).
  const double rho = R.norm();  // Frobenius >= spectral
  const double gap = (next_lambda - next_residual) - s(q - 1) * s(q - 1) - rho;
  const double eta = gap > rho ? std::min(rho, rho * rho / gap) : rho;
  c.sigma.assign(s.data(), s.data() + q);
  for (Eigen::Index i = 0; i < q; i++)
    c.bound.push_back(s(i) > 0 ? std::min(std::sqrt(eta), eta / s(i)) : std::sqrt(eta));
  return c;
}

// One solver run for the smallest: its pairs and what the certificate needs.
struct SmallestRun {
  std::string method;
  BlockEigsResult found;
  std::vector<double> estimate;  // the singular values it found, ascending
  bool inverse = false;      // on (J^T J)^{-1}: the estimates are accurate relative to themselves
  bool output_side = false;  // vectors on the output side (J J^T) or the input side (J^T J)
  double next_lambda = std::numeric_limits<double>::infinity(),
         next_residual = 0;  // the guard, in sigma^2
};

}  // namespace

long default_lanczos_budget(long n) { return std::clamp(50 * n, 10000L, 20000L); }

std::vector<double> stream_jacobian(const Model<double>& model, int first, int last,
                                    const std::vector<int>& in_tokens,
                                    const std::vector<int>& out_tokens) {
  const int T = model.planned_T(), C = model.state_width();  // (n C per token with hyper-connections)
  const int K = int(in_tokens.size()) * C;
  throw_if_interrupted();
  // One whole block, most tokens perturbed: built from d x d blocks (Model::block_jacobian; it says
  // which ranges it covers). Otherwise, and for a few tokens, the unit tangents below.
  if (model.block_jacobian_covers(first, last) && 2 * in_tokens.size() >= size_t(T)) {
    const size_t n = size_t(T) * C;
    std::vector<double> full(n * n);
    model.block_jacobian(full.data(), first / 2);
    bool every = in_tokens.size() == size_t(T) && out_tokens == in_tokens;
    for (size_t a = 0; every && a < in_tokens.size(); a++) every = in_tokens[a] == int(a);
    if (every) return full;
    std::vector<double> J(out_tokens.size() * C * size_t(K));
    for (size_t b = 0; b < out_tokens.size(); b++)
      for (int c = 0; c < C; c++)
        for (size_t a = 0; a < in_tokens.size(); a++)
          std::copy_n(full.data() + (size_t(out_tokens[b]) * C + c) * n + size_t(in_tokens[a]) * C, C,
                      J.data() + (b * C + c) * K + a * C);
    return J;
  }
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
  const int C = model.state_width();
  // Whole blocks only; one block always, several only where token i's output ignores the other
  // tokens' tangents (causal: they stay at tokens > i, which token i never reads).
  // With value residual learning, a block holds the first self-attention's values: a product of blocks
  // that starts at that source would drop its path into every later block, so the range is walked whole.
  const bool carries_values = model.config().is_value_source(first) && last - first > 2;
  const bool exact = !model.config().encdec() && first % 2 == 0 && last % 2 == 0 &&
                     (last - first <= 2 || model.config().causal()) && !carries_values;
  if (!exact) return stream_jacobian(model, first, last, {token}, {token});
  std::vector<double> t(size_t(C) * C, 0.0);  // (K = C, C): tangent k is the unit vector e_k
  for (int k = 0; k < C; k++) t[size_t(k) * C + k] = 1.0;
  for (int l = first / 2; l < last / 2; l++) model.jvp_block_token_local(t.data(), t.data(), C, l, token);
  std::vector<double> J(t.size());
  for (int k = 0; k < C; k++)
    for (int c = 0; c < C; c++) J[size_t(c) * C + k] = t[size_t(k) * C + c];
  return J;
}

namespace {

// (One solver whose phases, the largest values, the structural zeros and the rest by the block solver
// (shift-invert or the shifted Gram) with its certificate, share one operator and one budget: long for
// that reason.)
// The extreme singular values of ops' J (lanczos.h); [first, last) are the sub-layers that end in J's
// output (their last norm gives the structural zeros); source: J reads the encdec's source stream.
ExtremeSingularValues extreme_singular_values_of(Model<double>& model, const StreamOps& ops, Work& work, int first,
                                                 int last, const std::vector<int>& in_tokens,
                                                 const std::vector<int>& out_tokens, int k, long budget,
                                                 bool source) {
  ExtremeSingularValues r;
  r.n = int(ops.cols());
  r.budget = budget > 0 ? budget : default_lanczos_budget(r.n);
  k = std::max(1, std::min(k, int(std::min(ops.rows(), ops.cols())) / 2 - 1));
  if (r.n < 4) {  // too small for Lanczos; use the dense path
    r.converged = true;
    return r;
  }
  const auto over = [&](double more) { return work.products() + more > double(r.budget); };
  std::vector<std::string> why;
  // the largest, with at most a quarter of the budget
  GramOperator gram(ops);
  bool largest_ok = false;
  for (double lambda : largest_eigenvalues(gram, k, r.budget / 4, &largest_ok))
    r.largest.push_back(std::sqrt(std::max(0.0, lambda)));
  std::sort(r.largest.begin(), r.largest.end(), std::greater<>());
  if (!largest_ok || r.largest.empty())
    why.push_back("the largest did not converge within their quarter of the budget");
  const double smax = r.largest.empty() ? 0.0 : r.largest.front();
  // 1. the structural zeros (on the output side, where J's left null space lives)
  const Eigen::Index rows = ops.rows(), cols = ops.cols();
  const bool output_side = rows <= cols;
  Mat U = output_side ? structural_left_null(model, first, last, out_tokens) : Mat(rows, 0);
  if (U.cols() > 0) {
    Mat JtU;
    ops.vjp(U, JtU);
    r.structural_residual = smax > 0 ? JtU.norm() / smax : JtU.norm();
    if (!(r.structural_residual <= kStructuralTol)) {
      why.push_back(
          fmt::format("the structural null space fails its check: ||J^T U||_F = {:.2e} sigma_max",
                      r.structural_residual));
      U.resize(rows, 0);
    }
  }
  r.structural_zeros = int(U.cols());
  const int zeros = std::min(k, r.structural_zeros);
  r.smallest.assign(size_t(zeros), 0.0);
  const int wanted = k - zeros;
  r.smallest_error_bound = r.structural_residual;  // ||J^T U||_F bounds the S structural values
  if (wanted == 0) r.smallest_method = "structure";
  if (wanted > 0 && smax == 0) why.push_back("no largest singular value to scale the smallest by");
  if (wanted > 0 && smax > 0) {
    // 2. the rest by the block solver: shift-invert where J has invertible diagonal blocks, else
    // (or when its values fail the certificate) the shifted Gram block sizes: up to 8 new
    // directions per step on the shifted Gram, whose wanted values may be a numerically repeated
    // cluster (the multiplicity beyond the block comes in through the random directions); 2 on the
    // inverse, whose products cost T (or a GMRES run) each and whose wanted values are usually well
    // separated (measured: 2-3x fewer solves than 6)
    const int block = std::clamp(wanted + 1, 2, 8), inv_block = 2;
    const double reserve = wanted + 1;  // the certificate's products
    const auto shifted = [&] {
      SmallestRun run;
      run.method = "shifted";
      run.output_side = output_side;
      // c I - G, G = J J^T on the complement of the structural zeros (or J^T J on the input side)
      const double c = smax * smax * (1 + 1e-3);
      BlockEigsOptions o;
      o.nev = wanted;
      o.block = block;
      o.scale = c;
      o.tol = kShiftedLockTol;
      o.affordable = [&](int n_cols) { return !over(n_cols + reserve); };
      const auto op = [&](const Mat& X, Mat& Y) {
        ops.gram(X, Y, output_side);
        Y = c * X - Y;
      };
      run.found = block_largest_eigenpairs(op, output_side ? rows : cols,
                                           output_side ? U : Mat(cols, 0), o);
      for (Eigen::Index i = 0; i < run.found.values.size(); i++)
        run.estimate.push_back(std::sqrt(std::max(0.0, c - run.found.values(i))));
      if (!std::isnan(run.found.guard)) {
        run.next_lambda = c - run.found.guard;
        run.next_residual = run.found.guard_residual;
      }
      return run;
    };
    bool every_token = !source && int(in_tokens.size()) == model.planned_T() && in_tokens == out_tokens &&
                       model.planned_B() == 1;
    for (size_t a = 0; every_token && a < in_tokens.size(); a++)
      every_token = in_tokens[a] == int(a);
    std::optional<SmallestRun> run;
    if (every_token && U.cols() == 0 && !over(0.5 * double(cols) + reserve)) {
      // block lower triangular over tokens: a gpt, and an encdec's decoder (causal self-attention;
      // cross-attention reads the memory, held fixed)
      const bool triangular =
          model.config().causal() || (model.config().encdec() && first >= model.config().first_decoder_slot());
      InverseGram inverse(model, first, last, triangular, work);
      if (inverse.min_rcond() > 1e-12) {
        SmallestRun inv;
        inv.inverse = true;
        inv.output_side = false;
        BlockEigsOptions o;
        o.nev = wanted;
        o.block = inv_block;
        // the solves carry rounding amplified by cond(J): lock where the residual stops falling,
        // the certificate measures what the values are worth
        o.tol = kInverseLockTol;
        o.relative_to_value = true;
        o.lock_at_noise_floor = true;
        // a substitution solve costs T products; a GMRES one is only known afterwards (it may
        // overshoot the budget by one block)
        const double unit = triangular ? double(model.planned_T()) : 0.0;
        o.affordable = [&](int n_cols) { return !over(n_cols * unit + reserve); };
        inv.found = block_largest_eigenpairs([&](const Mat& X, Mat& Y) { inverse.apply(X, Y); },
                                             cols, Mat(cols, 0), o);
        r.solves = inverse.solves();
        if (inverse.solves_converged()) {
          inv.method = triangular ? "inverse (block substitution)" : "inverse (GMRES)";
          for (Eigen::Index i = 0; i < inv.found.values.size(); i++)
            inv.estimate.push_back(inv.found.values(i) > 0
                                       ? 1.0 / std::sqrt(inv.found.values(i))
                                       : std::numeric_limits<double>::infinity());
          if (!std::isnan(inv.found.guard) && inv.found.guard > 0) {
            inv.next_lambda = 1.0 / inv.found.guard;
            inv.next_residual =
                inv.found.guard_residual /
                (inv.found.guard * inv.found.guard);  // d(1/theta) = d theta / theta^2
          }
          run = std::move(inv);
        }
      }
    }
    // 3. the certificate
    std::vector<std::string> failed;  // the inverse method's failure, when the shifted one follows
    std::vector<double> estimate;     // the last run's unverified values
    bool verified = false;
    for (int attempt = 0; attempt < 2 && !verified; attempt++) {
      if (!run) run = shifted();
      r.smallest_method = run->method;
      estimate.assign(run->estimate.begin(),
                      run->estimate.begin() + std::min<long>(wanted, long(run->estimate.size())));
      if (!run->found.converged) {
        failed.push_back(run->method + ": " + run->found.reason);
      } else {
        const Certificate cert = certify(ops, run->found.vectors, run->output_side,
                                         run->next_lambda, run->next_residual);
        // the certificate covers the whole last cluster (block_eigs.h); the first `wanted` are
        // reported
        const size_t shown = std::min(size_t(wanted), cert.sigma.size());
        double worst = 0;
        verified = true;
        for (size_t i = 0; i < shown; i++) {
          const double tol = kSmallestAtol * smax + kSmallestRtol * cert.sigma[i];
          verified = verified && cert.bound[i] <= tol &&
                     (!run->inverse || std::abs(run->estimate[i] - cert.sigma[i]) <= tol);
          worst = std::max(worst, cert.bound[i] / smax);
        }
        if (verified) {
          r.smallest_error_bound = std::max(r.smallest_error_bound, worst);
          // the inverse method's own values are accurate relative to themselves, the certificate's
          // to sigma_max
          for (size_t i = 0; i < shown; i++)
            r.smallest.push_back(run->inverse ? run->estimate[i] : cert.sigma[i]);
          std::sort(r.smallest.begin(), r.smallest.end());
        } else {
          failed.push_back(fmt::format(
              "{}: the certificate's error bound {:.2e} sigma_max exceeds the tolerance",
              run->method, worst));
          estimate.assign(cert.sigma.begin(), cert.sigma.begin() + long(shown));
        }
      }
      if (!run->inverse) break;  // the shifted method was the last resort
      run.reset();
    }
    if (!verified) {
      for (const auto& f : failed) why.push_back("the smallest, " + f);
      r.smallest_unverified = r.smallest;
      r.smallest_unverified.insert(r.smallest_unverified.end(), estimate.begin(), estimate.end());
      std::sort(r.smallest_unverified.begin(), r.smallest_unverified.end());
    }
  }
  r.products = std::lround(work.products());
  r.converged = why.empty();
  for (size_t i = 0; i < why.size(); i++) r.reason += (i ? "; " : "") + why[i];
  return r;
}

}  // namespace

ExtremeSingularValues extreme_singular_values(Model<double>& model, int first, int last,
                                              const std::vector<int>& in_tokens,
                                              const std::vector<int>& out_tokens, int k, long budget) {
  Work work;
  const StreamOps ops(model, first, last, in_tokens, out_tokens, work);
  return extreme_singular_values_of(model, ops, work, first, last, in_tokens, out_tokens, k, budget, false);
}

ExtremeSingularValues extreme_singular_values_source(Model<double>& model, const std::vector<int>& src_tokens,
                                                     const std::vector<int>& out_tokens, int k, long budget) {
  const ModelConfig& cfg = model.config();
  if (!cfg.encdec()) throw Error("extreme_singular_values_source needs an encoder-decoder model");
  Work work;
  const StreamOps ops(model, 0, 0, src_tokens, out_tokens, work, true);
  return extreme_singular_values_of(model, ops, work, cfg.first_decoder_slot(), cfg.n_slots(), src_tokens,
                                    out_tokens, k, budget, true);
}

std::vector<double> source_jacobian(const Model<double>& model, const std::vector<int>& src_tokens,
                                    const std::vector<int>& out_tokens) {
  if (!model.config().encdec()) throw Error("source_jacobian needs an encoder-decoder model");
  const int T = model.planned_T(), S = model.planned_S(), C = model.config().d_model;
  const int K = int(src_tokens.size()) * C;
  std::vector<double> tsrc(size_t(K) * S * C, 0.0), ttgt(size_t(K) * T * C, 0.0), tout(size_t(K) * T * C);
  for (size_t a = 0; a < src_tokens.size(); a++)
    for (int c = 0; c < C; c++) tsrc[(a * C + c) * S * C + size_t(src_tokens[a]) * C + c] = 1.0;
  model.jvp_encdec(tout.data(), tsrc.data(), ttgt.data(), K);
  const size_t rows = out_tokens.size() * C;
  std::vector<double> J(rows * K);
  for (int k = 0; k < K; k++)
    for (size_t b = 0; b < out_tokens.size(); b++)
      for (int c = 0; c < C; c++) J[(b * C + c) * K + k] = tout[size_t(k) * T * C + size_t(out_tokens[b]) * C + c];
  return J;
}

}  // namespace normlab::analysis
