#include "inspect.h"

#include <cmath>

namespace tg {

void attention_probs(Model& model, const int32_t* tokens, int64_t T, float* out) {
  const Config& c = model.config();
  const int64_t L = c.n_layer, H = c.n_head, C = c.d_model, D = C / H;
  model.forward(tokens, 1, T);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  // one (layer, head) per task: each writes its own (T,T) block of out
  model.pool().parallel_for(L * H, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t lh = i0; lh < i1; lh++) {
      const LayerActs& a = model.layer_acts(lh / H);
      const int64_t h = lh % H;
      float* P = out + lh * T * T;  // (T,T)
      for (int64_t i = 0; i < T; i++) {
        const float* q = a.q + i * C + h * D;  // (D) of query i
        float* p = P + i * T;
        double max_score = -INFINITY;
        for (int64_t j = 0; j <= i; j++) {
          const float* k = a.k + j * C + h * D;
          double s = 0;
          for (int64_t d = 0; d < D; d++) s += static_cast<double>(q[d]) * k[d];
          s *= scale;
          p[j] = static_cast<float>(s);  // the score, until the row's maximum is known
          max_score = s > max_score ? s : max_score;
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; j++) sum += std::exp(static_cast<double>(p[j]) - max_score);
        for (int64_t j = 0; j <= i; j++)
          p[j] = static_cast<float>(std::exp(static_cast<double>(p[j]) - max_score) / sum);
        for (int64_t j = i + 1; j < T; j++) p[j] = 0;  // the causal mask
      }
    }
  });
}

void attention_entropy(Model& model, const int32_t* tokens, int64_t T, double* out) {
  const Config& c = model.config();
  const int64_t L = c.n_layer, H = c.n_head, C = c.d_model, D = C / H;
  model.forward(tokens, 1, T);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  model.pool().parallel_for(L * H, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t lh = i0; lh < i1; lh++) {
      const LayerActs& a = model.layer_acts(lh / H);
      const int64_t h = lh % H;
      double total = 0;
      for (int64_t i = 0; i < T; i++) {
        const float* q = a.q + i * C + h * D;
        // over keys 0..i: the running maximum mx, sum_e = sum e^(s - mx) and
        // sum_es = sum e^(s - mx) (s - mx); the entropy is ln(sum_e) - sum_es / sum_e
        double mx = -INFINITY, sum_e = 0, sum_es = 0;
        for (int64_t j = 0; j <= i; j++) {
          const float* k = a.k + j * C + h * D;
          double s = 0;
          for (int64_t d = 0; d < D; d++) s += static_cast<double>(q[d]) * k[d];
          s *= scale;
          if (s > mx) {  // rescale what is summed to the new maximum
            const double shift = mx - s, r = std::exp(shift);
            sum_es = sum_e > 0 ? r * (sum_es + shift * sum_e) : 0;
            sum_e = sum_e > 0 ? r * sum_e : 0;
            mx = s;
          }
          const double e = std::exp(s - mx);
          sum_e += e;
          sum_es += e * (s - mx);
        }
        total += std::log(sum_e) - sum_es / sum_e;
      }
      out[lh] = total / static_cast<double>(T);
    }
  });
}

void softmax_probs(const float* logits, int64_t V, float* out) {
  double max_logit = -INFINITY;
  for (int64_t i = 0; i < V; i++) max_logit = logits[i] > max_logit ? logits[i] : max_logit;
  double sum = 0;
  for (int64_t i = 0; i < V; i++) sum += std::exp(static_cast<double>(logits[i]) - max_logit);
  for (int64_t i = 0; i < V; i++)
    out[i] = static_cast<float>(std::exp(static_cast<double>(logits[i]) - max_logit) / sum);
}

}  // namespace tg
