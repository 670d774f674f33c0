// The TinyGPT model: config, manifest, the one arena, forward, backward and the training step.
// Shapes: B batch rows, T time (<= ctx), C dModel, H heads, D = C/H, V vocab, L layers, P params.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "adamw.h"
#include "thread_pool.h"

namespace tg {

// The adapted projections of LoRA, in the canonical order of python_ref/lora.py's TARGETS (the
// adapter manifest's order within a block); bit i of LoraConfig::targets is target i.
enum LoraTarget { kLoraQ, kLoraK, kLoraV, kLoraO, kLoraFcIn, kLoraFcOut, kLoraTargets };
extern const char* const kLoraTargetNames[kLoraTargets];    // "q_proj", ..., "fc_out"
constexpr uint64_t kLoraStreamKey = 0x4C6F526141646170ull;  // ASCII "LoRAAdap"

// LoRA mode (docs/format.md "LoRA adapter file"): rank 0 is a plain model. A LoRA model's arena
// holds the frozen base's weights but no base gradients or moments; the adapters have both.
struct LoraConfig {
  int64_t rank = 0;
  double alpha = 0;
  int32_t targets = 0;  // bit mask over LoraTarget
  bool on() const { return rank > 0; }
  bool has(int t) const { return (targets >> t) & 1; }
  float scale() const { return static_cast<float>(alpha / static_cast<double>(rank)); }
};

// A model's config: presets.json's model fields, named in snake_case (vocabSize: vocab_size), the
// training batch the arena is sized for, and LoRA's, if any.
struct Config {
  int64_t n_layer = 0, n_head = 0, d_model = 0, ctx = 0, vocab_size = 0;
  int64_t batch = 0;  // the most rows a training step runs; the arena is sized for it
  double layer_norm_eps = 0, init_std = 0;
  LoraConfig lora;
};

// Empty string if the config can work, else the reason: the first field presets.json's rules refuse
// (model fields, the checks across them, then batch: the order of every level), or an arena beyond
// any machine.
std::string config_problem(const Config& c);
// Empty if the LoRA settings can work (presets.json's rules.lora, then the targets), else the
// reason.
std::string lora_problem(const LoraConfig& l);

struct TensorInfo {
  std::string name;
  int64_t offset;  // element offset within a P-float block (weights, grads, m, v)
  int64_t numel;
  bool decay;  // 2-D+ tensor: AdamW applies weight decay
  bool init_normal;
  double init_std;  // for init_normal tensors
  float init_fill;  // 0 or 1 otherwise
};

// docs/format.md's order. The init stream walks it too.
std::vector<TensorInfo> build_manifest(const Config& c);
// The adapter manifest (docs/format.md "LoRA adapter file"): per block, per target in canonical
// order, A (r, in) then B (out, r); A's init_std is 1 / sqrt(in), B starts at 0. Empty without
// LoRA.
std::vector<TensorInfo> build_lora_manifest(const Config& c);
int64_t count_lora_params(const Config& c);

// One layer's tensors inside a P-float block (weights or grads). Linear weights are [out, in].
struct LayerParams {
  float *ln1w, *ln1b, *qw, *qb, *kw, *kb, *vw, *vb, *ow, *ob, *ln2w, *ln2b, *fcw, *fcb, *fcow,
      *fcob;
};
struct ParamViews {
  float *wte, *wpe;  // (V,C), (ctx,C)
  std::vector<LayerParams> layers;
  float *lnfw, *lnfb;  // (C)
};

// Saved forward activations of one layer, each (B,T,*) for the arena's B = batch, T = ctx; packed
// as (B,T,*) for the B, T of the last forward (k, v: (B,past+T,C)).
struct LayerActs {
  float* ln1;                  // (B,T,C)
  float *ln1_mean, *ln1_rstd;  // (B,T)
  float *q, *k, *v;            // (B,T,C)
  float* att;                  // (B,T,C) attention output before o_proj
  float* att_lse;              // (B,H,T)
  float* res2;                 // (B,T,C) x + attn
  float* ln2;                  // (B,T,C)
  float *ln2_mean, *ln2_rstd;  // (B,T)
  float* h;                    // (B,T,4C) fc_in output
  float* g;                    // (B,T,4C) gelu(h)
  float* res3;                 // (B,T,C) block output
};

// One adapted Linear of one layer: its adapters and their gradients (inside the arena's adapter
// blocks), its saved us = s · x A^T (B,T,r), and the frozen weight it adapts. A null A: not
// adapted.
struct LoraSlot {
  float *A = nullptr, *B = nullptr;    // (r,in), (out,r)
  float *dA = nullptr, *dB = nullptr;  // same shapes
  float* us = nullptr;                 // (B,T,r)
  float* W = nullptr;                  // (out,in), the base weight (merge and unmerge write it)
  int64_t in = 0, out = 0;
};
struct LayerLora {
  LoraSlot t[kLoraTargets];
};

// Generation's buffers (one sequence). Its KV cache needs none: it is the k, v activations of
// batch row 0, which forward() keeps between calls (see forward's `past`).
struct GenBuffers {
  int32_t* window;        // (ctx) the tokens the model currently sees
  int32_t* order;         // (V) sampler scratch
  double *scaled, *prob;  // (V) sampler scratch
};

class Model {
 public:
  // Throws nothing; check ok() / error() (the C API turns failures into codes).
  Model(const Config& c, int n_threads);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Bytes of the arena for a config (exact; what the constructor allocates).
  static int64_t arena_bytes_for(const Config& c);

  bool ok() const { return arena_ != nullptr; }
  const Config& config() const { return cfg_; }
  const std::vector<TensorInfo>& manifest() const { return manifest_; }
  int64_t param_count() const { return P_; }
  int64_t arena_bytes() const { return arena_bytes_; }
  ThreadPool& pool() { return *pool_; }
  const ThreadPool& pool() const { return *pool_; }

  // Weights from the init stream of seed (docs/determinism.md); zero moments and step.
  void init_from_seed(uint64_t seed);

  // LoRA (config().lora.on()): the adapters live in their own state block, laid out like the
  // .tinygpt state: i32 step | adapters (Q) | AdamW m (Q) | v (Q), with Q = lora_param_count().
  // A LoRA model has no base gradients or moments: grads(), moment_m(), moment_v() are null, and a
  // training step updates the adapters alone (forward_backward gives their gradients).
  bool lora() const { return cfg_.lora.on(); }
  const std::vector<TensorInfo>& lora_manifest() const { return lora_manifest_; }
  int64_t lora_param_count() const { return Q_; }
  // A from the init stream seed ^ kLoraStreamKey (1 / sqrt(in) each), B = 0, moments and step 0.
  void lora_init(uint64_t seed);
  float* lora_weights() { return lora_weights_; }
  const float* lora_grads() const { return lora_grads_; }
  uint8_t* lora_state_bytes() { return lora_state_ + kStepOffset; }
  const uint8_t* lora_state_bytes() const { return lora_state_ + kStepOffset; }
  int32_t lora_step() const;
  void set_lora_step(int32_t s);
  int64_t lora_adam_steps = 0;
  // Whether forwards add the adapters (enabled and not merged; merged, W carries them).
  bool lora_enabled = true;
  bool lora_merged = false;
  bool lora_active() const { return lora() && lora_enabled && !lora_merged; }
  // W += s · B A in every adapted Linear (merge) or W -= s · B A (unmerge); flips lora_merged.
  void lora_merge(bool merge);

  // Forward over tokens x (B,T) at positions past..past+T-1 (past + T <= ctx, B <= batch): logits
  // (B,T,V) in logits(). The one forward of training, evaluation and generation. past > 0 (B = 1
  // only) attends to the KV cache: the keys and values of positions 0..past-1 that the previous
  // forwards of this sequence left in the layers' k, v activations (row 0, position-major), where
  // this forward appends its own.
  void forward(const int32_t* x, int64_t B, int64_t T, int64_t past = 0);
  // Forward + mean cross-entropy against y (B,T).
  double forward_loss(const int32_t* x, const int32_t* y, int64_t B, int64_t T);
  // forward_loss, then every parameter gradient into grads() (overwritten, unclipped); in LoRA
  // mode (adapters active) the adapters' gradients into lora_grads() instead.
  double forward_backward(const int32_t* x, const int32_t* y, int64_t B, int64_t T);
  // Clip + AdamW with the grads now in grads() (LoRA: lora_grads(), the adapters updated); returns
  // the pre-clip global norm. stats (or null): 3 doubles per tensor of the manifest (LoRA: of the
  // adapter manifest), [sum g^2 before the clip, sum w^2 before the update, sum (w_after -
  // w_before)^2]; the update is the same, bit for bit, either way.
  double apply_update(const AdamWSettings& s, double* stats = nullptr);

  float* weights() { return weights_; }
  float* grads() { return grads_; }
  const float* grads() const { return grads_; }
  float* moment_m() { return m_; }
  float* moment_v() { return v_; }
  float* logits() { return logits_; }
  const float* logits() const { return logits_; }
  // The (batch, ctx) token buffers a forward reads: drawing a batch straight into them saves a
  // copy.
  int32_t* tokens() { return tokens_; }
  int32_t* targets() { return targets_; }
  // The .tinygpt state, contiguous in the arena: i32 step | weights | m | v (4 + 12P bytes; a LoRA
  // model: i32 step | weights, 4 + 4P). Little-endian hosts only (x86, ARM, WebAssembly), like the
  // format itself.
  static constexpr int64_t kStepOffset = 60;  // so the weights start 64-byte aligned
  uint8_t* state_bytes() { return state_ + kStepOffset; }
  const uint8_t* state_bytes() const { return state_ + kStepOffset; }
  int32_t step() const;
  void set_step(int32_t s);
  int64_t adam_steps = 0;  // steps since the moments were last zero: AdamW's bias-correction t

  GenBuffers& gen_buffers() { return gen_; }
  // Layer l's saved activations of the last forward (inspect.cpp reads its q, k).
  const LayerActs& layer_acts(int64_t l) const { return acts_[static_cast<size_t>(l)]; }

 private:
  struct Layout;
  void carve(Layout& a);
  void backward_lora(int64_t B, int64_t T);

  Config cfg_;
  std::vector<TensorInfo> manifest_;
  int64_t P_ = 0;
  std::unique_ptr<ThreadPool> pool_;
  uint8_t* arena_ = nullptr;
  int64_t arena_bytes_ = 0;

  uint8_t* state_ = nullptr;
  float *weights_ = nullptr, *grads_ = nullptr, *m_ = nullptr, *v_ = nullptr;
  ParamViews w_, gw_;
  int32_t *tokens_ = nullptr, *targets_ = nullptr;  // (B,T) of the current forward
  float* encoded_ = nullptr;                        // (B,T,C)
  std::vector<LayerActs> acts_;
  float *lnf_ = nullptr, *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr;  // (B,T,C), (B,T), (B,T)
  float* logits_ = nullptr;                                           // (B,T,V), then dlogits
  double *row_lse_ = nullptr, *row_loss_ = nullptr;                   // (B,T)
  float *dres_ = nullptr, *dln_ = nullptr, *datt_ = nullptr;          // (B,T,C)
  float *dq_ = nullptr, *dk_ = nullptr, *dv_ = nullptr;               // (B,T,C)
  float* dh_ = nullptr;                                               // (B,T,4C)
  float* att_scratch_ = nullptr;  // attention_scratch_size(B, T, C, H)
  double* norm_partials_ = nullptr;
  GenBuffers gen_;

  std::vector<TensorInfo> lora_manifest_;
  int64_t Q_ = 0;
  uint8_t* lora_state_ = nullptr;
  float *lora_weights_ = nullptr, *lora_grads_ = nullptr, *lora_m_ = nullptr, *lora_v_ = nullptr;
  std::vector<LayerLora> lora_layers_;
  float* lora_du_ = nullptr;       // (B,T,r) scratch of the backward
  float* lora_rm_ = nullptr;       // (r,B·T) scratch of lora.h's products
  float* lora_scratch_ = nullptr;  // (r,4C) scratch of lora.h's products; merge's s · B
};

}  // namespace tg
