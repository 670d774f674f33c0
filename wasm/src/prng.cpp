// See prng.h and docs/determinism.md. Compiled with -ffp-contract=off (wasm/native.mk).
#include "prng.h"

#include <cmath>

namespace tg {

namespace {
constexpr double kTwoPowMinus53 = 1.0 / 9007199254740992.0;
constexpr double kLn2 = 0.6931471805599453;
constexpr double kSqrtHalf = 0.7071067811865476;
constexpr double kHalfPi = 1.5707963267948966;
// L[k] = 1/(2k+1), CC[k] = (-1)^k/(2k)!, SC[k] = (-1)^k/(2k+1)!: the doubles nearest the rationals.
constexpr double L[12] = {1.0,
                          0.3333333333333333,
                          0.2,
                          0.14285714285714285,
                          0.1111111111111111,
                          0.09090909090909091,
                          0.07692307692307693,
                          0.06666666666666667,
                          0.058823529411764705,
                          0.05263157894736842,
                          0.047619047619047616,
                          0.043478260869565216};
constexpr double CC[12] = {1.0,
                           -0.5,
                           0.041666666666666664,
                           -0.001388888888888889,
                           2.48015873015873e-05,
                           -2.755731922398589e-07,
                           2.08767569878681e-09,
                           -1.1470745597729725e-11,
                           4.779477332387385e-14,
                           -1.5619206968586225e-16,
                           4.110317623312165e-19,
                           -8.896791392450574e-22};
constexpr double SC[12] = {1.0,
                           -0.16666666666666666,
                           0.008333333333333333,
                           -0.0001984126984126984,
                           2.7557319223985893e-06,
                           -2.505210838544172e-08,
                           1.6059043836821613e-10,
                           -7.647163731819816e-13,
                           2.8114572543455206e-15,
                           -8.22063524662433e-18,
                           1.9572941063391263e-20,
                           -3.868170170630684e-23};
}  // namespace

double uniform(uint64_t x) { return static_cast<double>(x >> 11) * kTwoPowMinus53; }
double uniform_open0(uint64_t x) { return static_cast<double>((x >> 11) + 1) * kTwoPowMinus53; }

double portable_log(double x) {
  int e = 0;
  double m = std::frexp(x, &e);  // x = m * 2^e, m in [0.5, 1)
  if (m < kSqrtHalf) {
    m = m * 2.0;
    e = e - 1;
  }
  double s = (m - 1.0) / (m + 1.0);
  double s2 = s * s;
  double p = L[11];
  for (int k = 10; k >= 0; k--) p = p * s2 + L[k];
  return static_cast<double>(e) * kLn2 + (2.0 * s) * p;
}

double portable_cos_2pi(double u) {
  double t = u * 4.0;
  double q = std::floor(t);
  double a = (t - q) * kHalfPi;
  double a2 = a * a;
  double c = CC[11], sn = SC[11];
  for (int k = 10; k >= 0; k--) {
    c = c * a2 + CC[k];
    sn = sn * a2 + SC[k];
  }
  sn = a * sn;
  return q == 0.0 ? c : q == 1.0 ? -sn : q == 2.0 ? -c : sn;
}

double normal(uint64_t s0, uint64_t j) {
  double u1 = uniform_open0(splitmix64(s0, 2 * j));
  double u2 = uniform(splitmix64(s0, 2 * j + 1));
  return std::sqrt(-2.0 * portable_log(u1)) * portable_cos_2pi(u2);
}

void normal_float32(float* out, uint64_t s0, uint64_t first, int64_t count, double std) {
  for (int64_t i = 0; i < count; i++)
    out[i] = static_cast<float>(normal(s0, first + static_cast<uint64_t>(i)) * std);
}

}  // namespace tg
