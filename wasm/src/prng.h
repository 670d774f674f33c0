// The portable PRNG of docs/determinism.md: SplitMix64 (counter-based) and Box-Muller normals built
// from IEEE binary64 + - * / sqrt floor frexp only, so C++, Python and JS draw bit-identical
// numbers. prng.cpp must be compiled with -ffp-contract=off: a fused multiply-add would round once,
// not twice.
#pragma once
#include <cstdint>

namespace tg {

constexpr uint64_t kDataStreamKey = 0xD6E8FEB86659FD93ull;
constexpr uint64_t kSampleStreamKey = 0x2545F4914F6CDD1Dull;

// Output n (0-based) of the stream whose initial state is s0.
inline uint64_t splitmix64(uint64_t s0, uint64_t n) {
  uint64_t z = s0 + (n + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t data_stream_state(uint64_t seed) { return seed ^ kDataStreamKey; }
inline uint64_t sample_stream_state(uint64_t seed) { return seed ^ kSampleStreamKey; }

// [0, 1) and (0, 1]: exact in binary64.
double uniform(uint64_t x);
double uniform_open0(uint64_t x);

// log(x) for a positive normal double and cos(2 pi u) for u in [0, 1), as fixed polynomials.
double portable_log(double x);
double portable_cos_2pi(double u);

// Standard normal number j of the stream s0 (uses outputs 2j and 2j+1).
double normal(uint64_t s0, uint64_t j);

// out[i] = float32(normal(s0, first + i) * std) for i < count.
void normal_float32(float* out, uint64_t s0, uint64_t first, int64_t count, double std);

}  // namespace tg
