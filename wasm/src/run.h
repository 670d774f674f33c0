// One training run around a Model: the corpus and its data stream, the AdamW settings and the
// generation session, and what the C API's calls do with them (drawing batches, the training step,
// the evaluation loop, generation). The C API (tinygpt_api.cpp) checks every argument before it
// calls in and turns outcomes into error codes; nothing here validates or reports.
#pragma once
#include <cstdint>

#include "adamw.h"
#include "data.h"
#include "generate.h"
#include "model.h"

namespace tg {

// A step updates the model only when the loss and then the gradient norm are finite.
enum class StepOutcome { kUpdated, kLossNotFinite, kNormNotFinite };
struct StepResult {
  StepOutcome outcome;
  double loss;  // mean loss of the batch, before the update
};

struct Run {
  Run(const Config& c, int n_threads) : model(c, n_threads) {}

  Model model;
  Corpus corpus;
  bool has_corpus = false;
  uint64_t data_seed = 0;
  int64_t batches_drawn = 0;  // the data stream's position: batch b uses outputs b*B .. b*B+B-1
  AdamWSettings hyper{};
  bool has_hyper = false;
  double last_norm = 0;  // of the last step, before clipping
  GenSession gen;        // any call that runs a forward or changes the weights ends it

  // Weights from the init stream of seed; the data stream restarts at (seed, 0).
  void init(uint64_t seed);
  // Copies the bytes and splits them (val_fraction of them, at the end, for evaluation).
  void set_corpus(const uint8_t* bytes, int64_t n, double val_fraction);
  // The next batch of the data stream (batch x ctx tokens each), advancing it.
  void next_batch(int32_t* x, int32_t* y);

  // Forward, backward, clip and AdamW on the next batch of the data stream. stats (or null): the
  // step measured (Model::apply_update's), for the training view.
  StepResult train_step(double* stats = nullptr);
  // The same on a given batch x, y (rows, t).
  StepResult train_step_batch(const int32_t* x, const int32_t* y, int64_t rows, int64_t t);
  double forward_backward(const int32_t* x, const int32_t* y, int64_t rows, int64_t t);
  double forward_loss(const int32_t* x, const int32_t* y, int64_t rows, int64_t t);
  // Mean cross-entropy over min(eval_windows, nVal - ctx) evenly spread windows of the val split.
  double eval(int64_t eval_windows);

  void gen_begin(const int32_t* prompt, int64_t n_prompt, double temperature, int64_t top_k,
                 uint64_t sample_seed, bool use_cache);
  int32_t gen_next();
  // The next-byte probabilities (V) the last gen_next picked from (gen.last_row >= 0).
  void gen_last_probs(float* out) const;

  // Attention probabilities of tokens (1,T) into out (L,H,T,T) (inspect.h). Its forward overwrites
  // the KV cache, so it ends a generation session.
  void attention(const int32_t* tokens, int64_t T, float* out);
  // Mean attention entropy per head of tokens (1,T) into out (L,H) (inspect.h); ends a session too.
  void attention_entropy(const int32_t* tokens, int64_t T, double* out);

  // A validated .tinygpt state (state_problem found nothing) into the model.
  void import_state(const uint8_t* buf, int64_t n);

  // LoRA mode. Each ends a generation session (the forward they change is generation's).
  bool lora_ready = false;  // adapters set by lora_init or import_lora_state: training may start
  void lora_init(uint64_t seed);
  void import_lora_state(const uint8_t* buf, int64_t n);  // validated (lora_state_problem)
  void lora_merge(bool merge);
  void lora_set_enabled(bool enabled);

 private:
  StepResult update(double loss, double* stats = nullptr);  // clip + AdamW after a forward_backward
};

}  // namespace tg
