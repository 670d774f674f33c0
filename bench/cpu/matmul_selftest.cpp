// A self-contained check of matmul.h, thread_pool.h and simd.h's exp/tanh for builds that Python
// cannot load through ctypes (the Emscripten ones, run under Node): forward, both backward products
// and gemm_strided against double-precision loops on awkward shapes, with 1 and 2 threads where the
// build has threads. Prints the back end and the max relative errors; exit status 1 on a failure.
//   scripts/em++.sh -O2 -msimd128 -pthread -sPTHREAD_POOL_SIZE=2 -Iwasm/src
//     bench/cpu/matmul_selftest.cpp wasm/src/matmul.cpp wasm/src/thread_pool.cpp -o t.js
//   node t.js
// (bench/wasm/run_matmul_selftest.sh runs the scalar, SIMD, relaxed-SIMD and threads builds.)
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "matmul.h"
#include "simd.h"
#include "thread_pool.h"

namespace {

uint64_t rng_state = 12345;
float next_uniform() {  // in [-1, 1)
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return float((rng_state >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0);
}
std::vector<float> random_vector(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = next_uniform();
  return v;
}

double rel_err(const std::vector<float>& got, const std::vector<double>& ref) {
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < ref.size(); i++) {
    worst = std::fmax(worst, std::fabs(got[i] - ref[i]));
    scale = std::fmax(scale, std::fabs(ref[i]));
  }
  return worst / scale;
}

bool check_linear(int64_t M, int64_t K, int64_t N, tg::ThreadPool& pool) {
  auto x = random_vector(M * K), w = random_vector(N * K), b = random_vector(N),
       d = random_vector(M * N);
  auto dx = random_vector(M * K), dw = random_vector(N * K), db = random_vector(N);
  std::vector<double> out_ref(size_t(M * N)), dx_ref(dx.begin(), dx.end()),
      dw_ref(dw.begin(), dw.end()), db_ref(db.begin(), db.end());
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double acc = b[n], g = d[m * N + n];
      for (int64_t k = 0; k < K; k++) {
        acc += double(x[m * K + k]) * w[n * K + k];
        dx_ref[m * K + k] += g * w[n * K + k];
        dw_ref[n * K + k] += g * x[m * K + k];
      }
      out_ref[m * N + n] = acc;
      db_ref[n] += g;
    }
  std::vector<float> out(size_t(M * N));
  tg::matmul_forward(out.data(), x.data(), w.data(), b.data(), M, K, N, pool);
  tg::matmul_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), M, K, N, pool);
  double e[4] = {rel_err(out, out_ref), rel_err(dx, dx_ref), rel_err(dw, dw_ref),
                 rel_err(db, db_ref)};
  std::printf(
      "threads=%d M,K,N=%lld,%lld,%lld max rel err out=%.2e dinp=%.2e dweight=%.2e dbias=%.2e\n",
      pool.size(), (long long)M, (long long)K, (long long)N, e[0], e[1], e[2], e[3]);
  return e[0] < 1e-5 && e[1] < 1e-5 && e[2] < 1e-5 && e[3] < 1e-5;
}

bool check_strided(tg::ThreadPool& pool) {
  // S = Q K^T for one head: Q, K (T, C) with the head's D columns at offset D.
  const int64_t T = 37, C = 24, D = 8;
  auto q = random_vector(T * C), k = random_vector(T * C);
  std::vector<float> s(size_t(T * T));
  std::vector<double> ref(size_t(T * T));
  for (int64_t i = 0; i < T; i++)
    for (int64_t j = 0; j < T; j++) {
      double acc = 0;
      for (int64_t p = 0; p < D; p++) acc += double(q[i * C + D + p]) * k[j * C + D + p];
      ref[i * T + j] = acc;
    }
  pool.parallel_for_scratch(1, 1, [&](int64_t, int64_t, float* scratch) {
    tg::gemm_strided(T, T, D, q.data() + D, C, 1, k.data() + D, 1, C, s.data(), T, false, scratch);
  });
  double e = rel_err(s, ref);
  std::printf("gemm_strided Q.K^T max rel err %.2e\n", e);
  return e < 1e-5;
}

bool check_exp_tanh() {
  using namespace tg::simd;
  double exp_err = 0, tanh_err = 0;
  float in[kWidth], out[kWidth];
  for (int i = 0; i < 20000; i++) {
    for (int j = 0; j < kWidth; j++)
      in[j] = -87.0f + 175.0f * float(i * kWidth + j) / (20000.0f * kWidth);
    store(out, tg::simd::exp(load(in)));
    for (int j = 0; j < kWidth; j++)
      exp_err =
          std::fmax(exp_err, std::fabs(out[j] - std::exp(double(in[j]))) / std::exp(double(in[j])));
    for (int j = 0; j < kWidth; j++) in[j] *= 0.1f;
    store(out, tg::simd::tanh(load(in)));
    for (int j = 0; j < kWidth; j++)
      tanh_err = std::fmax(tanh_err, std::fabs(out[j] - std::tanh(double(in[j]))));
  }
  std::printf("simd exp max rel err %.2e, tanh max abs err %.2e\n", exp_err, tanh_err);
  return exp_err < 5e-7 && tanh_err < 2e-7;
}

}  // namespace

// GFLOP/s of the three products on one Linear shape of the large preset (M = 12·128 rows, C = 192,
// fc_in: K = C, N = 4C), for comparing back ends and micro-tile shapes: `selftest bench [threads]`.
void bench(int threads) {
  const int64_t M = 1536, K = 192, N = 768;
  auto x = random_vector(M * K), w = random_vector(N * K), b = random_vector(N),
       d = random_vector(M * N);
  std::vector<float> out(size_t(M * N)), dx(size_t(M * K)), dw(size_t(N * K));
  tg::ThreadPool pool(threads);
  auto time = [&](const char* name, auto&& fn) {
    fn();
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
      auto t0 = std::chrono::steady_clock::now();
      fn();
      best = std::fmin(
          best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%s %s threads=%d M,K,N=%lld,%lld,%lld: %.1f GFLOP/s\n", tg::simd::kSimdName, name,
                pool.size(), (long long)M, (long long)K, (long long)N,
                2.0 * M * K * N / best / 1e9);
  };
  time("forward",
       [&] { tg::matmul_forward(out.data(), x.data(), w.data(), b.data(), M, K, N, pool); });
  time("dinp", [&] {
    tg::matmul_backward(dx.data(), nullptr, nullptr, d.data(), x.data(), w.data(), M, K, N, pool);
  });
  time("dweight", [&] {
    tg::matmul_backward(nullptr, dw.data(), nullptr, d.data(), x.data(), w.data(), M, K, N, pool);
  });
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "bench") {
    bench(argc > 2 ? std::atoi(argv[2]) : 1);
    return 0;
  }
  bool ok = true;
  const int64_t shapes[][3] = {{1, 7, 13}, {33, 65, 17}, {250, 96, 384}, {130, 520, 40}};
  for (int threads : {1, 2}) {
    tg::ThreadPool pool(threads);
    std::printf("simd back end %s, pool of %d thread(s) (asked %d)\n", tg::simd::kSimdName,
                pool.size(), threads);
    for (auto& s : shapes) ok = check_linear(s[0], s[1], s[2], pool) && ok;
    ok = check_strided(pool) && ok;
  }
  ok = check_exp_tanh() && ok;
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
