// Prints the portable PRNG's outputs for the seeds of docs/determinism.md's test vectors, for
// tests/wasm/test_native_prng.py to compare with the JSON block: "splitmix64 SEED HEX..." and
// "normals SEED %.17g...".
#include <cinttypes>
#include <cstdio>
#include <cstdlib>

#include "prng.h"

int main(int argc, char** argv) {
  for (int a = 1; a < argc; a++) {
    const uint64_t seed = std::strtoull(argv[a], nullptr, 10);
    std::printf("splitmix64 %" PRIu64, seed);
    for (uint64_t n = 0; n < 4; n++) std::printf(" %016" PRIx64, tg::splitmix64(seed, n));
    std::printf("\nnormals %" PRIu64, seed);
    for (uint64_t j = 0; j < 4; j++) std::printf(" %.17g", tg::normal(seed, j));
    std::printf("\n");
  }
  return 0;
}
