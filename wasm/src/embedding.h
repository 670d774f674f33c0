// Token + position embedding: x[b,t] = wte[tok[b,t]] + wpe[t].
#pragma once
#include <cstdint>

#include "thread_pool.h"

namespace tg {

// out: (B,T,C); tokens: (B,T); wte: (V,C); wpe: (ctx,C), positions 0..T-1 (plus pos0 for decoding)
template <class F>
void embedding_forward(F* out, const int32_t* tokens, const F* wte, const F* wpe, int64_t B,
                       int64_t T, int64_t C, ThreadPool& pool, int64_t pos0 = 0) {
  pool.parallel_for(B * T, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
      const F* te = wte + static_cast<int64_t>(tokens[r]) * C;
      const F* pe = wpe + (pos0 + r % T) * C;
      F* o = out + r * C;
      for (int64_t i = 0; i < C; i++) o[i] = te[i] + pe[i];
    }
  });
}

// Scatter-add: dwte[tok[b,t]] += dout[b,t], dwpe[t] += dout[b,t]. dout: (B,T,C). Sequential over
// rows (tokens repeat, so rows collide), split over channels so the sums keep one order.
template <class F>
void embedding_backward(F* dwte, F* dwpe, const F* dout, const int32_t* tokens, int64_t B,
                        int64_t T, int64_t C, ThreadPool& pool) {
  pool.parallel_for(C, 16, [&](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < B * T; r++) {
      const F* g = dout + r * C;
      F* te = dwte + static_cast<int64_t>(tokens[r]) * C;
      F* pe = dwpe + (r % T) * C;
      for (int64_t i = c0; i < c1; i++) {
        te[i] += g[i];
        pe[i] += g[i];
      }
    }
  });
}

}  // namespace tg
