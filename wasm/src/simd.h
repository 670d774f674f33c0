// A small portable float-vector layer for the hot loops (matmul, LayerNorm, attention, AdamW).
//
// One type and a handful of inline functions, with one back end chosen at compile time:
//   TG_SIMD_AVX512   x86 with -mavx512f (e.g. -march=native on an AVX-512 CPU)   16 lanes, FMA
//   TG_SIMD_AVX2     x86 with -mavx2 -mfma (e.g. -march=native on Zen/Haswell+)    8 lanes, FMA
//   TG_SIMD_WASM128  Emscripten/clang with -msimd128 (wasm_simd128.h)               4 lanes; FMA only
//                    with -mrelaxed-simd (the caller feature-detects and picks that build)
//   TG_SIMD_SCALAR   anything else (the scalar WASM build, plain -O3)                1 lane
// kSimdName says which one was compiled in, so benchmarks and the UI can report it.
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
#include <immintrin.h>
#elif defined(__AVX2__) && defined(__FMA__)
#define TG_SIMD_AVX2 1
#include <immintrin.h>
#elif defined(__wasm_simd128__)
#define TG_SIMD_WASM128 1
#include <wasm_simd128.h>
#else
#define TG_SIMD_SCALAR 1
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
inline vf max(vf a, vf b) { return _mm512_max_ps(a, b); }
inline vf fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
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
inline vf max(vf a, vf b) { return _mm256_max_ps(a, b); }
inline vf fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
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
// pmax (not max): plain compare-select, which lowers to one maxps; no NaN propagation needed here.
inline vf max(vf a, vf b) { return wasm_f32x4_pmax(a, b); }
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
inline vf max(vf a, vf b) { return a > b ? a : b; }
inline vf fma(vf a, vf b, vf c) { return a * b + c; }
inline float reduce_add(vf v) { return v; }
inline float reduce_max(vf v) { return v; }

#endif

}  // namespace simd
}  // namespace tg
