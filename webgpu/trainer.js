// The WebGPU trainer: TinyGPT's whole training step (forward, backward, clip, AdamW) as WGSL
// dispatches recorded once and replayed into ONE command encoder with ONE submit per step. Every
// tensor lives on the GPU; the only per-step uploads are the batch (tokens, targets, the token
// order for the embedding backward) and AdamW's two bias corrections; the only read-back is the
// loss, through a ring of mappable buffers so the next step is never stalled.
// No Node or DOM imports: runs as-is in a browser Web Worker and under Node's `webgpu` package.
import { manifest, initialWeights, splitCorpus, batchStarts, evalWindowStarts, SampleStream, sampleToken } from "./prng.js";
import { Ops, SplitSums, adamwValues, adamwStepValues, tilesPair, normPartialCount, decodeChainParts, sampleDecodeValues } from "./ops.js";
import { sampleDecodeFits, sampleDecodeServes, sampleRecordFloats } from "./kernels/sample_decode.js";
import { decodeRowsFloats, decodeNextRowsFloats, decodeTokensFits, decodeTokensKeepsNext } from "./kernels/decode_tokens.js";
import { chooseSplits, chooseTile, chooseSummedSplits, tileCount, tileShape, tileWithThreads } from "./kernels/matmul.js";
import { Plan } from "./plan.js";
import { isSoftwareAdapter } from "./software_adapter.js";

const LOSS_RING = 8;
// The most tokens decoded and sampled on the GPU in one submit by the decode chain (Trainer._decodeBatch);
// a batch also ends where the window restarts (every ctx/2 tokens). The host's round trip for a token
// (submit, the wait for the logits, sampling) cost as much as a tiny model's GPU work under Node
// (docs/performance.md §37–38), where batches of 8, 16 and 32 read alike; in Chromium a round trip takes
// ~3 ms, so the fewer the better (§43). A batch streams to the page as one burst.
export const DECODE_BATCH = 64;
// The most steps of a batch in one workgroup (decode_tokens.js), whose window restarts do not end a
// batch: fewer batches, fewer submits between a 512-token generation's steps (docs/performance.md §41).
export const TOKENS_BATCH = 64;
// A batch's tokens reach the page together, when its last step is done: on a slow adapter a batch
// holds only as many steps as the last one ran in this long (a software adapter's step of a large
// model takes ~0.7 s), so tokens keep streaming and Stop is heard within it.
const BATCH_MS = 50;
// The widest model whose batches decode in one workgroup (Trainer._decodesInOneWorkgroup): measured
// against the decode chain on an H200 (docs/performance.md §40).
const DECODE_IN_ONE_WORKGROUP_MAX_WIDTH = 64;
/** What a batch's commands were recorded for (Trainer._takeAhead), and what a batch submitted ahead is (_decodeBatch). */
const batchKey = (pos, n, prefill, slot) => `batch ${pos} ${n} ${prefill} ${slot}`;
const U = () => GPUBufferUsage;

// Activation buffers for B rows of T positions (kvT: the positions a KV cache holds), in floats.
// The constructor creates them from this table and requirements() sums it: one source for both.
function activationFloats({ dModel: C, nHead: H, vocabSize: V }, B, T, kvT) {
  const rows = B * T;
  return {
    layer: { ln1: rows * C, ln1s: 2 * rows, att: rows * C, lse: B * H * T, res2: rows * C, ln2: rows * C, ln2s: 2 * rows, h: 4 * rows * C, g: 4 * rows * C },
    // q, k, v: three views of one buffer, which one batched product fills, each of this many floats;
    // generation's (kvT > T) are the KV cache, and a token's q lands at its position too
    qkv: B * kvT * C,
    res: rows * C, // L + 1 residual streams
    top: { lnf: rows * C, lnfs: 2 * rows, logits: rows * V, losses: rows },
    ids: rows, // tokens, targets: u32
  };
}
const ACTIVATION_LABELS = { ln1s: "ln1 stats", ln2s: "ln2 stats", lnfs: "lnf stats" };
const activationLabel = (key) => ACTIVATION_LABELS[key] ?? key;

/** An activation set's layer's q, k and v views and the buffer they share (Trainer._qkvViews). */
const sameQkv = ({ qkv, stride, q, k, v }) => ({ qkv, stride, q, k, v });

/** Floats a slot of n floats takes in a buffer of several (q, k and v's views): bind-group offsets are multiples of 256 bytes. */
const slotFloats = (n) => Math.ceil(n / 64) * 64;

/** q, k and v views of n floats each, a slot apart from byte `at` of `buffer`: {stride (floats), q, k, v}. */
function qkvSlots(buffer, at, n) {
  const stride = slotFloats(n);
  const view = (i) => ({ buffer, offset: at + 4 * i * stride, size: 4 * n });
  return { stride, q: view(0), k: view(1), v: view(2) };
}

/**
 * Floats of `kv`, the buffer of every layer's q, k and v views (n floats each; Trainer._activations'
 * qkvLayers), then the next window's rows that decode_tokens.js keeps past them.
 */
const kvLayersFloats = (model, n) => model.nLayer * 3 * slotFloats(n) + decodeNextRowsFloats(model);

/** Layer l's q, k and v views (n floats each) in `kv`, the buffer of every layer's (Trainer._activations' qkvLayers). */
function qkvLayerViews(kv, l, n) {
  const at = 4 * 3 * l * slotFloats(n);
  return { qkv: { buffer: kv, offset: at, size: 4 * 3 * slotFloats(n) }, ...qkvSlots(kv, at, n) };
}

/** K-splits of a weight-gradient product dW (M,N) = dYᵀ·X over K = rows, `batches` of them in one dispatch. */
const weightGradSplits = (M, N, rows, batches = 1) => chooseSplits(M, N, rows, chooseTile("backward_weight", M, N, rows), batches);

/** Floats of a product's split-K slabs in the scratch, rounded to whole 256-byte binding offsets (0: no split). */
function splitKSlabFloats(M, N, batches, rows, splits = weightGradSplits(M, N, rows)) {
  return splits > 1 ? slotFloats(batches * splits * (M * N + M)) : 0;
}

// A block's split-K slabs stay side by side until one dispatch sums them all only while they are this
// small: the sums must find the slabs still in L2. On an H100 (50 MiB of L2) xl's 52 MiB of slabs made
// that step 6% slower than summing each product's slabs right after it; tiny–large (≤ 30 MiB) gained
// 2–14%; massive's 39 MiB took the same time either way (12.38/12.39 vs 12.34/12.41 ms) with 43
// dispatches fewer, which is host time saved where the host is the bound.
const GROUPED_SPLIT_SUMS_FLOATS = 10 * 2 ** 20;

// Every Linear's two backward products share a dispatch (Ops.matmulPair) while the block's biggest
// product (rows × 4C outputs) is this small. H100, ms/step, separate vs paired (medians of 3): tiny
// 0.69 vs 0.42, small 0.91 vs 0.82, medium 1.56 vs 1.58, then slower: large 3.63 vs 3.79, massive
// 15.5 vs 17.0 (a pair takes 256-invocation tiles only, and two products' registers). Past it, a
// Linear pairs only where both its products' own tiles pair as they are (fc_in and fc_out from xl
// on, 64×64w): xl 3.880 → 3.781–3.797, huge 8.393 → 8.320–8.330, massive 10.661 → 10.357–10.368
// (200 steps; docs/performance.md §16).
const PAIRED_MAX_OUTPUTS = 500_000;

// Past PAIRED_MAX_OUTPUTS, a pair whose weight gradient must take its own tile's twin (the same tile
// with K sliced into another number of groups, for the input gradient's invocation count) loses
// once that gradient is this big. H100, ms/step unpaired / paired, 3 trainers a side
// (docs/performance.md §28): large's fc_in and fc_out (192×768 = 147,456 outputs each) 2.193 / 2.293,
// massive's q/k/v (384×384) 8.848 / 9.170; medium's fc_in (65,536) 1.068 / 1.069; q/k/v or o_proj
// at medium and large (≤ 36,864) 2–4% slower unpaired; at 50,000, xl (q/k/v: 65,536) 2.5% slower.
const TWIN_PAIR_MAX_WEIGHT_OUTPUTS = 100_000;

// A LayerNorm is the prologue of the product it feeds (Ops.matmul's ln) only while its input
// (rows × C) is this small: each column tile of the product then recomputes its rows' statistics,
// which for bigger activations costs more than the dispatch it saves. H100, ms/step, a LayerNorm
// dispatch vs prologue (medians of 3–5 rounds, four calls; docs/performance.md §12): medium 0.5–2.5%
// faster in every call, tiny and small within their round-to-round spread; large 3.53 vs 3.57,
// huge 10.81 vs 11.14, massive 14.25 vs 14.55. Decoding (1 row) always takes the prologue.
const LAYERNORM_PROLOGUE_MAX_ACTIVATIONS = 200_000;

// Where a step's backward is a chain of dependent dispatches that each wait for their slowest
// workgroup, a Linear's weight gradient (K = B·T, the long serial loop) lengthens every link it
// rides in. Deferred, the chain runs the input gradients alone, and the weight gradients run at the
// end, each kind batched over the blocks and the kinds on one tile in one dispatch, where their
// workgroups fill the GPU. That keeps each block's output gradients and the activations they
// multiply until then (deferredLayout). H100, ms/step (ab_steps, 3 trainers a side;
// docs/performance.md §31), deferred / paired as before: medium 0.948 / 1.063, large 2.047 / 2.198;
// one dispatch per tile / one per kind: xl 2.722 / 2.769, huge 6.512 / 6.723, massive 8.392 / 8.568
// (one per kind / paired: xl 2.750 / 2.822, huge 6.680 / 7.086, massive 8.511 / 8.854). Tiny and
// small lost with one dispatch per kind (0.502 / 0.467, 0.603 / 0.536): their pairs are short.
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
// workgroups) rather than 3 (576), large 2 (1296) rather than none (648). H100, ms/step, 3 trainers a
// side: 768 / 512: medium 0.919 / 0.928, large 2.015 / 2.033; 1024 (medium 6) / 512: 0.924 / 0.930;
// medium unsplit (192) / 3 splits: 0.958 / 0.934 (docs/performance.md §32).
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
 * Floats of the scratch where products leave their split-K slabs for the LayerNorm after them to sum
 * (chooseSummedSplits): fc_out's forward where that LayerNorm is a dispatch of its own (not a
 * prologue), and the input gradients of fc_in and of q/k/v where a Linear's backward products are
 * not all paired; sized for the biggest of them at `rows` rows (generation's prefill has fewer).
 */
function summedSlabFloats({ dModel: C }, rows) {
  const forward = rows * C > LAYERNORM_PROLOGUE_MAX_ACTIVATIONS, backward = rows * 4 * C > PAIRED_MAX_OUTPUTS;
  const slabs = (on, K) => {
    const { splits } = chooseSummedSplits("forward", rows, C, K);
    return on && splits > 1 ? splits * rows * C : 0;
  };
  return Math.max(16, slabs(forward, 4 * C), slabs(backward, 4 * C), slabs(backward, 3 * C));
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

const bufferBytes = (size) => Math.max(16, Math.ceil(size / 4) * 4);

// Each plan's uniforms take 256 bytes per dispatch (a pair of products: 256 too): at most 14 + 24L
// dispatches train a step (unpaired, every weight gradient splitting K, each summed apart), 4 + 7L
// evaluate, and 3 + 9L decode a token or prefill a window. The decode chain keeps such a plan for each
// step of a batch (at most DECODE_BATCH, and ctx), and its sampler a dispatch for each and one more; a
// batch in one workgroup is one dispatch.
const uniformBytesBound = (L, ctx) =>
  256 * (14 + 24 * L + 4 + 7 * L + (3 + 9 * L) * (1 + Math.min(DECODE_BATCH, ctx)) + DECODE_BATCH + 1 + 1);

/**
 * Every buffer a Trainer for `config` creates (training, eval, generation, the state read-back) as
 * [{label, bytes, storage}]; storage: bound to kernels, so maxStorageBufferBindingSize applies.
 * Mirrors the constructor: tests/webgpu/test_webgpu_engine.py checks each label and size against the
 * buffers a real Trainer creates.
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
  const activations = (label, B, T, kvT, kept = [], ownQkv = true, qkvLayers = false) => {
    const s = activationFloats(m, B, T, kvT);
    for (const k of kept) add(`${label} ${activationLabel(k)}`, 4 * L * slotFloats(s.layer[k]));
    if (qkvLayers) add(`${label} qkv`, 4 * kvLayersFloats(m, s.qkv));
    for (let l = 0; l < L; l++) {
      for (const [k, n] of Object.entries(s.layer)) if (!kept.includes(k)) add(`${label} ${activationLabel(k)}`, 4 * n);
      if (ownQkv && !qkvLayers) add(`${label} qkv`, 4 * 3 * slotFloats(s.qkv));
    }
    for (let l = 0; l <= L; l++) add(`${label} res${l}`, 4 * s.res);
    for (const [k, n] of Object.entries(s.top)) add(`${label} ${activationLabel(k)}`, 4 * n);
    add(`${label} tokens`, 4 * s.ids);
    add(`${label} targets`, 4 * s.ids);
  };
  activations("train", B, T, T, deferred ? DEFERRED_ACTIVATIONS : []); // eval runs on the same set
  for (const [name, n] of [["d res", deferred ? stages.resFloats : rows * C], ["d ln", rows * C], ["d ln2", rows * C], ["d lnf", rows * C],
    ["d h", deferred ? L * stages.h : rows * 4 * C], ["d att", rows * C], ["d qkv", 3 * (deferred ? L : 1) * slotFloats(rows * C)],
    ...(deferred ? [["d logits", rows * V]] : []),
    ["split-K partials", splitKScratch(m, rows, deferred).floats],
    ["token order", V + 1 + rows], ["norm partials", normPartialCount(V, T, C)], ["norm, clip and loss", 4]]) add(name, 4 * n);
  for (let i = 0; i < LOSS_RING; i++) add(`loss readback ${i}`, 16, false);
  add("row losses readback", 4 * rows, false);
  activations("generate", 1, 1, T, [], true, decodeTokensFits(m));
  add("generate partial rows", 4 * decodeChainParts(C, m.nHead).floats);
  activations("prefill", 1, T, T, [], false); // its q, k and v are generation's
  add("logits readback", 4 * V, false);
  add("generate draws", 4 * DECODE_BATCH);
  add("generate samples", 4 * DECODE_BATCH * sampleRecordFloats(V));
  add("generate batch tokens", 4 * DECODE_BATCH);
  add("generate chain window", 4 * (T + 1), false);
  for (const i of [0, 1]) add(`samples readback ${i}`, 4 * DECODE_BATCH * sampleRecordFloats(V), false);
  if (decodeTokensFits(m)) {
    add("generate window", 4 * (1 + T));
    add("generate rows", 4 * decodeRowsFloats(m));
    for (const i of [0, 1]) {
      add(`tokens draws ${i}`, 4 * TOKENS_BATCH);
      add(`tokens samples ${i}`, 4 * TOKENS_BATCH * sampleRecordFloats(V));
      add(`tokens readback ${i}`, 4 * TOKENS_BATCH * sampleRecordFloats(V), false);
    }
  }
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
 * Null when a Trainer for `config` fits a device (or adapter) with these limits, else a sentence
 * naming the limit it exceeds. Limits the object lacks are not checked.
 */
export function checkLimits(config, limits) {
  const need = Trainer.requirements(config);
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

/**
 * Maps a read-back buffer. A lost device (or a destroyed trainer) rejects the map with an
 * AbortError whose message may be empty: the rejection says what was being read instead.
 */
async function mapForReading(buffer, what) {
  try {
    await buffer.mapAsync(GPUMapMode.READ);
  } catch (e) {
    throw new Error(`reading ${what} back from the GPU failed (${e.name}${e.message ? `: ${e.message}` : ""}); the device may have been lost`);
  }
}

/**
 * A batch's read-back `buffer` being mapped: {buffer, read (the promise)}. A batch submitted ahead may
 * never be awaited (the device lost while generate() throws): its rejection is marked handled so that
 * it does not end a Node process, and the promise still rejects for whoever awaits it.
 */
function mapFlight(buffer) {
  const read = mapForReading(buffer, "sampled tokens");
  read.catch(() => {});
  return { buffer, read };
}

/** Waits out a batch submitted ahead whose records are not wanted, and unmaps its read-back. */
async function landFlight(flight) {
  await flight.read;
  flight.buffer.unmap();
}

function checkModel(m) {
  for (const k of ["nLayer", "nHead", "dModel", "ctx", "vocabSize"]) {
    if (!Number.isInteger(m[k]) || m[k] <= 0) throw new Error(`${k} must be a positive integer, got ${m[k]}`);
  }
  if (m.dModel % m.nHead !== 0) throw new Error(`dModel (${m.dModel}) is not divisible by nHead (${m.nHead})`);
}

export class Trainer {
  /**
   * What a Trainer for `config` needs of a device, before creating one: totalBytes (every buffer,
   * plan uniforms bounded), largestBuffer and largestBinding in bytes with their buffers' labels,
   * and the list of buffers. deferWeightGrads: as the constructor's option.
   */
  static requirements(config, { deferWeightGrads = undefined } = {}) {
    checkModel(config.model);
    const buffers = trainerBuffers(config, deferWeightGrads);
    const largest = (list) => list.reduce((a, b) => (b.bytes > a.bytes ? b : a));
    const buffer = largest(buffers), binding = largest(buffers.filter((b) => b.storage));
    const totalBytes = buffers.reduce((sum, b) => sum + b.bytes, 0) + uniformBytesBound(config.model.nLayer, config.model.ctx);
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
   *   decodeInOneWorkgroup: a batch's decoded tokens in one workgroup (decode_tokens.js) or the decode
   *   chain; by default by the rule (_decodesInOneWorkgroup)
   *   decodeAhead: in one workgroup, submit the next batch before this one's tokens are read (default true)
   *   decodeNextWindow: in one workgroup, each step computes its token's row of the next window, so
   *   that a restart copies rows instead of rebuilding them (default true, where decodeTokensKeepsNext
   *   says they fit; false for a benchmark's column)
   */
  constructor(device, config, { corpus = null, seed = config.training.seed, state = null, matmulTiles = undefined, subgroupWidth = undefined,
    deferWeightGrads = undefined, decodeInOneWorkgroup = undefined, decodeAhead = true, decodeNextWindow = true } = {}) {
    checkModel(config.model);
    this.device = device;
    this.cfg = config.model;
    this.tr = config.training;
    this.initStd = config.initStd;
    this.seed = seed;
    this.entries = manifest(this.cfg);
    this.offsets = Object.fromEntries(this.entries.map((e) => [e.name, e.offset]));
    // q, k, v projections (weight, bias) lie one stride apart in the manifest: C·C + C
    this.projStride = this.offsets["blocks.0.attn.k_proj.weight"] - this.offsets["blocks.0.attn.q_proj.weight"];
    const last = this.entries[this.entries.length - 1];
    this.P = last.offset + last.numel;
    this.stepCount = 0;
    this.batchesDrawn = 0;
    this.deferred = deferWeightGrads ?? defersWeightGradients(this.cfg, this.tr.batch * this.cfg.ctx);
    this.decodeInOneWorkgroup = decodeInOneWorkgroup;
    this.decodeAhead = decodeAhead;
    this.decodeNextWindow = decodeNextWindow && decodeTokensKeepsNext(this.cfg);
    matmulTiles ??= isSoftwareAdapter(device.adapterInfo) ? "software" : "gpu";
    if (matmulTiles !== "gpu" && matmulTiles !== "software") throw new Error(`matmulTiles: "gpu" or "software", not ${matmulTiles}`);
    this.ops = new Ops(device, { softwareTiles: matmulTiles === "software", subgroupWidth });
    this.buffers = [];
    if (corpus) this.setCorpus(corpus);

    const P = this.P, store = U().STORAGE | U().COPY_SRC | U().COPY_DST;
    this.params = this.buffer("params", 4 * P, store);
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
    if (state) this.importState(state);
    else this.loadWeights(initialWeights(this.cfg, seed, this.initStd));
    this._buildTraining();
  }

  /** Dispatches (each a dependent GPU launch) of one training step, of one eval batch and of one decoded token. */
  get dispatches() {
    if (!this.genPlan) this._buildGeneration();
    return { step: this.trainPlan.entries.length, eval: this.evalPlan.entries.length, decode: this.genPlan.entries.length };
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
    const zeros = new Float32Array(this.P);
    this.device.queue.writeBuffer(this.m, 0, zeros);
    this.device.queue.writeBuffer(this.v, 0, zeros);
  }

  /**
   * One activation set: what the forward saves for the backward, for B rows of T positions. kept:
   * layer activations held as one buffer of L slots each (in `kept`, by name), each layer's a view.
   * qkvOf: another set whose layers' q, k and v views these layers use (as large: kvT·B·C floats each).
   * qkvLayers: every layer's q, k and v views in one buffer (`kv`), layer l's 3·stride floats from
   * l·3·stride, for a kernel that reads every layer's KV cache (decode_tokens.js), which keeps the
   * next window's rows past them (decodeNextRowsFloats).
   */
  _activations(label, B, T, kvT, keptNames = [], qkvOf = null, qkvLayers = false) {
    const { nLayer: L } = this.cfg, S = U().STORAGE | U().COPY_SRC;
    const sizes = activationFloats(this.cfg, B, T, kvT);
    const make = (table) => Object.fromEntries(Object.entries(table).filter(([k]) => !keptNames.includes(k))
      .map(([k, n]) => [k, this.buffer(`${label} ${activationLabel(k)}`, 4 * n, S)]));
    const kept = Object.fromEntries(keptNames.map((k) => {
      const slot = slotFloats(sizes.layer[k]);
      return [k, { buffer: this.buffer(`${label} ${activationLabel(k)}`, 4 * L * slot, S), slot }];
    }));
    const view = (k, l) => ({ buffer: kept[k].buffer, offset: 4 * l * kept[k].slot, size: 4 * sizes.layer[k] });
    const kv = qkvLayers ? this.buffer(`${label} qkv`, 4 * kvLayersFloats(this.cfg, sizes.qkv), S) : null;
    const layers = [];
    for (let l = 0; l < L; l++) {
      layers.push({ ...make(sizes.layer), ...Object.fromEntries(keptNames.map((k) => [k, view(k, l)])),
        ...(qkvOf ? sameQkv(qkvOf.layers[l]) : kv ? qkvLayerViews(kv, l, sizes.qkv) : this._qkvViews(`${label} qkv`, sizes.qkv)) });
    }
    // COPY_SRC: a restart on the GPU copies the prefill's tokens into the window it keeps (_batchCommands)
    const ids = (name) => this.buffer(`${label} ${name}`, 4 * sizes.ids, U().STORAGE | U().COPY_DST | U().COPY_SRC);
    return {
      B, T, kvT, layers, kept, kv, res: Array.from({ length: L + 1 }, (_, l) => this.buffer(`${label} res${l}`, 4 * sizes.res, S)),
      ...make(sizes.top), tokens: ids("tokens"), targets: ids("targets"),
    };
  }

  /** {qkv: buffer, stride: floats between the views, q, k, v: views of n floats each}. */
  _qkvViews(label, n, views = 3) {
    const stride = slotFloats(n);
    const qkv = this.buffer(label, 4 * views * stride, U().STORAGE | U().COPY_SRC);
    return { qkv, ...qkvSlots(qkv, 0, n) };
  }

  /** Forward pass of `rows` = B·T positions at absolute positions past.. (past > 0 only with a KV cache). */
  _recordForward(plan, A, { B, T, past, logitRows }) {
    const ops = this.ops, { nLayer: L, dModel: C, nHead: H, vocabSize: V, layerNormEps: eps } = this.cfg;
    const o = this.offsets, P = this.params, rows = B * T;
    if (A.chain) return this._recordDecodeChain(plan, A, past);
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
      ops.matmul(plan, "forward", { M: rows, N: C, K: C, ...ln1, B: P, bOff: o[n + "attn.q_proj.weight"], C: a.qkv, cOff: past * C, bias: P,
        biasOff: o[n + "attn.q_proj.bias"], batches: 3, strides: { b: this.projStride, c: a.stride, bias: this.projStride } });
      ops.attentionForward(plan, { B, T, kvT: A.kvT, past, H, C, q: a.q, k: a.k, v: a.v, out: a.att, lse: a.lse });
      ops.matmul(plan, "forward", { M: rows, N: C, K: C, A: a.att, B: P, bOff: o[n + "attn.o_proj.weight"], C: a.res2, bias: P, biasOff: o[n + "attn.o_proj.bias"], R: A.res[l] });
      const ln2 = normalised(n + "ln2", a.res2, a.ln2, a.ln2s);
      ops.matmul(plan, "forward", { M: rows, N: 4 * C, K: C, ...ln2, B: P, bOff: o[n + "mlp.fc_in.weight"], C: a.h, bias: P, biasOff: o[n + "mlp.fc_in.bias"], gelu: a.g });
      const fcOut = { M: rows, N: C, K: 4 * C, A: a.g, B: P, bOff: o[n + "mlp.fc_out.weight"], C: A.res[l + 1], bias: P, biasOff: o[n + "mlp.fc_out.bias"], R: a.res2 };
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

  /** Whether the decode chain (Ops.decodeChainServes) serves this model's decoded tokens (A: the generation's activations). */
  _decodeChainServes(A) {
    const { nLayer: L, dModel: C, nHead: H } = this.cfg, o = this.offsets;
    const names = ["attn.q_proj.weight", "attn.o_proj.weight", "attn.o_proj.bias", "ln1.weight", "ln1.bias",
      "ln2.weight", "ln2.bias", "mlp.fc_in.weight", "mlp.fc_out.weight", "mlp.fc_out.bias"];
    const vec4Offsets = [this.projStride, A.layers[0].stride, o["token_embedding.weight"], o["position_embedding.weight"], o["ln_f.weight"], o["ln_f.bias"],
      ...Array.from({ length: L }, (_, l) => names.map((k) => o[`blocks.${l}.${k}`])).flat()];
    return this.ops.decodeChainServes({ C, H, kvT: A.kvT, vec4Offsets });
  }

  /**
   * A decoded token's forward (past: its position) as the decode chain (decode_row.js): two dispatches
   * a block and the logits' one. Each dispatch starts from the residual row before it plus a bias and
   * the partial rows the dispatch before left in A.chain.parts (block 0's from the token's embedding),
   * and stores that row in the residual buffer.
   */
  _recordDecodeChain(plan, A, past) {
    const ops = this.ops, { nLayer: L, dModel: C, nHead: H, vocabSize: V, layerNormEps: eps } = this.cfg;
    const o = this.offsets, P = this.params, parts = A.chain.parts, at = decodeChainParts(C, H);
    const ln = (name) => ({ wOff: o[`${name}.weight`], bOff: o[`${name}.bias`], eps });
    const embed = { tokens: A.tokens, wteOff: o["token_embedding.weight"], wpeOff: o["position_embedding.weight"] };
    // the residual row before block l (l = L: the logits'): the token's embedding, or block l - 1's
    // o_proj sum plus fc_out's bias and its slices' partial rows
    const rowBefore = (l, store) => (l === 0 ? { embed, store }
      : { base: A.layers[l - 1].res2, biasOff: o[`blocks.${l - 1}.mlp.fc_out.bias`], partsOff: at.fcOut, nparts: at.slices, store });
    for (let l = 0; l < L; l++) {
      const a = A.layers[l], n = `blocks.${l}.`;
      ops.attentionDecodeQkv(plan, { C, H, kvT: A.kvT, past, row: rowBefore(l, A.res[l]), params: P, wOff: o[n + "attn.q_proj.weight"],
        wStride: this.projStride, biasOff: o[n + "attn.q_proj.bias"], ln: ln(n + "ln1"), oOff: o[n + "attn.o_proj.weight"],
        qkv: { buffer: a.qkv, stride: a.stride }, parts, partsOutOff: at.oProj });
      ops.mlpDecode(plan, { C, row: { base: A.res[l], biasOff: o[n + "attn.o_proj.bias"], partsOff: at.oProj, nparts: H, store: a.res2 },
        params: P, ln: ln(n + "ln2"), inOff: o[n + "mlp.fc_in.weight"], inBiasOff: o[n + "mlp.fc_in.bias"], outOff: o[n + "mlp.fc_out.weight"],
        parts, partsOutOff: at.fcOut });
    }
    ops.logitsDecode(plan, { C, V, row: rowBefore(L, A.res[L]), params: P, ln: ln("ln_f"), wOff: o["token_embedding.weight"], parts, logits: A.logits });
  }

  _buildTraining() {
    const { nLayer: L, dModel: C, nHead: H, vocabSize: V } = this.cfg, B = this.tr.batch, T = this.cfg.ctx, rows = B * T;
    const ops = this.ops, o = this.offsets, P = this.params, G = this.grads;
    const deferred = this.deferred, stages = deferred ? deferredLayout(this.cfg, rows) : null;
    const A = (this.act = this._activations("train", B, T, T, deferred ? DEFERRED_ACTIVATIONS : []));
    const S = U().STORAGE | U().COPY_SRC;
    const d = {
      // d ln2 keeps ln2's output gradient until the block's LayerNorm parameter sums, after ln1's backward
      // d lnf keeps ln_f's output gradient until the embedding's backward takes ln_f's parameter gradients
      res: this.buffer("d res", 4 * (deferred ? stages.resFloats : rows * C), S), ln: this.buffer("d ln", 4 * rows * C, S),
      ln2: this.buffer("d ln2", 4 * rows * C, S), lnf: this.buffer("d lnf", 4 * rows * C, S),
      h: this.buffer("d h", 4 * (deferred ? L * stages.h : rows * 4 * C), S),
      att: this.buffer("d att", 4 * rows * C, S), qkv: this._qkvViews("d qkv", rows * C, deferred ? 3 * L : 3),
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

    const plan = (this.trainPlan = new Plan(this.device, this.ops.pipelines, "train step"));
    this._recordForward(plan, A, { B, T, past: 0, logitRows: rows });
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
      const blockStride = L > 1 ? o["blocks.1.ln1.weight"] - o["blocks.0.ln1.weight"] : 0;
      // the args of matmul for each kind, their slabs from slabsUsed on
      const products = (list) => list.map(({ param, M, N, dY: y, X, batches, biasGrad, tile, splits }) => {
        const [buffer, aOff, aStride] = dY[y], x = keptX(X), head = param === HEAD_PARAM, partialsOff = slabsUsed;
        slabsUsed += splitKSlabFloats(M, N, batches, rows, splits);
        return { M, N, K: rows, A: buffer, aOff, B: x.buffer, C: G, cOff: o[head ? param : `blocks.0.${param}`], biasGrad, batches,
          strides: { a: aStride, b: x.slot, c: blockStride }, tile, splits, partials: this.splitK, partialsOff, sums: head ? headSums : sums };
      });
      // whether the kinds in `list` could share a dispatch, recorded if so
      const group = (list) => {
        const first = slabsUsed;
        if (ops.matmulGroup(plan, products(list)) !== null) return true;
        slabsUsed = first;
        return false;
      };
      // All on 64×64w rather than each on its own tile (32×32-s2 for the C×C ones, and at medium and
      // large for all): H100, ms/step, 3 trainers a side, 64×64w / own tiles: medium 0.936 / 0.948,
      // large 2.012 / 2.041, xl 2.639 / 2.683, huge 6.327 / 6.453, massive 8.149 / 8.303. Where the
      // device binds too few buffers for that group (its split-K scratch is a 9th), a group per own
      // tile (at medium unsplit: 8), else one dispatch each.
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

    // eval: the same forward, cross-entropy without gradient, per-row losses read back
    this.evalPlan = new Plan(this.device, this.ops.pipelines, "eval");
    this._recordForward(this.evalPlan, A, { B, T, past: 0, logitRows: rows });
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
   */
  async step(batch = null) {
    const slot = this.ring[this.ringNext];
    if (slot.pending) await slot.pending; // at most LOSS_RING steps in flight
    const { x, y } = batch ?? this.nextBatch();
    this._uploadBatch(x, y);
    this.stepCount += 1;
    this.trainPlan.update(this.adamIndex, adamwStepValues(this.tr, this.stepCount, this.adamStepValues));
    const enc = this.device.createCommandEncoder({ label: "train step" });
    const pass = enc.beginComputePass();
    this.trainPlan.encode(pass);
    pass.end();
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
    this.stepCount += 1;
    this.trainPlan.update(this.adamIndex, adamwStepValues(this.tr, this.stepCount, this.adamStepValues));
    await this.device.queue.onSubmittedWorkDone();
    const timed = async (i, times) => {
      const t0 = performance.now();
      const enc = this.device.createCommandEncoder();
      const pass = enc.beginComputePass();
      this.trainPlan.encode(pass, { first: i, end: i + 1, times });
      pass.end();
      this.device.queue.submit([enc.finish()]);
      await this.device.queue.onSubmittedWorkDone();
      return performance.now() - t0;
    };
    const rows = [];
    for (const [i, e] of this.trainPlan.entries.entries()) {
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

  _buildGeneration() {
    const ctx = this.cfg.ctx;
    this.gen = this._activations("generate", 1, 1, ctx, [], null, decodeTokensFits(this.cfg));
    // the decode chain's partial rows between its dispatches (made where it does not serve too: the
    // buffers a trainer needs do not depend on the device)
    const { dModel: C, nHead: H } = this.cfg;
    const parts = this.buffer("generate partial rows", 4 * decodeChainParts(C, H).floats, U().STORAGE | U().COPY_SRC);
    this.gen.chain = this._decodeChainServes(this.gen) ? { parts } : null;
    this.genPlan = new Plan(this.device, this.ops.pipelines, "decode");
    this._recordForward(this.genPlan, this.gen, { B: 1, T: 1, past: 0, logitRows: 1 });
    this.genPlan.freeze();
    this.genPositions = new Array(ctx); // _placeDecodePlan's records, by position
    // prefill: one forward of a whole window (padded to ctx) whose q, k and v land in the decode's
    // views, k and v as the KV cache at positions 0..: a prompt, or the window after a restart, costs
    // one forward, not one per token (causal attention keeps the padding out of the window's rows;
    // decoding overwrites its k, v)
    const pre = this._activations("prefill", 1, ctx, ctx, [], this.gen);
    this.prefill = pre;
    this.prefillPlan = new Plan(this.device, this.ops.pipelines, "prefill");
    this._recordForward(this.prefillPlan, pre, { B: 1, T: ctx, past: 0, logitRows: ctx });
    this.prefillPlan.freeze();
    this.prefillTokens = new Uint32Array(ctx);
    this.genLogits = this.buffer("logits readback", 4 * this.cfg.vocabSize, U().MAP_READ | U().COPY_DST);
    this.genToken = new Uint32Array(1);
    this._buildSampler();
    if (decodeTokensFits(this.cfg)) { // decode_tokens.js's window (its length, then its tokens) and its rebuild's scratch
      this.genWindow = this.buffer("generate window", 4 * (1 + ctx), U().STORAGE | U().COPY_DST);
      this.genRows = this.buffer("generate rows", 4 * decodeRowsFloats(this.cfg), U().STORAGE);
      this.genWindowValues = new Uint32Array(1 + ctx);
      // two batches' draws and records, so that the next batch runs while this one's are read
      const bytes = 4 * TOKENS_BATCH * sampleRecordFloats(this.cfg.vocabSize);
      this.tokenSlots = [0, 1].map((i) => ({
        draws: this.buffer(`tokens draws ${i}`, 4 * TOKENS_BATCH, U().STORAGE | U().COPY_DST),
        samples: this.buffer(`tokens samples ${i}`, bytes, U().STORAGE | U().COPY_SRC),
        read: this.buffer(`tokens readback ${i}`, bytes, U().MAP_READ | U().COPY_DST),
        drawValues: new Float32Array(TOKENS_BATCH), commands: null }));
      this.tokensSlot = 1; // the slot of the batch submitted last
      this.tokensFlight = null; // the batch submitted ahead: _submitTokens's {n, buffer, read}
    }
    this._startTokensPlan();
  }

  /**
   * The GPU's sampler (sample_decode.js) for _decodeBatch: a dispatch per step of a batch, each
   * reading its own uniform from `draws` and writing its record to `samples` and its token to `batch`,
   * and one more that samples a batch's first token from a prefill's logits. The decode plan of
   * every step but the first is a plan of its own (genSlots), since a plan's uniforms hold one
   * position; all of them share the positions' records (genPositions).
   * The window as the GPU has it (genChainWindow: positions 0..ctx, the last one the token that
   * restarts a full window) gathers each batch's tokens, so that a batch submitted ahead can restart
   * the window before the host has read the tokens in it. Two read-backs: one batch's records are
   * read while the next one's land.
   */
  _buildSampler() {
    const V = this.cfg.vocabSize, bytes = 4 * DECODE_BATCH * sampleRecordFloats(V);
    this.genDraws = this.buffer("generate draws", 4 * DECODE_BATCH, U().STORAGE | U().COPY_DST);
    this.genSamples = this.buffer("generate samples", bytes, U().STORAGE | U().COPY_SRC);
    this.genBatchTokens = this.buffer("generate batch tokens", 4 * DECODE_BATCH, U().STORAGE | U().COPY_SRC);
    this.genChainWindow = this.buffer("generate chain window", 4 * (this.cfg.ctx + 1), U().COPY_SRC | U().COPY_DST);
    this.genWindowUpload = new Uint32Array(this.cfg.ctx + 1);
    this.chainReads = [0, 1].map((i) => this.buffer(`samples readback ${i}`, bytes, U().MAP_READ | U().COPY_DST));
    this.chainSlot = 1; // the read-back of the batch submitted last
    this.chainFlight = null; // the batch submitted ahead: _submitBatch's flight
    this.genDrawValues = new Float32Array(DECODE_BATCH);
    this.genSlots = [this.genPlan];
    if (!sampleDecodeFits(V)) return;
    this.samplePlan = new Plan(this.device, this.ops.pipelines, "sample");
    const sample = (logits, step) => this.ops.sampleDecode(this.samplePlan, { V, logits, draws: this.genDraws,
      tokens: this.gen.tokens, samples: this.genSamples, batch: this.genBatchTokens, step, temperature: 0, topK: 0 });
    for (let step = 0; step < DECODE_BATCH; step++) sample(this.gen.logits, step);
    sample(this.prefill.logits, 0); // a batch's first step after a prefill: its logits_off is the window's last row
    this.samplePlan.freeze();
    this.sampling = sampleDecodeValues(0, 0); // the samplers' uniforms as last set
  }

  /** Builds decode_tokens.js's plan where the rule (or the constructor) takes it. */
  _startTokensPlan() {
    if (!this.samplePlan || !this._decodesInOneWorkgroup()) return;
    // By the rule, the kernel compiles in the background, and batches take the decode chain until it is
    // ready: a software adapter spends seconds on it, which a first token should not wait for. Asked for
    // (decodeInOneWorkgroup true), it is ready before the first batch.
    if (this.decodeInOneWorkgroup === true) this._buildTokensPlan();
    else {
      // a failure leaves the chain in place (this.tokensError says why): the chain is what the rule replaces
      this.tokensReady = this.ops.prepareDecodeTokens(this.cfg, this.decodeNextWindow)
        .then(() => { if (this.buffers.length) this._buildTokensPlan(); }, (e) => { this.tokensError = e; }); // no buffers: destroyed
    }
  }

  /** The plan of decode_tokens.js's one dispatch (a batch's steps), with the current sampling. */
  _buildTokensPlan() {
    this.tokensPlan = new Plan(this.device, this.ops.pipelines, "decode tokens");
    for (const { draws, samples } of this.tokenSlots) {
      this.ops.decodeTokens(this.tokensPlan, { model: this.cfg, values: { ...this._decodeTokensValues(), ...this.sampling },
        window: this.genWindow, params: this.params, kv: this.gen.kv, draws, samples, rows: this.genRows, next: this.decodeNextWindow });
    }
    this.tokensPlan.freeze();
  }

  /**
   * Whether a batch's decoded tokens run in one dispatch of one workgroup (decode_tokens.js) instead
   * of the decode chain's 1 + 2L dispatches and a sampler's each: where the model fits it and is small
   * enough that one workgroup's work costs less than the chain's launches (DECODE_IN_ONE_WORKGROUP_MAX_WIDTH),
   * or as the constructor's decodeInOneWorkgroup says. By the rule, from when its pipeline is ready
   * (this.tokensReady).
   */
  _decodesInOneWorkgroup() {
    const fits = decodeTokensFits(this.cfg); // as the generation's KV cache was laid out
    if (this.decodeInOneWorkgroup === true && !fits) throw new Error("decodeInOneWorkgroup: this model does not fit one workgroup of this device");
    return fits && (this.decodeInOneWorkgroup ?? this.cfg.dModel <= DECODE_IN_ONE_WORKGROUP_MAX_WIDTH);
  }

  /** decode_tokens.js's uniforms but for the steps' (set per batch) and the sampling's (per generation). */
  _decodeTokensValues() {
    const { nLayer: L, dModel: C, nHead: H, vocabSize: V, layerNormEps } = this.cfg, o = this.offsets;
    const block = o["blocks.0.ln1.weight"], at = (name) => o[`blocks.0.${name}`] - block;
    const stride = this.gen.layers[0].stride;
    return { rebuild: 0, steps: 0, V, wte_off: o["token_embedding.weight"], wpe_off: o["position_embedding.weight"], block_off: block,
      block_stride: L > 1 ? o["blocks.1.ln1.weight"] - block : 0, ln1_w: at("ln1.weight"), ln1_b: at("ln1.bias"),
      qkv_w: at("attn.q_proj.weight"), qkv_b: at("attn.q_proj.bias"), qkv_stride: this.projStride, o_w: at("attn.o_proj.weight"),
      o_b: at("attn.o_proj.bias"), ln2_w: at("ln2.weight"), ln2_b: at("ln2.bias"), in_w: at("mlp.fc_in.weight"), in_b: at("mlp.fc_in.bias"),
      out_w: at("mlp.fc_out.weight"), out_b: at("mlp.fc_out.bias"), lnf_w: o["ln_f.weight"], lnf_b: o["ln_f.bias"], kv_layer: 3 * stride,
      kv_stride: stride, ln_eps: layerNormEps, scale: 1 / Math.sqrt(C / H) };
  }

  /** Whether _decodeBatch serves this temperature (and the vocabulary): else the host samples every token. */
  _samplesOnGpu(temperature) {
    if (!this.genPlan) this._buildGeneration();
    return Boolean(this.samplePlan) && sampleDecodeServes(temperature);
  }

  /** The decode plan of a batch's step `step` (the first: genPlan), recorded on first use. */
  _decodeSlot(step) {
    while (this.genSlots.length <= step) {
      const plan = new Plan(this.device, this.ops.pipelines, `decode ${this.genSlots.length}`);
      this._recordForward(plan, this.gen, { B: 1, T: 1, past: 0, logitRows: 1 });
      plan.freeze();
      this.genSlots.push(plan);
    }
    return this.genSlots[step];
  }

  /**
   * n tokens' decode and sample commands from position pos on, their records copied to read-back
   * `slot` after them and their tokens to the GPU's window (at pos + 1..); with `prefill`, the
   * prefill's forward first and its last row sampled as step 0. onGpu: the prefill's window is the
   * GPU's window restarted (its last ctx/2 tokens and the one that restarted it), copied from
   * genChainWindow, and the restarted window is copied back to its start.
   */
  _batchCommands(pos, n, { prefill = false, onGpu = false, slot = 0 } = {}) {
    this.ahead = null; // placing the plans' uniforms voids what was recorded ahead with them
    const enc = this.device.createCommandEncoder({ label: "decode batch" });
    if (onGpu) {
      const ctx = this.cfg.ctx, kept = Math.floor(ctx / 2) + 1; // as generate()'s advance
      enc.copyBufferToBuffer(this.genChainWindow, 4 * (ctx + 1 - kept), this.prefill.tokens, 0, 4 * kept);
      enc.copyBufferToBuffer(this.prefill.tokens, 0, this.genChainWindow, 0, 4 * kept);
    }
    const pass = enc.beginComputePass();
    if (prefill) {
      this.prefillPlan.encode(pass);
      this.samplePlan.encode(pass, { first: DECODE_BATCH, end: DECODE_BATCH + 1 });
    }
    for (let step = prefill ? 1 : 0; step < n; step++) {
      const plan = this._decodeSlot(step);
      this._placeDecodePlan(pos + step, plan);
      plan.encode(pass);
      this.samplePlan.encode(pass, { first: step, end: step + 1 });
    }
    pass.end();
    enc.copyBufferToBuffer(this.genSamples, 0, this.chainReads[slot], 0, 4 * n * sampleRecordFloats(this.cfg.vocabSize));
    enc.copyBufferToBuffer(this.genBatchTokens, 0, this.genChainWindow, 4 * (pos + 1), 4 * n);
    return { key: batchKey(pos, n, prefill, slot), commands: enc.finish() };
  }

  /**
   * Decodes the window's last token (at pos) and the n − 1 tokens the GPU samples after it, at
   * pos + 1..; returns each step's {token, certain, logits}. prefill (a restart, or a prompt: the
   * window of pos + 1 tokens): the window's forward fills the KV cache and gives step 0's logits
   * instead of the token's decode (one submit where a rebuilt window took a round trip to the host of its own). A step's
   * token is the host's rule's (sampleToken's) where `certain`; after the first step that is not,
   * the rest are void (the host samples that one from its logits and goes on from there). The stream
   * is not advanced: step s takes the uniform s draws ahead (none at temperature 0).
   * next ({pos, n, prefill}, or null): the batch expected after this one, if every token of this one
   * is certain. With decodeAhead it is submitted before this one's records are read, going on from
   * the GPU's token and window (its restart too); the call after takes it where its token and batch
   * are the ones expected, else waits it out unread (and, where it restarted the window, rebuilds the
   * host's: a prefill). Without, its commands are recorded while the GPU runs this one.
   */
  async _decodeBatch(window, n, { temperature, topK, stream, prefill = false, next = null }) {
    this._setSampling(temperature, topK);
    const token = window.at(-1), pos = window.length - 1;
    let flight = this.chainFlight;
    this.chainFlight = null;
    if (flight && !(flight.pos === pos && flight.n === n && flight.prefill === prefill && flight.token === token)) {
      // a restart of the GPU's window that did not happen left its rows in the KV cache: the host's window is rebuilt
      if (await this._landChain(flight)) prefill ||= window.length > 1;
      flight = null;
    }
    flight ??= this._submitBatch(pos, n, { window, prefill, temperature, stream, drawsFrom: 0 });
    if (next && this.decodeAhead) {
      this.chainFlight = this._submitBatch(next.pos, next.n, { window: null, prefill: next.prefill, temperature, stream, drawsFrom: n });
    } else if (next) {
      this.ahead = this._batchCommands(next.pos, next.n, { prefill: next.prefill, slot: 1 - this.chainSlot });
    }
    await flight.read;
    const steps = this._readSamples(flight.buffer, n);
    // the batch ahead went on from this one's last token as the GPU sampled it
    if (this.chainFlight) this.chainFlight.token = steps[n - 1].certain ? steps[n - 1].token : -1;
    return steps;
  }

  /**
   * Submits a batch of n steps from position pos in the read-back slot after the last one's, its
   * draws from drawsFrom draws ahead of the stream. window (the host's, of pos + 1 tokens): its last
   * token, and the window itself as the GPU's (a prefill's too, where `prefill`); null: the batch
   * goes on from the GPU's token, and a prefill from the GPU's window. Returns {pos, n, prefill, token,
   * buffer, read} (mapFlight); token, the GPU's last one before it, is set once that is read.
   */
  _submitBatch(pos, n, { window, prefill, temperature, stream, drawsFrom }) {
    const slot = (this.chainSlot = 1 - this.chainSlot), onGpu = prefill && !window;
    // commands recorded ahead (without decodeAhead) are a host window's
    const commands = (onGpu ? null : this._takeAhead(batchKey(pos, n, prefill, slot))) ?? this._batchCommands(pos, n, { prefill, onGpu, slot }).commands;
    if (window) {
      if (prefill) this._uploadPrefillTokens(window);
      this.genWindowUpload.set(window);
      this.device.queue.writeBuffer(this.genChainWindow, 0, this.genWindowUpload, 0, window.length);
      this.genToken[0] = window.at(-1);
      this.device.queue.writeBuffer(this.gen.tokens, 0, this.genToken);
    }
    if (prefill) this.samplePlan.update(DECODE_BATCH, { logits_off: pos * this.cfg.vocabSize });
    this._uploadDraws(this.genDraws, this.genDrawValues, n, { temperature, stream, from: drawsFrom });
    this.device.queue.submit([commands]);
    return { pos, n, prefill, token: null, ...mapFlight(this.chainReads[slot]) };
  }

  /**
   * Waits out the decode chain's batch submitted ahead (chainFlight, or `flight`), whose records are
   * not wanted; returns whether it was a prefill (whose rows replaced the KV cache's).
   */
  async _landChain(flight = this.chainFlight) {
    if (flight === this.chainFlight) this.chainFlight = null;
    if (!flight) return false;
    await landFlight(flight);
    return flight.prefill;
  }

  /**
   * Decodes the window's last token and samples the n − 1 tokens after it in one dispatch of one
   * workgroup (decode_tokens.js), as _decodeBatch, but the window lives on the GPU: the kernel appends
   * each token and restarts a full window itself, so a batch does not end where the window does.
   * upload: the host's window replaces the GPU's, whose KV rows the kernel rebuilds first (a prompt,
   * or a token the host sampled). next (> 0): the steps of the batch after this one, which is
   * submitted before this one's records are read (decodeAhead), going on from the GPU's window as if
   * every token of this one were certain; the call after takes it where it needs no upload (its n is
   * then the one asked for here), else waits it out unread.
   */
  async _tokensBatch(window, n, { temperature, topK, stream, upload, next = 0 }) {
    this._setSampling(temperature, topK);
    if (upload) await this._landTokens();
    const flight = this.tokensFlight ?? this._submitTokens(n, { window: upload ? window : null, temperature, stream, drawsFrom: 0 });
    this.tokensFlight = null;
    if (next > 0 && this.decodeAhead) this.tokensFlight = this._submitTokens(next, { window: null, temperature, stream, drawsFrom: flight.n });
    await flight.read;
    return this._readSamples(flight.buffer, flight.n);
  }

  /**
   * Submits a batch of n steps in the slot after the last one's: its steps, its window (where given:
   * uploaded and rebuilt first) and its draws (from drawsFrom draws ahead of the stream). Returns
   * {n, buffer, read} (mapFlight); the slot's next commands are recorded while the GPU runs.
   */
  _submitTokens(n, { window, temperature, stream, drawsFrom }) {
    const index = (this.tokensSlot = 1 - this.tokensSlot), slot = this.tokenSlots[index];
    this.tokensPlan.update(index, { steps: n, rebuild: window ? 1 : 0 });
    if (window) {
      this.genWindowValues[0] = window.length;
      this.genWindowValues.set(window, 1);
      this.device.queue.writeBuffer(this.genWindow, 0, this.genWindowValues, 0, 1 + window.length);
    }
    this._uploadDraws(slot.draws, slot.drawValues, n, { temperature, stream, from: drawsFrom });
    this.device.queue.submit([slot.commands ?? this._tokensCommands(index)]);
    const flight = { n, ...mapFlight(slot.read) };
    slot.commands = this._tokensCommands(index);
    return flight;
  }

  /** Waits out the batch submitted ahead, if any, whose records are not wanted (the window changed under it). */
  async _landTokens() {
    const flight = this.tokensFlight;
    this.tokensFlight = null;
    if (flight) await landFlight(flight);
  }

  /** Slot `index`'s batch: its dispatch, then every step's record copied out. */
  _tokensCommands(index) {
    const slot = this.tokenSlots[index], enc = this.device.createCommandEncoder({ label: "decode tokens" });
    const pass = enc.beginComputePass();
    this.tokensPlan.encode(pass, { first: index, end: index + 1 });
    pass.end();
    enc.copyBufferToBuffer(slot.samples, 0, slot.read, 0, 4 * TOKENS_BATCH * sampleRecordFloats(this.cfg.vocabSize));
    return enc.finish();
  }

  /** The samplers' uniforms for a temperature and top-k, uploaded where they changed. */
  _setSampling(temperature, topK) {
    const values = sampleDecodeValues(temperature, topK);
    if (Object.keys(values).every((k) => values[k] === this.sampling[k])) return;
    for (const plan of [this.samplePlan, this.tokensPlan]) for (let i = 0; plan && i < plan.entries.length; i++) plan.update(i, values);
    this.sampling = values;
  }

  /** A batch's n uniforms into `draws` through `values` (step s the one from + s draws ahead of the stream; none at temperature 0). */
  _uploadDraws(draws, values, n, { temperature, stream, from = 0 }) {
    if (temperature !== 0) for (let step = 0; step < n; step++) values[step] = stream.peekUniform(from + step);
    this.device.queue.writeBuffer(draws, 0, values);
  }

  /** The n step records of a batch mapped in `read` as {token, certain, logits}; unmaps it. */
  _readSamples(read, n) {
    const V = this.cfg.vocabSize, R = sampleRecordFloats(V);
    const records = new Float32Array(read.getMappedRange(0, 4 * n * R)).slice();
    read.unmap();
    return Array.from({ length: n }, (_, s) => ({
      token: records[s * R], certain: records[s * R + 1] === 1, logits: records.subarray(s * R + 4, s * R + 4 + V),
    }));
  }

  /** Fills the KV cache with `tokens` (2..ctx) at positions 0.. in one forward; returns the last one's logits. */
  async _prefill(tokens) {
    if (!this.genPlan) this._buildGeneration();
    const V = this.cfg.vocabSize;
    this._uploadPrefillTokens(tokens);
    const enc = this.device.createCommandEncoder({ label: "prefill" });
    const pass = enc.beginComputePass();
    this.prefillPlan.encode(pass);
    pass.end();
    enc.copyBufferToBuffer(this.prefill.logits, 4 * (tokens.length - 1) * V, this.genLogits, 0, 4 * V);
    this.device.queue.submit([enc.finish()]);
    await mapForReading(this.genLogits, "logits");
    const logits = new Float32Array(this.genLogits.getMappedRange()).slice();
    this.genLogits.unmap();
    return logits;
  }

  /**
   * Sets the decode plan's uniforms and workgroup counts for position `pos`, the one thing that differs
   * between tokens. Recording the plan took the host 0.2–1.5 ms a token (tiny to massive), more than
   * the GPU's work for it (docs/performance.md §35), so each position's record is kept after its first
   * use and put back from then on: generation revisits positions ctx/2..ctx-1 after every restart.
   */
  _placeDecodePlan(pos, plan = this.genPlan) {
    const kept = this.genPositions[pos];
    if (kept) return plan.restore(kept);
    plan.rerecord();
    this._recordForward(plan, this.gen, { B: 1, T: 1, past: pos, logitRows: 1 });
    plan.freeze();
    this.genPositions[pos] = plan.snapshot();
  }

  /** A prefill's window (≤ ctx tokens), padded with zeros: causal attention keeps the padding out of its rows. */
  _uploadPrefillTokens(tokens) {
    this.prefillTokens.fill(0);
    this.prefillTokens.set(tokens);
    this.device.queue.writeBuffer(this.prefill.tokens, 0, this.prefillTokens);
  }

  /**
   * The commands recorded ahead (this.ahead: {key, commands}, from _decodeCommands or _batchCommands)
   * if they are the ones `key` asks for, else null; the slot is empty after either. Recording places
   * the plans' uniforms, so a recording voids what was recorded ahead before it.
   */
  _takeAhead(key) {
    const ahead = this.ahead;
    this.ahead = null;
    return ahead?.key === key ? ahead.commands : null;
  }

  /** The decode plan's commands at position `pos`, its logits copied to genLogits after them. */
  _decodeCommands(pos) {
    this.ahead = null; // placing genPlan's uniforms voids what was recorded ahead with them
    this._placeDecodePlan(pos);
    const enc = this.device.createCommandEncoder({ label: "decode" });
    const pass = enc.beginComputePass();
    this.genPlan.encode(pass);
    pass.end();
    enc.copyBufferToBuffer(this.gen.logits, 0, this.genLogits, 0, 4 * this.cfg.vocabSize);
    return { key: `decode ${pos}`, commands: enc.finish() };
  }

  /**
   * Feeds one token at position `pos` through the KV cache and returns its logits. The commands of
   * the token at pos + 1 depend on its position only (the token itself is uploaded), so they are
   * recorded while the GPU runs this one: the host's recording, ~5 µs a dispatch in Node, no longer
   * waits for the logits (docs/performance.md §35). Where the next call asks for another position (a
   * window restart), they are dropped unsubmitted.
   */
  async _decode(token, pos) {
    if (!this.genPlan) this._buildGeneration();
    const commands = this._takeAhead(`decode ${pos}`) ?? this._decodeCommands(pos).commands;
    this.genToken[0] = token;
    this.device.queue.writeBuffer(this.gen.tokens, 0, this.genToken);
    this.device.queue.submit([commands]);
    const read = mapForReading(this.genLogits, "logits");
    if (pos + 1 < this.cfg.ctx) this.ahead = this._decodeCommands(pos + 1);
    await read;
    const logits = new Float32Array(this.genLogits.getMappedRange()).slice();
    this.genLogits.unmap();
    return logits;
  }

  /** Logits of every position of `tokens` (≤ ctx), computed one token at a time through the KV cache. */
  async decodeLogits(tokens) {
    if (tokens.length > this.cfg.ctx) throw new Error(`${tokens.length} tokens exceed the context of ${this.cfg.ctx}`);
    const out = [];
    for (let i = 0; i < tokens.length; i++) out.push(await this._decode(tokens[i], i));
    return out;
  }

  /**
   * Generates maxNewTokens bytes after `prompt` (bytes) with the KV cache, calling onToken(byte, logits) as each
   * one is sampled (logits: the Float32Array (V) it was sampled from). Context policy (docs/determinism.md, as python_ref/sample.py's advance_window):
   * appending to a full window (ctx tokens) first restarts it from its last ctx/2 tokens at positions
   * 0.., and the cache is rebuilt (one prefill forward); prompt tokens go through the same policy.
   * Where the GPU's sampler serves (_samplesOnGpu), up to DECODE_BATCH tokens are decoded and sampled
   * in one submit by the decode chain (_decodeBatch), a (re)built window's prefill first in it, or up
   * to TOKENS_BATCH in one workgroup (_tokensBatch), which keeps the window and restarts it on the GPU, the next batch
   * submitted before this one is read. The host samples only the tokens the GPU could not tell for
   * certain: the tokens are sampleToken's either way.
   * signal (an AbortSignal): once aborted, generation stops before the next token and returns those made.
   * batchMs: the time a batch's steps may take, by the last batch's (tests give Infinity: full batches).
   */
  async generate(prompt, { maxNewTokens, temperature, topK, seed = 0, onToken = null, signal = null, batchMs = BATCH_MS } = {}) {
    if (!prompt || prompt.length === 0) throw new Error("generation needs a prompt of at least one byte");
    const ctx = this.cfg.ctx, stream = new SampleStream(seed), onGpu = this._samplesOnGpu(temperature);
    const aborted = () => signal?.aborted === true;
    let window = [], restarted = false;
    const advance = (token) => {
      restarted = window.length >= ctx;
      if (restarted) window = window.slice(window.length - Math.floor(ctx / 2));
      window.push(token);
    };
    for (const t of prompt) advance(t);
    const rebuild = () => (window.length === 1 ? this._decode(window[0], 0) : this._prefill(window));
    // with the GPU sampling, a (re)built window's prefill opens the next batch, which samples from it
    let prefill = onGpu && window.length > 1;
    const restart = async () => {
      if (!onGpu) return rebuild();
      prefill = window.length > 1;
      return null;
    };
    let logits = onGpu ? null : await rebuild(); // the logits the host samples the next token from, if any
    const out = [];
    // batches grow 1, 2, 4 .. DECODE_BATCH (or TOKENS_BATCH) steps (fewer where the last one's steps took BATCH_MS): a
    // batch's first token reaches onToken when its last step is done, and the playground's first token
    // on a software adapter took 16 steps' time
    let cap = 1, timeCap = TOKENS_BATCH;
    const emit = (token, from) => {
      out.push(token);
      if (onToken) onToken(token, from);
      if (out.length === maxNewTokens) return false;
      advance(token);
      return true;
    };
    // a batch's steps: each certain token emitted, and the first uncertain one's logits kept for the host
    // to sample; restarts: the chain's batches end where the window restarts (the kernel restarts it itself)
    const take = async (steps, restarts) => {
      for (const step of steps) {
        if (aborted()) return;
        if (!step.certain) { logits = step.logits.slice(); return; }
        if (temperature !== 0) stream.drawn += 1;
        if (!emit(step.token, step.logits)) return;
        if (restarts && restarted) { logits = await restart(); return; } // only a batch's last step restarts
      }
    };
    let synced = false; // whether the GPU's window (decode_tokens.js) is the host's
    while (out.length < maxNewTokens && !aborted()) {
      if (logits) {
        synced = false;
        if (!emit(sampleToken(logits, temperature, topK, stream), logits)) break;
        logits = restarted ? await restart() : onGpu ? null : await this._decode(window.at(-1), window.length - 1);
        continue;
      }
      if (this.tokensPlan) { // one workgroup: the window, restarts included, stays on the GPU
        // a batch submitted ahead goes on from the GPU's window: its steps were set one batch before
        const n = synced && this.tokensFlight ? this.tokensFlight.n : Math.min(cap, maxNewTokens - out.length);
        cap = Math.min(2 * cap, TOKENS_BATCH, timeCap);
        const next = Math.min(cap, maxNewTokens - out.length - n), started = performance.now();
        const steps = await this._tokensBatch(window, n, { temperature, topK, stream, upload: !synced, next });
        timeCap = Math.max(1, Math.floor(batchMs / ((performance.now() - started) / n)));
        synced = true;
        await take(steps, false);
        continue;
      }
      // the window's last token is sampled, not decoded: a batch decodes it and samples the next n
      // while no step's token would restart the window before the step after it is decoded
      const batchOf = (made, w) => Math.min(cap, maxNewTokens - made, ctx - w + 1);
      const w = window.length, n = batchOf(out.length, w);
      cap = Math.min(2 * cap, DECODE_BATCH, timeCap);
      // the next batch, if every token of this one is certain: its window restarted (a prefill of
      // ctx/2 + 1 tokens) where this one's last token restarts it
      const nextW = w + n <= ctx ? w + n : Math.floor(ctx / 2) + 1, nextN = batchOf(out.length + n, nextW);
      const next = nextN > 0 ? { pos: nextW - 1, n: nextN, prefill: w + n > ctx && nextW > 1 } : null;
      const started = performance.now();
      const steps = await this._decodeBatch(window, n, { temperature, topK, stream, prefill, next });
      timeCap = Math.max(1, Math.floor(batchMs / ((performance.now() - started) / n)));
      prefill = false;
      await take(steps, true);
    }
    await this._landTokens(); // a batch submitted ahead of an abort, or of the last uncertain token
    await this._landChain();
    return Uint8Array.from(out);
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

  /** The .tinygpt state bytes (docs/format.md): i32 step | weights | AdamW m | AdamW v, little-endian. */
  async exportState() {
    for (const slot of this.ring) if (slot.pending) await slot.pending;
    const P = this.P, out = new Uint8Array(4 + 12 * P);
    new DataView(out.buffer).setInt32(0, this.stepCount, true);
    for (const [i, buf] of [this.params, this.m, this.v].entries()) {
      const f = await this._read(buf, 4 * P);
      out.set(new Uint8Array(f.buffer), 4 + 4 * P * i);
    }
    return out;
  }

  /** Loads state bytes of exactly 4 + 4P (weights only: fresh moments) or 4 + 12P bytes. */
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
    if (u8.length === 4 + 12 * P) {
      this.device.queue.writeBuffer(this.m, 0, floats.subarray(P, 2 * P));
      this.device.queue.writeBuffer(this.v, 0, floats.subarray(2 * P, 3 * P));
    }
    this.stepCount = step;
  }

  /**
   * Frees the GPU objects. Returns a promise that settles when the work begun in the background (the
   * decode kernel's compile) is over: a Node process awaits it before it exits, since Dawn aborts
   * (std::system_error) where the process exits during a compile. A page need not wait.
   */
  destroy() {
    for (const p of [this.trainPlan, this.evalPlan, this.prefillPlan, this.samplePlan, this.tokensPlan, ...(this.genSlots ?? [])]) if (p) p.destroy();
    for (const b of this.buffers) b.destroy();
    this.buffers = [];
    return Promise.resolve(this.tokensReady);
  }
}
