// The C shell of tinygpt_api.h: argument checks, error codes and messages around a tg::Run (run.h),
// which does the work. Every entry point catches everything, so no C++ exception crosses into C or
// JS.
#include "tinygpt_api.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "config_rules.h"
#include "config_rules_generated.h"
#include "data.h"
#include "model.h"
#include "run.h"
#include "state.h"

struct tg_model {
  tg_model(const tg::Config& c, int n_threads) : run(c, n_threads) {}
  tg::Run run;
};

namespace {

using tg::field_problem;

thread_local std::string g_error = "no error";
thread_local int32_t g_code = TG_OK;

int32_t fail(int32_t code, const std::string& message) {
  g_code = code;
  g_error = message;
  return code;
}

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

int32_t internal_failure(const char* where) {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return fail(TG_ERR_ALLOC, std::string(where) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(TG_ERR_INTERNAL, std::string(where) + ": " + e.what());
  } catch (...) {
    return fail(TG_ERR_INTERNAL, std::string(where) + ": unknown failure");
  }
}

// Wraps a body returning int32/int64/double: any exception becomes an error code.
template <class R, class Fn>
R guarded(const char* where, Fn&& body) {
  try {
    return body();
  } catch (...) {
    return static_cast<R>(internal_failure(where));
  }
}

// Empty if the config (not null) can make a model of `batch` rows, else why not; *out holds it.
std::string read_config(const tg_config* config, int32_t batch, tg::Config* out) {
  out->n_layer = config->n_layer;
  out->n_head = config->n_head;
  out->d_model = config->d_model;
  out->ctx = config->ctx;
  out->vocab_size = config->vocab_size;
  out->layer_norm_eps = config->layer_norm_eps;
  out->init_std = config->init_std;
  out->batch = batch;
  return tg::config_problem(*out);
}

int32_t check_handle(const tg_model* m, const char* where) {
  if (m == nullptr) return fail(TG_ERR_ARG, std::string(where) + ": null model handle");
  return TG_OK;
}

// A handle of a LoRA model (tg_create_lora), else the code of why not.
int32_t check_lora(const tg_model* m, const char* where) {
  if (int32_t e = check_handle(m, where)) return e;
  if (!m->run.model.lora())
    return fail(TG_ERR_ARG,
                std::string(where) + ": this model has no LoRA adapters (tg_create_lora)");
  return TG_OK;
}

// A LoRA model trains only with its adapters set, enabled and not merged into the weights.
int32_t check_lora_trainable(const tg_model* m, const char* where) {
  if (!m->run.model.lora()) return TG_OK;
  if (m->run.model.lora_merged)
    return fail(
        TG_ERR_ARG,
        std::string(where) + ": the adapters are merged into the weights: tg_lora_unmerge first");
  if (!m->run.model.lora_enabled)
    return fail(TG_ERR_ARG, std::string(where) +
                                ": the adapters are disabled: tg_lora_set_enabled(m, 1) first");
  if (!m->run.lora_ready)
    return fail(
        TG_ERR_ARG,
        std::string(where) + ": no adapters yet: call tg_lora_init or tg_lora_import_state first");
  return TG_OK;
}

// Empty if the LoRA settings (not null) can work, else why not; *out holds them.
std::string read_lora(const tg_lora_config* lora, tg::LoraConfig* out) {
  out->rank = lora->rank;
  out->alpha = lora->alpha;
  out->targets = lora->targets;
  return tg::lora_problem(*out);
}

// The config of a LoRA model: the LoRA settings first, then the model's (config_problem).
std::string read_lora_config(const tg_config* config, const tg_lora_config* lora, int32_t batch,
                             tg::Config* out) {
  std::string problem = read_lora(lora, &out->lora);
  if (!problem.empty()) return problem;
  return read_config(config, batch, out);
}

int32_t check_tokens(const tg_model* m, const int32_t* t, int64_t n, const char* what) {
  if (t == nullptr) return fail(TG_ERR_ARG, std::string(what) + " is null");
  const int64_t V = m->run.model.config().vocab_size;
  for (int64_t i = 0; i < n; i++)
    if (t[i] < 0 || t[i] >= V)
      return fail(TG_ERR_ARG, std::string(what) + "[" + std::to_string(i) +
                                  "] = " + std::to_string(t[i]) + " is not a token in [0, " +
                                  std::to_string(V) + ")");
  return TG_OK;
}

int32_t check_batch(const tg_model* m, const int32_t* x, const int32_t* y, int32_t rows, int32_t t,
                    bool need_y) {
  const tg::Config& c = m->run.model.config();
  if (rows < 1 || rows > c.batch || t < 1 || t > c.ctx)
    return fail(TG_ERR_ARG, "batch shape (" + std::to_string(rows) + ", " + std::to_string(t) +
                                ") outside 1..batch (" + std::to_string(c.batch) + ") x 1..ctx (" +
                                std::to_string(c.ctx) + ")");
  const int64_t n = static_cast<int64_t>(rows) * t;
  if (int32_t e = check_tokens(m, x, n, "x")) return e;
  if (need_y)
    if (int32_t e = check_tokens(m, y, n, "y")) return e;
  return TG_OK;
}

// The loss of a step, or the code and message of why it made no update.
double step_result(const tg::StepResult& r) {
  switch (r.outcome) {
    case tg::StepOutcome::kLossNotFinite:
      return fail(TG_ERR_NONFINITE, "the loss is not finite (" + num(r.loss) +
                                        "): no update was made; lower the learning rate");
    case tg::StepOutcome::kNormNotFinite:
      return fail(TG_ERR_NONFINITE, "the gradient norm is not finite: no update was made");
    case tg::StepOutcome::kUpdated:
      break;
  }
  return r.loss;
}

// tg_create and tg_create_lora: read(&config) fills the config and says what is wrong with it.
template <class Read>
tg_model* create(const char* where, Read&& read, int32_t n_threads) {
  try {
    tg::Config c;
    const std::string problem = read(&c);
    if (!problem.empty()) {
      fail(TG_ERR_CONFIG, problem);
      return nullptr;
    }
    if (n_threads < 1 || n_threads > 1024) {
      fail(TG_ERR_CONFIG, "n_threads must be in 1..1024, got " + std::to_string(n_threads));
      return nullptr;
    }
    auto h = std::make_unique<tg_model>(c, n_threads);
    if (!h->run.model.ok()) {
      fail(TG_ERR_ALLOC,
           "could not allocate the model's arena of " + std::to_string(h->run.model.arena_bytes()) +
               " bytes" + (sizeof(size_t) < 8 ? " (a 32-bit build addresses at most 4 GiB)" : ""));
      return nullptr;
    }
    return h.release();
  } catch (...) {
    internal_failure(where);
    return nullptr;
  }
}

int32_t check_no_base_moments(const tg_model* m, int32_t with_moments, const char* where) {
  if (with_moments && m->run.model.lora())
    return fail(TG_ERR_ARG, std::string(where) +
                                ": a LoRA model keeps no AdamW moments of its frozen base: "
                                "with_moments must be 0 (tg_lora_export_state has the adapters')");
  return TG_OK;
}

}  // namespace

extern "C" {

const char* tg_last_error(void) { return g_error.c_str(); }
int32_t tg_last_error_code(void) { return g_code; }

int64_t tg_arena_bytes_for(const tg_config* config, int32_t batch) {
  if (config == nullptr) return fail(TG_ERR_ARG, "tg_arena_bytes_for: config is null");
  return guarded<int64_t>("tg_arena_bytes_for", [&]() -> int64_t {
    tg::Config c;
    std::string problem = read_config(config, batch, &c);
    if (!problem.empty()) return fail(TG_ERR_CONFIG, problem);
    return tg::Model::arena_bytes_for(c);
  });
}

tg_model* tg_create(const tg_config* config, int32_t batch, int32_t n_threads) {
  if (config == nullptr) {
    fail(TG_ERR_ARG, "tg_create: config is null");
    return nullptr;
  }
  return create(
      "tg_create", [&](tg::Config* c) { return read_config(config, batch, c); }, n_threads);
}

int64_t tg_lora_arena_bytes_for(const tg_config* config, const tg_lora_config* lora,
                                int32_t batch) {
  if (config == nullptr || lora == nullptr)
    return fail(TG_ERR_ARG, "tg_lora_arena_bytes_for: config or lora is null");
  return guarded<int64_t>("tg_lora_arena_bytes_for", [&]() -> int64_t {
    tg::Config c;
    std::string problem = read_lora_config(config, lora, batch, &c);
    if (!problem.empty()) return fail(TG_ERR_CONFIG, problem);
    return tg::Model::arena_bytes_for(c);
  });
}

tg_model* tg_create_lora(const tg_config* config, const tg_lora_config* lora, int32_t batch,
                         int32_t n_threads) {
  if (config == nullptr || lora == nullptr) {
    fail(TG_ERR_ARG, "tg_create_lora: config or lora is null");
    return nullptr;
  }
  return create(
      "tg_create_lora", [&](tg::Config* c) { return read_lora_config(config, lora, batch, c); },
      n_threads);
}

void tg_destroy(tg_model* m) { delete m; }

int64_t tg_param_count(const tg_model* m) {
  if (int32_t e = check_handle(m, "tg_param_count")) return e;
  return m->run.model.param_count();
}

int64_t tg_arena_bytes(const tg_model* m) {
  if (int32_t e = check_handle(m, "tg_arena_bytes")) return e;
  return m->run.model.arena_bytes();
}

int32_t tg_n_threads(const tg_model* m) {
  if (int32_t e = check_handle(m, "tg_n_threads")) return e;
  return m->run.model.pool().size();
}

int32_t tg_tensor_count(const tg_model* m) {
  if (int32_t e = check_handle(m, "tg_tensor_count")) return e;
  return static_cast<int32_t>(m->run.model.manifest().size());
}

const char* tg_tensor_name(const tg_model* m, int32_t i) {
  if (check_handle(m, "tg_tensor_name")) return nullptr;
  if (i < 0 || i >= static_cast<int32_t>(m->run.model.manifest().size())) {
    fail(TG_ERR_ARG, "tensor index " + std::to_string(i) + " out of range");
    return nullptr;
  }
  return m->run.model.manifest()[i].name.c_str();
}

int64_t tg_tensor_offset(const tg_model* m, int32_t i) {
  if (!tg_tensor_name(m, i)) return g_code;
  return m->run.model.manifest()[i].offset;
}

int64_t tg_tensor_numel(const tg_model* m, int32_t i) {
  if (!tg_tensor_name(m, i)) return g_code;
  return m->run.model.manifest()[i].numel;
}

int32_t tg_init(tg_model* m, uint64_t seed) {
  if (int32_t e = check_handle(m, "tg_init")) return e;
  std::string problem = field_problem(tg::rules::kTraining.seed, seed);
  if (!problem.empty()) return fail(TG_ERR_ARG, problem);
  return guarded<int32_t>("tg_init", [&]() -> int32_t {
    m->run.init(seed);
    return TG_OK;
  });
}

int32_t tg_set_hyper(tg_model* m, double lr, double beta1, double beta2, double eps,
                     double weight_decay, double grad_clip) {
  if (int32_t e = check_handle(m, "tg_set_hyper")) return e;
  const auto& r = tg::rules::kTraining;
  const std::string problem =
      tg::first_problem({{r.lr, field_problem(r.lr, lr)},
                         {r.beta1, field_problem(r.beta1, beta1)},
                         {r.beta2, field_problem(r.beta2, beta2)},
                         {r.eps, field_problem(r.eps, eps)},
                         {r.weight_decay, field_problem(r.weight_decay, weight_decay)},
                         {r.grad_clip, field_problem(r.grad_clip, grad_clip)}});
  if (!problem.empty()) return fail(TG_ERR_HYPER, problem);
  m->run.hyper = tg::AdamWSettings{lr, beta1, beta2, eps, weight_decay, grad_clip};
  m->run.has_hyper = true;
  return TG_OK;
}

int32_t tg_set_corpus(tg_model* m, const uint8_t* bytes, int64_t n, double val_fraction) {
  if (int32_t e = check_handle(m, "tg_set_corpus")) return e;
  if (bytes == nullptr && n > 0) return fail(TG_ERR_ARG, "corpus bytes are null");
  std::string problem = tg::corpus_problem(n, val_fraction, m->run.model.config().ctx);
  if (!problem.empty()) return fail(TG_ERR_CORPUS, problem);
  const int64_t V = m->run.model.config().vocab_size;
  if (V <= UINT8_MAX)  // below that every byte is a token
    for (int64_t i = 0; i < n; i++)
      if (bytes[i] >= V)
        return fail(TG_ERR_CORPUS, "corpus byte " + std::to_string(i) + " (" +
                                       std::to_string(bytes[i]) + ") is not below vocabSize " +
                                       std::to_string(V));
  return guarded<int32_t>("tg_set_corpus", [&]() -> int32_t {
    m->run.set_corpus(bytes, n, val_fraction);
    return TG_OK;
  });
}

int32_t tg_set_data_state(tg_model* m, uint64_t seed, int64_t batches_drawn) {
  if (int32_t e = check_handle(m, "tg_set_data_state")) return e;
  std::string problem = field_problem(tg::rules::kTraining.seed, seed);
  if (!problem.empty()) return fail(TG_ERR_ARG, problem);
  if (batches_drawn < 0)
    return fail(TG_ERR_ARG, "batchesDrawn must be >= 0, got " + std::to_string(batches_drawn));
  m->run.data_seed = seed;
  m->run.batches_drawn = batches_drawn;
  return TG_OK;
}

int64_t tg_batches_drawn(const tg_model* m) {
  if (int32_t e = check_handle(m, "tg_batches_drawn")) return e;
  return m->run.batches_drawn;
}

uint64_t tg_data_seed(const tg_model* m) { return m ? m->run.data_seed : 0; }

int32_t tg_next_batch(tg_model* m, int32_t* x, int32_t* y) {
  if (int32_t e = check_handle(m, "tg_next_batch")) return e;
  if (!m->run.has_corpus) return fail(TG_ERR_CORPUS, "no corpus: call tg_set_corpus first");
  if (!x || !y) return fail(TG_ERR_ARG, "tg_next_batch: x or y is null");
  m->run.next_batch(x, y);
  return TG_OK;
}

double tg_train_step(tg_model* m) {
  if (int32_t e = check_handle(m, "tg_train_step")) return e;
  if (int32_t e = check_lora_trainable(m, "tg_train_step")) return e;
  if (!m->run.has_hyper) return fail(TG_ERR_HYPER, "no hyper-parameters: call tg_set_hyper first");
  if (!m->run.has_corpus) return fail(TG_ERR_CORPUS, "no corpus: call tg_set_corpus first");
  return guarded<double>("tg_train_step",
                         [&]() -> double { return step_result(m->run.train_step()); });
}

double tg_train_step_batch(tg_model* m, const int32_t* x, const int32_t* y, int32_t rows,
                           int32_t t) {
  if (int32_t e = check_handle(m, "tg_train_step_batch")) return e;
  if (int32_t e = check_lora_trainable(m, "tg_train_step_batch")) return e;
  if (!m->run.has_hyper) return fail(TG_ERR_HYPER, "no hyper-parameters: call tg_set_hyper first");
  if (int32_t e = check_batch(m, x, y, rows, t, true)) return e;
  return guarded<double>("tg_train_step_batch", [&]() -> double {
    return step_result(m->run.train_step_batch(x, y, rows, t));
  });
}

double tg_forward_backward(tg_model* m, const int32_t* x, const int32_t* y, int32_t rows,
                           int32_t t) {
  if (int32_t e = check_handle(m, "tg_forward_backward")) return e;
  if (int32_t e = check_lora_trainable(m, "tg_forward_backward")) return e;
  if (int32_t e = check_batch(m, x, y, rows, t, true)) return e;
  return guarded<double>("tg_forward_backward",
                         [&]() -> double { return m->run.forward_backward(x, y, rows, t); });
}

double tg_forward_loss(tg_model* m, const int32_t* x, const int32_t* y, int32_t rows, int32_t t) {
  if (int32_t e = check_handle(m, "tg_forward_loss")) return e;
  if (int32_t e = check_batch(m, x, y, rows, t, true)) return e;
  return guarded<double>("tg_forward_loss",
                         [&]() -> double { return m->run.forward_loss(x, y, rows, t); });
}

double tg_eval(tg_model* m, int32_t eval_windows) {
  if (int32_t e = check_handle(m, "tg_eval")) return e;
  if (!m->run.has_corpus) return fail(TG_ERR_CORPUS, "no corpus: call tg_set_corpus first");
  std::string problem = field_problem(tg::rules::kTraining.eval_windows, int64_t{eval_windows});
  if (!problem.empty()) return fail(TG_ERR_ARG, problem);
  return guarded<double>("tg_eval", [&]() -> double { return m->run.eval(eval_windows); });
}

double tg_last_grad_norm(const tg_model* m) {
  if (int32_t e = check_handle(m, "tg_last_grad_norm")) return e;
  return m->run.last_norm;
}

int64_t tg_step(const tg_model* m) {
  if (int32_t e = check_handle(m, "tg_step")) return e;
  return m->run.model.lora() ? m->run.model.lora_step() : m->run.model.step();
}

float* tg_weights(tg_model* m) {
  return check_handle(m, "tg_weights") ? nullptr : m->run.model.weights();
}

const float* tg_grads(const tg_model* m) {
  if (check_handle(m, "tg_grads")) return nullptr;
  if (m->run.model.lora()) {
    fail(TG_ERR_ARG,
         "tg_grads: a LoRA model keeps no base gradients (tg_lora_grads: the adapters')");
    return nullptr;
  }
  return m->run.model.grads();
}

int32_t tg_gen_begin(tg_model* m, const int32_t* prompt, int32_t n_prompt, double temperature,
                     int32_t top_k, uint64_t sample_seed, int32_t use_kv_cache) {
  if (int32_t e = check_handle(m, "tg_gen_begin")) return e;
  if (n_prompt < 1)
    return fail(TG_ERR_ARG,
                "the prompt is empty: generation needs at least one token to start from");
  if (int32_t e = check_tokens(m, prompt, n_prompt, "prompt")) return e;
  const auto& r = tg::rules::kSampling;
  const std::string problem =
      tg::first_problem({{r.temperature, field_problem(r.temperature, temperature)},
                         {r.top_k, field_problem(r.top_k, int64_t{top_k})},
                         {r.seed, field_problem(r.seed, sample_seed)}});
  if (!problem.empty()) return fail(TG_ERR_ARG, problem);
  return guarded<int32_t>("tg_gen_begin", [&]() -> int32_t {
    m->run.gen_begin(prompt, n_prompt, temperature, top_k, sample_seed, use_kv_cache != 0);
    return TG_OK;
  });
}

int32_t tg_gen_next(tg_model* m) {
  if (int32_t e = check_handle(m, "tg_gen_next")) return e;
  if (!m->run.gen.active)
    return fail(TG_ERR_ARG,
                "no generation in progress: call tg_gen_begin first (training ends it)");
  return guarded<int32_t>("tg_gen_next", [&]() -> int32_t { return m->run.gen_next(); });
}

int32_t tg_gen_last_probs(const tg_model* m, float* out) {
  if (int32_t e = check_handle(m, "tg_gen_last_probs")) return e;
  if (!m->run.gen.active || m->run.gen.last_row < 0)
    return fail(TG_ERR_ARG,
                "no token generated in this session: call tg_gen_begin and tg_gen_next first");
  if (out == nullptr) return fail(TG_ERR_ARG, "tg_gen_last_probs: out is null");
  m->run.gen_last_probs(out);
  return TG_OK;
}

int32_t tg_attention(tg_model* m, const int32_t* tokens, int32_t t, float* out) {
  if (int32_t e = check_handle(m, "tg_attention")) return e;
  const int64_t ctx = m->run.model.config().ctx;
  if (t < 1 || t > ctx)
    return fail(TG_ERR_ARG, "tg_attention: " + std::to_string(t) + " tokens, outside 1..ctx (" +
                                std::to_string(ctx) + ")");
  if (int32_t e = check_tokens(m, tokens, t, "tokens")) return e;
  if (out == nullptr) return fail(TG_ERR_ARG, "tg_attention: out is null");
  return guarded<int32_t>("tg_attention", [&]() -> int32_t {
    m->run.attention(tokens, t, out);
    return TG_OK;
  });
}

double tg_train_step_stats(tg_model* m, double* out) {
  if (int32_t e = check_handle(m, "tg_train_step_stats")) return e;
  if (int32_t e = check_lora_trainable(m, "tg_train_step_stats")) return e;
  if (out == nullptr) return fail(TG_ERR_ARG, "tg_train_step_stats: out is null");
  if (!m->run.has_hyper) return fail(TG_ERR_HYPER, "no hyper-parameters: call tg_set_hyper first");
  if (!m->run.has_corpus) return fail(TG_ERR_CORPUS, "no corpus: call tg_set_corpus first");
  return guarded<double>("tg_train_step_stats",
                         [&]() -> double { return step_result(m->run.train_step(out)); });
}

int32_t tg_attention_entropy(tg_model* m, const int32_t* tokens, int32_t t, double* out) {
  if (int32_t e = check_handle(m, "tg_attention_entropy")) return e;
  const int64_t ctx = m->run.model.config().ctx;
  if (t < 1 || t > ctx)
    return fail(TG_ERR_ARG, "tg_attention_entropy: " + std::to_string(t) +
                                " tokens, outside 1..ctx (" + std::to_string(ctx) + ")");
  if (int32_t e = check_tokens(m, tokens, t, "tokens")) return e;
  if (out == nullptr) return fail(TG_ERR_ARG, "tg_attention_entropy: out is null");
  return guarded<int32_t>("tg_attention_entropy", [&]() -> int32_t {
    m->run.attention_entropy(tokens, t, out);
    return TG_OK;
  });
}

int32_t tg_generate(tg_model* m, const int32_t* prompt, int32_t n_prompt, int32_t max_new,
                    double temperature, int32_t top_k, uint64_t sample_seed, int32_t use_kv_cache,
                    int32_t* out) {
  if (int32_t e = check_handle(m, "tg_generate")) return e;
  std::string problem = field_problem(tg::rules::kSampling.max_new_tokens, int64_t{max_new});
  if (!problem.empty()) return fail(TG_ERR_ARG, problem);
  if (max_new > 0 && out == nullptr) return fail(TG_ERR_ARG, "tg_generate: out is null");
  if (int32_t e = tg_gen_begin(m, prompt, n_prompt, temperature, top_k, sample_seed, use_kv_cache))
    return e;
  for (int32_t i = 0; i < max_new; i++) {
    int32_t token = tg_gen_next(m);
    if (token < 0) return token;
    out[i] = token;
  }
  m->run.gen.active = false;
  return max_new;
}

int64_t tg_state_bytes(const tg_model* m, int32_t with_moments) {
  if (int32_t e = check_handle(m, "tg_state_bytes")) return e;
  if (int32_t e = check_no_base_moments(m, with_moments, "tg_state_bytes")) return e;
  return tg::state_size(m->run.model.param_count(), with_moments != 0);
}

int64_t tg_export_state(const tg_model* m, uint8_t* buf, int64_t cap, int32_t with_moments) {
  if (int32_t e = check_handle(m, "tg_export_state")) return e;
  if (int32_t e = check_no_base_moments(m, with_moments, "tg_export_state")) return e;
  const int64_t need = tg::state_size(m->run.model.param_count(), with_moments != 0);
  if (buf == nullptr || cap < need)
    return fail(TG_ERR_ARG, "export buffer of " + std::to_string(cap) +
                                " bytes is too small: the state needs " + std::to_string(need));
  tg::export_state(m->run.model, buf, with_moments != 0);
  return need;
}

int32_t tg_import_state(tg_model* m, const uint8_t* buf, int64_t n) {
  if (int32_t e = check_handle(m, "tg_import_state")) return e;
  return guarded<int32_t>("tg_import_state", [&]() -> int32_t {
    std::string problem = tg::state_problem(m->run.model, buf, n);
    if (!problem.empty()) return fail(TG_ERR_STATE, problem);
    m->run.import_state(buf, n);
    return TG_OK;
  });
}

const uint8_t* tg_state_ptr(const tg_model* m) {
  return check_handle(m, "tg_state_ptr") ? nullptr : m->run.model.state_bytes();
}

int32_t tg_lora_init(tg_model* m, uint64_t seed) {
  if (int32_t e = check_lora(m, "tg_lora_init")) return e;
  std::string problem = field_problem(tg::rules::kTraining.seed, seed);
  if (!problem.empty()) return fail(TG_ERR_ARG, problem);
  if (m->run.model.lora_merged)
    return fail(TG_ERR_ARG,
                "tg_lora_init: the adapters are merged into the weights: tg_lora_unmerge first");
  return guarded<int32_t>("tg_lora_init", [&]() -> int32_t {
    m->run.lora_init(seed);
    return TG_OK;
  });
}

int64_t tg_lora_param_count(const tg_model* m) {
  if (int32_t e = check_handle(m, "tg_lora_param_count")) return e;
  return m->run.model.lora_param_count();
}

int32_t tg_lora_tensor_count(const tg_model* m) {
  if (int32_t e = check_handle(m, "tg_lora_tensor_count")) return e;
  return static_cast<int32_t>(m->run.model.lora_manifest().size());
}

const char* tg_lora_tensor_name(const tg_model* m, int32_t i) {
  if (check_handle(m, "tg_lora_tensor_name")) return nullptr;
  if (i < 0 || i >= static_cast<int32_t>(m->run.model.lora_manifest().size())) {
    fail(TG_ERR_ARG, "adapter tensor index " + std::to_string(i) + " out of range");
    return nullptr;
  }
  return m->run.model.lora_manifest()[i].name.c_str();
}

int64_t tg_lora_tensor_offset(const tg_model* m, int32_t i) {
  if (!tg_lora_tensor_name(m, i)) return g_code;
  return m->run.model.lora_manifest()[i].offset;
}

int64_t tg_lora_tensor_numel(const tg_model* m, int32_t i) {
  if (!tg_lora_tensor_name(m, i)) return g_code;
  return m->run.model.lora_manifest()[i].numel;
}

float* tg_lora_weights(tg_model* m) {
  return check_lora(m, "tg_lora_weights") ? nullptr : m->run.model.lora_weights();
}

const float* tg_lora_grads(const tg_model* m) {
  return check_lora(m, "tg_lora_grads") ? nullptr : m->run.model.lora_grads();
}

int64_t tg_lora_state_bytes(const tg_model* m, int32_t with_moments) {
  if (int32_t e = check_lora(m, "tg_lora_state_bytes")) return e;
  return tg::state_size(m->run.model.lora_param_count(), with_moments != 0);
}

int64_t tg_lora_export_state(const tg_model* m, uint8_t* buf, int64_t cap, int32_t with_moments) {
  if (int32_t e = check_lora(m, "tg_lora_export_state")) return e;
  const int64_t need = tg::state_size(m->run.model.lora_param_count(), with_moments != 0);
  if (buf == nullptr || cap < need)
    return fail(TG_ERR_ARG, "export buffer of " + std::to_string(cap) +
                                " bytes is too small: the adapter state needs " +
                                std::to_string(need));
  tg::export_lora_state(m->run.model, buf, with_moments != 0);
  return need;
}

int32_t tg_lora_import_state(tg_model* m, const uint8_t* buf, int64_t n) {
  if (int32_t e = check_lora(m, "tg_lora_import_state")) return e;
  if (m->run.model.lora_merged)
    return fail(
        TG_ERR_ARG,
        "tg_lora_import_state: the adapters are merged into the weights: tg_lora_unmerge first");
  return guarded<int32_t>("tg_lora_import_state", [&]() -> int32_t {
    std::string problem = tg::lora_state_problem(m->run.model, buf, n);
    if (!problem.empty()) return fail(TG_ERR_STATE, problem);
    m->run.import_lora_state(buf, n);
    return TG_OK;
  });
}

const uint8_t* tg_lora_state_ptr(const tg_model* m) {
  return check_lora(m, "tg_lora_state_ptr") ? nullptr : m->run.model.lora_state_bytes();
}

int32_t tg_lora_merge(tg_model* m) {
  if (int32_t e = check_lora(m, "tg_lora_merge")) return e;
  if (m->run.model.lora_merged)
    return fail(TG_ERR_ARG, "tg_lora_merge: the adapters are already merged");
  if (!m->run.model.lora_enabled)
    return fail(TG_ERR_ARG,
                "tg_lora_merge: the adapters are disabled: tg_lora_set_enabled(m, 1) first");
  return guarded<int32_t>("tg_lora_merge", [&]() -> int32_t {
    m->run.lora_merge(true);
    return TG_OK;
  });
}

int32_t tg_lora_unmerge(tg_model* m) {
  if (int32_t e = check_lora(m, "tg_lora_unmerge")) return e;
  if (!m->run.model.lora_merged)
    return fail(TG_ERR_ARG, "tg_lora_unmerge: the adapters are not merged");
  return guarded<int32_t>("tg_lora_unmerge", [&]() -> int32_t {
    m->run.lora_merge(false);
    return TG_OK;
  });
}

int32_t tg_lora_merged(const tg_model* m) {
  if (int32_t e = check_lora(m, "tg_lora_merged")) return e;
  return m->run.model.lora_merged ? 1 : 0;
}

int32_t tg_lora_set_enabled(tg_model* m, int32_t enabled) {
  if (int32_t e = check_lora(m, "tg_lora_set_enabled")) return e;
  if (m->run.model.lora_merged)
    return fail(
        TG_ERR_ARG,
        "tg_lora_set_enabled: the adapters are merged into the weights: tg_lora_unmerge first");
  m->run.lora_set_enabled(enabled != 0);
  return TG_OK;
}

int32_t tg_lora_enabled(const tg_model* m) {
  if (int32_t e = check_lora(m, "tg_lora_enabled")) return e;
  return m->run.model.lora_enabled ? 1 : 0;
}

}  // extern "C"
