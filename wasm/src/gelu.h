// GELU in GPT-2's tanh form (PyTorch approximate="tanh"), elementwise forward and backward.
#pragma once
#include <cmath>
#include <cstdint>

#include "thread_pool.h"

namespace tg {

// sqrt(2/pi)
constexpr double kGeluScale = 0.7978845608028654;

// tanh(u) = 1 - 2 / (exp(2u) + 1): one exp instead of libm's slower tanh; saturates cleanly to
// +-1 (exp overflowing to inf gives 1, underflowing to 0 gives -1). Absolute error ~1 ulp of 1.
template <class F>
inline F tanh_via_exp(F u) {
  return static_cast<F>(1) - static_cast<F>(2) / (std::exp(static_cast<F>(2) * u) + static_cast<F>(1));
}

// out = 0.5 x (1 + tanh(s (x + 0.044715 x^3))); inp, out: (n)
template <class F>
void gelu_forward(F* out, const F* inp, int64_t n, ThreadPool& pool) {
  const F s = static_cast<F>(kGeluScale), c = static_cast<F>(0.044715);
  pool.parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) {
      F x = inp[i];
      F u = s * (x + c * x * x * x);
      out[i] = static_cast<F>(0.5) * x * (static_cast<F>(1) + tanh_via_exp(u));
    }
  });
}

// dinp = dout * gelu'(inp), overwritten (may alias dout). gelu'(x) = 0.5(1 + th) + 0.5 x (1 - th^2) u'
template <class F>
void gelu_backward(F* dinp, const F* inp, const F* dout, int64_t n, ThreadPool& pool) {
  const F s = static_cast<F>(kGeluScale), c = static_cast<F>(0.044715);
  pool.parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) {
      F x = inp[i];
      F u = s * (x + c * x * x * x);
      F th = tanh_via_exp(u);
      F du = s * (static_cast<F>(1) + static_cast<F>(3) * c * x * x);
      F grad = static_cast<F>(0.5) * (static_cast<F>(1) + th) +
               static_cast<F>(0.5) * x * (static_cast<F>(1) - th * th) * du;
      dinp[i] = grad * dout[i];
    }
  });
}

}  // namespace tg
