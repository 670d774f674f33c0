#include "data.h"

#include <cmath>

#include "config_rules.h"
#include "config_rules_generated.h"
#include "prng.h"

namespace tg {

void split_sizes(int64_t n, double val_fraction, int64_t* n_train, int64_t* n_val) {
  *n_val = static_cast<int64_t>(std::floor(static_cast<double>(n) * val_fraction));
  *n_train = n - *n_val;
}

std::string corpus_problem(int64_t n, double val_fraction, int64_t ctx) {
  std::string problem = field_problem(rules::kTraining.val_fraction, val_fraction);
  if (!problem.empty()) return problem;
  if (n <= 0) return "the corpus is empty: give a text with some content";
  int64_t n_train, n_val;
  split_sizes(n, val_fraction, &n_train, &n_val);
  const int64_t need = ctx + 1;
  if (n_train < need || n_val < need)
    return "corpus has " + std::to_string(n) + " bytes: too short for a context of " +
           std::to_string(ctx) + " (the train split has " + std::to_string(n_train) +
           " and the val split " + std::to_string(n_val) + " bytes; each needs at least " +
           std::to_string(need) + "). Use a longer text or a smaller preset.";
  return "";
}

void windows_at(int32_t* x, int32_t* y, const uint8_t* data, const int64_t* starts, int64_t rows,
                int64_t ctx) {
  for (int64_t r = 0; r < rows; r++) {
    const uint8_t* w = data + starts[r];
    for (int64_t t = 0; t < ctx; t++) {
      x[r * ctx + t] = w[t];
      y[r * ctx + t] = w[t + 1];
    }
  }
}

void draw_batch(int32_t* x, int32_t* y, const Corpus& corpus, int64_t ctx, int64_t B, uint64_t seed,
                int64_t batch_index) {
  const uint64_t s0 = data_stream_state(seed);
  const uint64_t n_starts = static_cast<uint64_t>(corpus.n_train - ctx);
  for (int64_t r = 0; r < B; r++) {
    const uint64_t out = splitmix64(s0, static_cast<uint64_t>(batch_index * B + r));
    const int64_t start = static_cast<int64_t>((out >> 11) % n_starts);
    windows_at(x + r * ctx, y + r * ctx, corpus.train(), &start, 1, ctx);
  }
}

int64_t eval_window_count(int64_t n_val, int64_t ctx, int64_t windows) {
  const int64_t k = windows < n_val - ctx ? windows : n_val - ctx;
  return k < 1 ? 1 : k;
}

int64_t eval_window_start(int64_t n_val, int64_t ctx, int64_t k, int64_t i) {
  return i * (n_val - ctx - 1) / (k - 1 > 1 ? k - 1 : 1);
}

}  // namespace tg
