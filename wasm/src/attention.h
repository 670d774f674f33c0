// Causal multi-head self-attention on already-projected q, k, v (the projections are matmuls).
// Heads split C into H consecutive groups of D = C/H channels. Scores are scaled by 1/sqrt(D).
// The forward keeps only the log-sum-exp of each query's softmax row (B,H,T); the backward
// recomputes the probabilities from it instead of storing a T x T matrix per head.
//
// Keys (and, in the backward, values) of one head are first transposed to (D, T) in scratch, so
// the scores of a query against all its keys are D vector updates along the key axis
// (s[0..n) += q[d] * kT[d][0..n)) rather than one horizontal dot-product reduction per key.
#pragma once
#include <cmath>
#include <cstdint>

#include "thread_pool.h"
#include "vec_ops.h"

namespace tg {

// kT (D, kt_stride): kT[d][j] = x[j * x_stride + d] for j < n.
template <class F>
inline void transpose_head(F* kT, int64_t kt_stride, const F* x, int64_t x_stride, int64_t n, int64_t D) {
  for (int64_t j = 0; j < n; j++)
    for (int64_t d = 0; d < D; d++) kT[d * kt_stride + j] = x[j * x_stride + d];
}

// s[j] = (q . k_j) * scale for j < n, with the keys transposed: kT (D, kt_stride).
template <class F>
inline void head_scores(F* s, const F* q, const F* kT, int64_t kt_stride, int64_t n, int64_t D, F scale) {
  for (int64_t j = 0; j < n; j++) s[j] = 0;
  for (int64_t d = 0; d < D; d++) vec_axpy(s, q[d], kT + d * kt_stride, n);
  for (int64_t j = 0; j < n; j++) s[j] *= scale;
}

// One query against keys 0 .. n_keys-1: y (D) = softmax(scores) . v_j; returns the row's
// log-sum-exp. kT: keys transposed (D, kt_stride); v rows are v_stride apart. p: scratch (n_keys).
// The training forward and KV-cache decoding both call this, so they compute the same numbers.
template <class F>
inline F attend_row(F* y, F* p, const F* q, const F* kT, int64_t kt_stride, const F* v,
                    int64_t v_stride, int64_t n_keys, int64_t D, F scale) {
  head_scores(p, q, kT, kt_stride, n_keys, D, scale);
  F max_score = -INFINITY;
  for (int64_t j = 0; j < n_keys; j++) max_score = p[j] > max_score ? p[j] : max_score;
  const F sum = vec_exp_shifted(p, max_score, n_keys);
  const F inv = static_cast<F>(1) / sum;
  for (int64_t d = 0; d < D; d++) y[d] = 0;
  for (int64_t j = 0; j < n_keys; j++) vec_axpy(y, p[j] * inv, v + j * v_stride, D);
  return max_score + std::log(sum);
}

// Floats of scratch that attention_forward and attention_backward need: per (b, h), the head's
// keys and values transposed (2 D T) and two rows of T.
inline int64_t attention_scratch_size(int64_t B, int64_t T, int64_t C, int64_t H) {
  return B * H * (2 * (C / H) * T + 2 * T);
}

// q, k, v, y: (B,T,C); lse: (B,H,T); scratch: attention_scratch_size(B,T,C,H)
template <class F>
void attention_forward(F* y, F* lse, F* scratch, const F* q, const F* k, const F* v, int64_t B,
                       int64_t T, int64_t C, int64_t H, ThreadPool& pool) {
  const int64_t D = C / H;
  const F scale = static_cast<F>(1) / std::sqrt(static_cast<F>(D));
  pool.parallel_for(B * H, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t bh = i0; bh < i1; bh++) {
      const int64_t b = bh / H, h = bh % H;
      F* kT = scratch + bh * (2 * D * T + 2 * T);  // (D,T)
      F* p = kT + 2 * D * T;                          // (T)
      const int64_t base = b * T * C + h * D;
      transpose_head(kT, T, k + base, C, T, D);
      for (int64_t t = 0; t < T; t++)
        lse[bh * T + t] = attend_row(y + base + t * C, p, q + base + t * C, kT, T, v + base, C,
                                     t + 1, D, scale);
    }
  });
}

// Given dy (B,T,C), writes (overwrites) dq, dk, dv (B,T,C). With p_j = exp(s_j - lse) and
// dp_j = dy . v_j for one query t:  ds_j = p_j (dp_j - sum_i p_i dp_i),
//   dq_t = scale sum_j ds_j k_j,  dk_j += scale ds_j q_t,  dv_j += p_j dy_t.
// scratch: attention_scratch_size(B,T,C,H). Each (b, h) owns its channel slice of dq, dk, dv, so
// heads run in parallel.
template <class F>
void attention_backward(F* dq, F* dk, F* dv, F* scratch, const F* dy, const F* q, const F* k,
                        const F* v, const F* lse, int64_t B, int64_t T, int64_t C, int64_t H,
                        ThreadPool& pool) {
  const int64_t D = C / H;
  const F scale = static_cast<F>(1) / std::sqrt(static_cast<F>(D));
  pool.parallel_for(B * H, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t bh = i0; bh < i1; bh++) {
      const int64_t b = bh / H, h = bh % H;
      F* kT = scratch + bh * (2 * D * T + 2 * T);  // (D,T)
      F* vT = kT + D * T;                             // (D,T)
      F* p = vT + D * T;                              // (T)
      F* dp = p + T;                                  // (T)
      const int64_t base = b * T * C + h * D;
      transpose_head(kT, T, k + base, C, T, D);
      transpose_head(vT, T, v + base, C, T, D);
      for (int64_t t = 0; t < T; t++)
        for (int64_t d = 0; d < D; d++) {
          dq[base + t * C + d] = 0;
          dk[base + t * C + d] = 0;
          dv[base + t * C + d] = 0;
        }
      for (int64_t t = 0; t < T; t++) {
        const F* qt = q + base + t * C;
        const F* dyt = dy + base + t * C;
        const int64_t n = t + 1;
        head_scores(p, qt, kT, T, n, D, scale);
        head_scores(dp, dyt, vT, T, n, D, static_cast<F>(1));  // dp_j = dy_t . v_j
        vec_exp_shifted(p, lse[bh * T + t], n);                  // p_j = exp(s_j - lse)
        F dot = 0;                                               // sum_j p_j dp_j
        for (int64_t j = 0; j < n; j++) dot += p[j] * dp[j];
        F* dqt = dq + base + t * C;
        for (int64_t j = 0; j < n; j++) {
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
