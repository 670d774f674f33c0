#include "run.h"

#include <cmath>

#include "inspect.h"
#include "state.h"

namespace tg {

void Run::init(uint64_t seed) {
  model.init_from_seed(seed);
  data_seed = seed;
  batches_drawn = 0;
  gen.active = false;
}

void Run::set_corpus(const uint8_t* bytes, int64_t n, double val_fraction) {
  Corpus c;
  c.bytes.assign(bytes, bytes + n);
  split_sizes(n, val_fraction, &c.n_train, &c.n_val);
  corpus = std::move(c);
  has_corpus = true;
}

void Run::next_batch(int32_t* x, int32_t* y) {
  const Config& c = model.config();
  draw_batch(x, y, corpus, c.ctx, c.batch, data_seed, batches_drawn++);
}

StepResult Run::update(double loss, double* stats) {
  if (!std::isfinite(loss)) return {StepOutcome::kLossNotFinite, loss};
  last_norm = model.apply_update(hyper, stats);
  return {std::isfinite(last_norm) ? StepOutcome::kUpdated : StepOutcome::kNormNotFinite, loss};
}

StepResult Run::train_step(double* stats) {
  const Config& c = model.config();
  // Drawn straight into the model's own token buffers: the forward then copies nothing.
  next_batch(model.tokens(), model.targets());
  return update(forward_backward(model.tokens(), model.targets(), c.batch, c.ctx), stats);
}

StepResult Run::train_step_batch(const int32_t* x, const int32_t* y, int64_t rows, int64_t t) {
  return update(forward_backward(x, y, rows, t));
}

double Run::forward_backward(const int32_t* x, const int32_t* y, int64_t rows, int64_t t) {
  gen.active = false;
  return model.forward_backward(x, y, rows, t);
}

double Run::forward_loss(const int32_t* x, const int32_t* y, int64_t rows, int64_t t) {
  gen.active = false;
  return model.forward_loss(x, y, rows, t);
}

double Run::eval(int64_t eval_windows) {
  const int64_t ctx = model.config().ctx, B = model.config().batch;
  const int64_t n_val = corpus.n_val;
  const int64_t k = eval_window_count(n_val, ctx, eval_windows);
  gen.active = false;
  double total = 0;  // summed cross-entropy over all k * ctx positions
  for (int64_t i0 = 0; i0 < k; i0 += B) {
    const int64_t rows = k - i0 < B ? k - i0 : B;
    for (int64_t r = 0; r < rows; r++) {
      const int64_t start = eval_window_start(n_val, ctx, k, i0 + r);
      windows_at(model.tokens() + r * ctx, model.targets() + r * ctx, corpus.val(), &start, 1, ctx);
    }
    total += model.forward_loss(model.tokens(), model.targets(), rows, ctx) *
             static_cast<double>(rows * ctx);
  }
  return total / static_cast<double>(k * ctx);
}

void Run::gen_begin(const int32_t* prompt, int64_t n_prompt, double temperature, int64_t top_k,
                    uint64_t sample_seed, bool use_cache) {
  tg::gen_begin(model, gen, prompt, n_prompt, temperature, top_k, sample_seed, use_cache);
}

int32_t Run::gen_next() { return tg::gen_next(model, gen); }

void Run::gen_last_probs(float* out) const {
  const int64_t V = model.config().vocab_size;
  softmax_probs(model.logits() + gen.last_row * V, V, out);
}

void Run::attention(const int32_t* tokens, int64_t T, float* out) {
  gen.active = false;
  attention_probs(model, tokens, T, out);
}

void Run::attention_entropy(const int32_t* tokens, int64_t T, double* out) {
  gen.active = false;
  tg::attention_entropy(model, tokens, T, out);
}

void Run::import_state(const uint8_t* buf, int64_t n) {
  tg::import_state(model, buf, n);
  gen.active = false;
}

void Run::lora_init(uint64_t seed) {
  model.lora_init(seed);
  lora_ready = true;
  gen.active = false;
}

void Run::import_lora_state(const uint8_t* buf, int64_t n) {
  tg::import_lora_state(model, buf, n);
  lora_ready = true;
  gen.active = false;
}

void Run::lora_merge(bool merge) {
  model.lora_merge(merge);
  gen.active = false;
}

void Run::lora_set_enabled(bool enabled) {
  model.lora_enabled = enabled;
  gen.active = false;
}

}  // namespace tg
