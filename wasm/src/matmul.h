// Matrix products of a Linear layer in PyTorch's layout: weight is (N,K) = [out, in], row-major.
// The contract between the model code and the blocked/threaded implementation in matmul.cpp.
#pragma once
#include <cstdint>

#include "thread_pool.h"

namespace tg {

// out: (M,N) = inp (M,K) . weight(N,K)^T + bias(N)     bias may be null. out is overwritten.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t M, int64_t K, int64_t N, ThreadPool& pool);

// Given dout (M,N), ACCUMULATES (+=) into
//   dinp    (M,K) += dout . weight          (skipped if dinp is null)
//   dweight (N,K) += dout^T . inp           (skipped if dweight is null)
//   dbias   (N)   += sum over rows of dout  (skipped if dbias is null)
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int64_t M, int64_t K, int64_t N,
                     ThreadPool& pool);

}  // namespace tg
