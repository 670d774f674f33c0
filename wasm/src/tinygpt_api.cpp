// The C API of tinygpt_api.h: argument checks, error codes and messages around tg::Model.
// Every entry point catches everything, so no C++ exception crosses into C or JS.
#include "tinygpt_api.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "data.h"
#include "generate.h"
#include "model.h"
#include "state.h"

struct tg_model {
  std::unique_ptr<tg::Model> model;
  tg::Corpus corpus;
  bool has_corpus = false;
  uint64_t data_seed = 0;
  int64_t batches_drawn = 0;
  tg::AdamWSettings hyper{};
  bool has_hyper = false;
  double last_norm = 0;
  tg::GenSession gen;
};

namespace {

thread_local std::string g_error = "no error";
thread_local int32_t g_code = TG_OK;

int32_t fail(int32_t code, const std::string& message) {
  g_code = code;
  g_error = message;
  return code;
}

constexpr uint64_t kMaxSeed = 1ull << 53;

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

tg::Config make_config(int32_t n_layer, int32_t n_head, int32_t d_model, int32_t ctx,
                       int32_t vocab_size, double eps, double init_std, int32_t batch) {
  tg::Config c;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.d_model = d_model;
  c.ctx = ctx;
  c.vocab = vocab_size;
  c.batch = batch;
  c.ln_eps = eps;
  c.init_std = init_std;
  return c;
}

int32_t check_handle(const tg_model* m, const char* where) {
  if (m == nullptr || !m->model) return fail(TG_ERR_ARG, std::string(where) + ": null model handle");
  return TG_OK;
}

int32_t check_tokens(const tg_model* m, const int32_t* t, int64_t n, const char* what) {
  if (t == nullptr) return fail(TG_ERR_ARG, std::string(what) + " is null");
  const int64_t V = m->model->config().vocab;
  for (int64_t i = 0; i < n; i++)
    if (t[i] < 0 || t[i] >= V)
      return fail(TG_ERR_ARG, std::string(what) + "[" + std::to_string(i) + "] = " +
                                  std::to_string(t[i]) + " is not a token in [0, " +
                                  std::to_string(V) + ")");
  return TG_OK;
}

int32_t check_batch(const tg_model* m, const int32_t* x, const int32_t* y, int32_t rows, int32_t t,
                    bool need_y) {
  const tg::Config& c = m->model->config();
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

// Clip + AdamW after a forward_backward; the loss or a negative code.
double finish_step(tg_model* m, double loss) {
  if (!std::isfinite(loss))
    return fail(TG_ERR_NONFINITE, "the loss is not finite (" + num(loss) +
                                      "): no update was made; lower the learning rate");
  const double norm = m->model->apply_update(m->hyper);
  m->last_norm = norm;
  if (!std::isfinite(norm))
    return fail(TG_ERR_NONFINITE, "the gradient norm is not finite: no update was made");
  return loss;
}

}  // namespace

extern "C" {

const char* tg_last_error(void) { return g_error.c_str(); }
int32_t tg_last_error_code(void) { return g_code; }

int64_t tg_arena_bytes_for(int32_t n_layer, int32_t n_head, int32_t d_model, int32_t ctx,
                           int32_t vocab_size, int32_t batch) {
  return guarded<int64_t>("tg_arena_bytes_for", [&]() -> int64_t {
    // eps and init_std do not change sizes: plausible placeholders for the check only.
    tg::Config c = make_config(n_layer, n_head, d_model, ctx, vocab_size, 1.0, 1.0, batch);
    std::string problem = tg::config_problem(c);
    if (!problem.empty()) return fail(TG_ERR_CONFIG, problem);
    return tg::Model::arena_bytes_for(c);
  });
}

tg_model* tg_create(int32_t n_layer, int32_t n_head, int32_t d_model, int32_t ctx, int32_t vocab_size,
                    double layer_norm_eps, double init_std, int32_t batch, int32_t n_threads) {
  try {
    tg::Config c = make_config(n_layer, n_head, d_model, ctx, vocab_size, layer_norm_eps, init_std,
                               batch);
    std::string problem = tg::config_problem(c);
    if (!problem.empty()) {
      fail(TG_ERR_CONFIG, problem);
      return nullptr;
    }
    if (n_threads < 1 || n_threads > 1024) {
      fail(TG_ERR_CONFIG, "n_threads must be in 1..1024, got " + std::to_string(n_threads));
      return nullptr;
    }
    auto h = std::make_unique<tg_model>();
    h->model = std::make_unique<tg::Model>(c, n_threads);
    if (!h->model->ok()) {
      fail(TG_ERR_ALLOC, "could not allocate the model's arena of " +
                             std::to_string(h->model->arena_bytes()) + " bytes" +
                             (sizeof(size_t) < 8 ? " (a 32-bit build addresses at most 4 GiB)" : ""));
      return nullptr;
    }
    return h.release();
  } catch (...) {
    internal_failure("tg_create");
    return nullptr;
  }
}

void tg_destroy(tg_model* m) { delete m; }

int64_t tg_param_count(const tg_model* m) {
  if (int32_t e = check_handle(m, "tg_param_count")) return e;
  return m->model->param_count();
}

int64_t tg_arena_bytes(const tg_model* m) {
  if (int32_t e = check_handle(m, "tg_arena_bytes")) return e;
  return m->model->arena_bytes();
}

int32_t tg_n_threads(const tg_model* m) {
  if (int32_t e = check_handle(m, "tg_n_threads")) return e;
  return m->model->pool().size();
}

int32_t tg_tensor_count(const tg_model* m) {
  if (int32_t e = check_handle(m, "tg_tensor_count")) return e;
  return static_cast<int32_t>(m->model->manifest().size());
}

const char* tg_tensor_name(const tg_model* m, int32_t i) {
  if (check_handle(m, "tg_tensor_name")) return nullptr;
  if (i < 0 || i >= static_cast<int32_t>(m->model->manifest().size())) {
    fail(TG_ERR_ARG, "tensor index " + std::to_string(i) + " out of range");
    return nullptr;
  }
  return m->model->manifest()[i].name.c_str();
}

int64_t tg_tensor_offset(const tg_model* m, int32_t i) {
  if (!tg_tensor_name(m, i)) return g_code;
  return m->model->manifest()[i].offset;
}

int64_t tg_tensor_numel(const tg_model* m, int32_t i) {
  if (!tg_tensor_name(m, i)) return g_code;
  return m->model->manifest()[i].numel;
}

int32_t tg_init(tg_model* m, uint64_t seed) {
  if (int32_t e = check_handle(m, "tg_init")) return e;
  if (seed >= kMaxSeed) return fail(TG_ERR_ARG, "seed must be an integer in [0, 2^53)");
  return guarded<int32_t>("tg_init", [&]() -> int32_t {
    m->model->init_from_seed(seed);
    m->data_seed = seed;
    m->batches_drawn = 0;
    m->gen.active = false;
    return TG_OK;
  });
}

int32_t tg_set_hyper(tg_model* m, double lr, double beta1, double beta2, double eps,
                     double weight_decay, double grad_clip) {
  if (int32_t e = check_handle(m, "tg_set_hyper")) return e;
  if (!(std::isfinite(lr) && lr > 0))
    return fail(TG_ERR_HYPER, "lr must be a positive finite number, got " + num(lr));
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
    return fail(TG_ERR_HYPER, "beta1 and beta2 must be in [0, 1), got " + num(beta1) +
                                  " and " + num(beta2));
  if (!(std::isfinite(eps) && eps > 0))
    return fail(TG_ERR_HYPER, "eps must be a positive finite number, got " + num(eps));
  if (!(std::isfinite(weight_decay) && weight_decay >= 0))
    return fail(TG_ERR_HYPER, "weightDecay must be a finite number >= 0, got " +
                                  num(weight_decay));
  if (!(grad_clip > 0))
    return fail(TG_ERR_HYPER, "gradClip must be positive (+inf disables clipping), got " +
                                  num(grad_clip));
  m->hyper = tg::AdamWSettings{lr, beta1, beta2, eps, weight_decay, grad_clip};
  m->has_hyper = true;
  return TG_OK;
}

int32_t tg_set_corpus(tg_model* m, const uint8_t* bytes, int64_t n, double val_fraction) {
  if (int32_t e = check_handle(m, "tg_set_corpus")) return e;
  if (bytes == nullptr && n > 0) return fail(TG_ERR_ARG, "corpus bytes are null");
  std::string problem = tg::corpus_problem(n, val_fraction, m->model->config().ctx);
  if (!problem.empty()) return fail(TG_ERR_CORPUS, problem);
  const int64_t V = m->model->config().vocab;
  if (V < 256)
    for (int64_t i = 0; i < n; i++)
      if (bytes[i] >= V)
        return fail(TG_ERR_CORPUS, "corpus byte " + std::to_string(i) + " (" +
                                       std::to_string(bytes[i]) + ") is not below vocabSize " +
                                       std::to_string(V));
  return guarded<int32_t>("tg_set_corpus", [&]() -> int32_t {
    tg::Corpus c;
    c.bytes.assign(bytes, bytes + n);
    tg::split_sizes(n, val_fraction, &c.n_train, &c.n_val);
    m->corpus = std::move(c);
    m->has_corpus = true;
    return TG_OK;
  });
}

int32_t tg_set_data_state(tg_model* m, uint64_t seed, int64_t batches_drawn) {
  if (int32_t e = check_handle(m, "tg_set_data_state")) return e;
  if (seed >= kMaxSeed) return fail(TG_ERR_ARG, "data seed must be an integer in [0, 2^53)");
  if (batches_drawn < 0)
    return fail(TG_ERR_ARG, "batchesDrawn must be >= 0, got " + std::to_string(batches_drawn));
  m->data_seed = seed;
  m->batches_drawn = batches_drawn;
  return TG_OK;
}

int64_t tg_batches_drawn(const tg_model* m) {
  if (int32_t e = check_handle(m, "tg_batches_drawn")) return e;
  return m->batches_drawn;
}

uint64_t tg_data_seed(const tg_model* m) { return m ? m->data_seed : 0; }

int32_t tg_next_batch(tg_model* m, int32_t* x, int32_t* y) {
  if (int32_t e = check_handle(m, "tg_next_batch")) return e;
  if (!m->has_corpus) return fail(TG_ERR_CORPUS, "no corpus: call tg_set_corpus first");
  if (!x || !y) return fail(TG_ERR_ARG, "tg_next_batch: x or y is null");
  const tg::Config& c = m->model->config();
  tg::draw_batch(x, y, m->corpus, c.ctx, c.batch, m->data_seed, m->batches_drawn++);
  return TG_OK;
}

double tg_train_step(tg_model* m) {
  if (int32_t e = check_handle(m, "tg_train_step")) return e;
  if (!m->has_hyper) return fail(TG_ERR_HYPER, "no hyper-parameters: call tg_set_hyper first");
  if (!m->has_corpus) return fail(TG_ERR_CORPUS, "no corpus: call tg_set_corpus first");
  return guarded<double>("tg_train_step", [&]() -> double {
    tg::Model& model = *m->model;
    const tg::Config& c = model.config();
    m->gen.active = false;
    tg::draw_batch(model.tokens(), model.targets(), m->corpus, c.ctx, c.batch, m->data_seed,
                   m->batches_drawn++);
    return finish_step(m, model.forward_backward(model.tokens(), model.targets(), c.batch, c.ctx));
  });
}

double tg_train_step_batch(tg_model* m, const int32_t* x, const int32_t* y, int32_t rows, int32_t t) {
  if (int32_t e = check_handle(m, "tg_train_step_batch")) return e;
  if (!m->has_hyper) return fail(TG_ERR_HYPER, "no hyper-parameters: call tg_set_hyper first");
  if (int32_t e = check_batch(m, x, y, rows, t, true)) return e;
  return guarded<double>("tg_train_step_batch", [&]() -> double {
    m->gen.active = false;
    return finish_step(m, m->model->forward_backward(x, y, rows, t));
  });
}

double tg_forward_backward(tg_model* m, const int32_t* x, const int32_t* y, int32_t rows, int32_t t) {
  if (int32_t e = check_handle(m, "tg_forward_backward")) return e;
  if (int32_t e = check_batch(m, x, y, rows, t, true)) return e;
  return guarded<double>("tg_forward_backward", [&]() -> double {
    m->gen.active = false;
    return m->model->forward_backward(x, y, rows, t);
  });
}

double tg_forward_loss(tg_model* m, const int32_t* x, const int32_t* y, int32_t rows, int32_t t) {
  if (int32_t e = check_handle(m, "tg_forward_loss")) return e;
  if (int32_t e = check_batch(m, x, y, rows, t, true)) return e;
  return guarded<double>("tg_forward_loss", [&]() -> double {
    m->gen.active = false;
    return m->model->forward_loss(x, y, rows, t);
  });
}

double tg_eval(tg_model* m, int32_t eval_windows) {
  if (int32_t e = check_handle(m, "tg_eval")) return e;
  if (!m->has_corpus) return fail(TG_ERR_CORPUS, "no corpus: call tg_set_corpus first");
  if (eval_windows < 1)
    return fail(TG_ERR_ARG, "evalWindows must be >= 1, got " + std::to_string(eval_windows));
  return guarded<double>("tg_eval", [&]() -> double {
    tg::Model& model = *m->model;
    const int64_t ctx = model.config().ctx, B = model.config().batch;
    const int64_t n_val = m->corpus.n_val;
    const int64_t k = tg::eval_window_count(n_val, ctx, eval_windows);
    m->gen.active = false;
    double total = 0;  // summed cross-entropy over all k * ctx positions
    for (int64_t i0 = 0; i0 < k; i0 += B) {
      const int64_t rows = k - i0 < B ? k - i0 : B;
      for (int64_t r = 0; r < rows; r++) {
        const int64_t start = tg::eval_window_start(n_val, ctx, k, i0 + r);
        tg::windows_at(model.tokens() + r * ctx, model.targets() + r * ctx, m->corpus.val(), &start,
                       1, ctx);
      }
      total += model.forward_loss(model.tokens(), model.targets(), rows, ctx) *
               static_cast<double>(rows * ctx);
    }
    return total / static_cast<double>(k * ctx);
  });
}

double tg_last_grad_norm(const tg_model* m) {
  if (int32_t e = check_handle(m, "tg_last_grad_norm")) return e;
  return m->last_norm;
}

int64_t tg_step(const tg_model* m) {
  if (int32_t e = check_handle(m, "tg_step")) return e;
  return m->model->step();
}

float* tg_weights(tg_model* m) { return check_handle(m, "tg_weights") ? nullptr : m->model->weights(); }

const float* tg_grads(const tg_model* m) {
  return check_handle(m, "tg_grads") ? nullptr : m->model->grads();
}

int32_t tg_gen_begin(tg_model* m, const int32_t* prompt, int32_t n_prompt, double temperature,
                     int32_t top_k, uint64_t sample_seed, int32_t use_kv_cache) {
  if (int32_t e = check_handle(m, "tg_gen_begin")) return e;
  if (n_prompt < 1)
    return fail(TG_ERR_ARG, "the prompt is empty: generation needs at least one token to start from");
  if (int32_t e = check_tokens(m, prompt, n_prompt, "prompt")) return e;
  if (!(temperature >= 0 && std::isfinite(temperature)))
    return fail(TG_ERR_ARG, "temperature must be a finite number >= 0 (0 = greedy), got " +
                                num(temperature));
  if (top_k < 0) return fail(TG_ERR_ARG, "top-k must be >= 0 (0 = all tokens), got " + std::to_string(top_k));
  if (sample_seed >= kMaxSeed) return fail(TG_ERR_ARG, "sample seed must be an integer in [0, 2^53)");
  return guarded<int32_t>("tg_gen_begin", [&]() -> int32_t {
    tg::gen_begin(*m->model, m->gen, prompt, n_prompt, temperature, top_k, sample_seed,
                  use_kv_cache != 0);
    return TG_OK;
  });
}

int32_t tg_gen_next(tg_model* m) {
  if (int32_t e = check_handle(m, "tg_gen_next")) return e;
  if (!m->gen.active)
    return fail(TG_ERR_ARG, "no generation in progress: call tg_gen_begin first (training ends it)");
  return guarded<int32_t>("tg_gen_next", [&]() -> int32_t { return tg::gen_next(*m->model, m->gen); });
}

int32_t tg_generate(tg_model* m, const int32_t* prompt, int32_t n_prompt, int32_t max_new,
                    double temperature, int32_t top_k, uint64_t sample_seed, int32_t use_kv_cache,
                    int32_t* out) {
  if (int32_t e = check_handle(m, "tg_generate")) return e;
  if (max_new < 0) return fail(TG_ERR_ARG, "max new tokens must be >= 0, got " + std::to_string(max_new));
  if (max_new > 0 && out == nullptr) return fail(TG_ERR_ARG, "tg_generate: out is null");
  if (int32_t e = tg_gen_begin(m, prompt, n_prompt, temperature, top_k, sample_seed, use_kv_cache))
    return e;
  for (int32_t i = 0; i < max_new; i++) {
    int32_t token = tg_gen_next(m);
    if (token < 0) return token;
    out[i] = token;
  }
  m->gen.active = false;
  return max_new;
}

int64_t tg_state_bytes(const tg_model* m, int32_t with_moments) {
  if (int32_t e = check_handle(m, "tg_state_bytes")) return e;
  return tg::state_size(m->model->param_count(), with_moments != 0);
}

int64_t tg_export_state(const tg_model* m, uint8_t* buf, int64_t cap, int32_t with_moments) {
  if (int32_t e = check_handle(m, "tg_export_state")) return e;
  const int64_t need = tg::state_size(m->model->param_count(), with_moments != 0);
  if (buf == nullptr || cap < need)
    return fail(TG_ERR_ARG, "export buffer of " + std::to_string(cap) + " bytes is too small: the state needs " +
                                std::to_string(need));
  tg::export_state(*m->model, buf, with_moments != 0);
  return need;
}

int32_t tg_import_state(tg_model* m, const uint8_t* buf, int64_t n) {
  if (int32_t e = check_handle(m, "tg_import_state")) return e;
  return guarded<int32_t>("tg_import_state", [&]() -> int32_t {
    std::string problem = tg::state_problem(*m->model, buf, n);
    if (!problem.empty()) return fail(TG_ERR_STATE, problem);
    tg::import_state(*m->model, buf, n);
    m->gen.active = false;
    return TG_OK;
  });
}

const uint8_t* tg_state_ptr(const tg_model* m) {
  return check_handle(m, "tg_state_ptr") ? nullptr : m->model->state_bytes();
}

}  // extern "C"
