#include "adamw.h"

#include <algorithm>
#include <cmath>

namespace tg {

double grad_global_norm(const float* g, int64_t n, double* partials, ThreadPool& pool) {
  const int64_t blocks = norm_partials_count(n);
  pool.parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; b++) {
      const int64_t end = std::min(n, (b + 1) * kNormBlock);
      double acc = 0;
      for (int64_t i = b * kNormBlock; i < end; i++) acc += static_cast<double>(g[i]) * g[i];
      partials[b] = acc;
    }
  });
  double total = 0;
  for (int64_t b = 0; b < blocks; b++) total += partials[b];
  return std::sqrt(total);
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

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, bool decay,
                  const AdamWSettings& s, int64_t t, ThreadPool& pool) {
  // Scalars in double, then rounded to float as PyTorch does when it applies them to a float
  // tensor.
  const float keep = static_cast<float>(1.0 - s.lr * s.weight_decay);
  const float w1 = static_cast<float>(1.0 - s.beta1);
  const float b2 = static_cast<float>(s.beta2);
  const float w2 = static_cast<float>(1.0 - s.beta2);
  const double bc1 = 1.0 - std::pow(s.beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(s.beta2, static_cast<double>(t));
  const float step_size = static_cast<float>(s.lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float eps = static_cast<float>(s.eps);
  pool.parallel_for(n, 8192, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) {
      float pi = p[i];
      if (decay) pi *= keep;
      const float gi = g[i];
      const float mi = m[i] + w1 * (gi - m[i]);  // torch's lerp for weights < 0.5
      const float vi = v[i] * b2 + w2 * gi * gi;
      const float denom = std::sqrt(vi) / bc2_sqrt + eps;
      p[i] = pi - step_size * (mi / denom);
      m[i] = mi;
      v[i] = vi;
    }
  });
}

}  // namespace tg
