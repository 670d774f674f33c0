// extern "C" entry points over matmul.h and thread_pool.h, so that tests/wasm/test_native_matmul.py
// and bench/cpu/native.py can drive the kernels through ctypes from a small shared library.
#include <chrono>

#include "../../wasm/src/matmul.h"
#include "../../wasm/src/simd.h"
#include "../../wasm/src/thread_pool.h"

extern "C" {

void* tgmm_pool_create(int n_threads) { return new tg::ThreadPool(n_threads); }
void tgmm_pool_destroy(void* pool) { delete static_cast<tg::ThreadPool*>(pool); }
int tgmm_pool_size(void* pool) { return static_cast<tg::ThreadPool*>(pool)->size(); }
const char* tgmm_simd_name() { return tg::simd::kSimdName; }

void tgmm_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t M,
                  int64_t K, int64_t N, void* pool) {
  tg::matmul_forward(out, inp, weight, bias, M, K, N, *static_cast<tg::ThreadPool*>(pool));
}

void tgmm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                   const float* weight, int64_t M, int64_t K, int64_t N, void* pool) {
  tg::matmul_backward(dinp, dweight, dbias, dout, inp, weight, M, K, N,
                      *static_cast<tg::ThreadPool*>(pool));
}

// gemm_strided on the calling thread, with the scratch of a one-thread pool.
void tgmm_gemm_strided(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_rs, int64_t a_cs,
                       const float* b, int64_t b_rs, int64_t b_cs, float* c, int64_t ldc,
                       int accumulate, void* pool) {
  static_cast<tg::ThreadPool*>(pool)->parallel_for_scratch(
      1, 1, [&](int64_t, int64_t, float* scratch) {
        tg::gemm_strided(M, N, K, a, a_rs, a_cs, b, b_rs, b_cs, c, ldc, accumulate != 0, scratch);
      });
}

// y = exp(x) (fn 0) or tanh(x) (fn 1) through simd.h, a vector at a time (the tail padded).
void tgmm_simd_apply(const float* x, float* y, int64_t n, int fn) {
  using namespace tg::simd;
  for (int64_t i = 0; i < n; i += kWidth) {
    float in[kWidth] = {0}, out[kWidth];
    for (int64_t j = 0; j < kWidth && i + j < n; j++) in[j] = x[i + j];
    store(out, fn == 0 ? tg::simd::exp(load(in)) : tg::simd::tanh(load(in)));
    for (int64_t j = 0; j < kWidth && i + j < n; j++) y[i + j] = out[j];
  }
}

// Runs forward then backward `reps` times (for timing without Python overhead per call).
void tgmm_repeat_step(int reps, float* out, const float* inp, const float* weight,
                      const float* bias, float* dinp, float* dweight, float* dbias,
                      const float* dout, int64_t M, int64_t K, int64_t N, void* pool) {
  tg::ThreadPool& p = *static_cast<tg::ThreadPool*>(pool);
  for (int r = 0; r < reps; r++) {
    tg::matmul_forward(out, inp, weight, bias, M, K, N, p);
    tg::matmul_backward(dinp, dweight, dbias, dout, inp, weight, M, K, N, p);
  }
}

// Counts how many items each of the pool's chunks saw, to test the parallel_for contract:
// counts[i] += 1 for every i in [0, n) (disjoint and covering means every count ends at 1).
void tgmm_pool_cover(void* pool, int64_t n, int64_t min_chunk, int32_t* counts, int64_t* n_chunks) {
  tg::ThreadPool& p = *static_cast<tg::ThreadPool*>(pool);
  *n_chunks = 0;
  int64_t chunk_count[64] = {0};
  p.parallel_for_scratch(n, min_chunk, [&](int64_t begin, int64_t end, float* scratch) {
    for (int64_t i = begin; i < end; i++) counts[i] += 1;
    scratch[0] = 1.0f;  // the scratch must be writable
    scratch[tg::ThreadPool::kScratchFloats - 1] = 1.0f;
    __atomic_fetch_add(&chunk_count[0], 1, __ATOMIC_RELAXED);
  });
  *n_chunks = chunk_count[0];
}

// Seconds per parallel_for of `n` trivial items (the pool's fork-join overhead), over `iters`
// calls.
double tgmm_pool_roundtrip(void* pool, int64_t n, int64_t iters) {
  tg::ThreadPool& p = *static_cast<tg::ThreadPool*>(pool);
  volatile int64_t sink = 0;
  auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < iters; i++)
    p.parallel_for(n, 1, [&](int64_t b, int64_t e) { sink = sink + (e - b); });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
         double(iters);
}

}  // extern "C"
