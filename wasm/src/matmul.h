// Matrix products of a Linear layer in PyTorch's layout: weight is (N,K) = [out, in], row-major.
// The contract between the model code and the blocked/threaded implementation in matmul.cpp.
#pragma once
#include <cstdint>

#include "thread_pool.h"

namespace tg {

// out: (M,N) = inp (M,K) . weight(N,K)^T + bias(N)     bias may be null. out is overwritten.
// A few rows (a KV-cache decode step's one) are summed in another order than many: the same row
// agrees to rounding between the two, not bit for bit. Either way, bit-identical for any pool.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t M,
                    int64_t K, int64_t N, ThreadPool& pool);

// out (M,N) += inp (M,K) . weight(N,K)^T: the forward product added to what out holds (LoRA's
// low-rank term on top of the base Linear's output, lora.h). Few rows as in matmul_forward.
void matmul_forward_accumulate(float* out, const float* inp, const float* weight, int64_t M,
                               int64_t K, int64_t N, ThreadPool& pool);

// Given dout (M,N), ACCUMULATES (+=) into
//   dinp    (M,K) += dout . weight          (skipped if dinp is null)
//   dweight (N,K) += dout^T . inp           (skipped if dweight is null)
//   dbias   (N)   += sum over rows of dout  (skipped if dbias is null)
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t M, int64_t K, int64_t N, ThreadPool& pool);

// dinp (M,K) = dout (M,N) . weight (N,K): matmul_backward's dinp product, OVERWRITING dinp (no
// memset first). The same bits as zeroing and accumulating, but one pass less over dinp.
void matmul_backward_input(float* dinp, const float* dout, const float* weight, int64_t M,
                           int64_t K, int64_t N, ThreadPool& pool);

// General strided product on the calling thread, for kernels that parallelise over an outer loop
// themselves (attention over (batch, head): S = Q·K^T, Y = P·V and their backward products):
//   C (M,N) = A·B (accumulate false) or C += A·B (accumulate true), where
//   A(i,p) = a[i*a_rs + p*a_cs], B(p,j) = b[p*b_rs + j*b_cs], C(i,j) = c[i*ldc + j].
// Fast when A has a unit stride (either one) and B any. One row of A (a decoded token's query) is
// summed where the operands lie, without packing: rounding may differ from the same row computed
// among others. `scratch` is ThreadPool::kScratchFloats floats owned by this thread (the third
// argument of parallel_for_scratch's fn). Never allocates.
void gemm_strided(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_rs, int64_t a_cs,
                  const float* b, int64_t b_rs, int64_t b_cs, float* c, int64_t ldc,
                  bool accumulate, float* scratch);

}  // namespace tg
