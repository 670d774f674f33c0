// The WebGPU trainer: TinyGPT's whole training step (forward, backward, clip, AdamW) as WGSL
// dispatches recorded once and replayed into ONE command encoder with ONE submit per step. Every
// tensor lives on the GPU; the only per-step uploads are the batch (tokens, targets, the token
// order for the embedding backward) and AdamW's two bias corrections; the only read-back is the
// loss, through a ring of mappable buffers so the next step is never stalled. Evaluation runs the
// same forward; generation is a Decoder's (decoder.js) on this trainer's weights.
// No Node or DOM imports: runs as-is in a browser Web Worker and under Node's `webgpu` package.
import { manifest, initialWeights, splitCorpus, batchStarts, evalWindowStarts } from "./prng.js";
import { Ops, SplitSums, adamwValues, adamwStepValues, tilesPair, normPartialCount } from "./ops.js";
import { chooseSplits, chooseTile, chooseSummedSplits, tileCount, tileShape, tileWithThreads } from "./kernels/matmul.js";
import { Plan } from "./plan.js";
import { isSoftwareAdapter } from "./software_adapter.js";
import { bufferBytes, createActivations, listActivations, mapForReading, qkvViews, slotFloats } from "./buffers.js";
import { decoderUniformBytes, listDecoderBuffers } from "./decoder.js";
import { checkConfig } from "./config_rules.js";
import { LoRA, listLoRABuffers, loraUniformBytes } from "./lora.js";
import { LAYERNORM_PROLOGUE_MAX_ACTIVATIONS, LOSS_RING, PAIRED_MAX_OUTPUTS, summedSlabFloats } from "./step_shapes.js";

const U = () => GPUBufferUsage;

/** K-splits of a weight-gradient product dW (M,N) = dYᵀ·X over K = rows, `batches` of them in one dispatch. */
const weightGradSplits = (M, N, rows, batches = 1) => chooseSplits(M, N, rows, chooseTile("backward_weight", M, N, rows), batches);

/** Floats of a product's split-K slabs in the scratch, rounded to whole 256-byte binding offsets (0: no split). */
function splitKSlabFloats(M, N, batches, rows, splits = weightGradSplits(M, N, rows)) {
  return splits > 1 ? slotFloats(batches * splits * (M * N + M)) : 0;
}

// A block's split-K slabs stay side by side until one dispatch sums them all only while they are this
// small: the sums must find the slabs still in L2. Slabs past a big GPU's L2 made the step slower than
// summing each product's slabs right after it; below, one sum a block is faster, and at the edge it
// still saves dispatches, which is host time where the host is the bound (see
// docs/lab/2026-11-25-wgsl-step-vs-pytorch.md §10).
const GROUPED_SPLIT_SUMS_FLOATS = 10 * 2 ** 20;

// Past PAIRED_MAX_OUTPUTS, a pair whose weight gradient must take its own tile's twin (the same tile
// with K sliced into another number of groups, for the input gradient's invocation count) loses
// once that gradient is this big, and wins below it (see docs/lab/2026-11-27-wgsl-step-dispatch-costs.md §28).
const TWIN_PAIR_MAX_WEIGHT_OUTPUTS = 100_000;

// Where a step's backward is a chain of dependent dispatches that each wait for their slowest
// workgroup, a Linear's weight gradient (K = B·T, the long serial loop) lengthens every link it
// rides in. Deferred, the chain runs the input gradients alone, and the weight gradients run at the
// end, each kind batched over the blocks and the kinds on one tile in one dispatch, where their
// workgroups fill the GPU. That keeps each block's output gradients and the activations they
// multiply until then (deferredLayout). It pays from medium up, one dispatch per tile more than one
// per kind; tiny and small, whose Linears pair, lose with it: their pairs are short (see
// docs/lab/2026-11-27-wgsl-step-deferred-weight-gradients.md §31).
// It stays off where the biggest buffer it keeps (L·rows·4C floats: every block's d h, or train g)
// would pass WebGPU's default binding size of 128 MiB.
const DEFERRED_MAX_KEPT_FLOATS = 2 ** 25;
/** Whether a step defers its Linears' weight gradients to the end of the backward (see above). */
export const defersWeightGradients = ({ nLayer: L, dModel: C }, rows) =>
  rows * 4 * C > PAIRED_MAX_OUTPUTS && L * rows * 4 * C <= DEFERRED_MAX_KEPT_FLOATS;

// the tied head's weight: the token embedding's
const HEAD_PARAM = "token_embedding.weight";
/**
 * The deferred weight gradients, each kind batched over the L blocks: the parameter, [M, N]
 * of dW = dYᵀ·X, and which slots hold dY and X (deferredLayout). Given the vocabulary V, also the
 * tied head's (no bias, one batch), where the device binds the group's buffers with the head's two
 * (headDeferred); otherwise the head's stays paired with its input gradient at the chain's start.
 */
const deferredProducts = (C, L, V = 0) => [
  { param: "mlp.fc_out.weight", M: C, N: 4 * C, dY: "res", X: "g" }, { param: "mlp.fc_in.weight", M: 4 * C, N: C, dY: "h", X: "ln2" },
  { param: "attn.o_proj.weight", M: C, N: C, dY: "res2", X: "att" }, { param: "attn.q_proj.weight", M: C, N: C, dY: "q", X: "ln1" },
  { param: "attn.k_proj.weight", M: C, N: C, dY: "k", X: "ln1" }, { param: "attn.v_proj.weight", M: C, N: C, dY: "v", X: "ln1" },
].map((k) => ({ ...k, batches: L, biasGrad: true })).concat(V ? [{ param: HEAD_PARAM, M: V, N: C, dY: "logits", X: "lnf", batches: 1, biasGrad: false }] : []);
// The 64×64w group's K-splits aim at ~768 workgroups, not chooseSplits' 512: medium 4 splits (768
// workgroups) rather than 3 (576), large 2 (1296) rather than none (648), faster than both aims
// around it (see docs/lab/2026-11-27-wgsl-step-deferred-weight-gradients.md §32).
const GROUP_WORKGROUPS = 768;
/**
 * The ways the deferred weight gradients may be recorded, each kind with its tile and K-splits, in
 * the order _buildTraining tries them: one group on 64×64w (Ops.matmulGroup), a group per kind's own
 * tile, one dispatch each (`apart`). A group splits K only as far as all its products together leave
 * the GPU short of ~512 workgroups (the 64×64w group: GROUP_WORKGROUPS). floats: split-K slabs enough
 * for any mix of the three. head: the head's weight gradient joins the 64×64w group (and only it).
 */
function deferredPlans({ nLayer: L, dModel: C, vocabSize: V }, rows, head = false) {
  // workgroups: chooseSplits' target (its ~512 where not given)
  const grouped = (list, workgroups) => {
    const all = list.reduce((n, k) => n + k.batches * tileCount(k.M, k.N, k.tile), 0);
    return list.map((k) => ({ ...k, splits: chooseSplits(k.M, k.N, rows, k.tile, all / tileCount(k.M, k.N, k.tile), workgroups) }));
  };
  const own = deferredProducts(C, L).map((k) => ({ ...k, tile: chooseTile("backward_weight", k.M, k.N, rows) }));
  const group = grouped(deferredProducts(C, L, head ? V : 0).map((k) => ({ ...k, tile: "64x64w" })), GROUP_WORKGROUPS);
  const perTile = [...new Set(own.map((k) => k.tile))].map((tile) => grouped(own.filter((k) => k.tile === tile)));
  const apart = own.map((k) => ({ ...k, splits: weightGradSplits(k.M, k.N, rows, L) }));
  const slabs = (k) => (k ? splitKSlabFloats(k.M, k.N, k.batches, rows, k.splits) : 0);
  const most = (param) => Math.max(...[group, perTile.flat(), apart].map((way) => slabs(way.find((k) => k.param === param))));
  const floats = group.reduce((n, { param }) => n + most(param), 0);
  return { group, perTile, apart, floats };
}

/** The activations the deferred weight gradients multiply: one buffer of L slots each in the training set. */
const DEFERRED_ACTIVATIONS = ["ln1", "att", "ln2", "g"];

/**
 * Slots (floats) of the buffers that keep, for the deferred weight gradients, each block's output
 * gradients: d res holds the residual stream's gradient at every stage, d res[j] (entering block j's
 * backward from above, j = 0..L) in slot j and block l's d res2 (at its attention's output) in slot
 * L + 1 + l; d h block l's in slot l; d qkv the q gradients of blocks 0..L-1, then the k, then the v.
 */
function deferredLayout({ nLayer: L, dModel: C }, rows) {
  const res = slotFloats(rows * C);
  return { res, h: slotFloats(rows * 4 * C), qkv: slotFloats(rows * C), resFloats: (2 * L + 1) * res };
}

/**
 * The split-K plan of a step: weight gradients dW = dYᵀ·X (with the bias gradient Σ_rows dY fused
 * in) have few output tiles and K = B·T, so they split K into slabs of one scratch buffer. With
 * `grouped`, a block's four products (and, in the last block, the head's) keep their slabs side by
 * side until one dispatch at the block's end sums them all; otherwise each product's slabs are summed
 * right after it, at the scratch's start. floats: the scratch's size.
 */
function splitKPlan(m, rows, deferred) {
  const { dModel: C, vocabSize: V } = m, head = splitKSlabFloats(V, C, 1, rows);
  // deferred: the head's slabs first, then the group's, or (headDeferred) the group's with the head's
  if (deferred) return { grouped: false, floats: Math.max(16, head + deferredPlans(m, rows).floats, deferredPlans(m, rows, true).floats) };
  const block = [[C, 4 * C, 1], [4 * C, C, 1], [C, C, 1], [C, C, 3]]; // [M, N, batches]: fc_out, fc_in, o_proj, q/k/v
  const slabs = block.map(([M, N, n]) => splitKSlabFloats(M, N, n, rows));
  const groupedFloats = head + slabs.reduce((a, b) => a + b, 0);
  const grouped = groupedFloats <= GROUPED_SPLIT_SUMS_FLOATS;
  return { grouped, floats: Math.max(16, grouped ? groupedFloats : Math.max(head, ...slabs)) };
}

/**
 * One scratch buffer for every split-K product's slabs: the weight gradients' (splitKPlan, and its
 * `grouped`) from 0, those a LayerNorm sums (summedSlabFloats) from summedOff on. Both in one buffer,
 * a block's end and ln1's backward bind it once (Ops.layernormBackwardBlock).
 */
function splitKScratch(m, rows, deferred) {
  const plan = splitKPlan(m, rows, deferred), summedOff = slotFloats(plan.floats); // a 256-byte binding offset
  return { grouped: plan.grouped, summedOff, floats: summedOff + summedSlabFloats(m, rows) };
}

// Each plan's uniforms take 256 bytes per dispatch (a pair of products: 256 too): at most 14 + 24L
// dispatches train a step (unpaired, every weight gradient splitting K, each summed apart) and 4 + 7L
// evaluate; a Decoder's plans come on top (decoderUniformBytes).
const uniformBytesBound = (L, ctx) => 256 * (14 + 24 * L + 4 + 7 * L) + decoderUniformBytes(L, ctx);

/**
 * Every buffer a Trainer for `config` creates (training, eval, the state read-back) and one Decoder
 * on it (generation: the page samples from the model it trains) as [{label, bytes, storage}];
 * storage: bound to kernels, so maxStorageBufferBindingSize applies. Mirrors the constructors:
 * tests/webgpu/test_webgpu_engine.py checks each label and size against the buffers a real Trainer
 * and its Decoder create.
 */
function trainerBuffers(config, deferWeightGrads) {
  const m = config.model, { nLayer: L, dModel: C, vocabSize: V, ctx: T } = m, B = config.training.batch, rows = B * T;
  const deferred = deferWeightGrads ?? defersWeightGradients(m, rows), stages = deferred ? deferredLayout(m, rows) : null;
  const last = manifest(m).at(-1), P = last.offset + last.numel;
  const list = [];
  const add = (label, bytes, storage = true) => list.push({ label, bytes: bufferBytes(bytes), storage });
  for (const name of ["params", "grads", "adam m", "adam v"]) add(name, 4 * P);
  add("decay mask", 4 * Math.ceil(P / 32));
  add("unused binding", 16); // Ops' stand-ins for an unused optional input and output
  add("unused output", 16);
  listActivations(add, m, "train", B, T, T, { kept: deferred ? DEFERRED_ACTIVATIONS : [] }); // eval runs on the same set
  for (const [name, n] of [["d res", deferred ? stages.resFloats : rows * C], ["d ln", rows * C], ["d ln2", rows * C], ["d lnf", rows * C],
    ["d h", deferred ? L * stages.h : rows * 4 * C], ["d att", rows * C], ["d qkv", 3 * (deferred ? L : 1) * slotFloats(rows * C)],
    ...(deferred ? [["d logits", rows * V]] : []),
    ["split-K partials", splitKScratch(m, rows, deferred).floats],
    ["token order", V + 1 + rows], ["norm partials", normPartialCount(V, T, C)], ["norm, clip and loss", 4]]) add(name, 4 * n);
  for (let i = 0; i < LOSS_RING; i++) add(`loss readback ${i}`, 16, false);
  add("row losses readback", 4 * rows, false);
  listDecoderBuffers(config, add);
  add("state readback", 4 * P, false); // exportState() and weights(): one at a time
  return list;
}

// What every kernel asks of a device: WebGPU's default limits, which every adapter offers (the
// matmul tiles and attention layouts are sized for them: ≤ 256 invocations, ≤ 16 KiB of workgroup
// memory; attention's backward binds 8 storage buffers).
const KERNEL_LIMITS = {
  maxStorageBuffersPerShaderStage: 8, maxComputeWorkgroupStorageSize: 16384,
  maxComputeInvocationsPerWorkgroup: 256, maxComputeWorkgroupSizeX: 256,
};
/** The device limits a Trainer depends on: trainerLimits() requests these (at the adapter's values), checkLimits() checks them. */
const TRAINER_LIMITS = ["maxStorageBufferBindingSize", "maxBufferSize", ...Object.keys(KERNEL_LIMITS)];

/**
 * requiredLimits for a Trainer's device: each of TRAINER_LIMITS at the adapter's own value, so that
 * big models get their bindings, the deepest matmul tiles their workgroup memory and the block-end
 * kernel (Ops.layernormBackwardBlock) its storage buffers, wherever the adapter offers them.
 */
export function trainerLimits(adapter) {
  const limits = {};
  for (const name of TRAINER_LIMITS) {
    if (adapter.limits[name] !== undefined) limits[name] = adapter.limits[name];
  }
  return limits;
}

function formatBytes(n) {
  const [unit, size] = n >= 2 ** 30 ? ["GiB", 2 ** 30] : n >= 2 ** 20 ? ["MiB", 2 ** 20] : ["KiB", 2 ** 10];
  return `${+(n / size).toFixed(1)} ${unit}`;
}

/**
 * Null when a Trainer for `config` (and a Decoder on it) fits a device (or adapter) with these limits, else a sentence
 * naming the limit it exceeds. Limits the object lacks are not checked. options: Trainer.requirements' ({lora}: a LoRA trainer's).
 */
export function checkLimits(config, limits, options = {}) {
  const need = Trainer.requirements(config, options);
  const sizes = [[need.largestBinding, need.largestBindingLabel, "maxStorageBufferBindingSize"], [need.largestBuffer, need.largestBufferLabel, "maxBufferSize"]];
  for (const [bytes, label, name] of sizes) {
    if (limits[name] !== undefined && bytes > limits[name]) {
      return `the ${label} buffer needs ${formatBytes(bytes)}, more than this adapter's ${name} of ${formatBytes(limits[name])}`;
    }
  }
  for (const [name, value] of Object.entries(KERNEL_LIMITS)) {
    if (limits[name] !== undefined && value > limits[name]) return `the kernels need a ${name} of ${value}; this adapter's is ${limits[name]}`;
  }
  return null;
}

// presets.json's rules (config.rules, from model_config.js) through webgpu/config_rules.js, as every
// level checks them: the model fields, initStd and the training values (gradClip 0 would zero every update).
const checkModel = (config) => checkConfig(config);

export class Trainer {
  /**
   * What a Trainer for `config` and a Decoder on it need of a device, before creating one: totalBytes
   * (every buffer, plan uniforms bounded), largestBuffer and largestBinding in bytes with their buffers' labels,
   * and the list of buffers. deferWeightGrads, lora: as the constructor's options (lora: a LoRA trainer's
   * buffers, lora.js listLoRABuffers: the base's weights, no gradients or moments of its own).
   */
  static requirements(config, { deferWeightGrads = undefined, lora = null } = {}) {
    checkModel(config);
    let buffers;
    if (lora) {
      buffers = [];
      listLoRABuffers(config, lora, (label, bytes, storage = true) => buffers.push({ label, bytes: bufferBytes(bytes), storage }));
    } else {
      buffers = trainerBuffers(config, deferWeightGrads);
    }
    const largest = (list) => list.reduce((a, b) => (b.bytes > a.bytes ? b : a));
    const buffer = largest(buffers), binding = largest(buffers.filter((b) => b.storage));
    const { nLayer: L, ctx } = config.model;
    const totalBytes = buffers.reduce((sum, b) => sum + b.bytes, 0) + (lora ? loraUniformBytes(L, ctx) : uniformBytesBound(L, ctx));
    return {
      totalBytes, largestBuffer: buffer.bytes, largestBufferLabel: buffer.label,
      largestBinding: binding.bytes, largestBindingLabel: binding.label, buffers,
    };
  }

  /**
   * @param {GPUDevice} device
   * @param {{model, training, initStd}} config  from model_config.js (site/static/js)
   * @param {{corpus?: Uint8Array, seed?: number, state?: ArrayBuffer|Uint8Array, matmulTiles?: "gpu"|"software", subgroupWidth?: number, deferWeightGrads?: boolean}} options
   *   matmulTiles: the GPU's tile choices, or their software twins (Ops softwareTiles); by default
   *   the software ones on an adapter that runs WGSL on the CPU (device.adapterInfo)
   *   subgroupWidth: the LayerNorm and attention kernels' subgroup width (Ops); by default what
   *   probeSubgroups() found on the device (subgroups.js), 1 (none) where it has not run
   *   deferWeightGrads: the Linears' weight gradients at the end of the backward, batched over the
   *   blocks; by default where that pays (defersWeightGradients)
   *   lora: {rank, alpha, targets, seed}: LoRA fine-tuning (lora.js): `state` (or the init of `seed`) is
   *   the frozen base, which gets no gradients, moments or decay mask; this.lora holds the adapters
   *   (from their init stream: this.lora.importState for others), and step() trains them alone
   */
  constructor(device, config, { corpus = null, seed = config.training.seed, state = null, matmulTiles = undefined, subgroupWidth = undefined,
    deferWeightGrads = undefined, lora = null } = {}) {
    checkModel(config);
    this.device = device;
    this.cfg = config.model;
    this.tr = config.training;
    this.initStd = config.initStd;
    this.seed = seed;
    this.entries = manifest(this.cfg);
    this.offsets = Object.fromEntries(this.entries.map((e) => [e.name, e.offset]));
    // q, k, v projections (weight, bias) lie one stride apart in the manifest: C·C + C
    this.projStride = this.offsets["blocks.0.attn.k_proj.weight"] - this.offsets["blocks.0.attn.q_proj.weight"];
    // a block's parameters lie one stride after the block before's (0 with one block)
    this.blockStride = this.cfg.nLayer > 1 ? this.offsets["blocks.1.ln1.weight"] - this.offsets["blocks.0.ln1.weight"] : 0;
    const last = this.entries[this.entries.length - 1];
    this.P = last.offset + last.numel;
    this.stepCount = 0;
    this.batchesDrawn = 0;
    this.lr = null; // the next steps' learning rate where a schedule sets one (null: config.training.lr)
    this.deferred = deferWeightGrads ?? defersWeightGradients(this.cfg, this.tr.batch * this.cfg.ctx);
    matmulTiles ??= isSoftwareAdapter(device.adapterInfo) ? "software" : "gpu";
    if (matmulTiles !== "gpu" && matmulTiles !== "software") throw new Error(`matmulTiles: "gpu" or "software", not ${matmulTiles}`);
    this.ops = new Ops(device, { softwareTiles: matmulTiles === "software", subgroupWidth });
    this.buffers = [];
    if (corpus) this.setCorpus(corpus);

    const P = this.P, store = U().STORAGE | U().COPY_SRC | U().COPY_DST;
    this.params = this.buffer("params", 4 * P, store);
    this.lora = lora ? new LoRA(this, lora, config.rules) : null; // its adapters instead of the base's optimizer
    if (!this.lora) {
      this.grads = this.buffer("grads", 4 * P, store);
      this.m = this.buffer("adam m", 4 * P, store);
      this.v = this.buffer("adam v", 4 * P, store);
      this.decay = this.buffer("decay mask", 4 * Math.ceil(P / 32), store);
      const mask = new Uint32Array(Math.ceil(P / 32));
      for (const e of this.entries) {
        if (e.shape.length < 2) continue;
        for (let i = e.offset; i < e.offset + e.numel; i++) mask[i >>> 5] |= 1 << (i & 31);
      }
      device.queue.writeBuffer(this.decay, 0, mask);
    }
    if (state) this.importState(state);
    else this.loadWeights(initialWeights(this.cfg, seed, this.initStd));
    if (this.lora) this.lora.build();
    else this._buildTraining();
  }

  /** The training step's plan, recorded at its first use (_buildTraining; LoRA.build sets its own). */
  get trainPlan() {
    if (!this._trainPlan) this._recordTrainStep?.(); // sets _trainPlan
    return this._trainPlan;
  }

  set trainPlan(plan) { this._trainPlan = plan; }

  /** Dispatches (each a dependent GPU launch) of one training step and of one eval batch. */
  get dispatches() {
    return { step: this.trainPlan.entries.length, eval: this.evalPlan.entries.length };
  }

  buffer(label, size, usage) {
    const b = this.device.createBuffer({ label, size: bufferBytes(size), usage });
    this.buffers.push(b);
    return b;
  }

  setCorpus(bytes) {
    const { train, val } = splitCorpus(bytes, this.tr.valFraction, this.cfg.ctx);
    this.train = train;
    this.val = val;
  }

  loadWeights(weights) {
    if (weights.length !== this.P) throw new Error(`expected ${this.P} weights, got ${weights.length}`);
    this.device.queue.writeBuffer(this.params, 0, weights);
    if (this.lora) return; // the frozen base has no moments
    const zeros = new Float32Array(this.P);
    this.device.queue.writeBuffer(this.m, 0, zeros);
    this.device.queue.writeBuffer(this.v, 0, zeros);
  }

  /** An activation set of the trainer's buffers, freed with it (createActivations; options: kept, qkv). */
  activations(label, B, T, kvT, options = {}) {
    return createActivations((...args) => this.buffer(...args), this.cfg, label, B, T, kvT, options);
  }

  /**
   * Forward pass of `rows` = B·T positions of activation set A at absolute positions past.. (past > 0
   * only with a KV cache: a Decoder's), the logits of the last logitRows rows. Training, evaluation, a
   * Decoder's prefill and RecomputeDecoder record it. params: the weights' buffer (a Decoder's may be
   * another, lora.js samplingWeights); linear: null, or where the products read a block's Linear weight
   * `name` instead, as {B, bOff} (lora.js LoRA.linear: the adapters merged into a copy of the adapted ones).
   */
  recordForward(plan, A, { B, T, past, logitRows, params = this.params, linear = null }) {
    const ops = this.ops, { nLayer: L, dModel: C, nHead: H, vocabSize: V, layerNormEps: eps } = this.cfg;
    const o = this.offsets, P = params, rows = B * T;
    const W = (name) => linear?.(name) ?? { B: P, bOff: o[name] };
    // a product's weight, and its LayerNorm prologue's parameters from the same buffer (`x`: normalised's)
    const reads = (x, weight, lnName) => {
      const w = W(weight);
      if (!x.ln || w.B === P) return { ...x, ...w };
      return { ...x, ...w, ln: { ...x.ln, wOff: W(`${lnName}.weight`).bOff, bOff: W(`${lnName}.bias`).bOff } };
    };
    const embedding = { T, past, tokens: A.tokens, wteOff: o["token_embedding.weight"], wpeOff: o["position_embedding.weight"] };
    // the A operand of the products that read LayerNorm `name` of x: x itself, normalised by their
    // prologue (which also stores the output and statistics for the backward), or that output, from
    // a dispatch of its own (LAYERNORM_PROLOGUE_MAX_ACTIVATIONS), which computes the embedding into
    // res[0] too where it is block 0's ln1
    const prologue = rows * C <= LAYERNORM_PROLOGUE_MAX_ACTIVATIONS;
    if (prologue) ops.embeddingForward(plan, { rows, C, ...embedding, params: P, out: A.res[0] });
    // fc_out's result, where it leaves its split-K slabs for the next LayerNorm to sum (summedSlabFloats)
    let unsummed = null;
    const normalised = (name, x, out, stats) => {
      const ln = { wOff: o[`${name}.weight`], bOff: o[`${name}.bias`], out, stats, eps };
      if (prologue) return { A: x, ln };
      ops.layernormForward(plan, { rows, C, x, params: P, wOff: ln.wOff, bOff: ln.bOff, out, stats, eps, sumIn: unsummed?.regions[0],
        embed: x === A.res[0] ? embedding : null });
      unsummed = null;
      return { A: out };
    };
    const fcOutSplit = prologue ? { splits: 1 } : chooseSummedSplits("forward", rows, C, 4 * C, ops.workgroupLimit);
    for (let l = 0; l < L; l++) {
      const a = A.layers[l], n = `blocks.${l}.`;
      const ln1 = normalised(n + "ln1", A.res[l], a.ln1, a.ln1s);
      // q, k and v of row r at row past + r of their views (the KV cache's position, when decoding)
      ops.matmul(plan, "forward", { M: rows, N: C, K: C, ...reads(ln1, n + "attn.q_proj.weight", n + "ln1"), C: a.qkv, cOff: past * C, bias: P,
        biasOff: o[n + "attn.q_proj.bias"], batches: 3, strides: { b: this.projStride, c: a.stride, bias: this.projStride } });
      ops.attentionForward(plan, { B, T, kvT: A.kvT, past, H, C, q: a.q, k: a.k, v: a.v, out: a.att, lse: a.lse });
      ops.matmul(plan, "forward", { M: rows, N: C, K: C, A: a.att, ...W(n + "attn.o_proj.weight"), C: a.res2, bias: P, biasOff: o[n + "attn.o_proj.bias"], R: A.res[l] });
      const ln2 = normalised(n + "ln2", a.res2, a.ln2, a.ln2s);
      ops.matmul(plan, "forward", { M: rows, N: 4 * C, K: C, ...reads(ln2, n + "mlp.fc_in.weight", n + "ln2"), C: a.h, bias: P, biasOff: o[n + "mlp.fc_in.bias"], gelu: a.g });
      const fcOut = { M: rows, N: C, K: 4 * C, A: a.g, ...W(n + "mlp.fc_out.weight"), C: A.res[l + 1], bias: P, biasOff: o[n + "mlp.fc_out.bias"], R: a.res2 };
      if (fcOutSplit.splits > 1) {
        unsummed = new SplitSums();
        ops.matmul(plan, "forward", { ...fcOut, ...fcOutSplit, partials: this.splitK, partialsOff: this.summedOff, sums: unsummed });
      } else {
        ops.matmul(plan, "forward", fcOut);
      }
    }
    // logits = ln_f(x) · wteᵀ (tied head), for the last logitRows rows only when generating
    const first = rows - logitRows, lnf = normalised("ln_f", A.res[L], A.lnf, A.lnfs);
    ops.matmul(plan, "forward", { M: logitRows, N: V, K: C, ...lnf, aOff: first * C, B: P, bOff: o["token_embedding.weight"], C: A.logits, cOff: first * V });
  }

  _buildTraining() {
    const { nLayer: L, dModel: C, nHead: H, vocabSize: V } = this.cfg, B = this.tr.batch, T = this.cfg.ctx, rows = B * T;
    const ops = this.ops, o = this.offsets, P = this.params, G = this.grads;
    const deferred = this.deferred, stages = deferred ? deferredLayout(this.cfg, rows) : null;
    const A = (this.act = this.activations("train", B, T, T, { kept: deferred ? DEFERRED_ACTIVATIONS : [] }));
    const S = U().STORAGE | U().COPY_SRC;
    const d = {
      // d ln2 keeps ln2's output gradient until the block's LayerNorm parameter sums, after ln1's backward
      // d lnf keeps ln_f's output gradient until the embedding's backward takes ln_f's parameter gradients
      res: this.buffer("d res", 4 * (deferred ? stages.resFloats : rows * C), S), ln: this.buffer("d ln", 4 * rows * C, S),
      ln2: this.buffer("d ln2", 4 * rows * C, S), lnf: this.buffer("d lnf", 4 * rows * C, S),
      h: this.buffer("d h", 4 * (deferred ? L * stages.h : rows * 4 * C), S),
      att: this.buffer("d att", 4 * rows * C, S), qkv: qkvViews((...args) => this.buffer(...args), "d qkv", rows * C, deferred ? 3 * L : 3),
      // (deferred) the logits' gradient, kept for the head's weight gradient in the group (headDeferred;
      // made whenever deferred, as the buffer list, trainerBuffers, does not depend on the device)
      logits: deferred ? this.buffer("d logits", 4 * rows * V, S) : null,
    };
    // where each stage of the output gradients lies: in place, or (deferred) kept in slots
    // (deferredLayout) until the weight gradients at the end read them
    const at = {
      res: (j) => (deferred ? j * stages.res : 0), // d res[j]
      res2: (l) => (deferred ? (L + 1 + l) * stages.res : 0),
      h: (l) => (deferred ? { buffer: d.h, offset: 4 * l * stages.h, size: 4 * rows * 4 * C } : d.h),
      // block l's q, k and v gradients: a view from q's slot on, k and v `stride` floats after it
      qkv: (l) => (deferred
        ? { buffer: { buffer: d.qkv.qkv, offset: 4 * l * d.qkv.stride, size: 4 * (2 * L + 1) * d.qkv.stride }, stride: L * d.qkv.stride }
        : { buffer: d.qkv.qkv, stride: d.qkv.stride }),
    };
    const scratch = splitKScratch(this.cfg, rows, deferred);
    this.splitK = this.buffer("split-K partials", 4 * scratch.floats, S);
    this.summedOff = scratch.summedOff;
    // grouped: a block's split-K weight gradients lie side by side in the scratch, summed by one
    // dispatch at the block's end (splitKPlan); deferred: the head's, summed at the last block's end
    // (or, in the group, by the embedding's backward: headSums), and the deferred ones', at block 0's
    const sums = scratch.grouped || deferred ? new SplitSums() : null;
    let slabsUsed = 0;
    let plan = null; // the step's, made where it is recorded (below), which linearBackward records into
    // (deferred) where each kind's dY lies: [buffer, block 0's offset, the stride between blocks];
    // and its X: {buffer, slot} (a kept activation's slots, or the head's ln_f output)
    const dY = deferred && { res: [d.res, at.res(1), stages.res], h: [d.h, 0, stages.h], res2: [d.res, at.res2(0), stages.res],
      q: [d.qkv.qkv, 0, d.qkv.stride], k: [d.qkv.qkv, L * d.qkv.stride, d.qkv.stride], v: [d.qkv.qkv, 2 * L * d.qkv.stride, d.qkv.stride],
      logits: [d.logits, 0, 0] };
    const keptX = (X) => (X === "lnf" ? { buffer: A.lnf, slot: 0 } : A.kept[X]);
    // The head's weight gradient joins the deferred group where the device binds the group's buffers
    // with the head's dY and X: its input gradient then starts the chain alone, with the cross-entropy
    // as its prologue (which leaves the logits' gradient in d logits for the group), and its split-K
    // slabs are summed by the embedding's backward, which adds the token gradients to them (headSums).
    const withHead = deferred && deferredPlans(this.cfg, rows, true);
    const headDeferred = deferred && ops.bindsGroup(withHead.group.map((k) => dY[k.dY][0]), withHead.group.map((k) => keptX(k.X).buffer),
      withHead.group.some((k) => k.splits > 1));
    const headSums = headDeferred ? new SplitSums() : null;
    this.headDeferred = headDeferred; // which of the two plans a deferred step took (the tests check)
    // a Linear's backward: its input gradient dX = dY·W and weight gradient dW = dYᵀ·X, in one
    // dispatch while the model is small enough for a step to be paid per dispatch (PAIRED_MAX_OUTPUTS)
    const paired = rows * 4 * C <= PAIRED_MAX_OUTPUTS;
    // The input gradient as its own dispatch (toLayerNorm as linearBackward's): {dX, unsummed}.
    const inputGradient = (inputGrad, toLayerNorm) => {
      const K = inputGrad.K * (inputGrad.kcat ?? 1);
      const split = toLayerNorm ? chooseSummedSplits("backward_input", rows, inputGrad.N, K, ops.workgroupLimit)
        : { tile: chooseTile("backward_input", rows, inputGrad.N, K, ops.workgroupLimit), splits: 1 };
      const unsummed = split.splits > 1 ? new SplitSums() : null;
      return { dX: { ...inputGrad, ...split, ...(unsummed ? { partials: this.splitK, partialsOff: this.summedOff, sums: unsummed } : {}) }, unsummed };
    };
    // toLayerNorm: the input gradient goes straight into a LayerNorm's backward, which (unpaired)
    // sums its split-K slabs; returns their region for that LayerNorm (null: the product is whole).
    // Past `paired`, the two products still share a dispatch where both tiles pair as they are.
    // weightGrad null (deferred): the input gradient alone.
    const linearBackward = (inputGrad, weightGrad, toLayerNorm = false) => {
      if (!weightGrad) {
        const { dX, unsummed } = inputGradient(inputGrad, toLayerNorm);
        ops.matmul(plan, "backward_input", dX);
        return unsummed?.regions[0] ?? null;
      }
      const { M, N, batches = 1 } = weightGrad, partialsOff = slabsUsed;
      if (sums) slabsUsed += splitKSlabFloats(M, N, batches, rows);
      const dW = { ...weightGrad, K: rows, splits: weightGradSplits(M, N, rows), partials: this.splitK, partialsOff, sums };
      if (paired) {
        ops.matmulPair(plan, inputGrad, dW);
        return null;
      }
      const { dX, unsummed } = inputGradient(inputGrad, toLayerNorm);
      const own = chooseTile("backward_weight", M, N, rows, ops.workgroupLimit);
      const tile = tileWithThreads(own, tileShape(dX.tile).threads) ?? own;
      const bigTwin = tile !== own && M * N > TWIN_PAIR_MAX_WEIGHT_OUTPUTS;
      if (!bigTwin && tilesPair(dX, { tile }, ops.workgroupLimit)) {
        ops.matmulPair(plan, dX, { ...dW, tile });
      } else {
        ops.matmul(plan, "backward_input", dX);
        ops.matmul(plan, "backward_weight", dW);
      }
      return unsummed?.regions[0] ?? null;
    };
    this.order = this.buffer("token order", 4 * (V + 1 + rows), U().STORAGE | U().COPY_DST);
    this.orderHost = new Uint32Array(V + 1 + rows);
    this.cursorHost = new Uint32Array(V);
    this.partials = this.buffer("norm partials", 4 * normPartialCount(V, T, C), S);
    this.scal = this.buffer("norm, clip and loss", 16, S); // [gradient norm, clip coefficient, mean loss]
    this.ring = Array.from({ length: LOSS_RING }, (_, i) => ({
      buf: this.buffer(`loss readback ${i}`, 16, U().MAP_READ | U().COPY_DST), pending: null,
    }));
    this.ringNext = 0;

    // The step is recorded (and its backward's pipelines compiled) at its first use (the trainPlan getter):
    // a model loaded to sample or evaluate never compiles them. Its buffers are all made above.
    this._recordTrainStep = () => {
      plan = this._trainPlan = new Plan(this.device, this.ops.pipelines, "train step");
      this.recordForward(plan, A, { B, T, past: 0, logitRows: rows });
      const wte = o["token_embedding.weight"];
      if (headDeferred) {
        ops.matmul(plan, "backward_input", { M: rows, N: C, K: V, A: A.logits, B: P, bOff: wte, C: d.lnf,
          ce: { targets: A.targets, losses: A.losses, out: d.logits, scale: 1 / rows } });
      } else {
        ops.crossEntropyBackward(plan, { rows, V, logits: A.logits, targets: A.targets, losses: A.losses });
        // backward; A.logits now holds d(loss)/d(logits): (rows,V)
        linearBackward({ M: rows, N: C, K: V, A: A.logits, B: P, bOff: wte, C: d.lnf }, { M: V, N: C, A: A.logits, B: A.lnf, C: G, cOff: wte });
      }
      const lnf = { dout: d.lnf, x: A.res[L], stats: A.lnfs, wOff: o["ln_f.weight"], bOff: o["ln_f.bias"] };
      ops.layernormBackwardInput(plan, { rows, C, ...lnf, params: P, dx: d.res, dxOut: at.res(L), accumulate: false });
      // a Linear's weight gradient, or (deferred) null: it runs before block 0's end, with the others
      const later = (weightGrad) => (deferred ? null : weightGrad);
      // (deferred) each kind of weight gradient, batched over the blocks: dW_l = dY_lᵀ·X_l (+ db_l), block
      // l's parameters one block's stride after block l-1's, recorded before block 0's end, which then
      // sums their split-K slabs along with its own work (once every operand is final: block 0's q, k
      // and v gradients are the last). They share a dispatch where the device binds its buffers (up to
      // 9; 11 with the head's), K split only as far as they all together leave the GPU short of ~768
      // workgroups; else one dispatch each, split as its own tiles need.
      const deferredWeightGradients = () => {
        // the args of matmul for each kind, their slabs from slabsUsed on
        const products = (list) => list.map(({ param, M, N, dY: y, X, batches, biasGrad, tile, splits }) => {
          const [buffer, aOff, aStride] = dY[y], x = keptX(X), head = param === HEAD_PARAM, partialsOff = slabsUsed;
          slabsUsed += splitKSlabFloats(M, N, batches, rows, splits);
          return { M, N, K: rows, A: buffer, aOff, B: x.buffer, C: G, cOff: o[head ? param : `blocks.0.${param}`], biasGrad, batches,
            strides: { a: aStride, b: x.slot, c: this.blockStride }, tile, splits, partials: this.splitK, partialsOff, sums: head ? headSums : sums };
        });
        // whether the kinds in `list` could share a dispatch, recorded if so
        const group = (list) => {
          const first = slabsUsed;
          if (ops.matmulGroup(plan, products(list)) !== null) return true;
          slabsUsed = first;
          return false;
        };
        // All on 64×64w rather than each on its own tile (32×32-s2 for the C×C ones, and at medium and
        // large for all): faster at every preset that defers (see
        // docs/lab/2026-11-27-wgsl-step-deferred-weight-gradients.md §31). Where the device binds too few
        // buffers for that group (its split-K scratch is a 9th), a group per own tile (at medium
        // unsplit: 8), else one dispatch each.
        const ways = headDeferred ? withHead : deferredPlans(this.cfg, rows);
        if (!group(ways.group)) {
          if (headDeferred) throw new Error("the deferred weight gradients with the head's: no group on this device");
          for (const list of ways.perTile) {
            if (!group(list)) for (const args of products(ways.apart.filter((k) => list.some((g) => g.param === k.param)))) ops.matmul(plan, "backward_weight", args);
          }
        }
      };
      for (let l = L - 1; l >= 0; l--) {
        const a = A.layers[l], n = `blocks.${l}.`, w = (s) => o[n + s], dh = at.h(l), dqkv = at.qkv(l);
        // MLP: res[l+1] = res2 + fc_out(gelu(fc_in(ln2(res2)))); d.res is d res[l+1]
        // d.h = (d.res · W_out) · gelu'(h): the gradient w.r.t. fc_in's output, GELU's backward fused in
        linearBackward({ M: rows, N: 4 * C, K: C, A: d.res, aOff: at.res(l + 1), B: P, bOff: w("mlp.fc_out.weight"), C: dh, geluGradOf: a.h },
          later({ M: C, N: 4 * C, A: d.res, B: a.g, C: G, cOff: w("mlp.fc_out.weight"), biasGrad: true }));
        const dLn2 = linearBackward({ M: rows, N: C, K: 4 * C, A: dh, B: P, bOff: w("mlp.fc_in.weight"), C: d.ln2 },
          later({ M: 4 * C, N: C, A: dh, B: a.ln2, C: G, cOff: w("mlp.fc_in.weight"), biasGrad: true }), true);
        ops.layernormBackwardInput(plan, { rows, C, dout: d.ln2, x: a.res2, stats: a.ln2s, params: P, wOff: w("ln2.weight"), dx: d.res,
          dxIn: at.res(l + 1), dxOut: at.res2(l), accumulate: true, sumIn: dLn2 });
        // attention: res2 = res[l] + o_proj(attn(q, k, v)); d.res is now d res2
        linearBackward({ M: rows, N: C, K: C, A: d.res, aOff: at.res2(l), B: P, bOff: w("attn.o_proj.weight"), C: d.att },
          later({ M: C, N: C, A: d.res, B: a.att, C: G, cOff: w("attn.o_proj.weight"), biasGrad: true }));
        ops.attentionBackward(plan, { B, T, H, C, qkv: { buffer: a.qkv, stride: a.stride }, out: a.att, lse: a.lse, dout: d.att, dqkv });
        // q, k, v projections, all three at once: d ln1 = Σ dX·W (one product over K = 3C), then
        // dW and db of each (three batches)
        const dLn1 = linearBackward({ M: rows, N: C, K: C, A: dqkv.buffer, B: P, bOff: w("attn.q_proj.weight"), C: d.ln, kcat: 3, strides: { a: dqkv.stride, b: this.projStride } },
          later({ M: C, N: C, A: dqkv.buffer, B: a.ln1, C: G, cOff: w("attn.q_proj.weight"), biasGrad: true, batches: 3, strides: { a: dqkv.stride, c: this.projStride } }), true);
        // ln1's backward, then what only the optimizer reads, once per block and in one dispatch: both
        // LayerNorms' parameter gradients and (grouped) the split-K sums of the block's weight gradients
        // (in the last block also the head's; deferred, the head's there and the others' in block 0);
        // the two in one dispatch where the device allows
        const ln1 = { dout: d.ln, x: A.res[l], stats: a.ln1s, wOff: w("ln1.weight") };
        if (deferred && l === 0) deferredWeightGradients();
        ops.layernormBackwardBlock(plan, { input: { rows, C, ...ln1, params: P, dx: d.res, dxIn: at.res2(l), dxOut: at.res(l), accumulate: true, sumIn: dLn1 },
          params: { rows, C, grads: G, sums, jobs: [{ dout: d.ln2, x: a.res2, stats: a.ln2s, wOff: w("ln2.weight") }, ln1] } });
        if (!deferred) slabsUsed = 0;
      }
      const parts = ops.embeddingBackwardNorm(plan, { B, T, C, V, order: this.order, dres: d.res, grads: G, wteOff: wte,
        wpeOff: o["position_embedding.weight"], lnf, n: this.P, partials: this.partials, headSlabs: headSums?.regions[0] ?? null });
      this.adamIndex = ops.adamwUpdate(plan, { n: this.P, params: P, grads: G, m: this.m, v: this.v, decay: this.decay,
        partials: this.partials, losses: A.losses, scal: this.scal, values: adamwValues(this.P, this.tr, 1, rows, parts) });
      this.adamStepValues = {}; // adamwStepValues' object, reused by every step
      plan.freeze();
    };

    // eval: the same forward, cross-entropy without gradient, per-row losses read back
    this.evalPlan = new Plan(this.device, this.ops.pipelines, "eval");
    this.recordForward(this.evalPlan, A, { B, T, past: 0, logitRows: rows });
    ops.crossEntropyForward(this.evalPlan, { rows, V, logits: A.logits, targets: A.targets, losses: A.losses });
    this.evalPlan.freeze();
    this.rowsReadback = this.buffer("row losses readback", 4 * rows, U().MAP_READ | U().COPY_DST);
    this.xHost = new Uint32Array(rows);
    this.yHost = new Uint32Array(rows);
    this.startsHost = new Array(B);
  }
  /** Fills xHost/yHost with windows of `data` at `starts` (rows beyond starts.length repeat row 0). */
  _fillWindows(data, starts) {
    const T = this.cfg.ctx, B = this.tr.batch;
    for (let r = 0; r < B; r++) {
      const s = starts[Math.min(r, starts.length - 1)];
      for (let t = 0; t < T; t++) { this.xHost[r * T + t] = data[s + t]; this.yHost[r * T + t] = data[s + t + 1]; }
    }
  }

  /** The next training batch of the portable data stream: {x, y} as (B·T) Uint32Arrays. */
  nextBatch() {
    if (!this.train) throw new Error("no corpus: pass {corpus} or call setCorpus(bytes) before training");
    batchStarts(this.seed, this.batchesDrawn, this.tr.batch, this.train.length - this.cfg.ctx, this.startsHost);
    this.batchesDrawn += 1;
    this._fillWindows(this.train, this.startsHost);
    return { x: this.xHost, y: this.yHost };
  }

  _uploadBatch(x, y) {
    const rows = this.tr.batch * this.cfg.ctx, V = this.cfg.vocabSize, ord = this.orderHost;
    if (x.length !== rows || y.length !== rows) throw new Error(`a batch has ${rows} tokens and targets; got ${x.length} and ${y.length}`);
    // counting sort of positions by token, for the deterministic embedding backward
    ord.fill(0, 0, V + 1);
    for (let r = 0; r < rows; r++) {
      if (!(x[r] < V) || !(y[r] < V)) throw new Error(`token ${x[r]} or target ${y[r]} at ${r} is outside the vocabulary of ${V}`);
      ord[x[r] + 1] += 1;
    }
    for (let t = 0; t < V; t++) ord[t + 1] += ord[t];
    const cursor = this.cursorHost;
    cursor.set(ord.subarray(0, V));
    for (let r = 0; r < rows; r++) ord[V + 1 + cursor[x[r]]++] = r;
    const q = this.device.queue;
    q.writeBuffer(this.act.tokens, 0, x instanceof Uint32Array ? x : Uint32Array.from(x));
    q.writeBuffer(this.act.targets, 0, y instanceof Uint32Array ? y : Uint32Array.from(y));
    q.writeBuffer(this.order, 0, ord);
  }

  /**
   * One training step on `batch` ({x, y}, B·T tokens each) or on the next batch of the stream.
   * Returns {loss}: a promise of the loss before the update; it resolves later, without blocking the
   * next step, and rejects if the device is lost before the loss is read back.
   * measure: null, or {before(encoder), after(encoder)}, recorded around the step's pass in its one
   * submit (training_stats.js: a step measured for the training view).
   */
  async step(batch = null, measure = null) {
    this.lora?.checkTrainable();
    const slot = this.ring[this.ringNext];
    if (slot.pending) await slot.pending; // at most LOSS_RING steps in flight
    const { x, y } = batch ?? this.nextBatch();
    this._uploadBatch(x, y);
    const plan = this.trainPlan; // first: recording it sets adamIndex
    this.stepCount += 1;
    plan.update(this.adamIndex, adamwStepValues(this.tr, this.stepCount, this.adamStepValues, this.lr ?? this.tr.lr));
    const enc = this.device.createCommandEncoder({ label: "train step" });
    measure?.before(enc);
    const pass = enc.beginComputePass();
    plan.encode(pass);
    pass.end();
    measure?.after(enc);
    enc.copyBufferToBuffer(this.scal, 8, slot.buf, 0, 4); // the mean loss
    this.device.queue.submit([enc.finish()]);
    this.ringNext = (this.ringNext + 1) % LOSS_RING;
    const pending = mapForReading(slot.buf, `the loss of step ${this.stepCount}`).then(() => {
      const loss = new Float32Array(slot.buf.getMappedRange(0, 4))[0];
      slot.buf.unmap();
      slot.pending = null;
      return loss;
    });
    slot.pending = pending;
    return { loss: pending };
  }

  /**
   * GPU time of each dispatch of one training step: each dispatch is replayed `reps` times in one
   * pass and once alone, and (t_reps - t_1) / (reps - 1) cancels the submit's own cost. Returns
   * [{name, grid, ms}] in step order (replays repeat AdamW and accumulations: profile a throwaway trainer).
   */
  async profileStep(batch = null, reps = 21) {
    const { x, y } = batch ?? this.nextBatch();
    this._uploadBatch(x, y);
    const plan = this.trainPlan; // first: recording it sets adamIndex
    this.stepCount += 1;
    plan.update(this.adamIndex, adamwStepValues(this.tr, this.stepCount, this.adamStepValues));
    await this.device.queue.onSubmittedWorkDone();
    const timed = async (i, times) => {
      const t0 = performance.now();
      const enc = this.device.createCommandEncoder();
      const pass = enc.beginComputePass();
      plan.encode(pass, { first: i, end: i + 1, times });
      pass.end();
      this.device.queue.submit([enc.finish()]);
      await this.device.queue.onSubmittedWorkDone();
      return performance.now() - t0;
    };
    const rows = [];
    for (const [i, e] of plan.entries.entries()) {
      await timed(i, 1);
      const one = Math.min(await timed(i, 1), await timed(i, 1));
      const many = await timed(i, reps);
      rows.push({ name: e.kernel.name, grid: [...e.grid], ms: Math.max(0, (many - one) / (reps - 1)) });
    }
    return rows;
  }

  /** Mean cross-entropy over B·T positions of a batch, without training. */
  async lossOn(x, y) {
    const rows = this.tr.batch * this.cfg.ctx;
    const sum = await this._forwardLosses(x, y, rows);
    return sum / rows;
  }

  async _forwardLosses(x, y, validRows) {
    this._uploadBatch(x, y);
    const enc = this.device.createCommandEncoder({ label: "eval" });
    const pass = enc.beginComputePass();
    this.evalPlan.encode(pass);
    pass.end();
    enc.copyBufferToBuffer(this.act.losses, 0, this.rowsReadback, 0, 4 * this.tr.batch * this.cfg.ctx);
    this.device.queue.submit([enc.finish()]);
    await mapForReading(this.rowsReadback, "evaluation losses");
    const losses = new Float32Array(this.rowsReadback.getMappedRange());
    let sum = 0;
    for (let r = 0; r < validRows; r++) sum += losses[r];
    this.rowsReadback.unmap();
    return sum;
  }

  /** Validation loss: mean cross-entropy over the K·ctx positions of the spec's eval windows. */
  async evaluate() {
    if (!this.val) throw new Error("no corpus: pass {corpus} or call setCorpus(bytes) before evaluating");
    const T = this.cfg.ctx, B = this.tr.batch;
    const starts = evalWindowStarts(this.val.length, T, this.tr.evalWindows);
    let sum = 0;
    for (let i = 0; i < starts.length; i += B) {
      const chunk = starts.slice(i, i + B);
      this._fillWindows(this.val, chunk);
      sum += await this._forwardLosses(this.xHost, this.yHost, chunk.length * T);
    }
    return sum / (starts.length * T);
  }

  async _read(buffer, bytes) {
    const staging = this.device.createBuffer({ label: "state readback", size: bytes, usage: U().MAP_READ | U().COPY_DST });
    const enc = this.device.createCommandEncoder();
    enc.copyBufferToBuffer(buffer, 0, staging, 0, bytes);
    this.device.queue.submit([enc.finish()]);
    await mapForReading(staging, "the model state");
    const out = new Float32Array(staging.getMappedRange().slice(0));
    staging.destroy();
    return out;
  }

  /** Current weights as one Float32Array in manifest order. */
  async weights() { return this._read(this.params, 4 * this.P); }

  /**
   * The .tinygpt state bytes (docs/format.md): i32 step | weights | AdamW m | AdamW v, little-endian.
   * A LoRA trainer's: 4 + 4P bytes, the base's step and weights (merged while merged: lora.js).
   */
  async exportState() {
    if (this.lora) return this.lora.exportBaseState();
    for (const slot of this.ring) if (slot.pending) await slot.pending;
    const P = this.P, out = new Uint8Array(4 + 12 * P);
    new DataView(out.buffer).setInt32(0, this.stepCount, true);
    for (const [i, buf] of [this.params, this.m, this.v].entries()) {
      const f = await this._read(buf, 4 * P);
      out.set(new Uint8Array(f.buffer), 4 + 4 * P * i);
    }
    return out;
  }

  /**
   * Loads state bytes of exactly 4 + 4P (weights only: fresh moments) or 4 + 12P bytes. A LoRA
   * trainer takes either and keeps the base's step and weights alone (its adapters stay, unmerged).
   */
  importState(bytes) {
    const u8 = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    const P = this.P;
    if (u8.length !== 4 + 4 * P && u8.length !== 4 + 12 * P) {
      throw new Error(`state has ${u8.length} bytes; this model needs ${4 + 4 * P} (weights) or ${4 + 12 * P} (with AdamW moments)`);
    }
    const copy = u8.slice(); // aligned, and the caller's bytes are left untouched
    const step = new DataView(copy.buffer).getInt32(0, true);
    if (step < 0) throw new Error(`state step is negative (${step})`);
    const floats = new Float32Array(copy.buffer, 4);
    for (let i = 0; i < floats.length; i++) {
      if (!Number.isFinite(floats[i])) throw new Error(`state holds a non-finite value at float ${i}`);
    }
    this.loadWeights(floats.subarray(0, P));
    if (this.lora) {
      this.lora.baseImported(step);
      return;
    }
    if (u8.length === 4 + 12 * P) {
      this.device.queue.writeBuffer(this.m, 0, floats.subarray(P, 2 * P));
      this.device.queue.writeBuffer(this.v, 0, floats.subarray(2 * P, 3 * P));
    }
    this.stepCount = step;
  }

  /** Frees the GPU objects. Destroy a Decoder on this trainer first (Decoder.destroy). */
  destroy() {
    this.lora?.destroy();
    for (const p of [this._trainPlan, this.evalPlan]) if (p) p.destroy(); // a step never recorded has none
    for (const b of this.buffers) b.destroy();
    this.buffers = [];
  }
}
