// The corpus split and the portable batch stream (docs/determinism.md "Data: split and batches").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tg {

struct Corpus {
  std::vector<uint8_t> bytes;  // train = [0, n_train), val = [n_train, n)
  int64_t n_train = 0, n_val = 0;
  const uint8_t* train() const { return bytes.data(); }
  const uint8_t* val() const { return bytes.data() + n_train; }
};

// (n_train, n_val) for n bytes: nVal = floor(n * val_fraction) in binary64.
void split_sizes(int64_t n, double val_fraction, int64_t* n_train, int64_t* n_val);

// Empty if a corpus of n bytes split by val_fraction can train a context of ctx, else why not.
std::string corpus_problem(int64_t n, double val_fraction, int64_t ctx);

// Batch number batch_index of B rows: row r starts at (data output (batch_index*B + r) >> 11)
// mod (n_train - ctx). x, y: (B, ctx) with y[r,t] = x[r,t+1] in the corpus.
void draw_batch(int32_t* x, int32_t* y, const Corpus& corpus, int64_t ctx, int64_t B, uint64_t seed,
                int64_t batch_index);

// Start of val window i of K = min(windows, n_val - ctx) (at least 1): i*(n_val-ctx-1) /
// max(K-1,1).
int64_t eval_window_count(int64_t n_val, int64_t ctx, int64_t windows);
int64_t eval_window_start(int64_t n_val, int64_t ctx, int64_t k, int64_t i);

// x, y (rows, ctx) from windows of data at the given starts.
void windows_at(int32_t* x, int32_t* y, const uint8_t* data, const int64_t* starts, int64_t rows,
                int64_t ctx);

}  // namespace tg
