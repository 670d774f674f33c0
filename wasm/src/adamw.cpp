#include "adamw.h"

#include <algorithm>
#include <cmath>

namespace tg {

double sum_squares(const float* x, int64_t n, double* partials, ThreadPool& pool) {
  const int64_t blocks = norm_partials_count(n);
  pool.parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; b++) {
      const int64_t end = std::min(n, (b + 1) * kNormBlock);
      double acc = 0;
      for (int64_t i = b * kNormBlock; i < end; i++) acc += static_cast<double>(x[i]) * x[i];
      partials[b] = acc;
    }
  });
  double total = 0;
  for (int64_t b = 0; b < blocks; b++) total += partials[b];
  return total;
}

double grad_global_norm(const float* g, int64_t n, double* partials, ThreadPool& pool) {
  return std::sqrt(sum_squares(g, n, partials, pool));
}

double clip_gradients(float* g, int64_t n, double norm, double grad_clip, ThreadPool& pool) {
  const double coef = std::min(1.0, grad_clip / (norm + 1e-6));
  if (coef < 1.0) {
    const float c = static_cast<float>(coef);
    pool.parallel_for(n, 8192, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; i++) g[i] *= c;
    });
  }
  return coef;
}

namespace {

// AdamW's scalars for step t: in double, then rounded to float as PyTorch does when it applies them
// to a float tensor.
struct AdamWScalars {
  float keep, w1, b2, w2, step_size, bc2_sqrt, eps;
};

AdamWScalars adamw_scalars(const AdamWSettings& s, int64_t t) {
  const double bc1 = 1.0 - std::pow(s.beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(s.beta2, static_cast<double>(t));
  return {static_cast<float>(1.0 - s.lr * s.weight_decay),
          static_cast<float>(1.0 - s.beta1),
          static_cast<float>(s.beta2),
          static_cast<float>(1.0 - s.beta2),
          static_cast<float>(s.lr / bc1),
          static_cast<float>(std::sqrt(bc2)),
          static_cast<float>(s.eps)};
}

// Elements [i0, i1) of one AdamW update; with Measure, returns the sum of (p_after - p_before)^2.
// Both instantiations run the same float operations on every element.
template <bool Measure>
double adamw_range(float* p, const float* g, float* m, float* v, int64_t i0, int64_t i1, bool decay,
                   const AdamWScalars c) {
  double moved = 0;
  for (int64_t i = i0; i < i1; i++) {
    float pi = p[i];
    const float before = pi;
    if (decay) pi *= c.keep;
    const float gi = g[i];
    const float mi = m[i] + c.w1 * (gi - m[i]);  // torch's lerp for weights < 0.5
    const float vi = v[i] * c.b2 + c.w2 * gi * gi;
    const float denom = std::sqrt(vi) / c.bc2_sqrt + c.eps;
    p[i] = pi - c.step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
    if (Measure) {
      const double d = static_cast<double>(p[i]) - before;
      moved += d * d;
    }
  }
  return moved;
}

}  // namespace

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, bool decay,
                  const AdamWSettings& s, int64_t t, ThreadPool& pool) {
  const AdamWScalars c = adamw_scalars(s, t);
  pool.parallel_for(
      n, 8192, [&](int64_t i0, int64_t i1) { adamw_range<false>(p, g, m, v, i0, i1, decay, c); });
}

double adamw_update_measured(float* p, const float* g, float* m, float* v, int64_t n, bool decay,
                             const AdamWSettings& s, int64_t t, double* partials,
                             ThreadPool& pool) {
  const AdamWScalars c = adamw_scalars(s, t);
  const int64_t blocks = norm_partials_count(n);
  pool.parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; b++)
      partials[b] = adamw_range<true>(p, g, m, v, b * kNormBlock, std::min(n, (b + 1) * kNormBlock),
                                      decay, c);
  });
  double total = 0;
  for (int64_t b = 0; b < blocks; b++) total += partials[b];
  return total;
}

}  // namespace tg
