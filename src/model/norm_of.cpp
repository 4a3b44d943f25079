// norm_of.cpp: the norm kinds' parameters, initial scalars, statistics and closed-form Jacobians
// (the dispatch of forward, backward and JVP is inline in norm_of.h).
#include "model/norm_of.h"

#include <cmath>
#include <string>

namespace normlab {

std::vector<NormParamSpec> norm_param_specs(NormKind kind, bool gain, bool bias) {
  const NormParamSpec weight{".weight", true, ParamRole::NormGain}, beta{".bias", true, ParamRole::NormBias},
      alpha{".alpha", false, ParamRole::NormScalar}, shift{".shift", false, ParamRole::NormScalar};
  std::vector<NormParamSpec> specs;
  if (gain) specs.push_back(weight);
  switch (kind) {
    case NormKind::LayerNorm:
      if (bias) specs.push_back(beta);
      return specs;
    case NormKind::RMSNorm: return specs;
    case NormKind::DyT:
      if (bias) specs.push_back(beta);
      specs.push_back(alpha);
      return specs;
    case NormKind::Derf:
      if (bias) specs.push_back(beta);
      specs.push_back(alpha);
      specs.push_back(shift);
      return specs;
    case NormKind::L2: return {};  // no gain, no bias: a projection
    case NormKind::SSNorm:  // one scalar gain, stored as the site's alpha (a weightless site: none)
      if (gain) return {alpha};
      return {};
  }
  return specs;
}

std::vector<NormParamSpec> norm_param_specs(const ModelConfig& cfg, const std::string& site) {
  const bool qk = site.ends_with(".q_norm") || site.ends_with(".k_norm") || site.ends_with(".v_norm");
  const bool affine = !qk || cfg.qk_norm_affine;
  return norm_param_specs(cfg.norm, affine, affine && cfg.norm_bias);
}

double norm_scalar_init(NormKind kind, const ModelConfig& cfg, const std::string& name) {
  switch (kind) {
    case NormKind::LayerNorm:
    case NormKind::RMSNorm:
    case NormKind::L2: return 0.0;  // no scalars
    case NormKind::SSNorm: return 1.0;  // the gain starts at 1 (torchtitan's SingleScaleRMSNorm)
    case NormKind::DyT:
    case NormKind::Derf:
      if (!name.ends_with(".alpha")) return 0.0;  // shift starts at 0 (Derf)
      // DyT's LLaMA recipe: the self-attention's input norm starts at its own alpha
      if (cfg.norm_alpha_attn && name.ends_with(".attn.ln_in.alpha")) return *cfg.norm_alpha_attn;
      return cfg.norm_alpha;
  }
  return 0.0;
}

NormStatistic norm_statistic(NormKind kind) {
  switch (kind) {
    case NormKind::LayerNorm: return NormStatistic::Variance;
    case NormKind::RMSNorm:
    case NormKind::SSNorm: return NormStatistic::MeanSquare;
    case NormKind::L2: return NormStatistic::SumSquare;
    case NormKind::DyT:
    case NormKind::Derf: return NormStatistic::None;
  }
  return NormStatistic::None;
}

namespace {

// The diagonal of a point-wise kind's Jacobian (DyT, Derf), without the site's constant scale:
// DyT gamma alpha (1 - tanh^2(alpha z)), Derf gamma alpha (2 / sqrt(pi)) exp(-(alpha z + shift)^2).
std::vector<double> pointwise_diagonal(NormKind kind, const double* z, const double* gamma,
                                       const NormParams<double>& p, int d) {
  std::vector<double> diagonal(static_cast<size_t>(d));
  const double a = *p.alpha;
  for (int i = 0; i < d; i++) {
    if (kind == NormKind::DyT) {
      const double t = std::tanh(a * z[i]);
      diagonal[size_t(i)] = gamma[i] * a * (1.0 - t * t);
    } else {
      const double u = a * z[i] + *p.shift;
      diagonal[size_t(i)] = gamma[i] * a * 2.0 / std::sqrt(M_PI) * std::exp(-u * u);
    }
  }
  return diagonal;
}

// The Jacobian of the kind's own map (without the site's constant scale).
std::vector<double> unscaled_jacobian(NormKind kind, const double* z, const NormParams<double>& p, int d,
                                      double eps) {
  std::vector<double> J(size_t(d) * d, 0.0);
  const std::vector<double> gains = effective_gain(kind, p, d);
  const double* gamma = gains.data();
  switch (kind) {
    case NormKind::LayerNorm: {
      // J = diag(gamma) (1/s) [I - 11^T/d - y y^T / (d s^2)],  y = z - mean, s = sqrt(var + eps)
      double mean = 0;
      for (int i = 0; i < d; i++) mean += z[i] / d;
      double var = 0;
      for (int i = 0; i < d; i++) var += (z[i] - mean) * (z[i] - mean) / d;
      const double s2 = var + eps, s = std::sqrt(s2);
      for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++)
          J[size_t(i) * d + j] = gamma[i] / s * ((i == j) - 1.0 / d - (z[i] - mean) * (z[j] - mean) / (d * s2));
      return J;
    }
    case NormKind::RMSNorm:
    case NormKind::SSNorm: {  // (SSNorm: gamma = its scalar, repeated)
      // J = diag(gamma) (1/r) [I - z z^T / (d r^2)],  r = sqrt(mean(z^2) + eps)
      double ms = 0;
      for (int i = 0; i < d; i++) ms += z[i] * z[i] / d;
      const double r2 = ms + eps, r = std::sqrt(r2);
      for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) J[size_t(i) * d + j] = gamma[i] / r * ((i == j) - z[i] * z[j] / (d * r2));
      return J;
    }
    case NormKind::DyT:
    case NormKind::Derf: {
      const std::vector<double> diagonal = pointwise_diagonal(kind, z, gamma, p, d);
      for (int i = 0; i < d; i++) J[size_t(i) * d + i] = diagonal[size_t(i)];
      return J;
    }
    case NormKind::L2: {
      // J = r I - r^3 z z^T,  r = (|z|^2 + eps)^(-1/2)  (no gain)
      double ss = 0;
      for (int i = 0; i < d; i++) ss += z[i] * z[i];
      const double r = 1.0 / std::sqrt(ss + eps);
      for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) J[size_t(i) * d + j] = r * (i == j) - r * r * r * z[i] * z[j];
      return J;
    }
  }
  return J;
}

}  // namespace

std::vector<double> norm_jacobian_closed_form(NormKind kind, const double* z, const NormParams<double>& p, int d,
                                              double eps) {
  std::vector<double> J = unscaled_jacobian(kind, z, p, d, eps);
  if (p.scale != 1.0)
    for (double& v : J) v *= p.scale;
  return J;
}

std::vector<double> norm_jacobian_diagonal(NormKind kind, const double* z, const NormParams<double>& p, int d) {
  if (kind != NormKind::DyT && kind != NormKind::Derf)
    throw Error(fmt::format("norm_jacobian_diagonal: {} is not a point-wise norm (a bug)", to_string(kind)));
  std::vector<double> diagonal = pointwise_diagonal(kind, z, effective_gain(kind, p, d).data(), p, d);
  for (double& v : diagonal) v *= p.scale;
  return diagonal;
}

std::vector<std::vector<double>> norm_structural_kernel(NormKind kind, const double* z, int d, double eps) {
  std::vector<std::vector<double>> basis;
  switch (kind) {
    case NormKind::LayerNorm: {
      basis.push_back(std::vector<double>(size_t(d), 1.0));
      if (eps == 0.0) {
        double mean = 0;
        for (int i = 0; i < d; i++) mean += z[i] / d;
        std::vector<double> y(z, z + d);
        for (double& v : y) v -= mean;
        basis.push_back(std::move(y));
      }
      return basis;
    }
    case NormKind::RMSNorm:
    case NormKind::SSNorm:
    case NormKind::L2:
      if (eps == 0.0) basis.push_back(std::vector<double>(z, z + d));
      return basis;
    case NormKind::DyT:
    case NormKind::Derf: return basis;
  }
  return basis;
}

int norm_kernel_dimension(NormKind kind) {
  switch (kind) {
    case NormKind::LayerNorm: return 2;
    case NormKind::RMSNorm:
    case NormKind::SSNorm:
    case NormKind::L2: return 1;
    case NormKind::DyT:
    case NormKind::Derf: return 0;
  }
  return 0;
}

}  // namespace normlab
