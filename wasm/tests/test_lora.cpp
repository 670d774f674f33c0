// Finite-difference check of LoRA's hand-written backward (wasm/src/lora.h), as test_kernels.cpp
// checks every other kernel: L = sum(y * R) with y = x W^T + b + s (x A^T) B^T and fixed random R;
// lora_backward with dy = R (plus matmul's d x for the frozen W) must match central differences of
// L in x, A and B. y is linear in each
// of them alone, so a large step has no truncation error in float (as for matmul); the gradients
// ACCUMULATE, so they start at a known fill that is subtracted afterwards. Prints
// max|analytic - numeric| / max|numeric| per gradient. Then merge: x (W + s B A)^T + b must equal
// the adapted forward, and unmerging must give W back (max |W' - W| / max |W| printed).
// Shapes are odd on purpose (they straddle the GEMM's tiles), with M = 5 taking matmul's few-rows
// path and M = 37 the blocked GEMM; pools of 1 and 2 threads must give the same bits.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "lora.h"
#include "matmul.h"
#include "prng.h"

namespace {

int g_failures = 0;
uint64_t g_counter = 0;

std::vector<float> random_vec(int64_t n, double scale = 1.0) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(tg::normal(777, g_counter++) * scale);
  return v;
}

double max_rel(const std::vector<float>& got, const std::vector<double>& want) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size(); i++) {
    diff = std::fmax(diff, std::fabs(got[i] - want[i]));
    scale = std::fmax(scale, std::fabs(want[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

void report(const std::string& what, const char* grad, double rel, double tol) {
  const bool ok = rel < tol;
  std::printf("%-28s %-8s max_rel_err %.3e (tol %.0e) %s\n", what.c_str(), grad, rel, tol,
              ok ? "ok" : "FAIL");
  if (!ok) g_failures++;
}

struct Case {
  int64_t M, K, N, r;
  float s;
};

// One case: returns the analytic gradients so that two pools can be compared bit for bit.
std::vector<float> check(tg::ThreadPool& pool, const Case& c) {
  const int64_t M = c.M, K = c.K, N = c.N, r = c.r;
  std::vector<float> x = random_vec(M * K), W = random_vec(N * K, 0.3), b = random_vec(N),
                     A = random_vec(r * K, 0.5), B = random_vec(N * r, 0.5), R = random_vec(M * N);
  std::vector<float> y(M * N), us(M * r), rm(r * M), rn(r * N);
  auto loss = [&] {
    tg::matmul_forward(y.data(), x.data(), W.data(), b.data(), M, K, N, pool);
    tg::lora_forward(y.data(), us.data(), rm.data(), x.data(), A.data(), B.data(), M, K, N, r, c.s,
                     pool);
    double sum = 0;
    for (int64_t i = 0; i < M * N; i++) sum += static_cast<double>(y[i]) * R[i];
    return sum;
  };
  loss();
  const float fill = 0.25f;
  std::vector<float> dx(M * K, fill), dA(r * K, fill), dB(N * r, fill), du(M * r);
  tg::lora_backward(dx.data(), dA.data(), dB.data(), du.data(), rm.data(), rn.data(), R.data(),
                    x.data(), us.data(), A.data(), B.data(), M, K, N, r, c.s, pool);
  auto numeric = [&](std::vector<float>& v) {
    std::vector<double> g(v.size());
    for (size_t i = 0; i < v.size(); i++) {
      const float keep = v[i];
      v[i] = keep + 0.5f;
      const double plus = loss();
      v[i] = keep - 0.5f;
      const double minus = loss();
      v[i] = keep;
      g[i] = plus - minus;  // / (2 * 0.5)
    }
    return g;
  };
  auto minus_fill = [&](std::vector<float> g) {
    for (float& v : g) v -= fill;
    return g;
  };
  // d x of the whole adapted Linear: the frozen base's part (matmul's dinp product, as the model
  // adds it) on top of the adapters'.
  tg::matmul_backward(dx.data(), nullptr, nullptr, R.data(), x.data(), W.data(), M, K, N, pool);
  const std::vector<double> dx_num = numeric(x);
  char name[96];
  std::snprintf(name, sizeof name, "lora %lldx%lldx%lld r=%lld s=%g", static_cast<long long>(M),
                static_cast<long long>(K), static_cast<long long>(N), static_cast<long long>(r),
                static_cast<double>(c.s));
  report(name, "dx", max_rel(minus_fill(dx), dx_num), 1e-3);
  report(name, "dA", max_rel(minus_fill(dA), numeric(A)), 1e-3);
  report(name, "dB", max_rel(minus_fill(dB), numeric(B)), 1e-3);
  // dx null: the adapters' gradients alone, the same bits.
  std::vector<float> dA2(r * K, fill), dB2(N * r, fill);
  tg::lora_backward(nullptr, dA2.data(), dB2.data(), du.data(), rm.data(), rn.data(), R.data(),
                    x.data(), us.data(), A.data(), B.data(), M, K, N, r, c.s, pool);
  if (dA2 != dA || dB2 != dB) {
    std::printf("%s: FAIL: gradients differ when dx is null\n", name);
    g_failures++;
  }

  // Merge: the plain forward on W + s B A against the adapted one; unmerge gives W back.
  loss();
  const std::vector<float> adapted = y, W0 = W;
  std::vector<float> sB(N * r), merged(M * N);
  tg::lora_merge(W.data(), A.data(), B.data(), sB.data(), N, K, r, c.s, pool);
  tg::matmul_forward(merged.data(), x.data(), W.data(), b.data(), M, K, N, pool);
  std::vector<double> adapted_d(adapted.begin(), adapted.end());
  report(name, "merged y", max_rel(merged, adapted_d), 1e-5);
  tg::lora_merge(W.data(), A.data(), B.data(), sB.data(), N, K, r, -c.s, pool);
  std::vector<double> W0_d(W0.begin(), W0.end());
  report(name, "unmerged W", max_rel(W, W0_d), 1e-6);

  std::vector<float> all = dx;
  all.insert(all.end(), dA.begin(), dA.end());
  all.insert(all.end(), dB.begin(), dB.end());
  all.insert(all.end(), adapted.begin(), adapted.end());
  return all;
}

}  // namespace

int main() {
  const Case cases[] = {{5, 7, 6, 3, 2.0f},
                        {37, 70, 45, 4, 2.0f},
                        {37, 24, 96, 8, 0.75f},
                        {130, 48, 192, 2, 4.0f},
                        {1, 33, 17, 5, 1.5f}};
  tg::ThreadPool inline_pool(1), pool2(2);
  std::vector<std::vector<float>> results[2];
  int p = 0;
  for (tg::ThreadPool* pool : {&inline_pool, &pool2}) {
    std::printf("-- pool of %d thread(s)\n", pool->size());
    g_counter = 0;  // the same inputs for both pools
    for (const Case& c : cases) results[p].push_back(check(*pool, c));
    p++;
  }
  const bool same = results[0] == results[1];
  std::printf("1 vs 2 threads: gradients and outputs bit-identical: %s\n", same ? "ok" : "FAIL");
  if (!same) g_failures++;
  std::printf("%s: %d failure(s)\n", g_failures ? "FAIL" : "PASS", g_failures);
  return g_failures ? 1 : 0;
}
