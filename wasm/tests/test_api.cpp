// Bad input through the C API: every case must return its error code with a message, never crash
// or leak. Built and run once under AddressSanitizer + UBSan (wasm/native.mk: test_api_asan).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "config_rules_generated.h"
#include "tinygpt_api.h"

// Under AddressSanitizer an impossible allocation must return null (as it does in production)
// instead of ASan reporting it: the "arena too large" case below relies on it.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }

namespace {

// presets.json's model defaults (the header scripts/config_rules_header.py generates), not numbers
// of our own.
constexpr int32_t V = tg::rules::kVocabSize;
constexpr double EPS = tg::rules::kLayerNormEps, STD = tg::rules::kInitStd;

int g_failures = 0;

void expect(const char* what, long long got, long long want_code) {
  const bool ok = got == want_code && (want_code >= 0 || std::strlen(tg_last_error()) > 0);
  std::printf("%-48s -> %lld (want %lld) %s%s%s\n", what, got, want_code, ok ? "ok" : "FAIL",
              want_code < 0 ? ": " : "", want_code < 0 ? tg_last_error() : "");
  if (!ok) g_failures++;
}

void expect_null(const char* what, tg_model* m, int32_t want_code) {
  const bool ok = m == nullptr && tg_last_error_code() == want_code;
  std::printf("%-48s -> %s code %d %s: %s\n", what, m ? "handle" : "NULL", tg_last_error_code(),
              ok ? "ok" : "FAIL", tg_last_error());
  if (!ok) g_failures++;
  tg_destroy(m);
}

tg_model* create(tg_config config, int32_t batch, int32_t n_threads) {
  return tg_create(&config, batch, n_threads);
}

// Small dims on purpose: the test is about the checks, not the arithmetic.
tg_model* small_model() { return create({1, 2, 8, 8, V, EPS, STD}, 2, 1); }

}  // namespace

int main() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  expect_null("create: nLayer = 0", create({0, 2, 8, 8, V, EPS, STD}, 2, 1), TG_ERR_CONFIG);
  expect_null("create: dModel = -8", create({1, 2, -8, 8, V, EPS, STD}, 2, 1), TG_ERR_CONFIG);
  expect_null("create: ctx = 0", create({1, 2, 8, 0, V, EPS, STD}, 2, 1), TG_ERR_CONFIG);
  expect_null("create: nHead = 0", create({1, 0, 8, 8, V, EPS, STD}, 2, 1), TG_ERR_CONFIG);
  expect_null("create: nHead 3 does not divide dModel 8", create({1, 3, 8, 8, V, EPS, STD}, 2, 1),
              TG_ERR_CONFIG);
  expect_null("create: batch = -1", create({1, 2, 8, 8, V, EPS, STD}, -1, 1), TG_ERR_CONFIG);
  expect_null("create: vocab = 0", create({1, 2, 8, 8, 0, EPS, STD}, 2, 1), TG_ERR_CONFIG);
  expect_null("create: layerNormEps = NaN", create({1, 2, 8, 8, V, nan, STD}, 2, 1), TG_ERR_CONFIG);
  expect_null("create: n_threads = 0", create({1, 2, 8, 8, V, EPS, STD}, 2, 0), TG_ERR_CONFIG);
  expect_null("create: config = NULL", tg_create(nullptr, 2, 1), TG_ERR_ARG);
  expect("arena_bytes_for: config = NULL", tg_arena_bytes_for(nullptr, 2), TG_ERR_ARG);
  const tg_config five_heads{1, 5, 8, 8, V, EPS, STD};
  expect("arena_bytes_for: nHead 5, dModel 8", tg_arena_bytes_for(&five_heads, 2), TG_ERR_CONFIG);
  const tg_config at_bounds{4096, 1, 65536, 1 << 20, V, EPS, STD};
  expect("arena_bytes_for: dims at their bounds (overflow)",
         tg_arena_bytes_for(&at_bounds, 1 << 20), TG_ERR_CONFIG);
  expect_null("create: an arena of ~3 TB cannot be allocated",
              create({64, 16, 16384, 64, V, EPS, STD}, 1, 1), TG_ERR_ALLOC);

  tg_model* m = small_model();
  if (!m) {
    std::printf("FAIL: could not create the small model: %s\n", tg_last_error());
    return 1;
  }
  expect("init seed 7", tg_init(m, 7), TG_OK);
  expect("init seed 2^53", tg_init(m, 1ull << 53), TG_ERR_ARG);

  expect("set_hyper: lr = NaN", tg_set_hyper(m, nan, 0.9, 0.95, 1e-8, 0.1, 1.0), TG_ERR_HYPER);
  expect("set_hyper: lr = 0", tg_set_hyper(m, 0.0, 0.9, 0.95, 1e-8, 0.1, 1.0), TG_ERR_HYPER);
  expect("set_hyper: lr = -1", tg_set_hyper(m, -1.0, 0.9, 0.95, 1e-8, 0.1, 1.0), TG_ERR_HYPER);
  expect("set_hyper: beta1 = 1", tg_set_hyper(m, 1e-3, 1.0, 0.95, 1e-8, 0.1, 1.0), TG_ERR_HYPER);
  expect("set_hyper: eps = NaN", tg_set_hyper(m, 1e-3, 0.9, 0.95, nan, 0.1, 1.0), TG_ERR_HYPER);
  expect("set_hyper: gradClip = 0", tg_set_hyper(m, 1e-3, 0.9, 0.95, 1e-8, 0.1, 0.0), TG_ERR_HYPER);
  expect("train_step before set_hyper", static_cast<long long>(tg_train_step(m)), TG_ERR_HYPER);
  expect("set_hyper: gradClip = inf (no clipping)",
         tg_set_hyper(m, 1e-3, 0.9, 0.95, 1e-8, 0.1, std::numeric_limits<double>::infinity()),
         TG_OK);
  expect("set_hyper: valid", tg_set_hyper(m, 1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0), TG_OK);
  expect("train_step before set_corpus", static_cast<long long>(tg_train_step(m)), TG_ERR_CORPUS);

  const char* text = "To be, or not to be, that is the question.";
  const auto* bytes = reinterpret_cast<const uint8_t*>(text);
  expect("set_corpus: 10 bytes for ctx 8", tg_set_corpus(m, bytes, 10, 0.1), TG_ERR_CORPUS);
  expect("set_corpus: empty", tg_set_corpus(m, bytes, 0, 0.1), TG_ERR_CORPUS);
  expect("set_corpus: null bytes", tg_set_corpus(m, nullptr, 100, 0.1), TG_ERR_ARG);
  expect("set_corpus: valFraction = 1.5", tg_set_corpus(m, bytes, 42, 1.5), TG_ERR_CORPUS);
  expect("set_corpus: 42 bytes, valFraction 0.3", tg_set_corpus(m, bytes, 42, 0.3), TG_OK);
  const double loss = tg_train_step(m);
  expect("train_step after set_corpus (loss >= 0)", loss >= 0 ? 0 : static_cast<long long>(loss),
         TG_OK);
  expect("eval: 0 windows", static_cast<long long>(tg_eval(m, 0)), TG_ERR_ARG);

  std::vector<int32_t> x(16, 65), y(16, 66);
  expect("forward_backward: rows 3 > batch 2",
         static_cast<long long>(tg_forward_backward(m, x.data(), y.data(), 3, 8)), TG_ERR_ARG);
  expect("forward_backward: t 9 > ctx 8",
         static_cast<long long>(tg_forward_backward(m, x.data(), y.data(), 1, 9)), TG_ERR_ARG);
  y[5] = V;
  expect("forward_backward: target vocabSize",
         static_cast<long long>(tg_forward_backward(m, x.data(), y.data(), 2, 8)), TG_ERR_ARG);
  y[5] = -1;
  expect("train_step_batch: target -1",
         static_cast<long long>(tg_train_step_batch(m, x.data(), y.data(), 2, 8)), TG_ERR_ARG);
  expect("forward_loss: null x",
         static_cast<long long>(tg_forward_loss(m, nullptr, y.data(), 2, 8)), TG_ERR_ARG);

  const int64_t full = tg_state_bytes(m, 1), weights_only = tg_state_bytes(m, 0);
  std::vector<uint8_t> state(static_cast<size_t>(full));
  expect("export: buffer one byte short", tg_export_state(m, state.data(), full - 1, 1),
         TG_ERR_ARG);
  expect("export: full state", tg_export_state(m, state.data(), full, 1), full);
  std::vector<float> before(tg_weights(m), tg_weights(m) + tg_param_count(m));
  expect("import: truncated (full - 1 bytes)", tg_import_state(m, state.data(), full - 1),
         TG_ERR_STATE);
  expect("import: 3 bytes", tg_import_state(m, state.data(), 3), TG_ERR_STATE);
  expect("import: weights-only length + 4", tg_import_state(m, state.data(), weights_only + 4),
         TG_ERR_STATE);
  expect("import: null buffer", tg_import_state(m, nullptr, full), TG_ERR_STATE);
  std::vector<uint8_t> bad = state;
  const int32_t negative = -3;
  std::memcpy(bad.data(), &negative, 4);
  expect("import: negative step", tg_import_state(m, bad.data(), full), TG_ERR_STATE);
  bad = state;
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(bad.data() + 4 + 4 * 10, &inf, 4);
  expect("import: inf in weights", tg_import_state(m, bad.data(), full), TG_ERR_STATE);
  bad = state;
  const float fnan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bad.data() + full - 4, &fnan, 4);
  expect("import: NaN in AdamW v", tg_import_state(m, bad.data(), full), TG_ERR_STATE);
  const bool unchanged = std::memcmp(before.data(), tg_weights(m), before.size() * 4) == 0;
  expect("weights unchanged after the failed imports", unchanged ? 0 : 1, 0);
  expect("import: the valid state", tg_import_state(m, state.data(), full), TG_OK);
  expect("import: weights only", tg_import_state(m, state.data(), weights_only), TG_OK);

  const int32_t prompt[2] = {72, 105};
  int32_t out[20];
  expect("generate: empty prompt", tg_generate(m, prompt, 0, 4, 0.0, 0, 0, 1, out), TG_ERR_ARG);
  expect("generate: temperature NaN", tg_generate(m, prompt, 2, 4, nan, 0, 0, 1, out), TG_ERR_ARG);
  expect("generate: temperature -1", tg_generate(m, prompt, 2, 4, -1.0, 0, 0, 1, out), TG_ERR_ARG);
  expect("generate: top-k -1", tg_generate(m, prompt, 2, 4, 1.0, -1, 0, 1, out), TG_ERR_ARG);
  expect("generate: null out", tg_generate(m, prompt, 2, 4, 1.0, 0, 0, 1, nullptr), TG_ERR_ARG);
  expect("gen_next without gen_begin", tg_gen_next(m), TG_ERR_ARG);
  expect("generate: 20 tokens past ctx 8 (restarts)",
         tg_generate(m, prompt, 2, 20, 0.8, 5, 3, 1, out), 20);

  expect("null handle: train_step", static_cast<long long>(tg_train_step(nullptr)), TG_ERR_ARG);
  expect("null handle: import", tg_import_state(nullptr, state.data(), full), TG_ERR_ARG);
  expect("tensor_name index -1", tg_tensor_name(m, -1) == nullptr ? tg_last_error_code() : 0,
         TG_ERR_ARG);
  // LoRA entry points on a plain model: refused, naming tg_create_lora.
  expect("plain model: lora_init", tg_lora_init(m, 1), TG_ERR_ARG);
  expect("plain model: lora_param_count is 0", tg_lora_param_count(m), 0);
  expect("plain model: lora_merge", tg_lora_merge(m), TG_ERR_ARG);
  expect("plain model: lora_state_bytes", tg_lora_state_bytes(m, 1), TG_ERR_ARG);
  tg_destroy(m);
  tg_destroy(nullptr);

  // ---- LoRA
  const tg_config small{1, 2, 8, 8, V, EPS, STD};
  const tg_lora_config qv{2, TG_LORA_Q_PROJ | TG_LORA_V_PROJ, 4.0};
  auto create_lora = [&](tg_lora_config l) { return tg_create_lora(&small, &l, 2, 1); };
  expect_null("create_lora: rank 0", create_lora({0, 1, 4.0}), TG_ERR_CONFIG);
  expect_null("create_lora: rank 4097", create_lora({4097, 1, 4.0}), TG_ERR_CONFIG);
  expect_null("create_lora: alpha 0", create_lora({2, 1, 0.0}), TG_ERR_CONFIG);
  expect_null("create_lora: alpha NaN", create_lora({2, 1, nan}), TG_ERR_CONFIG);
  expect_null("create_lora: no targets", create_lora({2, 0, 4.0}), TG_ERR_CONFIG);
  expect_null("create_lora: target bit 6", create_lora({2, 64, 4.0}), TG_ERR_CONFIG);
  expect_null("create_lora: lora = NULL", tg_create_lora(&small, nullptr, 2, 1), TG_ERR_ARG);
  const tg_config bad_heads{1, 3, 8, 8, V, EPS, STD};
  expect_null("create_lora: nHead 3 does not divide dModel 8",
              tg_create_lora(&bad_heads, &qv, 2, 1), TG_ERR_CONFIG);
  expect("lora_arena_bytes_for: lora = NULL", tg_lora_arena_bytes_for(&small, nullptr, 2),
         TG_ERR_ARG);
  const tg_lora_config huge_rank{4096, 63, 1.0};
  expect("lora_arena_bytes_for: rank 4096, every target, dims at bounds (overflow)",
         tg_lora_arena_bytes_for(&at_bounds, &huge_rank, 1 << 20), TG_ERR_CONFIG);
  m = create_lora(qv);
  if (!m) {
    std::printf("FAIL: could not create the small LoRA model: %s\n", tg_last_error());
    return 1;
  }
  expect("lora: grads of the frozen base", tg_grads(m) == nullptr ? tg_last_error_code() : 0,
         TG_ERR_ARG);
  expect("lora: state_bytes with base moments", tg_state_bytes(m, 1), TG_ERR_ARG);
  expect("lora: export with base moments", tg_export_state(m, state.data(), full, 1), TG_ERR_ARG);
  expect("lora: import a full state (keeps the weights)", tg_import_state(m, state.data(), full),
         TG_OK);
  expect("lora: set_hyper", tg_set_hyper(m, 1e-3, 0.9, 0.95, 1e-8, 0.0, 1.0), TG_OK);
  expect("lora: set_corpus", tg_set_corpus(m, bytes, 42, 0.3), TG_OK);
  expect("lora: train_step before lora_init", static_cast<long long>(tg_train_step(m)), TG_ERR_ARG);
  expect("lora: lora_init seed 2^53", tg_lora_init(m, 1ull << 53), TG_ERR_ARG);
  expect("lora: lora_init", tg_lora_init(m, 3), TG_OK);
  const double lora_loss = tg_train_step(m);
  expect("lora: train_step (loss >= 0)", lora_loss >= 0 ? 0 : static_cast<long long>(lora_loss),
         TG_OK);
  expect("lora: step counts the adapters' steps", tg_step(m), 1);
  expect("lora: unmerge while not merged", tg_lora_unmerge(m), TG_ERR_ARG);
  expect("lora: merge", tg_lora_merge(m), TG_OK);
  expect("lora: merged", tg_lora_merged(m), 1);
  expect("lora: merge twice", tg_lora_merge(m), TG_ERR_ARG);
  expect("lora: train_step while merged", static_cast<long long>(tg_train_step(m)), TG_ERR_ARG);
  expect("lora: disable while merged", tg_lora_set_enabled(m, 0), TG_ERR_ARG);
  expect("lora: lora_init while merged", tg_lora_init(m, 3), TG_ERR_ARG);
  expect("lora: unmerge", tg_lora_unmerge(m), TG_OK);
  expect("lora: disable", tg_lora_set_enabled(m, 0), TG_OK);
  expect("lora: forward_backward while disabled",
         static_cast<long long>(tg_forward_backward(m, x.data(), x.data(), 2, 8)), TG_ERR_ARG);
  expect("lora: generate without the adapters", tg_generate(m, prompt, 2, 4, 0.0, 0, 0, 1, out), 4);
  expect("lora: merge while disabled", tg_lora_merge(m), TG_ERR_ARG);
  expect("lora: enable", tg_lora_set_enabled(m, 1), TG_OK);
  const int64_t lfull = tg_lora_state_bytes(m, 1), lsmall = tg_lora_state_bytes(m, 0);
  std::vector<uint8_t> lstate(static_cast<size_t>(lfull));
  expect("lora: export adapters one byte short",
         tg_lora_export_state(m, lstate.data(), lfull - 1, 1), TG_ERR_ARG);
  expect("lora: export adapters", tg_lora_export_state(m, lstate.data(), lfull, 1), lfull);
  expect("lora: import adapters, truncated", tg_lora_import_state(m, lstate.data(), lfull - 1),
         TG_ERR_STATE);
  expect("lora: import adapters, null", tg_lora_import_state(m, nullptr, lfull), TG_ERR_STATE);
  bad.assign(lstate.begin(), lstate.end());
  const float minus_one = -1.0f;
  std::memcpy(bad.data() + lfull - 4, &minus_one, 4);
  expect("lora: import adapters, negative v", tg_lora_import_state(m, bad.data(), lfull),
         TG_ERR_STATE);
  bad.assign(lstate.begin(), lstate.end());
  std::memcpy(bad.data() + 4, &fnan, 4);
  expect("lora: import adapters, NaN", tg_lora_import_state(m, bad.data(), lfull), TG_ERR_STATE);
  expect("lora: import adapters", tg_lora_import_state(m, lstate.data(), lfull), TG_OK);
  expect("lora: import adapters without moments", tg_lora_import_state(m, lstate.data(), lsmall),
         TG_OK);
  expect("lora: tensor_name index 4 of 4",
         tg_lora_tensor_name(m, 4) == nullptr ? tg_last_error_code() : 0, TG_ERR_ARG);
  tg_destroy(m);

  std::printf("%s: %d failure(s)\n", g_failures ? "FAIL" : "PASS", g_failures);
  return g_failures ? 1 : 0;
}
