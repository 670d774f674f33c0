// LayerNorm over the last dimension, forward and backward. Templated on the float type so the
// finite-difference test can run the very same code in double.
#pragma once
#include <cmath>
#include <cstdint>

#include "thread_pool.h"

namespace tg {

// One row: out = (x - mean) * rstd * w + b; returns mean and rstd. x, out: (C)
template <class F>
inline void layernorm_row(F* out, F* mean_out, F* rstd_out, const F* x, const F* w, const F* b,
                          int64_t C, double eps) {
  F mean = 0;
  for (int64_t i = 0; i < C; i++) mean += x[i];
  mean /= static_cast<F>(C);
  F var = 0;  // biased variance, as PyTorch's LayerNorm
  for (int64_t i = 0; i < C; i++) {
    F d = x[i] - mean;
    var += d * d;
  }
  var /= static_cast<F>(C);
  F rstd = static_cast<F>(1) / std::sqrt(var + static_cast<F>(eps));
  for (int64_t i = 0; i < C; i++) out[i] = (x[i] - mean) * rstd * w[i] + b[i];
  *mean_out = mean;
  *rstd_out = rstd;
}

// out: (N,C) = LN(inp: (N,C)) with gain w (C), bias b (C); keeps mean, rstd: (N) for the backward.
template <class F>
void layernorm_forward(F* out, F* mean, F* rstd, const F* inp, const F* w, const F* b, int64_t N,
                       int64_t C, double eps, ThreadPool& pool) {
  pool.parallel_for(N, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++)
      layernorm_row(out + r * C, mean + r, rstd + r, inp + r * C, w, b, C, eps);
  });
}

// Given dout (N,C): dinp (N,C) += ..., dw (C) += sum_r dout * xhat, db (C) += sum_r dout; dw and
// db both null: d inp alone (a frozen LayerNorm, LoRA mode).
// With xhat = (x - mean) * rstd and dxhat = dout * w:
//   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
template <class F>
void layernorm_backward(F* dinp, F* dw, F* db, const F* dout, const F* inp, const F* w,
                        const F* mean, const F* rstd, int64_t N, int64_t C, ThreadPool& pool) {
  pool.parallel_for(N, 16, [&](int64_t r0, int64_t r1) {  // rows are independent for dinp
    for (int64_t r = r0; r < r1; r++) {
      const F* x = inp + r * C;
      const F* g = dout + r * C;
      F* dx = dinp + r * C;
      F m = mean[r], s = rstd[r];
      F sum_dxhat = 0, sum_dxhat_xhat = 0;
      for (int64_t i = 0; i < C; i++) {
        F dxhat = g[i] * w[i];
        sum_dxhat += dxhat;
        sum_dxhat_xhat += dxhat * (x[i] - m) * s;
      }
      F mean_dxhat = sum_dxhat / static_cast<F>(C);
      F mean_dxhat_xhat = sum_dxhat_xhat / static_cast<F>(C);
      for (int64_t i = 0; i < C; i++) {
        F xhat = (x[i] - m) * s;
        dx[i] += s * (g[i] * w[i] - mean_dxhat - xhat * mean_dxhat_xhat);
      }
    }
  });
  if (dw == nullptr && db == nullptr) return;
  // Parameter grads sum over rows: split by channel so each sum has one owner (and one order).
  pool.parallel_for(C, 16, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < N; r++) {
      const F* x = inp + r * C;
      const F* g = dout + r * C;
      F m = mean[r], s = rstd[r];
      for (int64_t i = c0; i < c1; i++) {
        dw[i] += g[i] * (x[i] - m) * s;
        db[i] += g[i];
      }
    }
  });
}

}  // namespace tg
