// LoRA fine-tuning on the WGSL trainer (docs/format.md "LoRA adapter file"; python_ref/lora.py and
// python_ref/finetune.py are the reference, wasm/src/lora.h and tinygpt_api.h's LoRA section the C++
// twin): y = W x + b + (alpha / r) B (A x) on the chosen projections of every block, the base frozen.
//
// A Trainer made with {lora} (trainer.js) holds the base's weights and no gradients, AdamW moments or
// decay mask of its own; this module gives it the adapters (Q floats: weights, gradients, m, v) and a
// training step of one submit that trains them alone. The step first merges the adapters into a copy
// of the adapted Linears' weights (the step weights, W' = W + s·B·A, remade from the frozen base at
// every step), then runs the base's own forward and input gradients on W' (Trainer.recordForward's
// `linear`), so the adapters add no dispatch there; each adapted Linear's rows then give their share
// of dA and dB where its output gradient is (kernels/lora.js), one dispatch adds the shares, and the
// global norm, clip and AdamW run over the adapters only (adamw_update over Q parameters, every one decayed
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
import { chooseSummedSplits } from "./kernels/matmul.js";
import { loraBlockRows, loraDownKernel, loraGradPartialsKernel, loraGradsSum, loraMerge, loraMergeIntoKernel, loraNormParts, LORA_OUTPUT_GROUPS, LORA_THREADS } from "./kernels/lora.js";
import { adamwValues, SplitSums } from "./ops.js";
import { bufferBytes, listActivations, mapForReading, qkvViews, slotFloats } from "./buffers.js";
import { decoderUniformBytes, listDecoderBuffers } from "./decoder.js";
import { LOSS_RING, PAIRED_MAX_OUTPUTS, summedSlabFloats } from "./step_shapes.js";

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
const partialsKernelFor = memo(loraGradPartialsKernel);
const downKernelFor = memo(loraDownKernel);
const mergeIntoKernelFor = memo(loraMergeIntoKernel);

/**
 * lora_merge_into (kernels/lora.js): 1..3 targets of one shape (N,K), merged copies W' = W + (scale·B)·A in
 * each of L blocks: targets [{srcOff, dstOff, aOff}], W at srcOff (+ l·srcStride) into Wm at dstOff
 * (+ l·dstStride), A at aOff (+ l·aStride) of Ad and B after it.
 */
export function recordLoraMergeInto(ops, plan, { N, K, r, L, srcStride, dstStride, aStride, scale, targets, W, Wm, Ad }) {
  const values = { N, K, r, L, src_stride: srcStride, dst_stride: dstStride, a_stride: aStride, scale };
  targets.forEach((t, i) => Object.assign(values, { [`src_off${i}`]: t.srcOff, [`dst_off${i}`]: t.dstOff, [`a_off${i}`]: t.aOff }));
  return plan.add(mergeIntoKernelFor(targets.length), values, [W, Wm, Ad], grid1d(Math.ceil((targets.length * L * N * K) / LORA_THREADS)));
}

/**
 * lora_down, then lora_grad_partials, for 1..3 targets of one Linear shape (in K, out N, rank r) on the same
 * M rows x at xOff of X: targets [{yOff, aOff}] (dy at yOff of Y, A at aOff of the adapters Ad and B after
 * it); u and d in UD (d dOff floats after u); the row blocks' shares at Pt (block w's from w·q). Returns
 * the blocks.
 */
export function recordLoraGradPartials(ops, plan, { M, K, N, r, q, scale, xOff = 0, dOff, targets, X, Y, Ad, UD, Pt }) {
  const T = targets.length, rows = loraBlockRows(M), blocks = Math.ceil(M / rows), offsets = {};
  targets.forEach((t, i) => Object.assign(offsets, { [`y_off${i}`]: t.yOff, [`a_off${i}`]: t.aOff }));
  plan.add(downKernelFor(T), { M, K, N, r, x_off: xOff, d_off: dOff, scale, ...offsets }, [X, Y, Ad, UD], grid1d(Math.ceil((2 * M * T * r) / LORA_THREADS)));
  plan.add(partialsKernelFor(T), { M, K, N, r, rows, q, x_off: xOff, d_off: dOff, ...offsets }, [X, Y, UD, Pt], grid1d(blocks * LORA_OUTPUT_GROUPS));
  return blocks;
}

/**
 * lora_grads_sum: G[i] = Σ_w Pt[w·n + i] over `blocks` row blocks, for the n adapter elements, and their
 * norm's partial sums of squares into partials; returns how many (adamwValues' parts).
 */
export function recordLoraGradsSum(ops, plan, { n, blocks, Pt, G, partials }) {
  const parts = loraNormParts(n);
  plan.add(loraGradsSum, { n, blocks, parts }, [Pt, G, partials], grid1d(parts));
  return parts;
}

/** W (N,K) at wOff += (scale·B)·A, A at aOff and B at bOff of the adapters L. */
export function recordLoraMerge(ops, plan, { N, K, r, wOff, aOff, bOff, scale, W, L }) {
  return plan.add(loraMerge, { N, K, r, w_off: wOff, a_off: aOff, b_off: bOff, scale }, [W, L], grid1d(Math.ceil((N * K) / LORA_THREADS)));
}

// ---------------------------------------------------------------- sizes (Trainer.requirements)

/** How many of q, k and v are adapted (at least 1): the most targets a lora_grad_partials dispatch takes. */
const dGroup = (lora) => Math.max(1, lora.targets.filter((t) => QKV.includes(t)).length);

/** Whether the step's input gradients into a LayerNorm split K (as the full step's, past its pairs). */
const splitsInputGradients = ({ dModel: C }, rows) => rows * 4 * C > PAIRED_MAX_OUTPUTS;

// A block's Linears whose weights a merged copy holds, and what the copy holds with them: q, k and v's
// together (the products read the three one projStride apart), with ln1 before them, and fc_in with ln2
// (a product's LayerNorm prologue reads its parameters from the weights' buffer); o_proj and fc_out alone
const SITES = [
  { site: "qkv", targets: QKV, first: "ln1.weight", last: "attn.v_proj.weight" },
  { site: "o_proj", targets: ["o_proj"], first: "attn.o_proj.weight" },
  { site: "fc_in", targets: ["fc_in"], first: "ln2.weight", last: "mlp.fc_in.weight" },
  { site: "fc_out", targets: ["fc_out"], first: "mlp.fc_out.weight" },
];
const weightName = (target) => `${target.startsWith("fc_") ? "mlp" : "attn"}.${target}.weight`;

/**
 * Where the step weights (the merged copies of a block's adapted Linears) lie: per block `blockFloats`,
 * the adapted sites one after another, each region a copy of the base's floats from its first weight
 * (block 0's at srcOff) to its last weight's end: {regions [{site, first, targets, base, floats, srcOff}],
 * blockFloats, floats}.
 */
export function stepWeightsLayout(model, lora) {
  const e = Object.fromEntries(manifest(model).map((x) => [x.name, x]));
  const regions = [];
  let at = 0;
  for (const s of SITES) {
    const targets = s.targets.filter((t) => lora.targets.includes(t));
    if (targets.length === 0) continue;
    const first = e[`blocks.0.${s.first}`], last = e[`blocks.0.${s.last ?? s.first}`];
    const floats = last.offset + last.numel - first.offset;
    regions.push({ site: s.site, first: s.first, targets, base: at, floats, srcOff: first.offset });
    at += floats;
  }
  return { regions, blockFloats: at, floats: model.nLayer * at };
}

/** Floats of the row blocks' shares of every adapter gradient (lora_grad_partials), for `rows` rows. */
const rowBlocks = (rows) => Math.ceil(rows / loraBlockRows(rows));
const partialFloats = (rows, Q) => rowBlocks(rows) * Q;

/**
 * Every buffer a LoRA trainer for `config` creates, and a Decoder on it (with the sampling copy of the
 * weights it reads), as add(label, bytes, storage) in creation order; LoRATrainer's twin of
 * trainer.js's trainerBuffers. what: "train" (what a step needs), "all" (with generation's).
 */
export function listLoRABuffers(config, options, add) {
  const m = config.model, { dModel: C, vocabSize: V, ctx: T } = m, B = config.training.batch, rows = B * T;
  const lora = loraConfig(options, config.rules), Q = adapterCount(m, lora), r = lora.rank;
  const last = manifest(m).at(-1), P = last.offset + last.numel;
  add("params", 4 * P);
  for (const name of ["lora weights", "lora grads", "lora m", "lora v"]) add(name, 4 * Q);
  add("lora decay mask", 4 * Math.ceil(Q / 32));
  add("lora step weights", 4 * stepWeightsLayout(m, lora).floats);
  add("lora u and d", 4 * 2 * dGroup(lora) * rows * r);
  add("lora grad partials", 4 * partialFloats(rows, Q));
  add("lora norm partials", 4 * loraNormParts(Q));
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
 * Bytes of a LoRA trainer's plan uniforms at most (256 a dispatch): the step (6 merges, ≤ 4 + 7L
 * dispatches forward, ≤ 3 + 7L and 4L backward, the sum, the norm and AdamW), two evals (≤ 6 + 5 + 11L),
 * three merges in place (6L each), and a Decoder's.
 */
export const loraUniformBytes = (L, ctx) => 256 * ((16 + 18 * L) + 2 * (11 + 11 * L) + 3 * 6 * L) + decoderUniformBytes(L, ctx);

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
    this.layout = stepWeightsLayout(m, this.config);
    this.stepWeights = trainer.buffer("lora step weights", 4 * this.layout.floats, store);
    this.dOff = dGroup(this.config) * rows * r; // d's floats after u's in "lora u and d"
    this.ud = trainer.buffer("lora u and d", 4 * 2 * this.dOff, store);
    this.partials = trainer.buffer("lora grad partials", 4 * partialFloats(rows, Q), store);
    this.normPartials = trainer.buffer("lora norm partials", 4 * loraNormParts(Q), store);
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

  // the offsets of a Linear's adapters
  _aOff(l, target) { return this.at[`${modulePath(l, target)}.lora_A`]; }
  _bOff(l, target) { return this.at[`${modulePath(l, target)}.lora_B`]; }

  /**
   * Where the products read the parameter `name` (e.g. "blocks.3.attn.q_proj.weight", "blocks.3.ln1.weight"):
   * in the step weights if it lies in an adapted site's copy there (the adapted Linears merged, the rest
   * the base's), else in the base's weights.
   */
  linear(name) {
    const tr = this.trainer, o = tr.offsets, match = /^blocks\.(\d+)\./.exec(name), l = match ? Number(match[1]) : -1;
    const within = (g) => o[name] >= o[`blocks.${l}.${g.first}`] && o[name] < o[`blocks.${l}.${g.first}`] + g.floats;
    const region = match && this.layout.regions.find(within);
    if (!region) return { B: tr.params, bOff: o[name] };
    return { B: this.stepWeights, bOff: l * this.layout.blockFloats + region.base + o[name] - o[`blocks.${l}.${region.first}`] };
  }

  /** Copies the base's floats of every adapted site into the step weights (their merges rewrite the adapted Linears' alone). */
  _copyBase() {
    const tr = this.trainer, enc = tr.device.createCommandEncoder({ label: "lora step weights" });
    for (let l = 0; l < tr.cfg.nLayer; l++) {
      for (const g of this.layout.regions) {
        enc.copyBufferToBuffer(tr.params, 4 * (g.srcOff + l * tr.blockStride), this.stepWeights, 4 * (l * this.layout.blockFloats + g.base), 4 * g.floats);
      }
    }
    tr.device.queue.submit([enc.finish()]);
  }

  /**
   * Records W' = W + s·B·A of every adapted Linear into the step weights: a dispatch for up to three
   * targets of one shape (q, k, v and o_proj are C×C), all blocks in it.
   */
  _recordMerges(plan) {
    const tr = this.trainer, { nLayer: L, dModel: C } = tr.cfg, r = this.config.rank;
    const byShape = new Map();
    for (const t of this.config.targets) {
      const key = targetDims(t, C).join("x");
      if (!byShape.has(key)) byShape.set(key, []);
      byShape.get(key).push(t);
    }
    for (const targets of byShape.values()) {
      const [K, N] = targetDims(targets[0], C);
      for (let i = 0; i < targets.length; i += 3) {
        recordLoraMergeInto(tr.ops, plan, { N, K, r, L, srcStride: tr.blockStride, dstStride: this.layout.blockFloats, aStride: this.Q / L,
          scale: this.config.scale, W: tr.params, Wm: this.stepWeights, Ad: this.weights,
          targets: targets.slice(i, i + 3).map((t) => {
            const name = `blocks.0.${weightName(t)}`;
            return { srcOff: tr.offsets[name], dstOff: this.linear(name).bOff, aOff: this._aOff(0, t) };
          }) });
      }
    }
  }

  /**
   * The row blocks' shares of dA and dB of the adapted Linears at `site` of block l ("qkv": those of q, k
   * and v adapted; else the one), from their input x (an activation) and output gradient dy ({buffer,
   * offset(target)}), into the partials; returns the blocks.
   */
  _recordGradPartials(plan, rows, l, site, dy, x) {
    const adapted = site === "qkv" ? QKV.filter((t) => this.adapts(t)) : this.adapts(site) ? [site] : [];
    if (adapted.length === 0) return;
    const [K, N] = targetDims(adapted[0], this.trainer.cfg.dModel);
    recordLoraGradPartials(this.trainer.ops, plan, { M: rows, K, N, r: this.config.rank, q: this.Q, scale: this.config.scale,
      dOff: this.dOff, X: x, Y: dy.buffer, Ad: this.weights, UD: this.ud, Pt: this.partials,
      targets: adapted.map((t) => ({ yOff: dy.offset(t), aOff: this._aOff(l, t) })) });
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
    const linear = (name) => this.linear(name);
    this._recordMerges(plan);
    tr.recordForward(plan, A, { B, T, past: 0, logitRows: rows, linear });
    ops.crossEntropyBackward(plan, { rows, V, logits: A.logits, targets: A.targets, losses: A.losses });
    ops.matmul(plan, "backward_input", { M: rows, N: C, K: V, A: A.logits, B: P, bOff: o["token_embedding.weight"], C: d.ln });
    ops.layernormBackwardInput(plan, { rows, C, dout: d.ln, x: A.res[L], stats: A.lnfs, params: P, wOff: o["ln_f.weight"], dx: d.res, accumulate: false });
    // an input gradient into a LayerNorm: split K with the LayerNorm summing the slabs (as the full step
    // past its pairs)
    const split = splitsInputGradients(m, rows);
    const intoLayerNorm = (args) => {
      if (!split) {
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
      const a = A.layers[l], n = `blocks.${l}.`, w = (s) => o[n + s], W = (s) => this.linear(n + s), lowest = l === 0;
      // MLP: res[l+1] = res2 + fc_out(gelu(fc_in(ln2(res2)))); d.res is d res[l+1]. Below it, in the
      // lowest block, only the attention's adapters want a gradient (mlpThrough), and fc_in's
      const mlpThrough = !lowest || attention, needDh = mlpThrough || has("fc_in");
      if (needDh) {
        ops.matmul(plan, "backward_input", { M: rows, N: 4 * C, K: C, A: d.res, ...W("mlp.fc_out.weight"), C: d.h, geluGradOf: a.h });
      }
      this._recordGradPartials(plan, rows, l, "fc_out", at0, a.g);
      let sumIn = null;
      if (mlpThrough) sumIn = intoLayerNorm({ M: rows, N: C, K: 4 * C, A: d.h, ...W("mlp.fc_in.weight"), C: d.ln });
      this._recordGradPartials(plan, rows, l, "fc_in", { buffer: d.h, offset: () => 0 }, a.ln2);
      if (!mlpThrough) break;
      ops.layernormBackwardInput(plan, { rows, C, dout: d.ln, x: a.res2, stats: a.ln2s, params: P, wOff: w("ln2.weight"), dx: d.res, accumulate: true, sumIn });
      // attention: res2 = res[l] + o_proj(attn(q, k, v)); d.res is now d res2
      const needDatt = !lowest || QKV.some(has);
      if (needDatt) ops.matmul(plan, "backward_input", { M: rows, N: C, K: C, A: d.res, ...W("attn.o_proj.weight"), C: d.att });
      this._recordGradPartials(plan, rows, l, "o_proj", at0, a.att);
      if (!needDatt) break;
      ops.attentionBackward(plan, { B, T, H, C, qkv: { buffer: a.qkv, stride: a.stride }, out: a.att, lse: a.lse, dout: d.att,
        dqkv: { buffer: d.qkv.qkv, stride: d.qkv.stride } });
      // q, k, v: d ln1 = Σ dX·W over the three (K = 3C), wanted above block 0 only
      const dln1 = !lowest;
      if (dln1) {
        sumIn = intoLayerNorm({ M: rows, N: C, K: C, A: d.qkv.qkv, ...W("attn.q_proj.weight"), C: d.ln, kcat: 3,
          strides: { a: d.qkv.stride, b: tr.projStride } });
      }
      this._recordGradPartials(plan, rows, l, "qkv", { buffer: d.qkv.qkv, offset: (t) => QKV.indexOf(t) * d.qkv.stride }, a.ln1);
      if (dln1) ops.layernormBackwardInput(plan, { rows, C, dout: d.ln, x: A.res[l], stats: a.ln1s, params: P, wOff: w("ln1.weight"), dx: d.res, accumulate: true, sumIn });
    }
    const parts = recordLoraGradsSum(ops, plan, { n: this.Q, blocks: rowBlocks(rows), Pt: this.partials, G: this.grads, partials: this.normPartials });
    tr.trainPlan = plan;
    tr.adamIndex = ops.adamwUpdate(plan, { n: this.Q, params: this.weights, grads: this.grads, m: this.m, v: this.v, decay: this.decay,
      partials: this.normPartials, losses: A.losses, scal: tr.scal, values: adamwValues(this.Q, tr.tr, 1, rows, parts) });
    tr.adamStepValues = {};
    plan.freeze();

    // eval, with the adapters (enabled, not merged: on the step weights, merged first) and without
    // (disabled, or merged into the weights)
    const evalPlan = (label, withAdapters) => {
      const p = new Plan(tr.device, ops.pipelines, label);
      if (withAdapters) this._recordMerges(p);
      tr.recordForward(p, A, { B, T, past: 0, logitRows: rows, linear: withAdapters ? linear : null });
      ops.crossEntropyForward(p, { rows, V, logits: A.logits, targets: A.targets, losses: A.losses });
      p.freeze();
      return p;
    };
    this.evalWith = evalPlan("lora eval", true);
    this.evalWithout = evalPlan("eval", false);
    this.mergePlan = this._mergePlan("lora merge", P, 1);
    this.unmergePlan = this._mergePlan("lora unmerge", P, -1);
    this.plans.push(plan, this.evalWith, this.evalWithout, this.mergePlan, this.unmergePlan);
    tr.evalPlan = this.evalWith;
    tr.rowsReadback = tr.buffer("row losses readback", 4 * rows, U().MAP_READ | U().COPY_DST);
    tr.xHost = new Uint32Array(rows);
    tr.yHost = new Uint32Array(rows);
    tr.startsHost = new Array(B);
    this._copyBase();
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
    if (this.trainPlan) this._copyBase();
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
