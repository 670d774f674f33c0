// A look inside the model (the page's attention and logit views): the attention probabilities of
// one sequence and the next-byte probabilities of a logits row. Both read what Model::forward
// leaves in the arena and write into caller memory, so nothing is allocated.
#pragma once
#include <cstdint>

#include "model.h"

namespace tg {

// Runs the forward over tokens (1,T), then from each layer's saved q, k (T,C) writes
// out (L,H,T,T): softmax(q k^T / sqrt(D)) per head with the causal mask, 0 above the diagonal.
// The forward keeps only each row's log-sum-exp, so the probabilities are recomputed here.
void attention_probs(Model& model, const int32_t* tokens, int64_t T, float* out);

// Runs the forward over tokens (1,T), then writes out (L,H): each head's attention entropy averaged
// over the T queries, mean_i -sum_j p_ij ln p_ij in nats (the training view; python_ref/
// training_stats.py). Each row's scores are taken once, with the softmax and the entropy kept
// online in double, so no (T,T) buffer is needed.
void attention_entropy(Model& model, const int32_t* tokens, int64_t T, double* out);

// out (V) = softmax(logits (V)), accumulated in double.
void softmax_probs(const float* logits, int64_t V, float* out);

}  // namespace tg
