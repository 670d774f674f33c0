/* TinyGPT C API: what the JS worker (through Emscripten) and the native tests (through ctypes)
 * call.
 *
 * Ownership and lifetime
 *   - tg_create() returns an opaque handle that owns ONE arena, allocated at creation from a size
 *     computed up front (weights, grads, AdamW m and v, activations, which hold generation's KV
 *     cache, activation grads, scratch). Nothing is allocated or grown inside a training step, an
 *     eval, a generation step or a look inside (tg_attention, tg_gen_last_probs), so a WASM memory
 * never grows while pool threads are running. tg_destroy() frees everything.
 *   - The corpus given to tg_set_corpus() is COPIED (the one allocation outside the arena, made
 * only by that call); the caller may free its buffer afterwards.
 *   - Pointers returned by tg_weights/tg_grads/tg_state_ptr point into the arena: valid until
 *     tg_destroy(); their contents change with every step.
 *   - A handle is not thread-safe: call it from one thread at a time (the model's own thread pool
 *     is internal).
 *
 * Error conventions
 *   - Nothing aborts and no C++ exception crosses this boundary. Functions returning int32_t give
 *     TG_OK (0) or a negative TG_ERR_* code. Functions returning a loss (double) give the loss
 *     (>= 0) or a negative TG_ERR_* code. Functions returning a count give it (>= 0) or a negative
 *     code. tg_create() returns NULL on failure.
 *   - After any failure tg_last_error() is a human-readable message naming the problem and
 *     tg_last_error_code() the code (per calling thread; valid until the next failing call).
 *   - A failing call leaves the model as it was (state buffers are fully validated before any byte
 *     of the model is overwritten).
 *
 * Units and types
 *   - Config dimensions and token counts are int32_t (they are small); every byte count, element
 *     count and batch counter is int64_t so a > 4 GB state never overflows. Seeds are uint64_t in
 *     [0, 2^53) (docs/determinism.md). Tokens are int32_t in [0, vocab_size).
 *   - Nothing here holds preset numbers: the caller passes the values of site/static/presets.json.
 *     What each value may be is that file's "rules", compiled in (scripts/config_rules_header.py
 *     writes them as a header at build time): a value they refuse gets the sentence python_ref
 *     and JS write for it.
 *   - The state layout is exactly the .tinygpt state (docs/format.md): i32 step | f32 weights x P |
 *     [f32 m x P | f32 v x P], little-endian, manifest order.
 *
 * LoRA fine-tuning (the section "LoRA" at the end)
 *   - tg_create_lora makes a model whose arena holds the frozen base's weights (no base gradients,
 *     no base AdamW moments) and, beside them, low-rank adapters on the chosen projections of every
 *     block, with their gradients and moments: y = W x + b + (alpha / rank) B (A x). On such a
 *     model the training entry points (tg_train_step, tg_train_step_batch, tg_forward_backward)
 *     train the adapters alone, and every forward (tg_forward_loss, tg_eval, generation,
 *     tg_attention) adds them unless they are disabled or merged into the weights.
 *   - tg_set_hyper's AdamW and clip settings apply to the adapters (weight decay to every adapter
 *     tensor; presets.json's "lora" section has the fine-tune's defaults: lr, weightDecay 0, rank,
 *     alpha, targets). Exact resume: the adapter state with moments (tg_lora_export_state) and the
 *     data stream's (seed, batches_drawn); the base comes from its own file.
 *   - The adapter state is laid out like the .tinygpt state over the adapter manifest
 *     (docs/format.md, "LoRA adapter file"): i32 step | f32 adapters x Q | [f32 m x Q | f32 v x Q].
 *     An adapter file's data is that state without the step, which its header holds.
 */
#ifndef TINYGPT_API_H
#define TINYGPT_API_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TG_OK 0
#define TG_ERR_CONFIG \
  (-1)                  /* invalid model config: non-positive dims, nHead not dividing dModel... */
#define TG_ERR_ARG (-2) /* null handle/pointer, token out of range, shape larger than the arena */
#define TG_ERR_STATE (-3)  /* state buffer of the wrong length, negative step, NaN/inf values */
#define TG_ERR_HYPER (-4)  /* hyper-parameters missing or invalid (NaN or non-positive lr, ...) */
#define TG_ERR_CORPUS (-5) /* no corpus set, or too short for the context */
#define TG_ERR_ALLOC (-6)  /* the arena (or the corpus copy) could not be allocated */
#define TG_ERR_NONFINITE \
  (-7) /* the loss or the gradient norm became NaN/inf: the update was skipped */
#define TG_ERR_INTERNAL (-8) /* an unexpected internal failure (a bug): the message says where */

typedef struct tg_model tg_model;

const char* tg_last_error(void);
int32_t tg_last_error_code(void);

/* ---- creation ----------------------------------------------------------------------------------
 */

/* A model's configuration: a preset's dims and the "model" values of site/static/presets.json.
 * Each field is named after its presets.json key in snake_case (nLayer: n_layer). Callers fill it
 * by name from the layout scripts/api_signatures.py reads here, so a field added here (and in
 * the model) needs no change in any caller. Fields: int32_t or double only, so the layout is the
 * same in every build (Memory64 included). */
typedef struct tg_config {
  int32_t n_layer;
  int32_t n_head;
  int32_t d_model;
  int32_t ctx;
  int32_t vocab_size;
  double layer_norm_eps;
  double init_std;
} tg_config;

/* Bytes of the arena a model of this config needs (so a loader can choose a build before creating),
 * or a negative TG_ERR_CONFIG. batch = the largest training batch (rows) the model will run. */
int64_t tg_arena_bytes_for(const tg_config* config, int32_t batch);

/* A model with all weights zero and step 0 (call tg_init or tg_import_state next). n_threads counts
 * the calling thread (1 = everything inline). The config is read, not kept. */
tg_model* tg_create(const tg_config* config, int32_t batch, int32_t n_threads);
void tg_destroy(tg_model* m);

int64_t tg_param_count(const tg_model* m);
int64_t tg_arena_bytes(const tg_model* m);
int32_t tg_n_threads(const tg_model* m);

/* The manifest (docs/format.md order): tensor i's name, element offset within a P-float block, and
 * element count. tg_tensor_name returns NULL for an index out of range. */
int32_t tg_tensor_count(const tg_model* m);
const char* tg_tensor_name(const tg_model* m, int32_t i);
int64_t tg_tensor_offset(const tg_model* m, int32_t i);
int64_t tg_tensor_numel(const tg_model* m, int32_t i);

/* ---- initialisation, hyper-parameters, data ----------------------------------------------------
 */

/* Weights from the portable init stream of `seed`; m = v = 0; step = 0; data stream = (seed, 0). */
int32_t tg_init(tg_model* m, uint64_t seed);

/* AdamW + clip settings (docs/determinism.md). Required before any training step. By presets.json's
 * rules: lr > 0 finite; 0 <= beta1, beta2 < 1; eps > 0; weight_decay >= 0; grad_clip > 0 (+inf = no
 * clipping; 0 would scale every gradient to zero). */
int32_t tg_set_hyper(tg_model* m, double lr, double beta1, double beta2, double eps,
                     double weight_decay, double grad_clip);

/* Copies the corpus bytes and splits it: nVal = floor(n * val_fraction), train = first n - nVal.
 * Both splits must hold ctx + 1 bytes (TG_ERR_CORPUS otherwise); bytes must be < vocab_size.
 * Does not touch the data stream position. */
int32_t tg_set_corpus(tg_model* m, const uint8_t* bytes, int64_t n, double val_fraction);

/* The data stream: batch b of the training split uses data-stream outputs b*B .. b*B+B-1.
 * (seed, batches_drawn) is the whole state; set it to resume exactly. */
int32_t tg_set_data_state(tg_model* m, uint64_t seed, int64_t batches_drawn);
int64_t tg_batches_drawn(const tg_model* m);
uint64_t tg_data_seed(const tg_model* m);

/* Writes the next batch's x and y (batch x ctx tokens each) without training on it, and advances
 * the stream (for tests and for callers that want to see the data). */
int32_t tg_next_batch(tg_model* m, int32_t* x, int32_t* y);

/* ---- training ----------------------------------------------------------------------------------
 */

/* Draws the next batch (B = the batch given to tg_create, T = ctx), forward, backward, clip,
 * AdamW. Returns the mean loss before the update, or a negative code. */
double tg_train_step(tg_model* m);

/* The same on a caller-given batch x, y: (rows, t) tokens, 1 <= rows <= batch, 1 <= t <= ctx. */
double tg_train_step_batch(tg_model* m, const int32_t* x, const int32_t* y, int32_t rows,
                           int32_t t);

/* Forward + backward only (no clip, no update): the loss; grads (unclipped) via tg_grads. */
double tg_forward_backward(tg_model* m, const int32_t* x, const int32_t* y, int32_t rows,
                           int32_t t);

/* Forward only: the mean loss of the batch. */
double tg_forward_loss(tg_model* m, const int32_t* x, const int32_t* y, int32_t rows, int32_t t);

/* Mean cross-entropy over K = min(eval_windows, nVal - ctx) windows of the val split. */
double tg_eval(tg_model* m, int32_t eval_windows);

/* Global gradient norm of the last training step, before clipping (LoRA: of the adapters'). */
double tg_last_grad_norm(const tg_model* m);
/* AdamW steps taken (the state's step; a LoRA model: the adapter state's step). */
int64_t tg_step(const tg_model* m);

/* P floats each, manifest order, in the arena. A LoRA model has no base gradients: tg_grads
 * returns NULL (TG_ERR_ARG; tg_lora_grads has the adapters'). */
float* tg_weights(tg_model* m);
const float* tg_grads(const tg_model* m);

/* ---- generation --------------------------------------------------------------------------------
 */

/* Appends up to max_new tokens after the prompt into out (capacity max_new). temperature 0 =
 * greedy; top_k 0 = all tokens; sample_seed keys the sample stream (determinism.md); use_kv_cache =
 * 0 runs a full recompute per token (same tokens, slower). Returns the number of tokens written. */
int32_t tg_generate(tg_model* m, const int32_t* prompt, int32_t n_prompt, int32_t max_new,
                    double temperature, int32_t top_k, uint64_t sample_seed, int32_t use_kv_cache,
                    int32_t* out);

/* Token-at-a-time generation for a UI: begin with a prompt, then each tg_gen_next returns one new
 * token (>= 0) or a negative code. Any training call or tg_generate ends the session. */
int32_t tg_gen_begin(tg_model* m, const int32_t* prompt, int32_t n_prompt, double temperature,
                     int32_t top_k, uint64_t sample_seed, int32_t use_kv_cache);
int32_t tg_gen_next(tg_model* m);

/* The next-byte probabilities the last tg_gen_next picked its token from: the softmax of the
 * model's logits at temperature 1 over all tokens (what the model predicts, before temperature and
 * top-k shape the draw), vocab_size floats into out (caller memory). TG_ERR_ARG unless a token has
 * been generated in the current session. Allocates nothing. */
int32_t tg_gen_last_probs(const tg_model* m, float* out);

/* ---- a look inside ------------------------------------------------------------------------------
 */

/* The attention probabilities of one sequence: runs the forward over tokens (1 <= t <= ctx of them)
 * and writes, for every layer and head, softmax(q k^T / sqrt(d_model / n_head)) with the causal
 * mask into out: n_layer x n_head x t x t floats, row-major, out[((l * n_head + h) * t + i) * t +
 * j] = how much query i attends to key j (0 for j > i; each row sums to 1). out is caller memory
 * and nothing is allocated. The forward reuses generation's KV cache, so this ends a generation
 * session. */
int32_t tg_attention(tg_model* m, const int32_t* tokens, int32_t t, float* out);

/* ---- training, seen (the page's training view)
 * ---------------------------------------------------
 */

/* tg_train_step, measured: the same step on the next batch of the data stream (the same weights,
 * bit for bit), and for each tensor i of the manifest (a LoRA model: of the adapter manifest)
 *   out[3i]     = the sum of squares of its gradient as the backward left it, before the clip,
 *   out[3i + 1] = the sum of squares of its weights before the update,
 *   out[3i + 2] = the sum of squares of the update (each weight after minus before, as float32),
 * summed in double in blocks of a fixed size (the same for any thread count). out: 3 x
 * tg_tensor_count (LoRA: tg_lora_tensor_count) doubles of caller memory, written only when the
 * step updated the model. python_ref/training_stats.py groups the sums per layer: gradient norm
 * and update-to-weight ratio. Costs two extra reads of the weights and gradients; allocates
 * nothing. Returns the loss, or a negative code as tg_train_step. */
double tg_train_step_stats(tg_model* m, double* out);

/* The attention entropy of one sequence: runs the forward over tokens (1 <= t <= ctx) and writes,
 * for every layer and head, the mean over the t queries of -sum_j p_ij ln p_ij (nats) of the
 * attention probabilities tg_attention gives: out[l * n_head + h], n_layer x n_head doubles of
 * caller memory. 0 is attention on one key; uniform attention gives mean_i ln(i + 1). Adds LoRA's
 * adapters as every forward does. Reuses generation's KV cache: ends a generation session. */
int32_t tg_attention_entropy(tg_model* m, const int32_t* tokens, int32_t t, double* out);

/* ---- state (.tinygpt state layout) --------------------------------------------------------------
 */

/* 4 + 4P bytes without moments, 4 + 12P with (a LoRA model has no base moments: with_moments
 * is TG_ERR_ARG there). */
int64_t tg_state_bytes(const tg_model* m, int32_t with_moments);

/* Writes the state into buf (capacity cap bytes); returns the bytes written or a negative code.
 * A LoRA model's weights are the base's, or with the adapters merged in after tg_lora_merge: the
 * merged model's state, for a plain .tinygpt. */
int64_t tg_export_state(const tg_model* m, uint8_t* buf, int64_t cap, int32_t with_moments);

/* Reads a state of exactly 4 + 4P (weights only: moments reset, AdamW bias correction restarts)
 * or 4 + 12P bytes (exact resume). Validated in full before the model changes. A LoRA model takes
 * either length and keeps the step and weights alone (its base is frozen): the adapters stay as
 * they are, and are no longer merged. */
int32_t tg_import_state(tg_model* m, const uint8_t* buf, int64_t n);

/* The arena holds the state contiguously (step | weights | m | v): a read-only view of
 * tg_state_bytes(m, 1) bytes (a LoRA model: tg_state_bytes(m, 0)), for exporting a huge model
 * without a second copy. */
const uint8_t* tg_state_ptr(const tg_model* m);

/* ---- LoRA --------------------------------------------------------------------------------------
 */

/* The adapted projections of every block, as a bit mask (docs/format.md's canonical order). */
#define TG_LORA_Q_PROJ 1
#define TG_LORA_K_PROJ 2
#define TG_LORA_V_PROJ 4
#define TG_LORA_O_PROJ 8
#define TG_LORA_FC_IN 16
#define TG_LORA_FC_OUT 32

/* LoRA settings: rank r and alpha by presets.json's rules ("lora": r in [1, 4096], alpha > 0);
 * targets a non-empty mask of TG_LORA_* (bit i: the i-th of q_proj, k_proj, v_proj, o_proj,
 * fc_in, fc_out). Each adapted Linear gets A (r, in) and B (out, r); scale = alpha / r. */
typedef struct tg_lora_config {
  int32_t rank;
  int32_t targets;
  double alpha;
} tg_lora_config;

/* Bytes of the arena of a LoRA model (tg_arena_bytes_for's counterpart), or a negative code:
 * the base's weights, activations, and the adapters with their gradients and moments; no base
 * gradients or moments. */
int64_t tg_lora_arena_bytes_for(const tg_config* config, const tg_lora_config* lora, int32_t batch);

/* A LoRA model: the base's weights zero (tg_import_state or tg_init sets them), the adapters zero
 * until tg_lora_init or tg_lora_import_state; adapters enabled, not merged. NULL on failure. */
tg_model* tg_create_lora(const tg_config* config, const tg_lora_config* lora, int32_t batch,
                         int32_t n_threads);

/* Adapters from the portable init stream (docs/format.md): A = float32(z_j / sqrt(in)) on the
 * stream seed XOR 0x4C6F526141646170, B = 0 (so the model computes exactly its base until it
 * trains); adapter moments and step 0. Refused while merged. The data stream is not touched. */
int32_t tg_lora_init(tg_model* m, uint64_t seed);

/* Q, the adapters' element count; 0 for a model without LoRA. */
int64_t tg_lora_param_count(const tg_model* m);

/* The adapter manifest (docs/format.md order: per block, per target, A then B): tensor i's name
 * ("blocks.0.attn.q_proj.lora_A"), element offset within a Q-float block, element count. */
int32_t tg_lora_tensor_count(const tg_model* m);
const char* tg_lora_tensor_name(const tg_model* m, int32_t i);
int64_t tg_lora_tensor_offset(const tg_model* m, int32_t i);
int64_t tg_lora_tensor_numel(const tg_model* m, int32_t i);

/* Q floats each, adapter-manifest order, in the arena (NULL and TG_ERR_ARG without LoRA). The
 * gradients are those of the last training call, unclipped until its update clipped them. */
float* tg_lora_weights(tg_model* m);
const float* tg_lora_grads(const tg_model* m);

/* The adapter state: 4 + 4Q bytes without moments, 4 + 12Q with. */
int64_t tg_lora_state_bytes(const tg_model* m, int32_t with_moments);
/* Writes it into buf (capacity cap); returns the bytes written or a negative code. */
int64_t tg_lora_export_state(const tg_model* m, uint8_t* buf, int64_t cap, int32_t with_moments);
/* Reads an adapter state of exactly 4 + 4Q bytes (moments reset: training restarts AdamW's bias
 * correction) or 4 + 12Q (exact resume: with tg_set_data_state, the same steps as an uninterrupted
 * run, bit for bit). Validated in full first (length, step >= 0, finite values, v >= 0); refused
 * while merged. */
int32_t tg_lora_import_state(tg_model* m, const uint8_t* buf, int64_t n);
/* A read-only view of the adapter state in the arena: tg_lora_state_bytes(m, 1) bytes. */
const uint8_t* tg_lora_state_ptr(const tg_model* m);

/* W += (alpha / r) B A in every adapted Linear (merge) and W -= the same product (unmerge): merged,
 * the forwards run the plain model and tg_export_state gives the merged model's weights; unmerged,
 * W is the base again up to float32 rounding. Training is refused while merged. Each ends a
 * generation session. */
int32_t tg_lora_merge(tg_model* m);
int32_t tg_lora_unmerge(tg_model* m);
/* 1 if merged, 0 if not, or a negative code. */
int32_t tg_lora_merged(const tg_model* m);

/* Whether forwards add the adapters: 0 samples (evaluates, looks inside) the base alone, 1 with
 * the adapters (the default). Refused while merged; training needs them enabled. Ends a
 * generation session. */
int32_t tg_lora_set_enabled(tg_model* m, int32_t enabled);
int32_t tg_lora_enabled(const tg_model* m);

#ifdef __cplusplus
}
#endif

#endif
