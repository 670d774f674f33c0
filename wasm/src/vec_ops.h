// The few vector primitives the templated kernels share: the shifted exponential of a span (the
// softmax) and the GELU of a span. Any type gets the plain loop (the double twins the
// finite-difference test runs); float, the model's type, gets simd.h's portable vectors. The
// kernels are one code path over these.
#pragma once
#include <cmath>
#include <cstdint>

#include "simd.h"

namespace tg {

// x[i] = exp(x[i] - shift); returns the sum of the results.
template <class F>
inline F vec_exp_shifted(F* x, F shift, int64_t n) {
  F sum = 0;
  for (int64_t i = 0; i < n; i++) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

inline float vec_exp_shifted(float* x, float shift, int64_t n) {
  using namespace simd;
  const vf vs = set1(shift);
  vf acc = zero();
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) {
    const vf e = simd::exp(sub(load(x + i), vs));
    store(x + i, e);
    acc = add(acc, e);
  }
  float sum = reduce_add(acc);
  for (; i < n; i++) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

// GELU, tanh form: 0.5 x (1 + tanh(s (x + 0.044715 x^3))), s = sqrt(2/pi); tanh(u) = 1 - 2/(e^2u +
// 1)
constexpr double kGeluScale = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;

template <class F>
inline F gelu_tanh(F u) {
  return static_cast<F>(1) -
         static_cast<F>(2) / (std::exp(static_cast<F>(2) * u) + static_cast<F>(1));
}

// out[i] = gelu(x[i])
template <class F>
inline void gelu_span(F* out, const F* x, int64_t n) {
  const F s = static_cast<F>(kGeluScale), c = static_cast<F>(kGeluCubic),
          half = static_cast<F>(0.5);
  for (int64_t i = 0; i < n; i++) {
    const F xi = x[i];
    out[i] = half * xi * (static_cast<F>(1) + gelu_tanh(s * (xi + c * xi * xi * xi)));
  }
}

// dx[i] = dout[i] * gelu'(x[i]); gelu'(x) = 0.5 (1 + th) + 0.5 x (1 - th^2) s (1 + 3c x^2). dx may
// be dout.
template <class F>
inline void gelu_grad_span(F* dx, const F* x, const F* dout, int64_t n) {
  const F s = static_cast<F>(kGeluScale), c = static_cast<F>(kGeluCubic),
          half = static_cast<F>(0.5);
  const F one = 1, three = 3;
  for (int64_t i = 0; i < n; i++) {
    const F xi = x[i];
    const F th = gelu_tanh(s * (xi + c * xi * xi * xi));
    const F du = s * (one + three * c * xi * xi);
    dx[i] = (half * (one + th) + half * xi * (one - th * th) * du) * dout[i];
  }
}

inline void gelu_span(float* out, const float* x, int64_t n) {
  using namespace simd;
  const vf s = set1(static_cast<float>(kGeluScale)), c = set1(static_cast<float>(kGeluCubic));
  const vf half = set1(0.5f), one = set1(1.0f);
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) {
    const vf xi = load(x + i);
    const vf u = mul(s, add(xi, mul(c, mul(xi, mul(xi, xi)))));
    store(out + i, mul(mul(half, xi), add(one, simd::tanh(u))));
  }
  gelu_span<float>(out + i, x + i, n - i);
}

inline void gelu_grad_span(float* dx, const float* x, const float* dout, int64_t n) {
  using namespace simd;
  const vf s = set1(static_cast<float>(kGeluScale)), c = set1(static_cast<float>(kGeluCubic));
  const vf c3 = set1(static_cast<float>(3 * kGeluCubic)), half = set1(0.5f), one = set1(1.0f);
  int64_t i = 0;
  for (; i + kWidth <= n; i += kWidth) {
    const vf xi = load(x + i);
    const vf x2 = mul(xi, xi);
    const vf th = simd::tanh(mul(s, add(xi, mul(c, mul(x2, xi)))));
    const vf du = mul(s, add(one, mul(c3, x2)));
    const vf g = add(mul(half, add(one, th)), mul(mul(half, xi), mul(sub(one, mul(th, th)), du)));
    store(dx + i, mul(g, load(dout + i)));
  }
  gelu_grad_span<float>(dx + i, x + i, dout + i, n - i);
}

}  // namespace tg
