// LoRA on one Linear layer (docs/format.md, "LoRA adapter file"), forward and backward side by
// side:
//   y = x W^T + b + s · (x A^T) B^T,    s = alpha / r,
// with A: (r,K) = [r, in] and B: (N,r) = [out, r], the [out, in] convention of the weight W: (N,K)
// they adapt. W and b are frozen: the backward gives the adapters' gradients and d x, never d W.
// Shapes: M rows (B·T), K = in, N = out, r = rank. Every product goes through matmul.h's contract,
// so the results are bit-identical for any thread count, and nothing allocates (the caller owns
// every buffer: the model's arena).
#pragma once
#include <cstdint>

#include "thread_pool.h"

namespace tg {

// Forward, after the base product has written y (M,N) = x W^T + b:
//   us (M,r)  = s · (x (M,K) · A^T)      overwritten; kept for the backward (d B needs it)
//   y  (M,N) += us · B^T
// Same function as PyTorch's y + s · ((x A^T) B^T) (python_ref/lora.py); with s a power of two (the
// defaults, alpha = 2r) the same products, otherwise one rounding apart. x A^T is computed as
// (A x^T)^T: r rows of A against the M rows of x is matmul's few-rows dot-product form (r <= 8),
// where M rows against r columns would fill a register tile a quarter. rm: (r,M) scratch.
void lora_forward(float* y, float* us, float* rm, const float* x, const float* A, const float* B,
                  int64_t M, int64_t K, int64_t N, int64_t r, float s, ThreadPool& pool);

// Backward, given dy (M,N) = dL/dy and the forward's x (M,K), us (M,r). ACCUMULATES (+=) into
//   dB (N,r) += dy^T · us                            (= s · dy^T · (x A^T))
//   dA (r,K) += du^T · x       with du = s · dy · B  (du (M,r): scratch, overwritten)
//   dx (M,K) += du · A                               (skipped if dx is null: nothing below needs
//   it)
// As in the forward, the two products over dy with r outputs are taken from the side where r is
// the row count: dB^T = us^T dy and du^T = B^T dy^T. rm: (r,M) and rn: (r,N) scratch.
void lora_backward(float* dx, float* dA, float* dB, float* du, float* rm, float* rn,
                   const float* dy, const float* x, const float* us, const float* A, const float* B,
                   int64_t M, int64_t K, int64_t N, int64_t r, float s, ThreadPool& pool);

// Merge (sign_scale = +s) or unmerge (sign_scale = -s): W (N,K) += sign_scale · B (N,r) · A (r,K).
// sB: (N,r) scratch. Unmerging subtracts the very product merging added: W comes back up to one
// float32 rounding of each add and subtract.
void lora_merge(float* W, const float* A, const float* B, float* sB, int64_t N, int64_t K,
                int64_t r, float sign_scale, ThreadPool& pool);

}  // namespace tg
