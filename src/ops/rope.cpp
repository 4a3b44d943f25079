// rope.cpp: the rotary position embedding's angle tables and rotation (one scalar path; the tables
// in double, rounded once to S).
#include "ops/rope.h"

#include <algorithm>
#include <cmath>

#include "ops/common.h"

namespace normlab::ops {

template <class S>
void rope_tables(S* cos_p, S* sin_p, int P, int R, double base, double scale, const double* factors, double m) {
  const int half = R / 2;
  for (int i = 0; i < half; i++) {
    const double theta = std::pow(base, -2.0 * i / R) / (scale * (factors ? factors[i] : 1.0));
    for (int p = 0; p < P; p++) {
      cos_p[(long)p * half + i] = S(m * std::cos(p * theta));
      sin_p[(long)p * half + i] = S(m * std::sin(p * theta));
    }
  }
}

template <class S>
void rope_rotate(S* x, const S* cos_p, const S* sin_p, int rows, int T, int pos0, int ld, int col0, int NH,
                 int HS, int R, int sign) {
  const int half = R / 2;
  // (a, b) <- (a cos - b sin, b cos + a sin) for the angle sign * p theta_i
#pragma omp parallel for schedule(static) if((long)rows * NH * R > kParallelMinWork)
  for (int n = 0; n < rows; n++) {
    const int p = pos0 + n % T;
    const S* c = cos_p + (long)p * half;
    const S* s = sin_p + (long)p * half;
    for (int h = 0; h < NH; h++) {
      S* a = x + (long)n * ld + col0 + (long)h * HS;
      S* b = a + half;
      for (int i = 0; i < half; i++) {
        const S si = sign > 0 ? s[i] : -s[i], ai = a[i], bi = b[i];
        a[i] = ai * c[i] - bi * si;
        b[i] = bi * c[i] + ai * si;
      }
    }
  }
}

double longrope_mscale(double s, double original) {
  return s > 1 ? std::sqrt(1 + std::log(s) / std::log(original)) : 1.0;
}

std::vector<double> yarn_rope_factors(int R, double base, double factor, double beta_fast, double beta_slow,
                                      double context, bool truncate) {
  const double kPi = 3.14159265358979323846;
  auto dim_of = [&](double rotations) { return R * std::log(context / (rotations * 2 * kPi)) / (2 * std::log(base)); };
  double low = dim_of(beta_fast), high = dim_of(beta_slow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(R - 1));
  if (low == high) high += 0.001;  // (as transformers: no division by zero)
  std::vector<double> f(size_t(R / 2));
  for (int i = 0; i < R / 2; i++) {
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    f[size_t(i)] = 1.0 / (ramp / factor + 1.0 - ramp);
  }
  return f;
}

std::vector<double> llama3_rope_factors(int R, double base, double factor, double low_freq_factor,
                                        double high_freq_factor, double context) {
  const double kPi = 3.14159265358979323846;
  const double long_wavelength = context / low_freq_factor, short_wavelength = context / high_freq_factor;
  std::vector<double> f(size_t(R / 2));
  for (int i = 0; i < R / 2; i++) {
    const double wavelength = 2 * kPi / std::pow(base, -2.0 * i / R);
    if (wavelength < short_wavelength) {
      f[size_t(i)] = 1.0;
    } else if (wavelength > long_wavelength) {
      f[size_t(i)] = factor;
    } else {
      const double s = (context / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor);
      f[size_t(i)] = 1.0 / ((1 - s) / factor + s);
    }
  }
  return f;
}

template void rope_tables<float>(float*, float*, int, int, double, double, const double*, double);
template void rope_tables<double>(double*, double*, int, int, double, double, const double*, double);
template void rope_rotate<float>(float*, const float*, const float*, int, int, int, int, int, int, int, int, int);
template void rope_rotate<double>(double*, const double*, const double*, int, int, int, int, int, int, int, int,
                                  int);

}  // namespace normlab::ops
