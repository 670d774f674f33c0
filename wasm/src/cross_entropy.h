// Fused softmax + cross-entropy, mean over the N = B*T positions.
#pragma once
#include <cmath>
#include <cstdint>

#include "thread_pool.h"

namespace tg {

// logits: (N,V); targets: (N). Writes each row's log-sum-exp (lse, N) and loss (losses, N) in
// double (exps in the logits' type, their sum and the log in double); returns the mean. Rows are
// summed in order after the parallel part, so the result does not depend on thread count.
template <class F>
double cross_entropy_forward(double* lse, double* losses, const F* logits, const int32_t* targets,
                             int64_t N, int64_t V, ThreadPool& pool) {
  pool.parallel_for(N, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
      const F* l = logits + r * V;
      double mx = -INFINITY;
      for (int64_t i = 0; i < V; i++) mx = l[i] > mx ? static_cast<double>(l[i]) : mx;
      double sum = 0;
      const F fmx = static_cast<F>(mx);  // mx is one of the logits: exact
      for (int64_t i = 0; i < V; i++) sum += static_cast<double>(std::exp(l[i] - fmx));
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
  const F inv_n = static_cast<F>(1.0 / static_cast<double>(N));
  pool.parallel_for(N, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
      const F* l = logits + r * V;
      F* d = dlogits + r * V;
      const F row_lse = static_cast<F>(lse[r]);
      for (int64_t i = 0; i < V; i++) d[i] = std::exp(l[i] - row_lse) * inv_n;
      d[targets[r]] -= inv_n;
    }
  });
}

}  // namespace tg
