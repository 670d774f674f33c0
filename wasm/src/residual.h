// Residual connection: out = a + b. Its backward is the identity into both inputs, which the model
// does by letting both branches accumulate into the same gradient buffer.
#pragma once
#include <cstdint>

#include "thread_pool.h"

namespace tg {

// out, a, b: (n)
template <class F>
void residual_forward(F* out, const F* a, const F* b, int64_t n, ThreadPool& pool) {
  pool.parallel_for(n, 8192, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) out[i] = a[i] + b[i];
  });
}

// da += dout, db += dout (either may be null when that input's gradient lives in dout itself)
template <class F>
void residual_backward(F* da, F* db, const F* dout, int64_t n, ThreadPool& pool) {
  pool.parallel_for(n, 8192, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) {
      if (da) da[i] += dout[i];
      if (db) db[i] += dout[i];
    }
  });
}

}  // namespace tg
