#include "generate.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "prng.h"

namespace tg {

void advance_window(Model& model, GenSession& s, int32_t token) {
  GenBuffers& d = model.gen_buffers();
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
    // The k first bytes by (larger logit, then lower index): a strict total order, so selecting
    // them (linear time) keeps exactly the set a full sort's first k would.
    for (int64_t i = 0; i < V; i++) order[i] = static_cast<int32_t>(i);
    std::nth_element(order, order + top_k - 1, order + V, [&](int32_t a, int32_t b) {
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
  GenBuffers& d = model.gen_buffers();
  const int64_t V = model.config().vocab_size;
  // With the cache, only the positions it lacks go through the forward; without, the whole window.
  const int64_t past = s.use_cache ? s.cached_len : 0, fresh = s.window_len - past;
  model.forward(d.window + past, 1, fresh, past);
  if (s.use_cache) s.cached_len = s.window_len;
  s.last_row = fresh - 1;  // the window's last position
  const float* logits = model.logits() + s.last_row * V;
  const int32_t token = pick_token(logits, V, s.temperature, s.top_k, s.sample_state, &s.drawn,
                                   d.order, d.scaled, d.prob);
  advance_window(model, s, token);
  return token;
}

}  // namespace tg
