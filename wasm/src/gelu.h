// GELU in GPT-2's tanh form (PyTorch approximate="tanh"), elementwise forward and backward.
// The arithmetic is in vec_ops.h (gelu_span / gelu_grad_span); here it is split across the pool.
#pragma once
#include <cstdint>

#include "thread_pool.h"
#include "vec_ops.h"

namespace tg {

// out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); inp, out: (n)
template <class F>
void gelu_forward(F* out, const F* inp, int64_t n, ThreadPool& pool) {
  pool.parallel_for(n, 4096,
                    [&](int64_t i0, int64_t i1) { gelu_span(out + i0, inp + i0, i1 - i0); });
}

// dinp = dout * gelu'(inp), overwritten (may alias dout).
template <class F>
void gelu_backward(F* dinp, const F* inp, const F* dout, int64_t n, ThreadPool& pool) {
  pool.parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
    gelu_grad_span(dinp + i0, inp + i0, dout + i0, i1 - i0);
  });
}

}  // namespace tg
