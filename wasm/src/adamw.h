// Global-norm gradient clipping and AdamW (docs/determinism.md "The training step"), float32 like
// PyTorch's single-tensor AdamW, which it mirrors operation for operation.
#pragma once
#include <cstdint>

#include "thread_pool.h"

namespace tg {

struct AdamWSettings {
  double lr, beta1, beta2, eps, weight_decay, grad_clip;
};

// Blocks of the fixed size below are summed in parallel, then in order: the norm does not depend on
// the thread count. partials: (norm_partials_count(n)) doubles of scratch.
constexpr int64_t kNormBlock = 1 << 14;
inline int64_t norm_partials_count(int64_t n) { return (n + kNormBlock - 1) / kNormBlock; }
double grad_global_norm(const float* g, int64_t n, double* partials, ThreadPool& pool);
// The sum of squares grad_global_norm takes the root of (the training view's per-tensor sums).
double sum_squares(const float* x, int64_t n, double* partials, ThreadPool& pool);

// coef = min(1, grad_clip / (norm + 1e-6)); g *= coef (PyTorch's clip_grad_norm_). Returns coef.
double clip_gradients(float* g, int64_t n, double norm, double grad_clip, ThreadPool& pool);

// One AdamW update of a tensor (n elements); t = the step after incrementing (starts at 1).
// decay: apply decoupled weight decay (2-D+ tensors only).
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, bool decay,
                  const AdamWSettings& s, int64_t t, ThreadPool& pool);
// The same update (bit for bit), measured: returns the sum over the tensor of (p_after -
// p_before)^2, in blocks of kNormBlock summed in order (the same for any thread count). partials:
// as grad_global_norm's.
double adamw_update_measured(float* p, const float* g, float* m, float* v, int64_t n, bool decay,
                             const AdamWSettings& s, int64_t t, double* partials, ThreadPool& pool);

}  // namespace tg
