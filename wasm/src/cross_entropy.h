// Fused softmax + cross-entropy, mean over the N = B*T positions.
#pragma once
#include <cmath>
#include <cstdint>

#include "thread_pool.h"

namespace tg {

// logits: (N,V); targets: (N). Writes each row's log-sum-exp (lse, N) and loss (losses, N) in double
// (the softmax of float logits is taken in double, as python_ref's evaluation does); returns the mean.
// Rows are summed in order after the parallel part, so the result does not depend on thread count.
template <class F>
double cross_entropy_forward(double* lse, double* losses, const F* logits, const int32_t* targets,
                             int64_t N, int64_t V, ThreadPool& pool) {
  pool.parallel_for(N, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
      const F* l = logits + r * V;
      double mx = -INFINITY;
      for (int64_t i = 0; i < V; i++) mx = l[i] > mx ? static_cast<double>(l[i]) : mx;
      double sum = 0;
      for (int64_t i = 0; i < V; i++) sum += std::exp(static_cast<double>(l[i]) - mx);
      lse[r] = mx + std::log(sum);
      losses[r] = lse[r] - static_cast<double>(l[targets[r]]);
    }
  });
  double total = 0;
  for (int64_t r = 0; r < N; r++) total += losses[r];
  return total / static_cast<double>(N);
}

// dlogits (N,V) = (softmax(logits) - onehot(target)) / N, overwritten; may alias logits.
template <class F>
void cross_entropy_backward(F* dlogits, const F* logits, const double* lse, const int32_t* targets,
                            int64_t N, int64_t V, ThreadPool& pool) {
  const double inv_n = 1.0 / static_cast<double>(N);
  pool.parallel_for(N, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
      const F* l = logits + r * V;
      F* d = dlogits + r * V;
      for (int64_t i = 0; i < V; i++) {
        double p = std::exp(static_cast<double>(l[i]) - lse[r]);
        d[i] = static_cast<F>((p - (i == targets[r] ? 1.0 : 0.0)) * inv_n);
      }
    }
  });
}

}  // namespace tg
