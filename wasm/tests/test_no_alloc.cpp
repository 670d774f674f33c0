// Nothing allocates inside a training step, an eval, a generation or a state import/export, of a
// plain model or of a LoRA one (with merge and unmerge): the model's one arena is sized at creation
// (issue 4's Memory64 build must never grow memory while pool threads run). Counts every operator
// new and malloc in the process, pool threads included.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "config_rules_generated.h"
#include "tinygpt_api.h"

namespace {
std::atomic<long> g_allocations{0};
}

#ifdef __GLIBC__
extern "C" void* __libc_malloc(size_t);
extern "C" void* __libc_calloc(size_t, size_t);
extern "C" void* __libc_realloc(void*, size_t);
extern "C" void* malloc(size_t n) {
  g_allocations++;
  return __libc_malloc(n);
}
extern "C" void* calloc(size_t a, size_t b) {
  g_allocations++;
  return __libc_calloc(a, b);
}
extern "C" void* realloc(void* p, size_t n) {
  g_allocations++;
  return __libc_realloc(p, n);
}
#endif

void* operator new(size_t n) {
  g_allocations++;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, std::align_val_t a) {
  g_allocations++;
  if (void* p = std::aligned_alloc(
          static_cast<size_t>(a),
          (n + static_cast<size_t>(a) - 1) / static_cast<size_t>(a) * static_cast<size_t>(a)))
    return p;
  throw std::bad_alloc();
}
void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return operator new(n, a);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }

int main() {
  int failures = 0;
  auto check = [&](const char* what, long before) {
    const long n = g_allocations.load() - before;
    std::printf("%-40s %ld allocation(s) %s\n", what, n, n == 0 ? "ok" : "FAIL");
    if (n) failures++;
  };
  // Two threads so the pool's workers run the kernels too.
  const long at_start = g_allocations.load();
  const tg_config config{
      2, 2, 32, 16, tg::rules::kVocabSize, tg::rules::kLayerNormEps, tg::rules::kInitStd};
  tg_model* m = tg_create(&config, 4, 2);
  const long by_create = g_allocations.load() - at_start;
  std::printf("%-40s %ld allocation(s) %s\n", "control: tg_create (must count some)", by_create,
              by_create > 0 ? "ok" : "FAIL: the counting hooks are not active");
  if (by_create == 0) failures++;
  if (!m) {
    std::printf("FAIL: create: %s\n", tg_last_error());
    return 1;
  }
  std::string text;
  for (int i = 0; i < 40; i++) text += "It is the east, and Juliet is the sun. ";
  tg_init(m, 1);
  tg_set_hyper(m, 1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0);
  tg_set_corpus(m, reinterpret_cast<const uint8_t*>(text.data()), static_cast<int64_t>(text.size()),
                0.1);
  std::vector<int32_t> x(4 * 16, 73), y(4 * 16, 116), prompt = {84, 111}, out(40);
  std::vector<uint8_t> state(static_cast<size_t>(tg_state_bytes(m, 1)));
  tg_train_step(m);  // warm-up: lazily created pool state, if any, is not a per-step cost
  tg_generate(m, prompt.data(), 2, 4, 0.8, 10, 1, 1, out.data());

  long before = g_allocations.load();
  for (int i = 0; i < 3; i++) tg_train_step(m);
  check("tg_train_step x3", before);
  before = g_allocations.load();
  tg_train_step_batch(m, x.data(), y.data(), 4, 16);
  tg_forward_backward(m, x.data(), y.data(), 3, 10);
  tg_forward_loss(m, x.data(), y.data(), 2, 16);
  check("train_step_batch, forward_backward, loss", before);
  before = g_allocations.load();
  tg_eval(m, 64);
  check("tg_eval", before);
  before = g_allocations.load();
  tg_generate(m, prompt.data(), 2, 40, 0.8, 10, 1, 1, out.data());
  tg_generate(m, prompt.data(), 2, 40, 0.0, 0, 0, 0, out.data());
  check("tg_generate (KV cache, recompute)", before);
  std::vector<float> attention(2 * 2 * 16 * 16), probs(256);
  before = g_allocations.load();
  tg_gen_begin(m, prompt.data(), 2, 0.8, 10, 1, 1);
  tg_gen_next(m);
  tg_gen_last_probs(m, probs.data());
  tg_attention(m, x.data(), 16, attention.data());
  check("tg_gen_last_probs, tg_attention", before);
  std::vector<double> sums(3 * static_cast<size_t>(tg_tensor_count(m))), entropy(2 * 2);
  before = g_allocations.load();
  tg_train_step_stats(m, sums.data());
  tg_attention_entropy(m, x.data(), 16, entropy.data());
  check("tg_train_step_stats, tg_attention_entropy", before);
  before = g_allocations.load();
  tg_export_state(m, state.data(), static_cast<int64_t>(state.size()), 1);
  tg_import_state(m, state.data(), static_cast<int64_t>(state.size()));
  check("export + import state", before);
  tg_destroy(m);

  // A LoRA model (tg_create_lora): its steps, forwards, merge and adapter state alike.
  const tg_lora_config lora{4, TG_LORA_Q_PROJ | TG_LORA_V_PROJ | TG_LORA_FC_OUT, 8.0};
  m = tg_create_lora(&config, &lora, 4, 2);
  if (!m) {
    std::printf("FAIL: create_lora: %s\n", tg_last_error());
    return 1;
  }
  tg_init(m, 1);
  tg_lora_init(m, 1);
  tg_set_hyper(m, 1e-3, 0.9, 0.95, 1e-8, 0.0, 1.0);
  tg_set_corpus(m, reinterpret_cast<const uint8_t*>(text.data()), static_cast<int64_t>(text.size()),
                0.1);
  std::vector<uint8_t> adapters(static_cast<size_t>(tg_lora_state_bytes(m, 1)));
  std::vector<uint8_t> base(static_cast<size_t>(tg_state_bytes(m, 0)));
  tg_train_step(m);  // warm-up
  tg_generate(m, prompt.data(), 2, 4, 0.8, 10, 1, 1, out.data());
  before = g_allocations.load();
  for (int i = 0; i < 3; i++) tg_train_step(m);
  tg_train_step_batch(m, x.data(), y.data(), 4, 16);
  tg_forward_backward(m, x.data(), y.data(), 3, 10);
  tg_forward_loss(m, x.data(), y.data(), 2, 16);
  check("LoRA: train steps, forward_backward, loss", before);
  before = g_allocations.load();
  tg_eval(m, 64);
  tg_generate(m, prompt.data(), 2, 40, 0.8, 10, 1, 1, out.data());
  tg_lora_set_enabled(m, 0);
  tg_generate(m, prompt.data(), 2, 40, 0.8, 10, 1, 1, out.data());
  tg_lora_set_enabled(m, 1);
  tg_attention(m, x.data(), 16, attention.data());
  check("LoRA: eval, generate with and without", before);
  std::vector<double> adapter_sums(3 * static_cast<size_t>(tg_lora_tensor_count(m)));
  before = g_allocations.load();
  tg_train_step_stats(m, adapter_sums.data());
  tg_attention_entropy(m, x.data(), 16, entropy.data());
  check("LoRA: tg_train_step_stats, tg_attention_entropy", before);
  before = g_allocations.load();
  tg_lora_merge(m);
  tg_generate(m, prompt.data(), 2, 40, 0.0, 0, 0, 1, out.data());
  tg_export_state(m, base.data(), static_cast<int64_t>(base.size()), 0);
  tg_lora_unmerge(m);
  check("LoRA: merge, export merged, unmerge", before);
  before = g_allocations.load();
  tg_lora_export_state(m, adapters.data(), static_cast<int64_t>(adapters.size()), 1);
  tg_lora_import_state(m, adapters.data(), static_cast<int64_t>(adapters.size()));
  tg_import_state(m, base.data(), static_cast<int64_t>(base.size()));
  tg_lora_init(m, 2);
  check("LoRA: adapter state export + import", before);
  tg_destroy(m);
  std::printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
