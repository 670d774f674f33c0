// Text generation (docs/determinism.md "Sampling" and "Context policy"), with or without a KV
// cache. Both run Model::forward on the same windows (with the cache, over the new positions only),
// so they emit the same tokens.
#pragma once
#include <cstdint>

#include "model.h"

namespace tg {

struct GenSession {
  bool active = false;
  double temperature = 0;
  int64_t top_k = 0;
  uint64_t sample_state = 0;  // s0 of the sample stream
  uint64_t drawn = 0;         // sample-stream outputs used
  bool use_cache = true;
  int64_t window_len = 0;  // tokens in model.gen_buffers().window
  int64_t cached_len = 0;  // of those, how many the KV cache holds (a prefix of the window)
  int64_t last_row = -1;  // the row of model.logits() the last token was picked from (-1: none yet)
};

// The context policy: a full window (ctx tokens) first restarts from its last ctx/2 tokens
// (re-encoded at positions 0.., so the cache is rebuilt); then the token is appended.
void advance_window(Model& model, GenSession& s, int32_t token);

// One token from float logits (V): greedy when temperature is 0, else top-k sampling with one
// uniform of the sample stream. order, scaled, prob: (V) scratch.
int32_t pick_token(const float* logits, int64_t V, double temperature, int64_t top_k,
                   uint64_t sample_state, uint64_t* drawn, int32_t* order, double* scaled,
                   double* prob);

// Starts a session: the prompt goes through the context policy token by token.
void gen_begin(Model& model, GenSession& s, const int32_t* prompt, int64_t n_prompt,
               double temperature, int64_t top_k, uint64_t sample_seed, bool use_cache);

// The next token (logits of the window's last position, then pick_token, then advance_window).
int32_t gen_next(Model& model, GenSession& s);

}  // namespace tg
