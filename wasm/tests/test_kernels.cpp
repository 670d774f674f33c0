// Finite-difference check of every hand-written backward pass. The templated kernels run twice:
// in double (tolerance 1e-6) and in float, the type the model uses (tolerance 1e-3, with a larger
// step since float rounding dominates); matmul goes through its float contract (matmul.h).
// For each kernel: L = sum(out * R) with fixed random R; the backward with dout = R must match
// central differences of L. Prints max|analytic - numeric| / max|numeric| per gradient tensor.
// The attention forward's KV-cache form (queries after `past` cached positions) is checked against
// the full forward the same way: max|cached - full| / max|full| per output.
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "attention.h"
#include "cross_entropy.h"
#include "embedding.h"
#include "gelu.h"
#include "layernorm.h"
#include "matmul.h"
#include "prng.h"
#include "residual.h"

using Vec = std::vector<double>;

namespace {

int g_failures = 0;
uint64_t g_counter = 0;

template <class F>
std::vector<F> random_vec(int64_t n, double scale = 1.0) {
  std::vector<F> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<F>(tg::normal(12345, g_counter++) * scale);
  return v;
}

// max|a - n| / max|n| for one gradient tensor; prints and records a failure above tol.
template <class A>
void report(const char* kernel, const char* grad, const std::vector<A>& analytic,
            const Vec& numeric, double tol) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < analytic.size(); i++) {
    diff = std::fmax(diff, std::fabs(analytic[i] - numeric[i]));
    scale = std::fmax(scale, std::fabs(numeric[i]));
  }
  const double rel = scale > 0 ? diff / scale : diff;
  const bool ok = rel < tol;
  std::printf("%-16s %-8s %-6s max_rel_err %.3e (tol %.0e) %s\n", kernel, grad,
              sizeof(A) == 8 ? "double" : "float", rel, tol, ok ? "ok" : "FAIL");
  if (!ok) g_failures++;
}

// Per type: the finite-difference step and the tolerance.
template <class F>
struct Fd;
template <>
struct Fd<double> {
  static constexpr double h = 1e-5, tol = 1e-6;
};
template <>
struct Fd<float> {
  static constexpr double h = 1e-2, tol = 1e-3;
};

// Central differences of loss() with respect to every element of x; the loss is summed in double.
template <class F>
Vec numeric_grad(std::vector<F>& x, const std::function<double()>& loss) {
  const F h = static_cast<F>(Fd<F>::h);
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    const F keep = x[i];
    x[i] = keep + h;
    const double plus = loss();
    x[i] = keep - h;
    const double minus = loss();
    x[i] = keep;
    g[i] = (plus - minus) / (static_cast<double>(keep + h) - static_cast<double>(keep - h));
  }
  return g;
}

template <class F>
double dot(const std::vector<F>& a, const std::vector<F>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); i++) s += static_cast<double>(a[i]) * b[i];
  return s;
}

template <class F>
void check_layernorm(tg::ThreadPool& pool) {
  using Buf = std::vector<F>;
  const int64_t N = 5, C = 7;
  Buf x = random_vec<F>(N * C, 2.0), w = random_vec<F>(C), b = random_vec<F>(C);
  Buf R = random_vec<F>(N * C), out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    tg::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                          1e-5, pool);
    return dot(out, R);
  };
  loss();
  Buf dx(N * C, 0), dw(C, 0), db(C, 0);
  tg::layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(),
                         rstd.data(), N, C, pool);
  report("layernorm", "dinp", dx, numeric_grad(x, loss), Fd<F>::tol);
  report("layernorm", "dweight", dw, numeric_grad(w, loss), Fd<F>::tol);
  report("layernorm", "dbias", db, numeric_grad(b, loss), Fd<F>::tol);
}

template <class F>
void check_gelu(tg::ThreadPool& pool) {
  using Buf = std::vector<F>;
  const int64_t n = 64;
  Buf x = random_vec<F>(n, 2.0), R = random_vec<F>(n), out(n);
  auto loss = [&] {
    tg::gelu_forward(out.data(), x.data(), n, pool);
    return dot(out, R);
  };
  Buf dx(n);
  tg::gelu_backward(dx.data(), x.data(), R.data(), n, pool);
  report("gelu", "dinp", dx, numeric_grad(x, loss), Fd<F>::tol);
}

template <class F>
void check_attention(tg::ThreadPool& pool, int64_t B, int64_t T, int64_t C, int64_t H) {
  using Buf = std::vector<F>;
  Buf q = random_vec<F>(B * T * C), k = random_vec<F>(B * T * C), v = random_vec<F>(B * T * C);
  Buf R = random_vec<F>(B * T * C), y(B * T * C), lse(B * H * T),
      scratch(tg::attention_scratch_size(B, T, C, H));
  auto loss = [&] {
    tg::attention_forward(y.data(), lse.data(), scratch.data(), q.data(), k.data(), v.data(), B, T,
                          C, H, pool);
    return dot(y, R);
  };
  loss();
  Buf dq(B * T * C), dk(B * T * C), dv(B * T * C);
  tg::attention_backward(dq.data(), dk.data(), dv.data(), scratch.data(), R.data(), q.data(),
                         k.data(), v.data(), lse.data(), B, T, C, H, pool);
  const std::string name = "attention T=" + std::to_string(T) + " D=" + std::to_string(C / H);
  report(name.c_str(), "dq", dq, numeric_grad(q, loss), Fd<F>::tol);
  report(name.c_str(), "dk", dk, numeric_grad(k, loss), Fd<F>::tol);
  report(name.c_str(), "dv", dv, numeric_grad(v, loss), Fd<F>::tol);
}

// The last T - past queries against all T keys, the first past of them cached, are the last rows of
// the full forward over T.
template <class F>
void check_attention_past(tg::ThreadPool& pool, int64_t T, int64_t past, int64_t C, int64_t H) {
  using Buf = std::vector<F>;
  const int64_t fresh = T - past;
  Buf q = random_vec<F>(T * C), k = random_vec<F>(T * C), v = random_vec<F>(T * C);
  Buf y(T * C), lse(H * T), scratch(tg::attention_scratch_size(1, T, C, H));
  tg::attention_forward(y.data(), lse.data(), scratch.data(), q.data(), k.data(), v.data(), 1, T, C,
                        H, pool);
  Buf y_new(fresh * C), lse_new(H * fresh);
  tg::attention_forward(y_new.data(), lse_new.data(), scratch.data(), q.data() + past * C, k.data(),
                        v.data(), 1, fresh, C, H, pool, past);
  Vec y_tail(y.begin() + past * C, y.end()), lse_tail;
  for (int64_t h = 0; h < H; h++)
    lse_tail.insert(lse_tail.end(), lse.begin() + h * T + past, lse.begin() + (h + 1) * T);
  const std::string name = "attention past=" + std::to_string(past) + " T=" + std::to_string(T);
  report(name.c_str(), "y", y_new, y_tail, Fd<F>::tol);
  report(name.c_str(), "lse", lse_new, lse_tail, Fd<F>::tol);
}

template <class F>
void check_embedding(tg::ThreadPool& pool) {
  using Buf = std::vector<F>;
  const int64_t B = 2, T = 4, C = 3, V = 5;
  const std::vector<int32_t> tokens = {1, 3, 1, 0,
                                       4, 4, 2, 1};  // repeats: the scatter-add collides
  Buf wte = random_vec<F>(V * C), wpe = random_vec<F>(T * C), R = random_vec<F>(B * T * C);
  Buf out(B * T * C);
  auto loss = [&] {
    tg::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, pool);
    return dot(out, R);
  };
  Buf dwte(V * C, 0), dwpe(T * C, 0);
  tg::embedding_backward(dwte.data(), dwpe.data(), R.data(), tokens.data(), B, T, C, pool);
  report("embedding", "dwte", dwte, numeric_grad(wte, loss), Fd<F>::tol);
  report("embedding", "dwpe", dwpe, numeric_grad(wpe, loss), Fd<F>::tol);
}

template <class F>
void check_cross_entropy(tg::ThreadPool& pool) {
  using Buf = std::vector<F>;
  const int64_t N = 6, V = 7;
  const std::vector<int32_t> targets = {0, 6, 3, 3, 2, 5};
  Buf logits = random_vec<F>(N * V, 3.0);
  std::vector<double> lse(N), losses(N);
  auto loss = [&] {
    return tg::cross_entropy_forward(lse.data(), losses.data(), logits.data(), targets.data(), N, V,
                                     pool);
  };
  loss();
  Buf dlogits(N * V);
  tg::cross_entropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), N, V, pool);
  report("cross_entropy", "dlogits", dlogits, numeric_grad(logits, loss), Fd<F>::tol);
}

template <class F>
void check_residual(tg::ThreadPool& pool) {
  using Buf = std::vector<F>;
  const int64_t n = 10;
  Buf a = random_vec<F>(n), b = random_vec<F>(n), R = random_vec<F>(n), out(n);
  auto loss = [&] {
    tg::residual_forward(out.data(), a.data(), b.data(), n, pool);
    return dot(out, R);
  };
  Buf da(n, 0), db(n, 0);
  tg::residual_backward(da.data(), db.data(), R.data(), n, pool);
  report("residual", "da", da, numeric_grad(a, loss), Fd<F>::tol);
  report("residual", "db", db, numeric_grad(b, loss), Fd<F>::tol);
}

// Float, through the contract. The shapes are odd on purpose (they straddle any blocking), and
// the backward must ACCUMULATE: gradients start at a known fill that is subtracted afterwards.
void check_matmul(tg::ThreadPool& pool, int64_t M, int64_t K, int64_t N, bool with_bias) {
  std::vector<float> inp = random_vec<float>(M * K), w = random_vec<float>(N * K),
                     bias = random_vec<float>(N);
  std::vector<float> R = random_vec<float>(M * N), out(M * N);
  auto loss = [&] {
    tg::matmul_forward(out.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, M, K, N,
                       pool);
    double s = 0;
    for (int64_t i = 0; i < M * N; i++) s += static_cast<double>(out[i]) * R[i];
    return s;
  };
  const float fill = 0.25f;
  std::vector<float> dinp(M * K, fill), dw(N * K, fill), db(N, fill);
  tg::matmul_backward(dinp.data(), dw.data(), with_bias ? db.data() : nullptr, R.data(), inp.data(),
                      w.data(), M, K, N, pool);
  // matmul is linear in each argument, so a large step has no truncation error in float.
  auto numeric = [&](std::vector<float>& x) {
    Vec g(x.size());
    for (size_t i = 0; i < x.size(); i++) {
      const float keep = x[i];
      x[i] = keep + 0.5f;
      const double plus = loss();
      x[i] = keep - 0.5f;
      const double minus = loss();
      x[i] = keep;
      g[i] = (plus - minus) / 1.0;
    }
    return g;
  };
  auto minus_fill = [&](const std::vector<float>& g) {
    std::vector<float> r(g.size());
    for (size_t i = 0; i < g.size(); i++) r[i] = g[i] - fill;
    return r;
  };
  std::string name =
      "matmul " + std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(N);
  report(name.c_str(), "dinp", minus_fill(dinp), numeric(inp), 1e-3);
  report(name.c_str(), "dweight", minus_fill(dw), numeric(w), 1e-3);
  if (with_bias) report(name.c_str(), "dbias", minus_fill(db), numeric(bias), 1e-3);
  // Skipped outputs must stay untouched: null dinp/dweight/dbias are allowed by the contract.
  tg::matmul_backward(nullptr, nullptr, nullptr, R.data(), inp.data(), w.data(), M, K, N, pool);
}

}  // namespace

int main() {
  tg::ThreadPool inline_pool(1);
  tg::ThreadPool pool2(2);
  for (tg::ThreadPool* pool : {&inline_pool, &pool2}) {
    std::printf("-- pool of %d thread(s)\n", pool->size());
    check_layernorm<double>(*pool);
    check_gelu<double>(*pool);
    check_attention<double>(*pool, 2, 5, 6, 2);
    check_attention<double>(*pool, 1, 66, 4,
                            2);  // T > kAttnRows: several blocks of query rows, a partial last one
    check_attention_past<double>(*pool, 5, 3, 6, 2);
    check_attention_past<double>(*pool, 70, 37, 4, 2);  // 33 new queries: two blocks
    check_embedding<double>(*pool);
    check_cross_entropy<double>(*pool);
    check_residual<double>(*pool);
    check_layernorm<float>(*pool);
    check_gelu<float>(*pool);
    // D = 3 runs the scalar tails only; D = 19 and 32 the vector paths of vec_ops.h plus a tail.
    check_attention<float>(*pool, 2, 5, 6, 2);
    check_attention<float>(*pool, 2, 6, 38, 2);
    check_attention<float>(*pool, 1, 7, 64, 2);
    check_attention<float>(*pool, 1, 66, 4, 2);
    check_attention_past<float>(*pool, 40, 39, 38, 2);  // one new query: a decoding step
    check_attention_past<float>(*pool, 70, 32, 19, 1);  // the cache ends on a block boundary
    check_embedding<float>(*pool);
    check_cross_entropy<float>(*pool);
    check_residual<float>(*pool);
    check_matmul(*pool, 7, 5, 6, true);
    check_matmul(*pool, 33, 70, 45, true);
    check_matmul(*pool, 17, 24, 9, false);
  }
  std::printf("%s: %d failure(s)\n", g_failures ? "FAIL" : "PASS", g_failures);
  return g_failures ? 1 : 0;
}
