// Causal multi-head self-attention on already-projected q, k, v (the projections are matmuls).
// Heads split C into H consecutive groups of D = C/H channels. Scores are scaled by 1/sqrt(D).
// The forward keeps only the log-sum-exp of each query's softmax row (B,H,T); the backward
// recomputes the probabilities from it instead of storing a T x T matrix per head.
#pragma once
#include <cmath>
#include <cstdint>

#include "thread_pool.h"
#include "vec_ops.h"

namespace tg {

// One query against keys 0 .. n_keys-1: y (D) = softmax(q.k_j * scale) . v_j; returns the row's
// log-sum-exp. k, v rows are `stride` apart (C for (B,T,C) tensors and for the KV cache alike).
// p: scratch (n_keys). Training forward and KV-cache decoding both call this, so they agree.
template <class F>
inline F attend_row(F* y, F* p, const F* q, const F* k, const F* v, int64_t n_keys, int64_t stride,
                    int64_t D, F scale) {
  F max_score = -INFINITY;
  for (int64_t j = 0; j < n_keys; j++) {
    const F s = vec_dot(q, k + j * stride, D) * scale;
    p[j] = s;
    if (s > max_score) max_score = s;
  }
  const F sum = vec_exp_shifted(p, max_score, n_keys);
  F inv = static_cast<F>(1) / sum;
  for (int64_t d = 0; d < D; d++) y[d] = 0;
  for (int64_t j = 0; j < n_keys; j++) vec_axpy(y, p[j] * inv, v + j * stride, D);
  return max_score + std::log(sum);
}

// q, k, v, y: (B,T,C); lse: (B,H,T); scratch: (B*H*T)
template <class F>
void attention_forward(F* y, F* lse, F* scratch, const F* q, const F* k, const F* v, int64_t B,
                       int64_t T, int64_t C, int64_t H, ThreadPool& pool) {
  const int64_t D = C / H;
  const F scale = static_cast<F>(1) / std::sqrt(static_cast<F>(D));
  pool.parallel_for(B * H, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t bh = i0; bh < i1; bh++) {
      int64_t b = bh / H, h = bh % H;
      F* p = scratch + bh * T;
      const int64_t base = b * T * C + h * D;
      for (int64_t t = 0; t < T; t++)
        lse[bh * T + t] = attend_row(y + base + t * C, p, q + base + t * C, k + base, v + base,
                                     t + 1, C, D, scale);
    }
  });
}

// Given dy (B,T,C), writes (overwrites) dq, dk, dv (B,T,C). With p_j = exp(s_j - lse) and
// dp_j = dy . v_j for one query t:  ds_j = p_j (dp_j - sum_i p_i dp_i),
//   dq_t = scale sum_j ds_j k_j,  dk_j += scale ds_j q_t,  dv_j += p_j dy_t.
// scratch: (B*H*2T). Each (b, h) owns its channel slice of dq, dk, dv, so heads run in parallel.
template <class F>
void attention_backward(F* dq, F* dk, F* dv, F* scratch, const F* dy, const F* q, const F* k,
                        const F* v, const F* lse, int64_t B, int64_t T, int64_t C, int64_t H,
                        ThreadPool& pool) {
  const int64_t D = C / H;
  const F scale = static_cast<F>(1) / std::sqrt(static_cast<F>(D));
  pool.parallel_for(B * H, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t bh = i0; bh < i1; bh++) {
      int64_t b = bh / H, h = bh % H;
      F* p = scratch + bh * 2 * T;
      F* dp = p + T;
      const int64_t base = b * T * C + h * D;
      for (int64_t t = 0; t < T; t++)
        for (int64_t d = 0; d < D; d++) {
          dq[base + t * C + d] = 0;
          dk[base + t * C + d] = 0;
          dv[base + t * C + d] = 0;
        }
      for (int64_t t = 0; t < T; t++) {
        const F* qt = q + base + t * C;
        const F* dyt = dy + base + t * C;
        const F row_lse = lse[bh * T + t];
        F dot = 0;  // sum_j p_j dp_j
        for (int64_t j = 0; j <= t; j++) {
          p[j] = vec_dot(qt, k + base + j * C, D) * scale;
          dp[j] = vec_dot(dyt, v + base + j * C, D);
        }
        vec_exp_shifted(p, row_lse, t + 1);  // p_j = exp(s_j - lse)
        for (int64_t j = 0; j <= t; j++) dot += p[j] * dp[j];
        F* dqt = dq + base + t * C;
        for (int64_t j = 0; j <= t; j++) {
          const F ds = p[j] * (dp[j] - dot) * scale;
          vec_axpy(dqt, ds, k + base + j * C, D);
          vec_axpy(dk + base + j * C, ds, qt, D);
          vec_axpy(dv + base + j * C, p[j], dyt, D);
        }
      }
    }
  });
}

}  // namespace tg
