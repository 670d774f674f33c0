#include "lora.h"

#include <cstring>

#include "matmul.h"

namespace tg {

void lora_forward(float* y, float* us, float* rm, const float* x, const float* A, const float* B,
                  int64_t M, int64_t K, int64_t N, int64_t r, float s, ThreadPool& pool) {
  matmul_forward(rm, A, x, nullptr, r, K, M, pool);  // (r,M) = A (r,K) · x^T = (x A^T)^T
  for (int64_t m = 0; m < M; m++)
    for (int64_t i = 0; i < r; i++) us[m * r + i] = s * rm[i * M + m];
  matmul_forward_accumulate(y, us, B, M, r, N, pool);  // (M,N) += us (M,r) · B^T, B: (N,r)
}

void lora_backward(float* dx, float* dA, float* dB, float* du, float* rm, float* rn,
                   const float* dy, const float* x, const float* us, const float* A, const float* B,
                   int64_t M, int64_t K, int64_t N, int64_t r, float s, ThreadPool& pool) {
  // dB^T (r,N) = us^T (r,M) · dy (M,N): the dweight product of a Linear dy -> us with weight dB^T
  std::memset(rn, 0, static_cast<size_t>(r * N) * 4);
  matmul_backward(nullptr, rn, nullptr, us, dy, nullptr, M, N, r, pool);
  for (int64_t n = 0; n < N; n++)
    for (int64_t i = 0; i < r; i++) dB[n * r + i] += rn[i * N + n];
  // du (M,r) = s · dy (M,N) · B (N,r), as du^T (r,M) = B^T (r,N) · dy^T
  for (int64_t n = 0; n < N; n++)
    for (int64_t i = 0; i < r; i++) rn[i * N + n] = B[n * r + i];
  matmul_forward(rm, rn, dy, nullptr, r, N, M, pool);
  for (int64_t m = 0; m < M; m++)
    for (int64_t i = 0; i < r; i++) du[m * r + i] = s * rm[i * M + m];
  // dA (r,K) += du^T (r,M) · x (M,K), dx (M,K) += du (M,r) · A (r,K): the Linear x -> u of weight A
  matmul_backward(dx, dA, nullptr, du, x, A, M, K, r, pool);
}

void lora_merge(float* W, const float* A, const float* B, float* sB, int64_t N, int64_t K,
                int64_t r, float sign_scale, ThreadPool& pool) {
  for (int64_t i = 0; i < N * r; i++) sB[i] = sign_scale * B[i];
  // W (N,K) += sB (N,r) · A (r,K): matmul_backward's dinp product with dout = sB, weight = A
  matmul_backward(W, nullptr, nullptr, sB, nullptr, A, N, K, r, pool);
}

}  // namespace tg
