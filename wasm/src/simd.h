// A small portable float-vector layer for the hot loops (matmul, LayerNorm, attention, AdamW).
//
// One type and a handful of inline functions, with one back end chosen at compile time:
//   TG_SIMD_AVX512   x86 with -mavx512f (e.g. -march=native on an AVX-512 CPU)   16 lanes, FMA
//   TG_SIMD_AVX2     x86 with -mavx2 -mfma (e.g. -march=native on Zen/Haswell+)    8 lanes, FMA
//   TG_SIMD_WASM128  Emscripten/clang with -msimd128 (wasm_simd128.h)               4 lanes; FMA
//   only
//                    with -mrelaxed-simd (the caller feature-detects and picks that build)
//   TG_SIMD_SCALAR   anything else (the scalar WASM build, plain -O3)                1 lane
// kSimdName says which one was compiled in, so benchmarks and the UI can report it.
// Functions: zero set1 load store add sub mul div min max fma round_nearest reduce_add reduce_max,
// and exp / tanh (one polynomial for every back end, see below).
//
// Usage (the lane count is kWidth, so loops are written once for every back end):
//   using namespace tg::simd;
//   int64_t i = 0;
//   for (; i + kWidth <= n; i += kWidth) store(y + i, fma(set1(a), load(x + i), load(y + i)));
//   for (; i < n; i++) y[i] += a * x[i];                       // the scalar tail
//
// Loads and stores are unaligned (no alignment contract for callers). fma(a, b, c) = a*b + c: fused
// (one rounding) where the back end has FMA, else a multiply then an add; code that must be
// bit-identical across builds should not rely on either.
#pragma once
#include <cstdint>

#if defined(__AVX512F__)
#define TG_SIMD_AVX512 1
// GCC 12's AVX-512 intrinsics pass a self-initialised `_mm512_undefined_ps()` as the unused merge
// operand, which -Wmaybe-uninitialized reports at every inlined use (a GCC 12 regression, gone in
// 13). The diagnostic's location is inside this header, so ignoring it here silences only that.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
#elif defined(__AVX2__) && defined(__FMA__)
#define TG_SIMD_AVX2 1
#include <immintrin.h>
#elif defined(__wasm_simd128__)
#define TG_SIMD_WASM128 1
#include <wasm_simd128.h>
#else
#define TG_SIMD_SCALAR 1
#include <cmath>
#include <cstring>
#endif

namespace tg {
namespace simd {

#if defined(TG_SIMD_AVX512)

using vf = __m512;
constexpr int kWidth = 16;
constexpr const char* kSimdName = "avx512";
inline vf zero() { return _mm512_setzero_ps(); }
inline vf set1(float x) { return _mm512_set1_ps(x); }
inline vf load(const float* p) { return _mm512_loadu_ps(p); }
inline void store(float* p, vf v) { _mm512_storeu_ps(p, v); }
inline vf add(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf div(vf a, vf b) { return _mm512_div_ps(a, b); }
inline vf min(vf a, vf b) { return _mm512_min_ps(a, b); }
inline vf max(vf a, vf b) { return _mm512_max_ps(a, b); }
inline vf fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
inline vf round_nearest(vf a) {
  return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
// 2^n for integral n in [-126, 127], built in the exponent bits
inline vf exp2_int(vf n) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
inline float reduce_add(vf v) { return _mm512_reduce_add_ps(v); }
inline float reduce_max(vf v) { return _mm512_reduce_max_ps(v); }

#elif defined(TG_SIMD_AVX2)

using vf = __m256;
constexpr int kWidth = 8;
constexpr const char* kSimdName = "avx2+fma";
inline vf zero() { return _mm256_setzero_ps(); }
inline vf set1(float x) { return _mm256_set1_ps(x); }
inline vf load(const float* p) { return _mm256_loadu_ps(p); }
inline void store(float* p, vf v) { _mm256_storeu_ps(p, v); }
inline vf add(vf a, vf b) { return _mm256_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf div(vf a, vf b) { return _mm256_div_ps(a, b); }
inline vf min(vf a, vf b) { return _mm256_min_ps(a, b); }
inline vf max(vf a, vf b) { return _mm256_max_ps(a, b); }
inline vf fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline vf round_nearest(vf a) {
  return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline vf exp2_int(vf n) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
inline float reduce_add(vf v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float reduce_max(vf v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

#elif defined(TG_SIMD_WASM128)

using vf = v128_t;
constexpr int kWidth = 4;
inline vf zero() { return wasm_f32x4_splat(0.0f); }
inline vf set1(float x) { return wasm_f32x4_splat(x); }
inline vf load(const float* p) { return wasm_v128_load(p); }
inline void store(float* p, vf v) { wasm_v128_store(p, v); }
inline vf add(vf a, vf b) { return wasm_f32x4_add(a, b); }
inline vf sub(vf a, vf b) { return wasm_f32x4_sub(a, b); }
inline vf mul(vf a, vf b) { return wasm_f32x4_mul(a, b); }
inline vf div(vf a, vf b) { return wasm_f32x4_div(a, b); }
// pmin/pmax (not min/max): plain compare-selects, which lower to one minps/maxps.
inline vf min(vf a, vf b) { return wasm_f32x4_pmin(a, b); }
inline vf max(vf a, vf b) { return wasm_f32x4_pmax(a, b); }
inline vf round_nearest(vf a) { return wasm_f32x4_nearest(a); }
inline vf exp2_int(vf n) {
  return wasm_i32x4_shl(wasm_i32x4_add(wasm_i32x4_trunc_sat_f32x4(n), wasm_i32x4_splat(127)), 23);
}
#if defined(__wasm_relaxed_simd__)
constexpr const char* kSimdName = "wasm-simd128+relaxed-fma";
inline vf fma(vf a, vf b, vf c) { return wasm_f32x4_relaxed_madd(a, b, c); }
#else
constexpr const char* kSimdName = "wasm-simd128";
inline vf fma(vf a, vf b, vf c) { return wasm_f32x4_add(wasm_f32x4_mul(a, b), c); }
#endif
inline float reduce_add(vf v) {
  return (wasm_f32x4_extract_lane(v, 0) + wasm_f32x4_extract_lane(v, 1)) +
         (wasm_f32x4_extract_lane(v, 2) + wasm_f32x4_extract_lane(v, 3));
}
inline float reduce_max(vf v) {
  float a = wasm_f32x4_extract_lane(v, 0), b = wasm_f32x4_extract_lane(v, 1);
  float c = wasm_f32x4_extract_lane(v, 2), d = wasm_f32x4_extract_lane(v, 3);
  float ab = a > b ? a : b, cd = c > d ? c : d;
  return ab > cd ? ab : cd;
}

#else  // TG_SIMD_SCALAR

using vf = float;
constexpr int kWidth = 1;
constexpr const char* kSimdName = "scalar";
inline vf zero() { return 0.0f; }
inline vf set1(float x) { return x; }
inline vf load(const float* p) { return *p; }
inline void store(float* p, vf v) { *p = v; }
inline vf add(vf a, vf b) { return a + b; }
inline vf sub(vf a, vf b) { return a - b; }
inline vf mul(vf a, vf b) { return a * b; }
inline vf div(vf a, vf b) { return a / b; }
inline vf min(vf a, vf b) { return a < b ? a : b; }
inline vf max(vf a, vf b) { return a > b ? a : b; }
inline vf fma(vf a, vf b, vf c) { return a * b + c; }
inline vf round_nearest(vf a) { return std::nearbyint(a); }
inline vf exp2_int(vf n) {
  uint32_t bits = uint32_t(int32_t(n) + 127) << 23;
  float r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}
inline float reduce_add(vf v) { return v; }
inline float reduce_max(vf v) { return v; }

#endif

// exp(x), every back end the same polynomial (Cephes expf: range reduction by ln 2, degree-5
// polynomial), within a few ulp of the true value for x in [-87.3, 88.37]; inputs outside are
// clamped (so exp(-inf) gives 1.2e-38, not 0, and exp(+inf) gives 2.4e38). NaN in, unspecified out.
inline vf exp(vf x) {
  x = min(max(x, set1(-87.3365f)), set1(88.37f));  // n <= 127: 2^n stays a normal float
  vf n = round_nearest(mul(x, set1(1.44269504088896341f)));
  vf r = fma(n, set1(-0.693359375f), x);  // x - n ln2, ln2 in two parts for exactness
  r = fma(n, set1(2.12194440e-4f), r);
  vf y = set1(1.9875691500e-4f);
  y = fma(y, r, set1(1.3981999507e-3f));
  y = fma(y, r, set1(8.3334519073e-3f));
  y = fma(y, r, set1(4.1665795894e-2f));
  y = fma(y, r, set1(1.6666665459e-1f));
  y = fma(y, r, set1(5.0000001201e-1f));
  y = fma(y, mul(r, r), add(r, set1(1.0f)));
  return mul(y, exp2_int(n));
}

// tanh(x) = 1 - 2 / (exp(2x) + 1): absolute error below 1e-7 (relative error grows near 0, where
// tanh(x) ~ x; fine for GELU, which adds 1 to it).
inline vf tanh(vf x) { return sub(set1(1.0f), div(set1(2.0f), add(exp(add(x, x)), set1(1.0f)))); }

}  // namespace simd
}  // namespace tg
