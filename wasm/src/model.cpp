#include "model.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>

#include "attention.h"
#include "config_rules.h"
#include "config_rules_generated.h"
#include "cross_entropy.h"
#include "embedding.h"
#include "gelu.h"
#include "layernorm.h"
#include "lora.h"
#include "matmul.h"
#include "prng.h"
#include "residual.h"

namespace tg {

std::string config_problem(const Config& c) {
  const auto& m = rules::kModel;
  std::string problem =
      first_problem({{m.n_layer, field_problem(m.n_layer, c.n_layer)},
                     {m.n_head, field_problem(m.n_head, c.n_head)},
                     {m.d_model, field_problem(m.d_model, c.d_model)},
                     {m.ctx, field_problem(m.ctx, c.ctx)},
                     {m.vocab_size, field_problem(m.vocab_size, c.vocab_size)},
                     {m.layer_norm_eps, field_problem(m.layer_norm_eps, c.layer_norm_eps)},
                     {m.init_std, field_problem(m.init_std, c.init_std)}});
  if (!problem.empty()) return problem;
  // The checks across fields name integer model fields (scripts/config_rules_header.py refuses any
  // other).
  auto value = [&](const std::string& name) -> int64_t {
    if (name == "nLayer") return c.n_layer;
    if (name == "nHead") return c.n_head;
    if (name == "dModel") return c.d_model;
    if (name == "ctx") return c.ctx;
    if (name == "vocabSize") return c.vocab_size;
    throw std::logic_error("a check across fields names " + name + ", not a model field");
  };
  for (const DivisibleCheck& check : rules::kModelChecks) {
    problem = divisible_problem(check, value(check.a), value(check.b));
    if (!problem.empty()) return problem;
  }
  problem = field_problem(rules::kTraining.batch, c.batch);
  if (!problem.empty()) return problem;
  if (c.lora.on() || c.lora.targets) {
    problem = lora_problem(c.lora);
    if (!problem.empty()) return problem;
  }
  // Within the rules' bounds the exact int64 sizes could still overflow: estimate the arena in
  // double (parameters x 4 blocks + activations, generously; adapters x 4 blocks and their saved
  // products) and refuse anything beyond 2^46 bytes.
  const double C = static_cast<double>(c.d_model), BT = static_cast<double>(c.batch) * c.ctx;
  const double params =
      static_cast<double>(c.vocab_size + c.ctx) * C + c.n_layer * (12 * C * C + 13 * C);
  const double r = static_cast<double>(c.lora.rank);
  const double bytes = 16 * params +
                       4 * BT * (c.n_layer * (20 * C + c.n_head + 8) + 16 * C + c.vocab_size + 8) +
                       16 * c.n_layer * r * 20 * C + 4 * BT * r * (6 * c.n_layer + 1) + 16 * C * r;
  if (bytes > 70368744177664.0) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "config needs an arena of about %.3g TB: beyond any machine",
                  bytes / 1e12);
    return buf;
  }
  return "";
}

const char* const kLoraTargetNames[kLoraTargets] = {"q_proj", "k_proj", "v_proj",
                                                    "o_proj", "fc_in",  "fc_out"};

std::string lora_problem(const LoraConfig& l) {
  const auto& r = rules::kLora;
  std::string problem = first_problem(
      {{r.rank, field_problem(r.rank, l.rank)}, {r.alpha, field_problem(r.alpha, l.alpha)}});
  if (!problem.empty()) return "LoRA " + problem;
  if (l.targets < 1 || l.targets >= (1 << kLoraTargets))
    return "LoRA targets must be a non-empty set of q_proj, k_proj, v_proj, o_proj, fc_in, fc_out "
           "(a bit mask in [1, 63], bit i for the i-th), got " +
           std::to_string(l.targets);
  return "";
}

namespace {

// (in, out) of target t's Linear.
void target_dims(int t, int64_t C, int64_t* in, int64_t* out) {
  *in = t == kLoraFcOut ? 4 * C : C;
  *out = t == kLoraFcIn ? 4 * C : C;
}

}  // namespace

std::vector<TensorInfo> build_lora_manifest(const Config& c) {
  std::vector<TensorInfo> out;
  if (!c.lora.on()) return out;
  const int64_t r = c.lora.rank;
  int64_t offset = 0;
  for (int64_t i = 0; i < c.n_layer; i++)
    for (int t = 0; t < kLoraTargets; t++) {
      if (!c.lora.has(t)) continue;
      int64_t in, o;
      target_dims(t, c.d_model, &in, &o);
      const std::string name = "blocks." + std::to_string(i) +
                               (t >= kLoraFcIn ? ".mlp." : ".attn.") + kLoraTargetNames[t] +
                               ".lora_";
      // A (r, in): float32(z * (1 / sqrt(in))); B (out, r): zeros. Both 2-D: decay applies.
      out.push_back(TensorInfo{name + "A", offset, r * in, true, true,
                               1.0 / std::sqrt(static_cast<double>(in)), 0.0f});
      offset += r * in;
      out.push_back(TensorInfo{name + "B", offset, o * r, true, false, 0.0, 0.0f});
      offset += o * r;
    }
  return out;
}

int64_t count_lora_params(const Config& c) {
  if (!c.lora.on()) return 0;
  int64_t per_layer = 0;
  for (int t = 0; t < kLoraTargets; t++) {
    if (!c.lora.has(t)) continue;
    int64_t in, o;
    target_dims(t, c.d_model, &in, &o);
    per_layer += c.lora.rank * (in + o);
  }
  return c.n_layer * per_layer;
}

std::vector<TensorInfo> build_manifest(const Config& c) {
  const int64_t C = c.d_model;
  const double std_proj = c.init_std / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  std::vector<TensorInfo> out;
  int64_t offset = 0;
  // matrix: a 2-D tensor (embeddings, Linear weights), the ones AdamW decays.
  auto add = [&](const std::string& name, int64_t rows, int64_t cols, bool matrix) {
    const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    const bool is_ln = name.find(".ln") != std::string::npos || name.rfind("ln_f", 0) == 0;
    const bool is_residual_proj = name.find("o_proj.weight") != std::string::npos ||
                                  name.find("fc_out.weight") != std::string::npos;
    TensorInfo t;
    t.name = name;
    t.offset = offset;
    t.numel = rows * cols;
    t.decay = matrix;
    t.init_normal = !is_bias && !is_ln;
    t.init_std = is_residual_proj ? std_proj : c.init_std;
    t.init_fill = is_ln && !is_bias ? 1.0f : 0.0f;
    out.push_back(t);
    offset += t.numel;
  };
  add("token_embedding.weight", c.vocab_size, C, true);
  add("position_embedding.weight", c.ctx, C, true);
  for (int64_t i = 0; i < c.n_layer; i++) {
    const std::string p = "blocks." + std::to_string(i) + ".";
    add(p + "ln1.weight", C, 1, false);
    add(p + "ln1.bias", C, 1, false);
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      add(p + "attn." + proj + ".weight", C, C, true);
      add(p + "attn." + proj + ".bias", C, 1, false);
    }
    add(p + "ln2.weight", C, 1, false);
    add(p + "ln2.bias", C, 1, false);
    add(p + "mlp.fc_in.weight", 4 * C, C, true);
    add(p + "mlp.fc_in.bias", 4 * C, 1, false);
    add(p + "mlp.fc_out.weight", C, 4 * C, true);
    add(p + "mlp.fc_out.bias", C, 1, false);
  }
  add("ln_f.weight", C, 1, false);
  add("ln_f.bias", C, 1, false);
  return out;
}

namespace {

int64_t count_params(const Config& c) {
  const int64_t C = c.d_model;
  return c.vocab_size * C + c.ctx * C + 2 * C + c.n_layer * (12 * C * C + 13 * C);
}

ParamViews views_of(float* base, const std::vector<TensorInfo>& man, int64_t n_layer) {
  ParamViews v;
  auto at = [&](size_t i) { return base + man[i].offset; };
  v.wte = at(0);
  v.wpe = at(1);
  for (int64_t l = 0; l < n_layer; l++) {
    const size_t i = 2 + 16 * static_cast<size_t>(l);
    v.layers.push_back(LayerParams{at(i), at(i + 1), at(i + 2), at(i + 3), at(i + 4), at(i + 5),
                                   at(i + 6), at(i + 7), at(i + 8), at(i + 9), at(i + 10),
                                   at(i + 11), at(i + 12), at(i + 13), at(i + 14), at(i + 15)});
  }
  v.lnfw = at(man.size() - 2);
  v.lnfb = at(man.size() - 1);
  return v;
}

constexpr int64_t kAlign = 64;

}  // namespace

// Hands out aligned pieces of one block: first with base == nullptr to measure, then for real.
struct Model::Layout {
  uint8_t* base = nullptr;
  int64_t used = 0;
  template <class T>
  T* take(int64_t count) {
    used = (used + kAlign - 1) / kAlign * kAlign;
    T* p = base ? reinterpret_cast<T*>(base + used) : nullptr;
    used += count * static_cast<int64_t>(sizeof(T));
    return p;
  }
};

void Model::carve(Layout& a) {
  const Config& c = cfg_;
  const int64_t B = c.batch, T = c.ctx, C = c.d_model, H = c.n_head, V = c.vocab_size;
  const int64_t BT = B * T;
  const bool lora = c.lora.on();
  // step | weights | m | v, contiguous: the .tinygpt state in place. A LoRA model keeps the frozen
  // base's step | weights alone: no base moments, and (below) no base gradients.
  state_ = a.take<uint8_t>(kStepOffset + 4 + (lora ? 4 : 12) * P_);
  weights_ = state_ ? reinterpret_cast<float*>(state_ + kStepOffset + 4) : nullptr;
  m_ = weights_ && !lora ? weights_ + P_ : nullptr;
  v_ = weights_ && !lora ? weights_ + 2 * P_ : nullptr;
  grads_ = lora ? nullptr : a.take<float>(P_);
  tokens_ = a.take<int32_t>(BT);
  targets_ = a.take<int32_t>(BT);
  encoded_ = lora ? nullptr : a.take<float>(BT * C);  // LoRA: below, in a backward-only buffer
  // A Linear's input is saved for its weight gradient. A frozen Linear has none: in LoRA mode the
  // input of a Linear nothing adapts is one buffer that all layers share (the forward reads it at
  // once; the backward never). fc_in's input (LayerNorm 2's output) is shared even when adapted:
  // the backward recomputes a layer's from its saved input, mean and rstd (one LayerNorm, cheap
  // beside the Linears) rather than keep (L-1)·B·T·C floats, which keeps a LoRA model on every
  // target within base weights + activations + adapters and their moments.
  const bool share_ln1 = lora && !(c.lora.targets & (1 << kLoraQ | 1 << kLoraK | 1 << kLoraV));
  const bool share_att = lora && !c.lora.has(kLoraO);
  const bool share_ln2 = lora;
  const bool share_g = lora && !c.lora.has(kLoraFcOut);
  float* shared_ln1 = share_ln1 ? a.take<float>(BT * C) : nullptr;  // q, k, v input
  float* shared_att = share_att ? a.take<float>(BT * C) : nullptr;  // o_proj input
  float* shared_ln2 = share_ln2 ? a.take<float>(BT * C) : nullptr;  // fc_in input
  float* shared_g = share_g ? a.take<float>(BT * 4 * C) : nullptr;  // fc_out input
  acts_.assign(static_cast<size_t>(c.n_layer), LayerActs{});
  for (LayerActs& L : acts_) {
    L.ln1 = share_ln1 ? shared_ln1 : a.take<float>(BT * C);
    L.ln1_mean = a.take<float>(BT);
    L.ln1_rstd = a.take<float>(BT);
    L.q = a.take<float>(BT * C);
    L.k = a.take<float>(BT * C);
    L.v = a.take<float>(BT * C);
    L.att = share_att ? shared_att : a.take<float>(BT * C);
    L.att_lse = a.take<float>(B * H * T);
    L.res2 = a.take<float>(BT * C);
    L.ln2 = share_ln2 ? shared_ln2 : a.take<float>(BT * C);
    L.ln2_mean = a.take<float>(BT);
    L.ln2_rstd = a.take<float>(BT);
    L.h = a.take<float>(BT * 4 * C);
    L.g = share_g ? shared_g : a.take<float>(BT * 4 * C);
    L.res3 = a.take<float>(BT * C);
  }
  lnf_ = lora ? nullptr : a.take<float>(BT * C);
  lnf_mean_ = a.take<float>(BT);
  lnf_rstd_ = a.take<float>(BT);
  logits_ = a.take<float>(BT * V);
  row_lse_ = a.take<double>(BT);
  row_loss_ = a.take<double>(BT);
  dres_ = a.take<float>(BT * C);
  dln_ = a.take<float>(BT * C);
  if (lora) {
    // The embeddings' output and ln_f's are read by the forward alone in LoRA mode (they feed only
    // the frozen layer 0 LayerNorm's and the tied head's weight gradients): they live in two
    // buffers that only the backward uses.
    encoded_ = dln_;
    lnf_ = dres_;
  }
  datt_ = a.take<float>(BT * C);
  dq_ = a.take<float>(BT * C);
  dk_ = a.take<float>(BT * C);
  dv_ = a.take<float>(BT * C);
  dh_ = a.take<float>(BT * 4 * C);
  att_scratch_ = a.take<float>(attention_scratch_size(B, T, C, H));
  norm_partials_ = a.take<double>(norm_partials_count(lora ? Q_ : P_));
  if (lora) {
    // i32 step | adapters | m | v, contiguous like the .tinygpt state: the adapter state in place.
    const int64_t r = c.lora.rank;
    lora_state_ = a.take<uint8_t>(kStepOffset + 4 + 12 * Q_);
    lora_weights_ = lora_state_ ? reinterpret_cast<float*>(lora_state_ + kStepOffset + 4) : nullptr;
    lora_m_ = lora_weights_ ? lora_weights_ + Q_ : nullptr;
    lora_v_ = lora_weights_ ? lora_weights_ + 2 * Q_ : nullptr;
    lora_grads_ = a.take<float>(Q_);
    lora_layers_.assign(static_cast<size_t>(c.n_layer), LayerLora{});
    for (LayerLora& L : lora_layers_)
      for (int t = 0; t < kLoraTargets; t++)
        if (c.lora.has(t)) L.t[t].us = a.take<float>(BT * r);
    lora_du_ = a.take<float>(BT * r);
    lora_rm_ = a.take<float>(BT * r);
    lora_scratch_ = a.take<float>(4 * C * r);
  }
  gen_.window = a.take<int32_t>(T);
  gen_.order = a.take<int32_t>(V);
  gen_.scaled = a.take<double>(V);
  gen_.prob = a.take<double>(V);
}

int64_t Model::arena_bytes_for(const Config& c) {
  Model probe_shapes_only(c, 0);
  return probe_shapes_only.arena_bytes_;
}

Model::Model(const Config& c, int n_threads) : cfg_(c) {
  manifest_ = build_manifest(c);
  P_ = count_params(c);
  lora_manifest_ = build_lora_manifest(c);
  Q_ = count_lora_params(c);
  Layout measure;
  carve(measure);
  arena_bytes_ = measure.used;
  if (n_threads <= 0) return;  // measuring only (arena_bytes_for)
  // A 32-bit WebAssembly build cannot address an arena above 4 GiB: never truncate the size.
  if (static_cast<uint64_t>(arena_bytes_) > std::numeric_limits<size_t>::max()) return;
  pool_ = std::make_unique<ThreadPool>(n_threads);
  arena_ = static_cast<uint8_t*>(
      ::operator new(static_cast<size_t>(arena_bytes_), std::align_val_t(kAlign), std::nothrow));
  if (!arena_) return;
  std::memset(arena_, 0, static_cast<size_t>(arena_bytes_));
  Layout real;
  real.base = arena_;
  carve(real);
  w_ = views_of(weights_, manifest_, c.n_layer);
  if (grads_) gw_ = views_of(grads_, manifest_, c.n_layer);
  if (c.lora.on()) {
    // The slots, in adapter-manifest order: per layer, per target, A then B.
    size_t i = 0;
    for (int64_t l = 0; l < c.n_layer; l++) {
      const LayerParams& p = w_.layers[static_cast<size_t>(l)];
      float* const base[kLoraTargets] = {p.qw, p.kw, p.vw, p.ow, p.fcw, p.fcow};
      for (int t = 0; t < kLoraTargets; t++) {
        if (!c.lora.has(t)) continue;
        LoraSlot& s = lora_layers_[static_cast<size_t>(l)].t[t];
        const TensorInfo &ta = lora_manifest_[i], &tb = lora_manifest_[i + 1];
        s.A = lora_weights_ + ta.offset;
        s.B = lora_weights_ + tb.offset;
        s.dA = lora_grads_ + ta.offset;
        s.dB = lora_grads_ + tb.offset;
        s.W = base[t];
        s.in = ta.numel / c.lora.rank;
        s.out = tb.numel / c.lora.rank;
        i += 2;
      }
    }
  }
}

Model::~Model() {
  if (arena_) ::operator delete(arena_, std::align_val_t(kAlign));
}

int32_t Model::step() const {
  int32_t s;
  std::memcpy(&s, state_ + kStepOffset, 4);
  return s;
}

void Model::set_step(int32_t s) { std::memcpy(state_ + kStepOffset, &s, 4); }

void Model::init_from_seed(uint64_t seed) {
  uint64_t drawn = 0;
  for (const TensorInfo& t : manifest_) {
    float* dst = weights_ + t.offset;
    if (t.init_normal) {
      // The stream is counter-based, so any split across the pool gives the same bits.
      const uint64_t first = drawn;
      pool_->parallel_for(t.numel, 1 << 14, [&](int64_t i0, int64_t i1) {
        normal_float32(dst + i0, seed, first + static_cast<uint64_t>(i0), i1 - i0, t.init_std);
      });
      drawn += static_cast<uint64_t>(t.numel);
    } else {
      for (int64_t i = 0; i < t.numel; i++) dst[i] = t.init_fill;
    }
  }
  if (m_) std::memset(m_, 0, static_cast<size_t>(P_) * 4);
  if (v_) std::memset(v_, 0, static_cast<size_t>(P_) * 4);
  set_step(0);
  adam_steps = 0;
  lora_merged = false;  // the weights are the init's: no adapter is merged into them
}

int32_t Model::lora_step() const {
  int32_t s;
  std::memcpy(&s, lora_state_ + kStepOffset, 4);
  return s;
}

void Model::set_lora_step(int32_t s) { std::memcpy(lora_state_ + kStepOffset, &s, 4); }

void Model::lora_init(uint64_t seed) {
  const uint64_t s0 = seed ^ kLoraStreamKey;
  uint64_t drawn = 0;  // one running count over the A tensors
  for (const TensorInfo& t : lora_manifest_) {
    float* dst = lora_weights_ + t.offset;
    if (t.init_normal) {
      const uint64_t first = drawn;
      pool_->parallel_for(t.numel, 1 << 14, [&](int64_t i0, int64_t i1) {
        normal_float32(dst + i0, s0, first + static_cast<uint64_t>(i0), i1 - i0, t.init_std);
      });
      drawn += static_cast<uint64_t>(t.numel);
    } else {
      std::memset(dst, 0, static_cast<size_t>(t.numel) * 4);
    }
  }
  std::memset(lora_m_, 0, static_cast<size_t>(Q_) * 4);
  std::memset(lora_v_, 0, static_cast<size_t>(Q_) * 4);
  set_lora_step(0);
  lora_adam_steps = 0;
}

void Model::lora_merge(bool merge) {
  const float s = cfg_.lora.scale();
  for (const LayerLora& L : lora_layers_)
    for (const LoraSlot& slot : L.t)
      if (slot.A)
        tg::lora_merge(slot.W, slot.A, slot.B, lora_scratch_, slot.out, slot.in, cfg_.lora.rank,
                       merge ? s : -s, *pool_);
  lora_merged = merge;
}

void Model::forward(const int32_t* x, int64_t B, int64_t T, int64_t past) {
  const int64_t C = cfg_.d_model, H = cfg_.n_head, V = cfg_.vocab_size, BT = B * T;
  ThreadPool& pool = *pool_;
  if (x != tokens_) std::memcpy(tokens_, x, static_cast<size_t>(BT) * 4);
  embedding_forward(encoded_, tokens_, w_.wte, w_.wpe, B, T, C, pool, past);  // (B,T,C)
  const float* residual = encoded_;
  // LoRA: y += s · (x A^T) B^T after each adapted Linear (lora.h), unless merged into W or
  // disabled.
  const bool adapters = lora_active();
  const float scale = adapters ? cfg_.lora.scale() : 0.0f;
  auto adapt = [&](const LoraSlot& s, float* y, const float* x) {
    if (adapters && s.A)
      lora_forward(y, s.us, lora_rm_, x, s.A, s.B, BT, s.in, s.out, cfg_.lora.rank, scale, pool);
  };
  static const LayerLora kNoAdapters{};
  for (int64_t l = 0; l < cfg_.n_layer; l++) {
    const LayerParams& p = w_.layers[l];
    LayerActs& a = acts_[l];
    const LayerLora& ad = adapters ? lora_layers_[l] : kNoAdapters;
    layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, residual, p.ln1w, p.ln1b, BT, C,
                      cfg_.layer_norm_eps, pool);
    matmul_forward(a.q, a.ln1, p.qw, p.qb, BT, C, C, pool);  // (B,T,C)
    adapt(ad.t[kLoraQ], a.q, a.ln1);
    matmul_forward(a.k + past * C, a.ln1, p.kw, p.kb, BT, C, C, pool);  // after the cached keys
    adapt(ad.t[kLoraK], a.k + past * C, a.ln1);
    matmul_forward(a.v + past * C, a.ln1, p.vw, p.vb, BT, C, C, pool);
    adapt(ad.t[kLoraV], a.v + past * C, a.ln1);
    attention_forward(a.att, a.att_lse, att_scratch_, a.q, a.k, a.v, B, T, C, H, pool, past);
    matmul_forward(a.res2, a.att, p.ow, p.ob, BT, C, C, pool);  // o_proj output, then + residual
    adapt(ad.t[kLoraO], a.res2, a.att);
    residual_forward(a.res2, residual, a.res2, BT * C, pool);
    layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, p.ln2w, p.ln2b, BT, C,
                      cfg_.layer_norm_eps, pool);
    matmul_forward(a.h, a.ln2, p.fcw, p.fcb, BT, C, 4 * C, pool);  // (B,T,4C)
    adapt(ad.t[kLoraFcIn], a.h, a.ln2);
    gelu_forward(a.g, a.h, BT * 4 * C, pool);
    matmul_forward(a.res3, a.g, p.fcow, p.fcob, BT, 4 * C, C, pool);  // (B,T,C)
    adapt(ad.t[kLoraFcOut], a.res3, a.g);
    residual_forward(a.res3, a.res2, a.res3, BT * C, pool);
    residual = a.res3;
  }
  layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, residual, w_.lnfw, w_.lnfb, BT, C,
                    cfg_.layer_norm_eps, pool);
  matmul_forward(logits_, lnf_, w_.wte, nullptr, BT, C, V, pool);  // (B,T,V): the tied head
}

double Model::forward_loss(const int32_t* x, const int32_t* y, int64_t B, int64_t T) {
  forward(x, B, T);
  if (y != targets_) std::memcpy(targets_, y, static_cast<size_t>(B * T) * 4);
  return cross_entropy_forward(row_lse_, row_loss_, logits_, targets_, B * T, cfg_.vocab_size,
                               *pool_);
}

double Model::forward_backward(const int32_t* x, const int32_t* y, int64_t B, int64_t T) {
  const double loss = forward_loss(x, y, B, T);
  if (lora()) {
    backward_lora(B, T);
    return loss;
  }
  const int64_t C = cfg_.d_model, H = cfg_.n_head, V = cfg_.vocab_size, BT = B * T;
  ThreadPool& pool = *pool_;
  std::memset(grads_, 0, static_cast<size_t>(P_) * 4);
  float* dlogits = logits_;  // (B,T,V), in place
  cross_entropy_backward(dlogits, logits_, row_lse_, targets_, BT, V, pool);
  std::memset(dln_, 0, static_cast<size_t>(BT * C) * 4);
  matmul_backward(dln_, gw_.wte, nullptr, dlogits, lnf_, w_.wte, BT, C, V, pool);
  const float* last = cfg_.n_layer > 0 ? acts_.back().res3 : encoded_;
  std::memset(dres_, 0, static_cast<size_t>(BT * C) * 4);
  layernorm_backward(dres_, gw_.lnfw, gw_.lnfb, dln_, last, w_.lnfw, lnf_mean_, lnf_rstd_, BT, C,
                     pool);
  // dres_ holds d(block output) (B,T,C); walking back through a block leaves d(block input) there.
  for (int64_t l = cfg_.n_layer - 1; l >= 0; l--) {
    const LayerParams& p = w_.layers[l];
    const LayerParams& g = gw_.layers[l];
    const LayerActs& a = acts_[l];
    const float* residual = l > 0 ? acts_[l - 1].res3 : encoded_;
    // res3 = res2 + fc_out(gelu(fc_in(ln2(res2)))): dres_ flows to res2 unchanged and into the MLP.
    std::memset(dh_, 0, static_cast<size_t>(BT * 4 * C) * 4);
    matmul_backward(dh_, g.fcow, g.fcob, dres_, a.g, p.fcow, BT, 4 * C, C, pool);  // d gelu out
    gelu_backward(dh_, a.h, dh_, BT * 4 * C, pool);                                // d h
    std::memset(dln_, 0, static_cast<size_t>(BT * C) * 4);
    matmul_backward(dln_, g.fcw, g.fcb, dh_, a.ln2, p.fcw, BT, C, 4 * C, pool);
    layernorm_backward(dres_, g.ln2w, g.ln2b, dln_, a.res2, p.ln2w, a.ln2_mean, a.ln2_rstd, BT, C,
                       pool);
    // res2 = residual + o_proj(attention(q, k, v)): dres_ now is d res2.
    std::memset(datt_, 0, static_cast<size_t>(BT * C) * 4);
    matmul_backward(datt_, g.ow, g.ob, dres_, a.att, p.ow, BT, C, C, pool);
    attention_backward(dq_, dk_, dv_, att_scratch_, datt_, a.q, a.k, a.v, a.att_lse, B, T, C, H,
                       pool);
    std::memset(dln_, 0, static_cast<size_t>(BT * C) * 4);
    matmul_backward(dln_, g.qw, g.qb, dq_, a.ln1, p.qw, BT, C, C, pool);
    matmul_backward(dln_, g.kw, g.kb, dk_, a.ln1, p.kw, BT, C, C, pool);
    matmul_backward(dln_, g.vw, g.vb, dv_, a.ln1, p.vw, BT, C, C, pool);
    layernorm_backward(dres_, g.ln1w, g.ln1b, dln_, residual, p.ln1w, a.ln1_mean, a.ln1_rstd, BT, C,
                       pool);
  }
  embedding_backward(gw_.wte, gw_.wpe, dres_, tokens_, B, T, C, pool);
  return loss;
}

// The backward of a LoRA model (adapters active): the base is frozen, so no weight gradient is
// formed, only d(activation) on the way down to the adapted Linears and, at each, the adapters'
// gradients (lora_backward). Below the lowest adapter nothing needs a gradient: the lowest layer
// skips what only feeds its input (its LayerNorm 1 and q/k/v d input; without attention adapters,
// the whole attention), and the embeddings get none.
void Model::backward_lora(int64_t B, int64_t T) {
  const int64_t C = cfg_.d_model, H = cfg_.n_head, V = cfg_.vocab_size, BT = B * T;
  const int64_t r = cfg_.lora.rank;
  const float s = cfg_.lora.scale();
  ThreadPool& pool = *pool_;
  std::memset(lora_grads_, 0, static_cast<size_t>(Q_) * 4);
  float* dlogits = logits_;  // (B,T,V), in place
  cross_entropy_backward(dlogits, logits_, row_lse_, targets_, BT, V, pool);
  matmul_backward_input(dln_, dlogits, w_.wte, BT, C, V, pool);
  const float* last = cfg_.n_layer > 0 ? acts_.back().res3 : encoded_;
  std::memset(dres_, 0, static_cast<size_t>(BT * C) * 4);
  layernorm_backward<float>(dres_, nullptr, nullptr, dln_, last, w_.lnfw, lnf_mean_, lnf_rstd_, BT,
                            C, pool);
  // A LoRA Linear: the adapters' gradients, and d x += its part when dx is not null.
  auto adapted = [&](const LoraSlot& a, float* dx, const float* dy, const float* x) {
    if (a.A)
      lora_backward(dx, a.dA, a.dB, lora_du_, lora_rm_, lora_scratch_, dy, x, a.us, a.A, a.B, BT,
                    a.in, a.out, r, s, pool);
  };
  for (int64_t l = cfg_.n_layer - 1; l >= 0; l--) {
    const LayerParams& p = w_.layers[l];
    const LayerActs& a = acts_[l];
    const LayerLora& ad = lora_layers_[l];
    const float* residual = l > 0 ? acts_[l - 1].res3 : encoded_;
    const bool lowest = l == 0;
    const bool qkv = ad.t[kLoraQ].A || ad.t[kLoraK].A || ad.t[kLoraV].A;
    // res3 = res2 + fc_out(gelu(fc_in(ln2(res2)))), dres_ = d res3. d res2 needs the MLP's part
    // unless nothing below res2 (the attention's adapters, the lower layers) wants a gradient.
    const bool mlp_through = !lowest || qkv || ad.t[kLoraO].A;
    const bool need_dh = mlp_through || ad.t[kLoraFcIn].A;
    if (need_dh) {
      matmul_backward_input(dh_, dres_, p.fcow, BT, 4 * C, C, pool);  // d gelu out
    }
    adapted(ad.t[kLoraFcOut], need_dh ? dh_ : nullptr, dres_, a.g);
    if (need_dh) gelu_backward(dh_, a.h, dh_, BT * 4 * C, pool);  // d h
    if (mlp_through) {
      matmul_backward_input(dln_, dh_, p.fcw, BT, C, 4 * C, pool);
    }
    // fc_in's input again (carve shares it); the top layer's is still there from the forward
    if (ad.t[kLoraFcIn].A && l < cfg_.n_layer - 1)
      layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, p.ln2w, p.ln2b, BT, C,
                        cfg_.layer_norm_eps, pool);
    adapted(ad.t[kLoraFcIn], mlp_through ? dln_ : nullptr, dh_, a.ln2);
    if (!mlp_through) break;  // the lowest layer, adapted in its MLP only
    layernorm_backward<float>(dres_, nullptr, nullptr, dln_, a.res2, p.ln2w, a.ln2_mean, a.ln2_rstd,
                              BT, C, pool);
    // res2 = residual + o_proj(attention(q, k, v)): dres_ now is d res2.
    const bool need_datt = !lowest || qkv;
    if (need_datt) {
      matmul_backward_input(datt_, dres_, p.ow, BT, C, C, pool);
    }
    adapted(ad.t[kLoraO], need_datt ? datt_ : nullptr, dres_, a.att);
    if (!need_datt) break;
    attention_backward(dq_, dk_, dv_, att_scratch_, datt_, a.q, a.k, a.v, a.att_lse, B, T, C, H,
                       pool);
    float* dln1 = lowest ? nullptr : dln_;  // the lowest layer's input needs no gradient
    if (dln1) {
      matmul_backward_input(dln_, dq_, p.qw, BT, C, C, pool);
      matmul_backward(dln_, nullptr, nullptr, dk_, a.ln1, p.kw, BT, C, C, pool);
      matmul_backward(dln_, nullptr, nullptr, dv_, a.ln1, p.vw, BT, C, C, pool);
    }
    adapted(ad.t[kLoraQ], dln1, dq_, a.ln1);
    adapted(ad.t[kLoraK], dln1, dk_, a.ln1);
    adapted(ad.t[kLoraV], dln1, dv_, a.ln1);
    if (dln1)
      layernorm_backward<float>(dres_, nullptr, nullptr, dln_, residual, p.ln1w, a.ln1_mean,
                                a.ln1_rstd, BT, C, pool);
  }
}

double Model::apply_update(const AdamWSettings& s, double* stats) {
  ThreadPool& pool = *pool_;
  // A LoRA model: the adapters alone (their norm, clip and AdamW; the base has no moments)
  const bool adapters = lora();
  float* g = adapters ? lora_grads_ : grads_;
  float* w = adapters ? lora_weights_ : weights_;
  float* m = adapters ? lora_m_ : m_;
  float* v = adapters ? lora_v_ : v_;
  const int64_t n = adapters ? Q_ : P_;
  const std::vector<TensorInfo>& tensors = adapters ? lora_manifest_ : manifest_;
  const double norm = grad_global_norm(g, n, norm_partials_, pool);
  if (!std::isfinite(norm))
    return norm;  // the caller reports it; weights and moments stay as they were
  if (stats != nullptr) {
    for (size_t i = 0; i < tensors.size(); i++) {
      const TensorInfo& t = tensors[i];
      stats[3 * i] = sum_squares(g + t.offset, t.numel, norm_partials_, pool);
      stats[3 * i + 1] = sum_squares(w + t.offset, t.numel, norm_partials_, pool);
    }
  }
  clip_gradients(g, n, norm, s.grad_clip, pool);
  int64_t& t_adam = adapters ? lora_adam_steps : adam_steps;
  t_adam++;
  for (size_t i = 0; i < tensors.size(); i++) {
    const TensorInfo& t = tensors[i];
    if (stats != nullptr)
      stats[3 * i + 2] =
          adamw_update_measured(w + t.offset, g + t.offset, m + t.offset, v + t.offset, t.numel,
                                t.decay, s, t_adam, norm_partials_, pool);
    else
      adamw_update(w + t.offset, g + t.offset, m + t.offset, v + t.offset, t.numel, t.decay, s,
                   t_adam, pool);
  }
  if (adapters)
    set_lora_step(lora_step() + 1);
  else
    set_step(step() + 1);
  return norm;
}

}  // namespace tg
