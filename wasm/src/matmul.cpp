// Placeholder: plain loops, correct but slow. The register- and cache-blocked version replaces it.
#include "matmul.h"

namespace tg {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t M, int64_t K, int64_t N, ThreadPool&) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      float acc = bias ? bias[n] : 0.0f;
      for (int64_t k = 0; k < K; k++) acc += inp[m * K + k] * weight[n * K + k];
      out[m * N + n] = acc;
    }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int64_t M, int64_t K, int64_t N,
                     ThreadPool&) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      float d = dout[m * N + n];
      if (dbias) dbias[n] += d;
      for (int64_t k = 0; k < K; k++) {
        if (dinp) dinp[m * K + k] += d * weight[n * K + k];
        if (dweight) dweight[n * K + k] += d * inp[m * K + k];
      }
    }
}

}  // namespace tg
