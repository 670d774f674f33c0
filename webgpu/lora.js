// LoRA fine-tuning on the WGSL trainer (docs/format.md "LoRA adapter file"; python_ref/lora.py and
// python_ref/finetune.py are the reference, wasm/src/lora.h and tinygpt_api.h's LoRA section the C++
// twin): y = W x + b + (alpha / r) B (A x) on the chosen projections of every block, the base frozen.
//
// A Trainer made with {lora} (trainer.js) holds the base's weights and no gradients, AdamW moments or
// decay mask of its own; this module gives it the adapters (Q floats: weights, gradients, m, v), a
// training step of one submit that adds them in the forward (Trainer.recordForward's adapter hook)
// and trains them alone: the input gradients still flow through the frozen weights to the lower
// blocks, the adapters' gradients are formed where their Linears are (kernels/lora.js), and the global
// norm, clip and AdamW run over the adapters only (adamw_update over Q parameters, every one decayed
// by the run's weightDecay: python_ref's make_adapter_optimizer, C++'s apply_update). Below the lowest
// adapter nothing is computed (no embedding gradient, no ln1 gradient in block 0), as C++'s
// backward_lora skips it.
//
// The adapter state is laid out as the C++ core's (tg_lora_export_state): i32 step | f32 adapters x Q
// | [f32 m x Q | f32 v x Q], adapter-manifest order (per block, per target in canonical order, A then
// B), so a fine-tune exported by one engine resumes on the other.
//
// Sampling: the Decoder reads a copy of the weights (samplingWeights), refreshed at each generation
// from the base, with the adapters merged into it or not. The base itself stays bit-exact (a merge
// and unmerge in place would round it), training may go on between samples, and the decode kernels
// (the fused decode chain, one-workgroup decoding) need no LoRA variant. merge()/unmerge() in place
// are there for what C++'s tg_lora_merge is for: the merged model's weights and forwards.
import { manifest, normals, seedPair, xorPair } from "./prng.js";
import { checkFields, ConfigError, pyRepr } from "./config_rules.js";
import { Plan } from "./plan.js";
import { grid1d } from "./kernels/kernel.js";
import { normPartials } from "./kernels/adamw.js";
import { chooseSummedSplits } from "./kernels/matmul.js";
import { loraRowsKernel, loraGradsKernel, loraNormPartials, loraMerge, loraSlices, LORA_ROWS_PER_WORKGROUP, LORA_GRAD_OUTPUTS, LORA_THREADS } from "./kernels/lora.js";
import { adamwValues, SplitSums } from "./ops.js";
import { bufferBytes, listActivations, mapForReading, qkvViews, slotFloats } from "./buffers.js";
import { decoderUniformBytes, listDecoderBuffers } from "./decoder.js";
import { LOSS_RING, PAIRED_MAX_OUTPUTS, summedSlabFloats } from "./trainer.js";

/** The adaptable projections in canonical order (python_ref/lora.py TARGETS; bit i of C++'s mask). */
export const LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "fc_in", "fc_out"];
/** ASCII "LoRAAdap": the adapters' init stream is seed XOR this (docs/format.md). */
export const LORA_STREAM_KEY = [0x4c6f5261, 0x41646170];
const QKV = ["q_proj", "k_proj", "v_proj"];
const U = () => GPUBufferUsage;

/**
 * {rank, alpha, targets (canonical order), seed, scale} from {rank, alpha, targets, seed}, checked by
 * presets.json's rules ("lora", as every level words them) and python_ref's target and seed checks.
 */
export function loraConfig({ rank, alpha, targets = ["q_proj", "v_proj"], seed = 0 }, rules) {
  try {
    checkFields(rules, "lora", { rank, alpha });
  } catch (e) {
    throw new ConfigError(`LoRA ${e.message}`);
  }
  const list = Array.isArray(targets) ? targets : null;
  if (!list || list.length === 0 || list.some((t) => !LORA_TARGETS.includes(t)) || new Set(list).size !== list.length) {
    throw new ConfigError(`LoRA targets must be distinct names among ${LORA_TARGETS.join(", ")}, got ${pyRepr(targets)}`);
  }
  if (!Number.isSafeInteger(seed) || seed < 0) throw new ConfigError(`LoRA seed must be an integer in [0, 2^53), got ${pyRepr(seed)}`);
  return { rank, alpha, targets: LORA_TARGETS.filter((t) => list.includes(t)), seed, scale: alpha / rank };
}

/** [in, out] of a target's Linear at width C. */
const targetDims = (target, C) => (target === "fc_in" ? [C, 4 * C] : target === "fc_out" ? [4 * C, C] : [C, C]);
const modulePath = (l, target) => `blocks.${l}.${target.startsWith("fc_") ? "mlp" : "attn"}.${target}`;

/**
 * The adapter manifest (docs/format.md): per block, per target in canonical order, A (r, in) then B
 * (out, r): [{name, shape, offset, numel, layer, target, in, out}].
 */
export function adapterManifest(model, lora) {
  const out = [], r = lora.rank;
  let offset = 0;
  for (let l = 0; l < model.nLayer; l++) {
    for (const target of lora.targets) {
      const [inF, outF] = targetDims(target, model.dModel), base = { layer: l, target, in: inF, out: outF };
      out.push({ ...base, name: `${modulePath(l, target)}.lora_A`, shape: [r, inF], offset, numel: r * inF });
      offset += r * inF;
      out.push({ ...base, name: `${modulePath(l, target)}.lora_B`, shape: [outF, r], offset, numel: outF * r });
      offset += outF * r;
    }
  }
  return out;
}

/** Q: the adapters' element count. */
export const adapterCount = (model, lora) => model.nLayer * lora.targets.reduce((n, t) => n + lora.rank * targetDims(t, model.dModel).reduce((a, b) => a + b), 0);

/**
 * The adapters' initial values (docs/format.md): every A float32(z_j · (1 / sqrt(in))) from the stream
 * seed XOR LORA_STREAM_KEY, one running counter j over the A tensors in manifest order; B = 0.
 */
export function initialAdapters(model, lora) {
  const entries = adapterManifest(model, lora), out = new Float32Array(adapterCount(model, lora));
  const state0 = xorPair(seedPair(lora.seed), LORA_STREAM_KEY);
  let drawn = 0;
  for (const e of entries) {
    if (!e.name.endsWith(".lora_A")) continue;
    const z = normals(state0, drawn, e.numel), std = 1 / Math.sqrt(e.in);
    for (let i = 0; i < e.numel; i++) out[e.offset + i] = Math.fround(z[i] * std);
    drawn += e.numel;
  }
  return out;
}

// ---------------------------------------------------------------- recording (the kernel cases call these too)

const memo = (make) => {
  const made = new Map();
  return (...args) => {
    const key = JSON.stringify(args);
    if (!made.has(key)) made.set(key, make(...args));
    return made.get(key);
  };
};
const rowsKernelFor = memo(loraRowsKernel);
const gradsKernelFor = memo(loraGradsKernel);

/**
 * lora_rows (kernels/lora.js) for 1..3 targets on M rows: down length K, up length N, rank r.
 * targets: [{xOff, wdOff, uOff, wuOff, yOff}]; wd {sj, sk} and wu {sj, sc}: the strides of the down
 * and up weights in W; Y null: the down half alone (u or d kept, no output); G (forward, gelu) or H
 * (backward, geluGrad): the epilogue's buffer, at Y's indices.
 */
export function recordLoraRows(ops, plan, { mode, M, K, N, r, scale, targets, X, W, U: u, Y = null, G = null, H = null, wd, wu }) {
  const T = targets.length, epilogue = G ? "gelu" : H ? "geluGrad" : "none", up = Y !== null;
  const rowsPer = LORA_ROWS_PER_WORKGROUP, kg = loraSlices(rowsPer * T * r, K);
  const values = { M, K, N, r, rows_per: rowsPer, kg, scale, wd_sj: wd.sj, wd_sk: wd.sk, wu_sj: wu.sj, wu_sc: wu.sc };
  targets.forEach((t, i) => Object.assign(values, { [`x_off${i}`]: t.xOff, [`wd_off${i}`]: t.wdOff, [`u_off${i}`]: t.uOff,
    [`wu_off${i}`]: t.wuOff, [`y_off${i}`]: t.yOff ?? 0 }));
  const buffers = [X, W, u, ...(up ? [Y] : []), ...(G ? [G] : H ? [H] : [])];
  return plan.add(rowsKernelFor(T, mode, epilogue, up), values, buffers, grid1d(Math.ceil(M / rowsPer)));
}

/**
 * lora_grads for 1..3 targets of one Linear shape (in K, out N, rank r) on M rows: targets
 * [{yOff, xOff, uOff, dOff, aOff, bOff}]: dy in Y, x in X, u in U, d in D; dA at aOff and dB at bOff of G.
 */
export function recordLoraGrads(ops, plan, { M, K, N, r, targets, Y, X, U: u, D, G }) {
  const wgB = Math.ceil((N * r) / LORA_GRAD_OUTPUTS), wgA = Math.ceil((r * K) / LORA_GRAD_OUTPUTS);
  const values = { M, K, N, r, wg_b: wgB, wg_a: wgA };
  targets.forEach((t, i) => Object.assign(values, { [`y_off${i}`]: t.yOff, [`x_off${i}`]: t.xOff, [`u_off${i}`]: t.uOff,
    [`d_off${i}`]: t.dOff, [`a_off${i}`]: t.aOff, [`b_off${i}`]: t.bOff }));
  return plan.add(gradsKernelFor(targets.length), values, [Y, X, u, D, G], grid1d(targets.length * (wgB + wgA)));
}

/** The norm's partial sums of squares of n gradients into partials; returns how many (adamwValues' parts). */
export function recordLoraNorm(ops, plan, { n, grads, partials }) {
  const parts = normPartials(n);
  plan.add(loraNormPartials, { n, parts }, [grads, partials], grid1d(parts));
  return parts;
}

/** W (N,K) at wOff += (scale·B)·A, A at aOff and B at bOff of the adapters L. */
export function recordLoraMerge(ops, plan, { N, K, r, wOff, aOff, bOff, scale, W, L }) {
  return plan.add(loraMerge, { N, K, r, w_off: wOff, a_off: aOff, b_off: bOff, scale }, [W, L], grid1d(Math.ceil((N * K) / LORA_THREADS)));
}

// ---------------------------------------------------------------- sizes (Trainer.requirements)

/** Floats of the scratch that keeps each adapter's d between lora_rows and lora_grads: the biggest group's. */
const dGroup = (lora) => Math.max(1, lora.targets.filter((t) => QKV.includes(t)).length);

/** Whether the step's input gradients into a LayerNorm split K (as the full step's, past its pairs). */
const splitsInputGradients = ({ dModel: C }, rows) => rows * 4 * C > PAIRED_MAX_OUTPUTS;

/**
 * Every buffer a LoRA trainer for `config` creates, and a Decoder on it (with the sampling copy of the
 * weights it reads), as add(label, bytes, storage) in creation order; LoRATrainer's twin of
 * trainer.js's trainerBuffers. what: "train" (what a step needs), "all" (with generation's).
 */
export function listLoRABuffers(config, options, add) {
  const m = config.model, { nLayer: L, dModel: C, vocabSize: V, ctx: T } = m, B = config.training.batch, rows = B * T;
  const lora = loraConfig(options, config.rules), Q = adapterCount(m, lora), r = lora.rank;
  const last = manifest(m).at(-1), P = last.offset + last.numel;
  add("params", 4 * P);
  for (const name of ["lora weights", "lora grads", "lora m", "lora v"]) add(name, 4 * Q);
  add("lora decay mask", 4 * Math.ceil(Q / 32));
  add("lora u", 4 * L * lora.targets.length * slotFloats(rows * r));
  add("lora d", 4 * dGroup(lora) * slotFloats(rows * r));
  add("lora norm partials", 4 * normPartials(Q));
  add("unused binding", 16);
  add("unused output", 16);
  listActivations(add, m, "train", B, T, T);
  for (const [name, n] of [["d res", rows * C], ["d ln", rows * C], ["d h", rows * 4 * C], ["d att", rows * C], ["d qkv", 3 * slotFloats(rows * C)],
    ["split-K partials", summedSlabFloats(m, rows)], ["token order", V + 1 + rows], ["norm, clip and loss", 4]]) add(name, 4 * n);
  for (let i = 0; i < LOSS_RING; i++) add(`loss readback ${i}`, 16, false);
  add("row losses readback", 4 * rows, false);
  add("lora sampling weights", 4 * P);
  listDecoderBuffers(config, add);
  add("state readback", 4 * P, false); // exportState(), weights(), mergedState(): one at a time
  add("adapter readback", 4 * Q, false); // exportAdapterState(): one at a time
}

/**
 * Bytes of a LoRA trainer's plan uniforms at most (256 a dispatch): the step (≤ 4 + 7L base and 4L
 * adapter dispatches forward, ≤ 3 + 7L and 8L backward, the norm and AdamW), two evals (≤ 5 + 11L),
 * three merges (6L each), and a Decoder's.
 */
export const loraUniformBytes = (L, ctx) => 256 * ((9 + 26 * L) + 2 * (5 + 11 * L) + 3 * 6 * L) + decoderUniformBytes(L, ctx);

// ---------------------------------------------------------------- the trainer's adapters

export class LoRA {
  /**
   * The adapters of `trainer` (made in its constructor, before its state is loaded): options {rank,
   * alpha, targets, seed (the adapters' init stream; by default the data stream's seed, as
   * python_ref's finetune keys both with one)}, checked by `rules`. Buffers only: build() records the
   * plans once the trainer's weights are in place.
   */
  constructor(trainer, options, rules) {
    this.trainer = trainer;
    this.config = loraConfig({ seed: trainer.seed, ...options }, rules);
    const m = trainer.cfg, rows = trainer.tr.batch * m.ctx, r = this.config.rank;
    this.tensors = adapterManifest(m, this.config);
    this.Q = adapterCount(m, this.config);
    this.at = Object.fromEntries(this.tensors.map((e) => [e.name, e.offset]));
    const Q = this.Q, store = U().STORAGE | U().COPY_SRC | U().COPY_DST;
    this.weights = trainer.buffer("lora weights", 4 * Q, store);
    this.grads = trainer.buffer("lora grads", 4 * Q, store);
    this.m = trainer.buffer("lora m", 4 * Q, store);
    this.v = trainer.buffer("lora v", 4 * Q, store);
    // every adapter is 2-D, so AdamW decays every one (by the run's weightDecay: 0 by presets.json's "lora")
    this.decay = trainer.buffer("lora decay mask", 4 * Math.ceil(Q / 32), store);
    trainer.device.queue.writeBuffer(this.decay, 0, new Uint32Array(Math.ceil(Q / 32)).fill(0xffffffff));
    this.uSlot = slotFloats(rows * r);
    this.u = trainer.buffer("lora u", 4 * m.nLayer * this.config.targets.length * this.uSlot, store);
    this.d = trainer.buffer("lora d", 4 * dGroup(this.config) * this.uSlot, store);
    this.normPartials = trainer.buffer("lora norm partials", 4 * normPartials(Q), store);
    this.stepBase = 0; // the adapter step of the last import without moments: trainer.stepCount counts AdamW's steps since
    this.baseStep = 0; // the base state's step (exported with the base, as C++'s tg_export_state)
    this.merged = false;
    this.enabled = true;
    this.plans = [];
    this.sampling = null; // the weights a Decoder reads (samplingWeights), made at the first sample
    this.init();
  }

  /** The adapter step (AdamW steps of the fine-tune; tg_step's on a C++ LoRA model). */
  get step() { return this.stepBase + this.trainer.stepCount; }

  /** Whether the adapters are adapted at `target` (a name of LORA_TARGETS). */
  adapts(target) { return this.config.targets.includes(target); }

  /** Adapters from the init stream of `seed` (B = 0: the model computes exactly its base), moments and step 0. */
  init(seed = this.config.seed) {
    this._refuseMerged("init");
    const q = this.trainer.device.queue;
    q.writeBuffer(this.weights, 0, initialAdapters(this.trainer.cfg, { ...this.config, seed }));
    const zeros = new Float32Array(this.Q);
    q.writeBuffer(this.m, 0, zeros);
    q.writeBuffer(this.v, 0, zeros);
    this.stepBase = 0;
    this.trainer.stepCount = 0;
  }

  _refuseMerged(what) {
    if (this.merged) throw new Error(`LoRA ${what}: the adapters are merged into the weights: unmerge first`);
  }

  /** Throws unless a step may train the adapters: enabled and not merged (C++'s check_lora_trainable). */
  checkTrainable() {
    this._refuseMerged("training");
    if (!this.enabled) throw new Error("LoRA training: the adapters are disabled: enable them first");
  }

  // u's slot of target `target` in block l, and the offsets of a Linear's adapters
  _uOff(l, target) { return (l * this.config.targets.length + this.config.targets.indexOf(target)) * this.uSlot; }
  _aOff(l, target) { return this.at[`${modulePath(l, target)}.lora_A`]; }
  _bOff(l, target) { return this.at[`${modulePath(l, target)}.lora_B`]; }

  /**
   * The adapters' forward at `site` of block l (Trainer.recordForward's hook), on activation set A's
   * rows from position 0: "qkv" (q, k, v adapted among them), "o_proj", "fc_in" (h, and g = gelu(h)
   * again), "fc_out".
   */
  recordForward(plan, A, l, site) {
    const { dModel: C } = this.trainer.cfg, rows = A.B * A.T, a = A.layers[l], r = this.config.rank;
    const adapted = site === "qkv" ? QKV.filter((t) => this.adapts(t)) : this.adapts(site) ? [site] : [];
    if (adapted.length === 0) return;
    const [K, N] = targetDims(adapted[0], C);
    const io = { qkv: [a.ln1, a.qkv], o_proj: [a.att, a.res2], fc_in: [a.ln2, a.h], fc_out: [a.g, A.res[l + 1]] }[site];
    recordLoraRows(this.trainer.ops, plan, { mode: "forward", M: rows, K, N, r, scale: this.config.scale, X: io[0], W: this.weights, U: this.u, Y: io[1],
      G: site === "fc_in" ? a.g : null, wd: { sj: K, sk: 1 }, wu: { sj: 1, sc: r },
      targets: adapted.map((t) => ({ xOff: 0, wdOff: this._aOff(l, t), uOff: this._uOff(l, t), wuOff: this._bOff(l, t), yOff: site === "qkv" ? QKV.indexOf(t) * a.stride : 0 })) });
  }

  /**
   * An adapted Linear's backward at `site` of block l: d = s·dy·B kept, dx += d·A into dx (null: no
   * input gradient wanted; H: fc_out's, times gelu'(h)), then dA and dB. dy: {buffer, offsets by target}.
   */
  _recordBackward(plan, A, l, site, dy, x, dx, H = null) {
    const { dModel: C } = this.trainer.cfg, rows = A.B * A.T, r = this.config.rank, ops = this.trainer.ops;
    const adapted = site === "qkv" ? QKV.filter((t) => this.adapts(t)) : this.adapts(site) ? [site] : [];
    if (adapted.length === 0) return;
    const [K, N] = targetDims(adapted[0], C);
    recordLoraRows(ops, plan, { mode: "backward", M: rows, K: N, N: K, r, scale: this.config.scale, X: dy.buffer, W: this.weights, U: this.d, Y: dx,
      H: dx ? H : null, wd: { sj: 1, sk: r }, wu: { sj: K, sc: 1 },
      targets: adapted.map((t, i) => ({ xOff: dy.offset(t), wdOff: this._bOff(l, t), uOff: i * this.uSlot, wuOff: this._aOff(l, t), yOff: 0 })) });
    recordLoraGrads(ops, plan, { M: rows, K, N, r, Y: dy.buffer, X: x, U: this.u, D: this.d, G: this.grads,
      targets: adapted.map((t, i) => ({ yOff: dy.offset(t), xOff: 0, uOff: this._uOff(l, t), dOff: i * this.uSlot, aOff: this._aOff(l, t), bOff: this._bOff(l, t) })) });
  }

  /**
   * Records the step, the evals and the merges, and sets what the trainer's step(), evaluate() and
   * lossOn() use (trainPlan, adamIndex, evalPlan, the batch's buffers and the loss ring), as
   * Trainer._buildTraining does for full training.
   */
  build() {
    const tr = this.trainer, ops = tr.ops, m = tr.cfg, { nLayer: L, dModel: C, nHead: H, vocabSize: V } = m, B = tr.tr.batch, T = m.ctx, rows = B * T;
    const o = tr.offsets, P = tr.params, S = U().STORAGE | U().COPY_SRC, has = (t) => this.adapts(t);
    const A = (tr.act = tr.activations("train", B, T, T));
    // ln's output gradient of every LayerNorm in turn (no LayerNorm parameter gradients to wait for)
    const d = { res: tr.buffer("d res", 4 * rows * C, S), ln: tr.buffer("d ln", 4 * rows * C, S), h: tr.buffer("d h", 4 * rows * 4 * C, S),
      att: tr.buffer("d att", 4 * rows * C, S), qkv: qkvViews((...args) => tr.buffer(...args), "d qkv", rows * C, 3) };
    // the products a LayerNorm sums (the forward's fc_out, and here the input gradients into ln2 and ln1
    // where no adapter adds to them): their slabs from float 0 of this scratch (summedSlabFloats)
    tr.splitK = tr.buffer("split-K partials", 4 * summedSlabFloats(m, rows), S);
    tr.summedOff = 0;
    tr.order = tr.buffer("token order", 4 * (V + 1 + rows), U().STORAGE | U().COPY_DST);
    tr.orderHost = new Uint32Array(V + 1 + rows);
    tr.cursorHost = new Uint32Array(V);
    tr.scal = tr.buffer("norm, clip and loss", 16, S);
    tr.ring = Array.from({ length: LOSS_RING }, (_, i) => ({ buf: tr.buffer(`loss readback ${i}`, 16, U().MAP_READ | U().COPY_DST), pending: null }));
    tr.ringNext = 0;

    const plan = (this.trainPlan = new Plan(tr.device, ops.pipelines, "lora step"));
    tr.recordForward(plan, A, { B, T, past: 0, logitRows: rows, lora: this });
    ops.crossEntropyBackward(plan, { rows, V, logits: A.logits, targets: A.targets, losses: A.losses });
    ops.matmul(plan, "backward_input", { M: rows, N: C, K: V, A: A.logits, B: P, bOff: o["token_embedding.weight"], C: d.ln });
    ops.layernormBackwardInput(plan, { rows, C, dout: d.ln, x: A.res[L], stats: A.lnfs, params: P, wOff: o["ln_f.weight"], dx: d.res, accumulate: false });
    // an input gradient into a LayerNorm: split K with the LayerNorm summing the slabs (as the full step
    // past its pairs), unless an adapter adds its part to the gradient first
    const split = splitsInputGradients(m, rows);
    const intoLayerNorm = (args, adapted) => {
      if (!split || adapted) {
        ops.matmul(plan, "backward_input", args);
        return null;
      }
      const sums = new SplitSums(), s = chooseSummedSplits("backward_input", rows, args.N, args.K * (args.kcat ?? 1), ops.workgroupLimit);
      ops.matmul(plan, "backward_input", { ...args, ...s, ...(s.splits > 1 ? { partials: tr.splitK, partialsOff: 0, sums } : {}) });
      return sums.regions[0] ?? null;
    };
    const attention = QKV.some(has) || has("o_proj");
    const at0 = { buffer: d.res, offset: () => 0 };
    for (let l = L - 1; l >= 0; l--) {
      const a = A.layers[l], n = `blocks.${l}.`, w = (s) => o[n + s], lowest = l === 0;
      // MLP: res[l+1] = res2 + fc_out(gelu(fc_in(ln2(res2)))); d.res is d res[l+1]. Below it, in the
      // lowest block, only the attention's adapters want a gradient (mlpThrough), and fc_in's
      const mlpThrough = !lowest || attention, needDh = mlpThrough || has("fc_in");
      if (needDh) {
        ops.matmul(plan, "backward_input", { M: rows, N: 4 * C, K: C, A: d.res, B: P, bOff: w("mlp.fc_out.weight"), C: d.h,
          geluGradOf: has("fc_out") ? null : a.h });
      }
      this._recordBackward(plan, A, l, "fc_out", at0, a.g, needDh ? d.h : null, a.h);
      let sumIn = null;
      if (mlpThrough) sumIn = intoLayerNorm({ M: rows, N: C, K: 4 * C, A: d.h, B: P, bOff: w("mlp.fc_in.weight"), C: d.ln }, has("fc_in"));
      this._recordBackward(plan, A, l, "fc_in", { buffer: d.h, offset: () => 0 }, a.ln2, mlpThrough ? d.ln : null);
      if (!mlpThrough) break;
      ops.layernormBackwardInput(plan, { rows, C, dout: d.ln, x: a.res2, stats: a.ln2s, params: P, wOff: w("ln2.weight"), dx: d.res, accumulate: true, sumIn });
      // attention: res2 = res[l] + o_proj(attn(q, k, v)); d.res is now d res2
      const needDatt = !lowest || QKV.some(has);
      if (needDatt) ops.matmul(plan, "backward_input", { M: rows, N: C, K: C, A: d.res, B: P, bOff: w("attn.o_proj.weight"), C: d.att });
      this._recordBackward(plan, A, l, "o_proj", at0, a.att, needDatt ? d.att : null);
      if (!needDatt) break;
      ops.attentionBackward(plan, { B, T, H, C, qkv: { buffer: a.qkv, stride: a.stride }, out: a.att, lse: a.lse, dout: d.att,
        dqkv: { buffer: d.qkv.qkv, stride: d.qkv.stride } });
      // q, k, v: d ln1 = Σ dX·W over the three (K = 3C), wanted above block 0 only
      const dln1 = !lowest;
      if (dln1) {
        sumIn = intoLayerNorm({ M: rows, N: C, K: C, A: d.qkv.qkv, B: P, bOff: w("attn.q_proj.weight"), C: d.ln, kcat: 3,
          strides: { a: d.qkv.stride, b: tr.projStride } }, QKV.some(has));
      }
      this._recordBackward(plan, A, l, "qkv", { buffer: d.qkv.qkv, offset: (t) => QKV.indexOf(t) * d.qkv.stride }, a.ln1, dln1 ? d.ln : null);
      if (dln1) ops.layernormBackwardInput(plan, { rows, C, dout: d.ln, x: A.res[l], stats: a.ln1s, params: P, wOff: w("ln1.weight"), dx: d.res, accumulate: true, sumIn });
    }
    const parts = recordLoraNorm(ops, plan, { n: this.Q, grads: this.grads, partials: this.normPartials });
    tr.trainPlan = plan;
    tr.adamIndex = ops.adamwUpdate(plan, { n: this.Q, params: this.weights, grads: this.grads, m: this.m, v: this.v, decay: this.decay,
      partials: this.normPartials, losses: A.losses, scal: tr.scal, values: adamwValues(this.Q, tr.tr, 1, rows, parts) });
    tr.adamStepValues = {};
    plan.freeze();

    // eval, with the adapters (enabled, not merged) and without (disabled, or merged into the weights)
    const evalPlan = (label, lora) => {
      const p = new Plan(tr.device, ops.pipelines, label);
      tr.recordForward(p, A, { B, T, past: 0, logitRows: rows, lora });
      ops.crossEntropyForward(p, { rows, V, logits: A.logits, targets: A.targets, losses: A.losses });
      p.freeze();
      return p;
    };
    this.evalWith = evalPlan("lora eval", this);
    this.evalWithout = evalPlan("eval", null);
    this.mergePlan = this._mergePlan("lora merge", P, 1);
    this.unmergePlan = this._mergePlan("lora unmerge", P, -1);
    this.plans.push(plan, this.evalWith, this.evalWithout, this.mergePlan, this.unmergePlan);
    tr.evalPlan = this.evalWith;
    tr.rowsReadback = tr.buffer("row losses readback", 4 * rows, U().MAP_READ | U().COPY_DST);
    tr.xHost = new Uint32Array(rows);
    tr.yHost = new Uint32Array(rows);
    tr.startsHost = new Array(B);
  }

  /** W += sign·s·B·A in every adapted Linear of the weights in `W`, one dispatch each. */
  _mergePlan(label, W, sign) {
    const tr = this.trainer, p = new Plan(tr.device, tr.ops.pipelines, label), r = this.config.rank;
    for (let l = 0; l < tr.cfg.nLayer; l++) {
      for (const t of this.config.targets) {
        const [K, N] = targetDims(t, tr.cfg.dModel);
        recordLoraMerge(tr.ops, p, { N, K, r, wOff: tr.offsets[`${modulePath(l, t)}.weight`], aOff: this._aOff(l, t), bOff: this._bOff(l, t),
          scale: sign * this.config.scale, W, L: this.weights });
      }
    }
    p.freeze();
    return p;
  }

  _submit(plan, label) {
    const enc = this.trainer.device.createCommandEncoder({ label });
    const pass = enc.beginComputePass();
    plan.encode(pass);
    pass.end();
    this.trainer.device.queue.submit([enc.finish()]);
  }

  // which forward evaluate(), lossOn() and the attention view run
  _chooseEval() { this.trainer.evalPlan = this.enabled && !this.merged ? this.evalWith : this.evalWithout; }

  /** W += (alpha / r)·B·A in every adapted Linear, in place (tg_lora_merge): the forwards then run the merged model. */
  merge() {
    if (this.merged) throw new Error("LoRA merge: the adapters are already merged");
    if (!this.enabled) throw new Error("LoRA merge: the adapters are disabled: enable them first");
    this._submit(this.mergePlan, "lora merge");
    this.merged = true;
    this._chooseEval();
  }

  /** W -= the same product (tg_lora_unmerge): the base again, up to float32 rounding of the add and subtract. */
  unmerge() {
    if (!this.merged) throw new Error("LoRA unmerge: the adapters are not merged");
    this._submit(this.unmergePlan, "lora unmerge");
    this.merged = false;
    this._chooseEval();
  }

  /** Whether the forwards (evaluate, lossOn, the attention view) add the adapters (tg_lora_set_enabled). */
  setEnabled(enabled) {
    this._refuseMerged("enable or disable");
    this.enabled = Boolean(enabled);
    this._chooseEval();
  }

  /** The weights a Decoder on this trainer reads (Decoder's params): a copy of the base's, made on first use. */
  samplingWeights() {
    if (!this.sampling) {
      const tr = this.trainer;
      this.sampling = tr.buffer("lora sampling weights", 4 * tr.P, U().STORAGE | U().COPY_SRC | U().COPY_DST);
      this.samplingMerge = this._mergePlan("lora sampling merge", this.sampling, 1);
      this.plans.push(this.samplingMerge);
    }
    return this.sampling;
  }

  /**
   * Refreshes samplingWeights(): the trainer's weights, with the adapters merged in where
   * `withAdapters` (and they are enabled and not merged in place already), else the weights alone
   * (the base, or the model merged in place). Queued before whatever the caller submits next.
   */
  prepareSampling(withAdapters = this.enabled) {
    const tr = this.trainer, W = this.samplingWeights(), enc = tr.device.createCommandEncoder({ label: "lora sampling weights" });
    enc.copyBufferToBuffer(tr.params, 0, W, 0, 4 * tr.P);
    if (withAdapters && this.enabled && !this.merged) {
      const pass = enc.beginComputePass();
      this.samplingMerge.encode(pass);
      pass.end();
    }
    tr.device.queue.submit([enc.finish()]);
  }

  /** The merged model's state, 4 + 4P bytes (the base's step | W + (alpha / r)·B·A), the trainer left as it is. */
  async mergedState() {
    this.prepareSampling(true);
    return this._baseState(await this.trainer._read(this.sampling, 4 * this.trainer.P));
  }

  _baseState(weights) {
    const out = new Uint8Array(4 + 4 * this.trainer.P);
    new DataView(out.buffer).setInt32(0, this.baseStep, true);
    out.set(new Uint8Array(weights.buffer, weights.byteOffset, weights.byteLength), 4);
    return out;
  }

  /** The trainer's exportState() in LoRA mode: 4 + 4P bytes, the base's step and weights (merged ones while merged). */
  async exportBaseState() {
    await this._drain();
    return this._baseState(await this.trainer.weights());
  }

  /** The trainer's importState() in LoRA mode: the frozen base's weights (done) and step; no longer merged. */
  baseImported(step) {
    this.baseStep = step;
    this.merged = false;
    if (this.evalWith) this._chooseEval();
  }

  async _drain() {
    for (const slot of this.trainer.ring ?? []) if (slot.pending) await slot.pending;
  }

  async _readAdapters(buffer) {
    const tr = this.trainer, staging = tr.device.createBuffer({ label: "adapter readback", size: bufferBytes(4 * this.Q), usage: U().MAP_READ | U().COPY_DST });
    try {
      const enc = tr.device.createCommandEncoder();
      enc.copyBufferToBuffer(buffer, 0, staging, 0, 4 * this.Q);
      tr.device.queue.submit([enc.finish()]);
      await mapForReading(staging, "the adapter state");
      return new Float32Array(staging.getMappedRange(0, 4 * this.Q).slice(0));
    } finally {
      staging.destroy();
    }
  }

  /** The adapters (Q floats, adapter-manifest order). */
  async adapterWeights() {
    await this._drain();
    return this._readAdapters(this.weights);
  }

  /** The adapters' gradients of the last step, clipped (Q floats). */
  async adapterGrads() {
    await this._drain();
    return this._readAdapters(this.grads);
  }

  /** The adapter state (tg_lora_export_state): i32 step | adapters x Q | [AdamW m x Q | v x Q], little-endian. */
  async exportState({ moments = true } = {}) {
    await this._drain();
    const Q = this.Q, out = new Uint8Array(4 + (moments ? 12 : 4) * Q);
    new DataView(out.buffer).setInt32(0, this.step, true);
    const blocks = moments ? [this.weights, this.m, this.v] : [this.weights];
    for (const [i, buf] of blocks.entries()) {
      const f = await this._readAdapters(buf);
      out.set(new Uint8Array(f.buffer), 4 + 4 * Q * i);
    }
    return out;
  }

  /**
   * Loads an adapter state of exactly 4 + 4Q bytes (moments reset: AdamW's bias correction restarts, the
   * step counts on) or 4 + 12Q (exact resume), checked in full first (tg_lora_import_state's checks:
   * length, step ≥ 0, finite values, v ≥ 0); refused while merged.
   */
  importState(bytes) {
    this._refuseMerged("import");
    const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes), Q = this.Q;
    const small = 4 + 4 * Q, full = 4 + 12 * Q;
    if (u8.length !== small && u8.length !== full) {
      throw new Error(`adapter state length mismatch: ${u8.length} bytes, expected ${small} (step + adapters) or ${full} `
        + `(step + adapters + AdamW m and v) for this config${u8.length < small ? " - the buffer is truncated" : ""}`);
    }
    const copy = u8.slice(), step = new DataView(copy.buffer).getInt32(0, true);
    if (step < 0) throw new Error(`step is negative (${step})`);
    const floats = new Float32Array(copy.buffer, 4), blockNames = ["adapters", "AdamW m", "AdamW v"];
    for (let i = 0; i < floats.length; i++) {
      const bad = !Number.isFinite(floats[i]) || (i >= 2 * Q && floats[i] < 0);
      if (!bad) continue;
      const b = Math.floor(i / Q), e = this.tensors.find((t) => i % Q < t.offset + t.numel), at = i % Q - e.offset;
      if (b < 2 || !Number.isFinite(floats[i])) throw new Error(`non-finite value (NaN or infinity) in ${blockNames[b]} of ${e.name} at element ${at}`);
      throw new Error(`negative value in AdamW v of ${e.name} at element ${at}: v is a mean of squares`);
    }
    const q = this.trainer.device.queue, moments = u8.length === full;
    q.writeBuffer(this.weights, 0, floats.subarray(0, Q));
    q.writeBuffer(this.m, 0, moments ? floats.subarray(Q, 2 * Q) : new Float32Array(Q));
    q.writeBuffer(this.v, 0, moments ? floats.subarray(2 * Q, 3 * Q) : new Float32Array(Q));
    this.stepBase = moments ? 0 : step;
    this.trainer.stepCount = moments ? step : 0;
  }

  destroy() {
    for (const p of this.plans) p.destroy();
    this.plans = [];
  }
}
