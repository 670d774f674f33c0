#include "generate.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "attention.h"
#include "gelu.h"
#include "layernorm.h"
#include "matmul.h"
#include "prng.h"

namespace tg {

void advance_window(Model& model, GenSession& s, int32_t token) {
  DecodeBuffers& d = model.decode();
  const int64_t ctx = model.config().ctx;
  if (s.window_len >= ctx) {
    const int64_t keep = ctx / 2;
    std::memmove(d.window, d.window + (s.window_len - keep), static_cast<size_t>(keep) * 4);
    s.window_len = keep;
    s.cached_len = 0;  // positions changed: the cache is rebuilt at the next token
  }
  d.window[s.window_len++] = token;
}

int32_t pick_token(const float* logits, int64_t V, double temperature, int64_t top_k,
                   uint64_t sample_state, uint64_t* drawn, int32_t* order, double* scaled,
                   double* prob) {
  if (temperature == 0) {
    int64_t best = 0;  // first maximum: the lowest index on ties
    for (int64_t i = 1; i < V; i++)
      if (logits[i] > logits[best]) best = i;
    return static_cast<int32_t>(best);
  }
  for (int64_t i = 0; i < V; i++) {
    scaled[i] = static_cast<double>(logits[i]) / temperature;
    prob[i] = 1;  // 1 = kept
  }
  if (top_k > 0 && top_k < V) {
    for (int64_t i = 0; i < V; i++) order[i] = static_cast<int32_t>(i);
    std::sort(order, order + V, [&](int32_t a, int32_t b) {
      return scaled[a] > scaled[b] || (scaled[a] == scaled[b] && a < b);
    });
    for (int64_t i = 0; i < V; i++) prob[i] = 0;
    for (int64_t i = 0; i < top_k; i++) prob[order[i]] = 1;
  }
  double mx = -INFINITY;
  for (int64_t i = 0; i < V; i++)
    if (prob[i] != 0 && scaled[i] > mx) mx = scaled[i];
  for (int64_t i = 0; i < V; i++) prob[i] = prob[i] != 0 ? std::exp(scaled[i] - mx) : 0.0;
  // prob becomes the running sum, in ascending byte order (as numpy's cumsum).
  double total = 0;
  for (int64_t i = 0; i < V; i++) {
    total += prob[i];
    scaled[i] = total;
  }
  const double threshold = uniform(splitmix64(sample_state, (*drawn)++)) * total;
  for (int64_t i = 0; i < V; i++)
    if (scaled[i] > threshold) return static_cast<int32_t>(i);
  // u * sum rounded up to sum: the last kept byte of nonzero probability.
  for (int64_t i = V - 1; i > 0; i--)
    if (prob[i] > 0) return static_cast<int32_t>(i);
  return 0;
}

void decode_token(Model& model, int32_t token, int64_t pos, bool want_logits) {
  const Config& c = model.config();
  const int64_t C = c.d_model, H = c.n_head, D = C / H, V = c.vocab;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const ParamViews& w = model.weight_views();
  DecodeBuffers& d = model.decode();
  ThreadPool& pool = model.pool();
  for (int64_t i = 0; i < C; i++)  // x: (C)
    d.x[i] = w.wte[static_cast<int64_t>(token) * C + i] + w.wpe[pos * C + i];
  for (int64_t l = 0; l < c.n_layer; l++) {
    const LayerParams& p = w.layers[l];
    const int64_t ctx = c.ctx;
    float* kT = d.k_cache[l];  // (C, ctx)
    float* v_row = d.v_cache[l] + pos * C;
    layernorm_row(d.ln, &d.ln_mean, &d.ln_rstd, d.x, p.ln1w, p.ln1b, C, c.ln_eps);
    matmul_forward(d.q, d.ln, p.qw, p.qb, 1, C, C, pool);
    matmul_forward(d.k, d.ln, p.kw, p.kb, 1, C, C, pool);
    for (int64_t i = 0; i < C; i++) kT[i * ctx + pos] = d.k[i];
    matmul_forward(v_row, d.ln, p.vw, p.vb, 1, C, C, pool);
    for (int64_t h = 0; h < H; h++)
      attend_row(d.att + h * D, d.p, d.q + h * D, kT + h * D * ctx, ctx, d.v_cache[l] + h * D, C,
                 pos + 1, D, scale);
    matmul_forward(d.proj, d.att, p.ow, p.ob, 1, C, C, pool);
    for (int64_t i = 0; i < C; i++) d.x[i] = d.x[i] + d.proj[i];
    layernorm_row(d.ln, &d.ln_mean, &d.ln_rstd, d.x, p.ln2w, p.ln2b, C, c.ln_eps);
    matmul_forward(d.h, d.ln, p.fcw, p.fcb, 1, C, 4 * C, pool);
    gelu_forward(d.g, d.h, 4 * C, pool);
    matmul_forward(d.proj, d.g, p.fcow, p.fcob, 1, 4 * C, C, pool);
    for (int64_t i = 0; i < C; i++) d.x[i] = d.x[i] + d.proj[i];
  }
  if (!want_logits) return;
  layernorm_row(d.ln, &d.ln_mean, &d.ln_rstd, d.x, w.lnfw, w.lnfb, C, c.ln_eps);
  matmul_forward(d.logits, d.ln, w.wte, nullptr, 1, C, V, pool);
}

void gen_begin(Model& model, GenSession& s, const int32_t* prompt, int64_t n_prompt,
               double temperature, int64_t top_k, uint64_t sample_seed, bool use_cache) {
  s = GenSession{};
  s.active = true;
  s.temperature = temperature;
  s.top_k = top_k;
  s.sample_state = sample_stream_state(sample_seed);
  s.use_cache = use_cache;
  for (int64_t i = 0; i < n_prompt; i++) advance_window(model, s, prompt[i]);
}

int32_t gen_next(Model& model, GenSession& s) {
  DecodeBuffers& d = model.decode();
  const int64_t V = model.config().vocab;
  const float* logits;
  if (s.use_cache) {
    for (int64_t pos = s.cached_len; pos < s.window_len; pos++)
      decode_token(model, d.window[pos], pos, pos == s.window_len - 1);
    s.cached_len = s.window_len;
    logits = d.logits;
  } else {
    model.forward(d.window, 1, s.window_len);  // the whole window, every time
    logits = model.logits() + (s.window_len - 1) * V;
  }
  const int32_t token = pick_token(logits, V, s.temperature, s.top_k, s.sample_state, &s.drawn,
                                   d.order, d.scaled, d.prob);
  advance_window(model, s, token);
  return token;
}

}  // namespace tg
