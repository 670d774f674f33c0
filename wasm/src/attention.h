// Causal multi-head self-attention on already-projected q, k, v (the projections are matmuls).
// Heads split C into H consecutive groups of D = C/H channels. Scores are scaled by 1/sqrt(D).
// The forward keeps only the log-sum-exp of each query's softmax row (B,H,T); the backward
// recomputes the probabilities from it instead of storing a T x T matrix per head.
//
// Training works on blocks of up to kAttnRows query rows of one (batch, head), as small matrix
// products (gemm_strided, matmul.h): S = Q K^T, then the masked softmax row by row, then Y = P V;
// the backward likewise. Only one block's scores live at a time, in per-(b, h) scratch.
// The forward also serves KV-cache decoding: `past` cached positions precede the T new queries.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "matmul.h"
#include "thread_pool.h"
#include "vec_ops.h"

namespace tg {

// 32 rows: a block computes the scores of all its keys, masked ones included, so smaller blocks
// waste less of the causal triangle (T = 128: 62.5% of T x T computed, against 75% at 64 rows); at
// 16 rows the extra, smaller products cost more than they save (measured in WebAssembly, relaxed
// build: 32 rows 1.0-1.26x faster than 64 at small..xl, 16 rows 0.82-1.0x of 32).
constexpr int64_t kAttnRows = 32;

// Flops (4 T Tk D a head: scores and P V) below which heads are not split across the pool.
constexpr int64_t kMinAttentionFlopsPerChunk = int64_t(1) << 13;

// C (M,N) = A B (or += when accumulate), A(i,p) = a[i*a_rs + p*a_cs], B(p,j) = b[p*b_rs + j*b_cs].
// Any type: plain loops (the double twins of the finite-difference test); float: gemm_strided.
template <class F>
inline void head_gemm(int64_t M, int64_t N, int64_t K, const F* a, int64_t a_rs, int64_t a_cs,
                      const F* b, int64_t b_rs, int64_t b_cs, F* c, int64_t ldc, bool accumulate,
                      float*) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      F s = accumulate ? c[i * ldc + j] : F(0);
      for (int64_t p = 0; p < K; p++) s += a[i * a_rs + p * a_cs] * b[p * b_rs + j * b_cs];
      c[i * ldc + j] = s;
    }
}

inline void head_gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_rs, int64_t a_cs,
                      const float* b, int64_t b_rs, int64_t b_cs, float* c, int64_t ldc,
                      bool accumulate, float* gemm_scratch) {
  gemm_strided(M, N, K, a, a_rs, a_cs, b, b_rs, b_cs, c, ldc, accumulate, gemm_scratch);
}

// Scales a row of n raw scores in place and returns its maximum (the softmax shift).
template <class F>
inline F scale_scores(F* s, int64_t n, F scale) {
  F max_score = -INFINITY;
  for (int64_t j = 0; j < n; j++) {
    s[j] *= scale;
    max_score = s[j] > max_score ? s[j] : max_score;
  }
  return max_score;
}

// Floats of scratch attention_forward/backward need: two (kAttnRows, T) score blocks per (b, h).
inline int64_t attention_scratch_size(int64_t B, int64_t T, int64_t C, int64_t H) {
  (void)C;
  return B * H * 2 * (T < kAttnRows ? T : kAttnRows) * T;
}

// q, y: (B,T,C); lse: (B,H,T); k, v: (B,past+T,C), the keys and values of positions 0..past+T-1,
// the last T of them the new queries' own; query t (position past + t) sees keys 0..past+t.
// scratch: attention_scratch_size(B, T, C, H) for the training shapes; with past > 0 (decoding,
// B = 1) 2 H min(T, kAttnRows) (past + T) floats, which a training arena (past + T <= ctx) holds.
template <class F>
void attention_forward(F* y, F* lse, F* scratch, const F* q, const F* k, const F* v, int64_t B,
                       int64_t T, int64_t C, int64_t H, ThreadPool& pool, int64_t past = 0) {
  const int64_t D = C / H, R = T < kAttnRows ? T : kAttnRows, Tk = past + T;
  const F scale = static_cast<F>(1) / std::sqrt(static_cast<F>(D));
  // A decoded token's heads are a few microseconds of work in all: split across threads, the
  // claims and the wait for the last one cost more than they save. A head of a training block
  // (T, Tk >= 32, D >= 16) is always worth a chunk of its own.
  const int64_t min_heads = std::max<int64_t>(1, kMinAttentionFlopsPerChunk / (4 * T * Tk * D));
  pool.parallel_for_scratch(B * H, min_heads, [&](int64_t i0, int64_t i1, float* gemm_scratch) {
    for (int64_t bh = i0; bh < i1; bh++) {
      const int64_t b = bh / H, h = bh % H;
      const int64_t q_base = b * T * C + h * D, k_base = b * Tk * C + h * D;
      F* S = scratch + bh * 2 * R * Tk;  // (R, Tk): scores, then probabilities
      for (int64_t t0 = 0; t0 < T; t0 += R) {
        // queries t0.., keys 0..n-1
        const int64_t rows = T - t0 < R ? T - t0 : R, n = past + t0 + rows;
        head_gemm(rows, n, D, q + q_base + t0 * C, C, 1, k + k_base, 1, C, S, Tk, false,
                  gemm_scratch);
        for (int64_t i = 0; i < rows; i++) {  // query t = t0 + i sees keys 0..past+t
          F* s = S + i * Tk;
          const int64_t keys = past + t0 + i + 1;
          const F max_score = scale_scores(s, keys, scale);
          const F sum = vec_exp_shifted(s, max_score, keys);
          const F inv = static_cast<F>(1) / sum;
          for (int64_t j = 0; j < keys; j++) s[j] *= inv;
          for (int64_t j = keys; j < n; j++) s[j] = 0;  // the causal mask
          lse[bh * T + t0 + i] = max_score + std::log(sum);
        }
        head_gemm(rows, D, n, S, Tk, 1, v + k_base, C, 1, y + q_base + t0 * C, C, false,
                  gemm_scratch);
      }
    }
  });
}

// Given dy (B,T,C), writes (overwrites) dq, dk, dv (B,T,C). With P = exp(S - lse) (masked) and
// dP = dY V^T, for each query row t:  dS_tj = P_tj (dP_tj - sum_i P_ti dP_ti) * scale, then
//   dQ = dS K,  dK = dS^T Q,  dV = P^T dY.
// Each (b, h) owns its channel slice of dq, dk, dv, so heads run in parallel.
template <class F>
void attention_backward(F* dq, F* dk, F* dv, F* scratch, const F* dy, const F* q, const F* k,
                        const F* v, const F* lse, int64_t B, int64_t T, int64_t C, int64_t H,
                        ThreadPool& pool) {
  const int64_t D = C / H, R = T < kAttnRows ? T : kAttnRows;
  const F scale = static_cast<F>(1) / std::sqrt(static_cast<F>(D));
  pool.parallel_for_scratch(B * H, 1, [&](int64_t i0, int64_t i1, float* gemm_scratch) {
    for (int64_t bh = i0; bh < i1; bh++) {
      const int64_t b = bh / H, h = bh % H;
      const int64_t base = b * T * C + h * D;
      F* P = scratch + bh * 2 * R * T;  // (R, T)
      F* dS = P + R * T;                // (R, T): dP, then dS
      for (int64_t t = 0; t < T; t++)
        for (int64_t d = 0; d < D; d++) {
          dk[base + t * C + d] = 0;
          dv[base + t * C + d] = 0;
        }
      for (int64_t t0 = 0; t0 < T; t0 += R) {
        const int64_t rows = T - t0 < R ? T - t0 : R, n = t0 + rows;
        head_gemm(rows, n, D, q + base + t0 * C, C, 1, k + base, 1, C, P, T, false, gemm_scratch);
        head_gemm(rows, n, D, dy + base + t0 * C, C, 1, v + base, 1, C, dS, T, false, gemm_scratch);
        for (int64_t i = 0; i < rows; i++) {
          F* p = P + i * T;
          F* ds = dS + i * T;
          const int64_t keys = t0 + i + 1;
          for (int64_t j = 0; j < keys; j++) p[j] *= scale;
          vec_exp_shifted(p, lse[bh * T + t0 + i], keys);  // p_j = exp(s_j - lse)
          F dot = 0;
          for (int64_t j = 0; j < keys; j++) dot += p[j] * ds[j];
          for (int64_t j = 0; j < keys; j++) ds[j] = p[j] * (ds[j] - dot) * scale;
          for (int64_t j = keys; j < n; j++) p[j] = ds[j] = 0;  // the causal mask
        }
        head_gemm(rows, D, n, dS, T, 1, k + base, C, 1, dq + base + t0 * C, C, false, gemm_scratch);
        head_gemm(n, D, rows, dS, 1, T, q + base + t0 * C, C, 1, dk + base, C, true, gemm_scratch);
        head_gemm(n, D, rows, P, 1, T, dy + base + t0 * C, C, 1, dv + base, C, true, gemm_scratch);
      }
    }
  });
}

}  // namespace tg
