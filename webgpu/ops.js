// Recording helpers: one method per layer operation, named as its C++ function in wasm/src (which
// may record several kernels, or none of its own when it is fused into another's epilogue),
// turning shapes and buffers into a kernel's uniforms and workgroup counts. The trainer and the
// kernel tests both record through these.
import { grid1d } from "./kernels/kernel.js";
import { matvecKernel, matvecGrid, matvecUnroll } from "./kernels/matvec.js";
import { matmulKernel, matmulPairKernel, matmulGroupKernel, pairSlabs, matmulGrid, chooseTile, softwareTile, tileShape, workgroupBytes, splitChunk, matmulSplitFinal, vecAligned, MATMUL_FLAGS, MAX_SPLITS, SPLIT_REGIONS, REGION_FIELDS, splitRegionFields } from "./kernels/matmul.js";
import {
  layernormKernels, layernormParamsKernels, layernormBackwardParamsWorkgroups, LAYERNORM_PARAM_JOBS, layernormBlockEndKernels,
} from "./kernels/layernorm.js";
import { embeddingForward, embeddingBackwardNorm, embeddingBackwardNormSlabs, TOKEN_CHANNELS } from "./kernels/embedding.js";
import { crossEntropyForward, crossEntropyBackward, crossEntropyWorkgroups } from "./kernels/cross_entropy.js";
import { attentionForward, attentionBackward, attentionLayout, attentionLayoutFor, attentionGrid } from "./kernels/attention.js";
import { attentionDecode, attentionDecodeFits, attentionDecodeGrid } from "./kernels/attention_decode.js";
import { attentionDecodeQkv, attentionDecodeQkvFits } from "./kernels/attention_decode_qkv.js";
import { mlpDecode, mlpDecodeFits, mlpDecodeGrid } from "./kernels/mlp_decode.js";
import { logitsDecode, logitsDecodeFits, logitsDecodeGrid } from "./kernels/logits_decode.js";
import { sampleDecode, sampleDecodeFits, sampleDecodeValues } from "./kernels/sample_decode.js";
import { decodeTokens, decodeTokensFits, decodeTokensKeepsNext } from "./kernels/decode_tokens.js";
import { adamwUpdate, NORM_PARTIALS, NORM_THREADS, normPartials } from "./kernels/adamw.js";
import { PipelineCache } from "./plan.js";
import { subgroupWidthOf } from "./subgroups.js";

// Each kernel variant is generated once per process (pipelines are cached by its name): `make` memoised
// on its arguments.
const memoised = (make) => {
  const made = new Map();
  return (...args) => {
    const key = JSON.stringify(args);
    if (!made.has(key)) made.set(key, make(...args));
    return made.get(key);
  };
};
const matmulFor = memoised(matmulKernel);
const matvecFor = memoised(matvecKernel);
const attentionDecodeFor = memoised(attentionDecode);
const attentionDecodeQkvFor = memoised(attentionDecodeQkv);
const mlpDecodeFor = memoised(mlpDecode);
const logitsDecodeFor = memoised(logitsDecode);
const decodeTokensFor = memoised(decodeTokens);
const matmulGroupFor = memoised(matmulGroupKernel);
const matmulPairFor = memoised(matmulPairKernel);
// a decode chain kernel's summedRow uniforms (decode_row.js) for row {baseOff, biasOff, partsOff, nparts, storeOff}
const summedRowValues = ({ baseOff = 0, biasOff = 0, partsOff = 0, nparts = 0, storeOff = 0 }) =>
  ({ x_base_off: baseOff, x_bias_off: biasOff, x_parts_off: partsOff, x_nparts: nparts, x_store_off: storeOff });
// A pair's tiles must have as many invocations: where no tile is given, a tile other than an unsliced
// one of 16×16 invocations becomes the 256-invocation 32×32 (2×2 each, the input gradients' choice
// at tiny).
const pairsAsIs = (tile) => {
  const { WX, WY, KG } = tileShape(tile);
  return WX === 16 && WY === 16 && KG === 1;
};
const pairTile = (tile) => (pairsAsIs(tile) ? tile : "32x32w-k32");
/** Whether products on these two tiles can share a pair's dispatch on a device with workgroupLimit bytes of workgroup memory. */
export function tilesPair(inputGrad, weightGrad, workgroupLimit = 16384) {
  return tileShape(inputGrad.tile).threads === tileShape(weightGrad.tile).threads
    && pairSlabs({ form: "backward_input", ...inputGrad }, { form: "backward_weight", ...weightGrad }).bytes <= workgroupLimit;
}
const attentionKernelsFor = memoised((kind, D, options, G) => {
  const layout = attentionLayout(D, options);
  return kind === "forward" ? { layout, fwd: attentionForward(D, layout, G) } : { layout, backward: attentionBackward(D, layout, G) };
});
// kind: "forward" or "backward"; options: attentionLayout's (attentionLayoutFor's for `rows`, the
// query rows over all heads, where absent; the layout bench tries others); G: the subgroup width
const attentionFor = (kind, D, rows, options, G) => attentionKernelsFor(kind, D, options ?? attentionLayoutFor(kind, D, rows), G);

const cachesByDevice = new WeakMap(); // pipelines are shared by every trainer of a device
/** The pipelines made on a device so far, by kernel name (every Ops of the device shares them). */
export function pipelinesOf(device) {
  if (!cachesByDevice.has(device)) cachesByDevice.set(device, new PipelineCache(device));
  return cachesByDevice.get(device);
}

export class Ops {
  /**
   * softwareTiles: run every product on softwareTile(the tile chosen or given), for an adapter that
   * runs WGSL on the CPU; a pair whose software tiles do not pair becomes two dispatches. Off, a
   * given tile is used as given (the kernel cases and benches time and check each tile).
   * subgroupWidth: the subgroup width the LayerNorm and attention kernels use (subgroups.js); by
   * default what probeSubgroups() found on the device, 1 (none) where it has not run.
   */
  constructor(device, { softwareTiles = false, subgroupWidth = subgroupWidthOf(device) } = {}) {
    this.device = device;
    this.softwareTiles = softwareTiles;
    this.subgroupWidth = subgroupWidth;
    this.pipelines = pipelinesOf(device);
    // what the device was created with (WebGPU's default, 16 KiB, where it asked for no more)
    this.workgroupLimit = device.limits?.maxComputeWorkgroupStorageSize ?? 16384;
    // likewise (WebGPU's default, 8): the block-end kernel binds more (layernormBackwardBlock)
    this.storageBufferLimit = device.limits?.maxStorageBuffersPerShaderStage ?? 8;
    // bound where a kernel's optional input (bias, residual) is unused
    this.dummy = device.createBuffer({ label: "unused binding", size: 16, usage: GPUBufferUsage.STORAGE });
    // bound where a kernel's optional output is unused: a buffer bound for writing may not also be
    // bound for reading in the same dispatch
    this.dummyOut = device.createBuffer({ label: "unused output", size: 16, usage: GPUBufferUsage.STORAGE });
  }

  /**
   * C[cOff..] (M,N) = op(A)·op(B) (+ bias) (+ C if accumulate) (+ R); offsets in elements; form: a
   * key of MATMUL_FORMS (forward, backward_input, backward_weight).
   * gelu (a buffer): also gelu(C) into it, at C's indices (fc_in's forward: h and its activation).
   * geluGradOf (a buffer, read at rOff): C = product · gelu'(geluGradOf), instead of R (fc_out's
   * input gradient: the gradient w.r.t. fc_in's output h).
   * biasGrad (backward_weight only): also C[cOff + M·N + m] = Σ_k A[k, m], the Linear's bias gradient.
   * splits > 1: split-K through `partials` from float partialsOff (a multiple of 64) on
   * (batches·splits·(M·N [+ M]) floats), see matmulKernel; the final sum is recorded at once, or,
   * given `sums` (a SplitSums), later with the others collected there (recordSplitSums).
   * batches > 1: that many products in one dispatch, operand i at offset + i·stride (strides:
   * {a, b, c, bias}); kcat > 1: the sum of kcat products (strides {a, b}) into one C.
   * vec (default: whenever vecAligned allows): read A and B 4 floats at a time (and, on tiles whose
   * invocations own runs of 4 columns, load and store C, R and G so).
   * ln ({wOff, bOff, out, stats, eps}; forward only): the product of LayerNorm(A) instead of A, the
   * LayerNorm's weight and bias in B's buffer at wOff and bOff; LayerNorm(A) is also written to out
   * (at A's offsets) and each row's (mean, rstd) to stats (layernorm_forward's outputs).
   * ce ({targets, losses, out, scale}; backward_input only, A the logits from row 0): the product of
   * d(mean loss)/d(logits) = (softmax(A) − onehot(targets))·scale instead of A, also written to out
   * (at A's offsets), and each row's loss to losses (cross_entropy_backward's outputs).
   */
  matmul(plan, form, args) {
    const d = this._matmulDispatch(form, args);
    const k = d.matvec ? matvecFor(d.vec, !!d.ln, matvecUnroll(args.K, d.vec)) : matmulFor(form, d.tile, d.split, d.kcat, d.vec, d.ln, d.ce);
    const index = plan.add(k, d.uniforms, d.buffers, d.grid);
    return d.region ? this._splitFinal(plan, d.region, args.sums) : index;
  }

  /**
   * Two products in one dispatch, sharing A: a Linear's input gradient (form backward_input, its
   * geluGradOf allowed) and its weight gradient (backward_weight); either may split K, with the
   * same options as matmul (each split's final sum goes to its own `sums`, or is recorded after
   * the pair). Neither reads what the other writes, so no barrier separates them. Tiles given must
   * pair (tilesPair); one not given is chosen as for matmul, then made a 256-invocation one.
   */
  matmulPair(plan, inputGrad, weightGrad) {
    if (inputGrad.A !== weightGrad.A) throw new Error("matmulPair: both products read the same A");
    if (inputGrad.bias || inputGrad.gelu || weightGrad.bias || weightGrad.R || weightGrad.gelu || weightGrad.geluGradOf) {
      throw new Error("matmulPair: an input gradient (geluGradOf allowed) and a plain weight gradient (biasGrad allowed)");
    }
    const pair = (form, a) => this._matmulDispatch(form, { ...a, tile: a.tile ?? pairTile(chooseTile(form, a.M, a.N, a.K * (a.kcat ?? 1))) });
    const x = pair("backward_input", inputGrad), w = pair("backward_weight", weightGrad), vec = x.vec && w.vec;
    if (!tilesPair(x, w, this.workgroupLimit)) {
      if (!this.softwareTiles) throw new Error(`matmulPair: tiles ${x.tile} and ${w.tile} do not pair on this device`);
      // one dispatch saves a GPU's launch latency and barrier; on a CPU two cost about the same
      this.matmul(plan, "backward_input", { ...inputGrad, tile: x.tile });
      return this.matmul(plan, "backward_weight", { ...weightGrad, tile: w.tile });
    }
    const spec = (form, d) => ({ form, tile: d.tile, split: d.split, kcat: d.kcat });
    const values = { count0: x.grid[0] * x.grid[1] * x.grid[2], gx0: x.grid[0], gy0: x.grid[1], gx1: w.grid[0], gy1: w.grid[1] };
    for (const [s, d] of [["0", x], ["1", w]]) for (const [f, v] of Object.entries(d.uniforms)) values[`${f}${s}`] = v;
    const [A, B0, , R0, C0] = x.buffers, [, B1, , , C1] = w.buffers;
    const index = plan.add(matmulPairFor(spec("backward_input", x), spec("backward_weight", w), vec), values, [A, B0, R0, C0, B1, C1],
      grid1d(values.count0 + w.grid[0] * w.grid[1] * w.grid[2]));
    if (x.region) this._splitFinal(plan, x.region, inputGrad.sums);
    return w.region ? this._splitFinal(plan, w.region, weightGrad.sums) : index;
  }

  /**
   * Weight gradients (matmul's args each, form backward_weight; C one buffer for all, and `partials`
   * one for those that split K) in one dispatch (matmulGroupKernel); a split one's final sum goes to
   * its `sums`, as in matmul. Returns null, recording nothing, where they cannot share one: tiles of
   * different shapes, or more storage buffers than the device binds (3 dY and 4 X buffers, C and
   * the partials: a step's deferred weight gradients need 9, 11 with the head's).
   */
  matmulGroup(plan, products) {
    const form = "backward_weight", d = products.map((a) => this._matmulDispatch(form, a));
    if (d.some((x) => x.tile !== d[0].tile) || products.some((a) => a.C !== products[0].C)) return null;
    const unique = (list) => [...new Set(list)];
    const As = unique(products.map((a) => a.A)), Bs = unique(products.map((a) => a.B));
    const partials = unique(products.filter((a, i) => d[i].split).map((a) => a.partials));
    if (partials.length > 1 || !this.bindsGroup(As, Bs, partials.length > 0)) return null;
    const vec = d.every((x) => x.vec);
    const specs = d.map((x, i) => ({ form, split: x.split, values: x.uniforms, grid: x.grid, slabOff: products[i].partialsOff,
      buffers: { A: `A${As.indexOf(products[i].A)}`, B: `B${Bs.indexOf(products[i].B)}`, C: x.split ? "partials" : "C" } }));
    const bindings = [...As.map((_, i) => [`A${i}`, "read"]), ...Bs.map((_, i) => [`B${i}`, "read"]), ["C", "rw"], ...partials.map(() => ["partials", "rw"])];
    const workgroups = d.reduce((n, x) => n + x.grid[0] * x.grid[1] * x.grid[2], 0);
    const index = plan.add(matmulGroupFor(d[0].tile, specs, bindings, vec), { workgroups }, [...As, ...Bs, products[0].C, ...partials], grid1d(workgroups));
    d.forEach((x, i) => x.region && this._splitFinal(plan, x.region, products[i].sums));
    return index;
  }

  /**
   * Whether the device binds a weight-gradient group (matmulGroup) that reads dY from the buffers in
   * As and X from those in Bs (each counted once), writes one C, and, split, one scratch of slabs.
   */
  bindsGroup(As, Bs, split) {
    return new Set(As).size + new Set(Bs).size + 1 + (split ? 1 : 0) <= this.storageBufferLimit;
  }

  /**
   * One product's kernel choice, uniforms, buffers, grid and, when it splits K, its final sum's region
   * (see matmul). matvec: one row (a decoded token) and no tile asked for, so a dot product per output
   * (matvec.js) on no tile.
   */
  _matmulDispatch(form, { M, N, K, A, aOff = 0, B, bOff = 0, C, cOff = 0, bias = null, biasOff = 0, R = null, rOff = 0,
    accumulate = false, biasGrad = false, gelu = null, geluGradOf = null, tile = null, splits = 1,
    partials = null, partialsOff = 0, batches = 1, kcat = 1, strides = {}, vec = undefined, ln = null, ce = null }) {
    const matvec = form === "forward" && M === 1 && !tile && splits === 1 && kcat === 1;
    if (!matvec) {
      tile ??= chooseTile(form, M, N, K * kcat, this.workgroupLimit);
      if (this.softwareTiles) tile = softwareTile(tile);
      const bytes = workgroupBytes(form, tile, !!(ln || ce));
      if (bytes > this.workgroupLimit) throw new Error(`matmul tile ${tile} needs ${bytes} bytes of workgroup memory; this device offers ${this.workgroupLimit}`);
    }
    if (ln && (form !== "forward" || splits > 1 || kcat > 1 || aOff % K !== 0)) throw new Error("a LayerNorm prologue: an unsplit forward product of whole rows");
    if (ce && (form !== "backward_input" || splits > 1 || kcat > 1 || batches > 1 || aOff !== 0 || bias || R || gelu || geluGradOf || accumulate)) {
      throw new Error("a cross-entropy prologue: one plain unsplit input-gradient product of the logits from row 0");
    }
    const len = M * N + (biasGrad ? M : 0);
    const aligned = vecAligned(form, tile, { M, N, K, aOff, bOff, cOff, rOff, len, strides }) && (!ln || (ln.wOff % 4 === 0 && ln.bOff % 4 === 0));
    if (vec && !aligned) throw new Error(`matmul ${form} ${M}x${N}x${K}: operands not aligned for vec4 reads`);
    vec = vec ?? aligned;
    if (biasGrad && (form !== "backward_weight" || bias || accumulate || R)) throw new Error("biasGrad: a plain backward_weight product only");
    if (batches > 1 && (kcat > 1 || R || (splits > 1 && (bias || accumulate)))) throw new Error("matmul batches: no kcat, residual, or split-K epilogue");
    if ((gelu || geluGradOf) && (splits > 1 || batches > 1 || R || accumulate)) throw new Error("matmul gelu epilogues: one unsplit product, no residual or accumulate");
    if (splits > MAX_SPLITS) throw new Error(`matmul: ${splits} K-splits, at most ${MAX_SPLITS}`);
    if (partialsOff % 64 !== 0) throw new Error(`partialsOff ${partialsOff} is not a multiple of 64 floats (256-byte binding offsets)`);
    const flags = (bias ? MATMUL_FLAGS.bias : 0) | (accumulate ? MATMUL_FLAGS.accumulate : 0) | (R ? MATMUL_FLAGS.residual : 0)
      | (biasGrad ? MATMUL_FLAGS.biasGrad : 0) | (gelu ? MATMUL_FLAGS.gelu : 0) | (geluGradOf ? MATMUL_FLAGS.geluGrad : 0);
    const grid = matvec ? matvecGrid(N) : matmulGrid(M, N, tile);
    const { a: a_zs = 0, b: b_zs = 0, c: c_zs = 0, bias: bias_zs = 0 } = strides;
    const uniforms = { M, N, K, a_off: aOff, b_off: bOff, c_off: cOff, bias_off: biasOff, r_off: rOff, flags,
      k_chunk: K * kcat, len, splits: 1, kcat, a_zs, b_zs, c_zs, bias_zs };
    const split = splits > 1;
    if (!split) {
      // the cross-entropy prologue's kernel binds no bias, residual or GELU output (matmulKernel)
      const buffers = ce ? [A, B, C, ce.targets, ce.losses, ce.out] : [A, B, bias ?? this.dummy, R ?? geluGradOf ?? this.dummy, C, gelu ?? this.dummyOut];
      if (ln) {
        Object.assign(uniforms, { ln_w_off: ln.wOff, ln_b_off: ln.bOff, ln_stats_off: 2 * (aOff / K), ln_eps: ln.eps });
        buffers.push(ln.out, ln.stats);
      }
      if (ce) uniforms.ce_scale = ce.scale;
      return { tile, matvec, split, kcat: kcat > 1, vec, ln: ln ? K : false, ce: ce ? K : false, uniforms, grid: [grid[0], grid[1], batches], region: null, buffers };
    }
    const slabs = { buffer: partials, offset: 4 * partialsOff, size: 4 * batches * splits * len };
    if (partials.size !== undefined && slabs.offset + slabs.size > partials.size) {
      throw new Error(`matmul ${form} ${M}x${N}x${K}: ${splits} K-splits need ${slabs.offset + slabs.size} bytes of partials; the buffer has ${partials.size}`);
    }
    return { tile, split, kcat: kcat > 1, vec, uniforms: { ...uniforms, splits, k_chunk: splitChunk(K * kcat, splits, tile) },
      grid: [grid[0], grid[1], batches * splits], buffers: [A, B, this.dummy, this.dummy, slabs, this.dummyOut],
      region: { src: partialsOff, len, N, splits, batches, c_off: cOff, c_zs, bias_off: biasOff, r_off: rOff,
        flags: flags & ~MATMUL_FLAGS.biasGrad, buffers: [partials, bias ?? this.dummy, R ?? this.dummy, C] } };
  }

  /** A split product's final sum: collected into `sums`, or recorded now. */
  _splitFinal(plan, region, sums) {
    if (sums) return sums.add(region);
    return this.recordSplitSums(plan, new SplitSums().add(region));
  }

  /** The final sums of the split-K products collected in `sums`, SPLIT_REGIONS per dispatch; empties it. */
  recordSplitSums(plan, sums) {
    for (let first = 0; first < sums.regions.length; first += SPLIT_REGIONS) {
      const group = sums.regions.slice(first, first + SPLIT_REGIONS), { values, end } = splitRegionValues(group);
      plan.add(matmulSplitFinal, values, group[0].buffers, grid1d(Math.ceil(end / 256)));
    }
    sums.regions = [];
  }

  /**
   * out = LayerNorm(x), stats = (mean, rstd) per row. sumIn: x is the result of a split-K product
   * left unsummed (its region, from the SplitSums given to matmul as `sums`): the LayerNorm sums it
   * into x first (layernorm.js), so the product's final sum needs no dispatch. embed ({T, past,
   * tokens, wteOff, wpeOff}, as embeddingForward's; wte and wpe in params): x is the embedding, which
   * the LayerNorm writes into x first, so the embedding needs no dispatch.
   */
  layernormForward(plan, { rows, C, x, params, wOff, bOff, out, stats, eps, sumIn = null, embed = null }) {
    const k = layernormKernels(C, this.subgroupWidth), grid = grid1d(k.workgroups(rows)), values = { rows, C, w_off: wOff, b_off: bOff, eps };
    if (embed) {
      if (sumIn) throw new Error("layernormForward: x is the embedding or a product's sum, not both");
      return plan.add(k.forwardEmbed, { ...values, T: embed.T, past: embed.past, wte_off: embed.wteOff, wpe_off: embed.wpeOff },
        [x, params, out, stats, embed.tokens], grid);
    }
    if (!sumIn) return plan.add(k.forward, values, [x, params, out, stats], grid);
    const [partials, bias, R] = this._sumInRegion(sumIn, rows, C, x);
    if (sumIn.flags & MATMUL_FLAGS.bias && bias !== params) throw new Error("layernormForward sumIn: the product's bias must lie in the LayerNorm's params buffer");
    return plan.add(k.forwardSum, { ...values, src: sumIn.src, len: sumIn.len, splits: sumIn.splits, bias_off: sumIn.bias_off, flags: sumIn.flags },
      [x, params, out, stats, partials, R], grid);
  }

  /**
   * dx[dxOut..] = the gradient w.r.t. the LayerNorm's input (accumulate: plus dx[dxIn..], as the
   * residual stream's gradient; dxIn = dxOut adds in place). sumIn: dout is a split-K product left
   * unsummed, as in layernormForward; it is summed into dout.
   */
  layernormBackwardInput(plan, { rows, C, dout, x, stats, params, wOff, dx, accumulate, dxIn = 0, dxOut = 0, sumIn = null }) {
    const k = layernormKernels(C, this.subgroupWidth), grid = grid1d(k.workgroups(rows));
    const values = { rows, C, w_off: wOff, flags: accumulate ? 1 : 0, dx_in: dxIn, dx_out: dxOut };
    if (!sumIn) return plan.add(k.backwardInput, values, [dout, x, stats, params, dx], grid);
    if (sumIn.flags) throw new Error("layernormBackwardInput sumIn: a product with no epilogue");
    const [partials] = this._sumInRegion(sumIn, rows, C, dout);
    return plan.add(k.backwardInputSum, { ...values, src: sumIn.src, len: sumIn.len, splits: sumIn.splits }, [dout, x, stats, params, dx, partials], grid);
  }

  /** A split-K region a LayerNorm may sum: one (rows, C) product into the whole of `into`; its partials, bias and R buffers. */
  _sumInRegion(region, rows, C, into) {
    const [partials, bias, R, result] = region.buffers;
    if (region.batches !== 1 || region.N !== C || region.len !== rows * C || region.c_off !== 0 || region.r_off !== 0 || result !== into) {
      throw new Error(`a LayerNorm sums one split-K product of (${rows}, ${C}) into its input, from offset 0`);
    }
    return [partials, bias, R];
  }

  /**
   * The weight and bias gradients of up to LAYERNORM_PARAM_JOBS LayerNorms of `rows` rows of C in
   * one dispatch; jobs: [{dout, x, stats, wOff}], each bias gradient right after its weight's (as in
   * the manifest). sums (a SplitSums, emptied): split-K products' final sums recorded here too, in
   * the same dispatch where they are up to SPLIT_REGIONS plain weight gradients into grads.
   */
  layernormBackwardParams(plan, { rows, C, jobs, grads, sums = null }) {
    if (jobs.length < 1 || jobs.length > LAYERNORM_PARAM_JOBS) throw new Error(`1 to ${LAYERNORM_PARAM_JOBS} LayerNorms per dispatch, got ${jobs.length}`);
    const values = { rows, C }, buffers = [];
    for (let j = 0; j < LAYERNORM_PARAM_JOBS; j++) {
      const job = jobs[Math.min(j, jobs.length - 1)]; // unused jobs bind the last one's buffers
      values[`w_off${j}`] = job.wOff;
      buffers.push(job.dout, job.x, job.stats);
    }
    const nx = layernormBackwardParamsWorkgroups(C), regions = sums?.regions ?? [], kernels = layernormParamsKernels(this.subgroupWidth);
    // the sums come along where they are plain weight gradients into grads, one dispatch's worth
    const along = regions.length > 0 && this._sumsAlong(regions, grads);
    if (!along) {
      const index = plan.add(kernels.plain, values, [...buffers, grads], [nx, jobs.length]);
      if (regions.length) this.recordSplitSums(plan, sums);
      return index;
    }
    const partials = regions[0].buffers[0], taken = this._takeSums(sums);
    return plan.add(kernels.withSums, { ...values, jobs: jobs.length, ...taken.values }, [...buffers, grads, partials],
      [nx, jobs.length + Math.ceil(taken.workgroups / nx)]);
  }

  /**
   * A block's last LayerNorm backward (ln1's input gradient: layernormBackwardInput's `input`) and its
   * end (layernormBackwardParams' `params`, whose last job is the same LayerNorm) in one dispatch where
   * the device binds that kernel's 10 storage buffers and the sums can come along (where ln1's gradient
   * is a split-K product's slabs, in the same scratch buffer as theirs); otherwise as the two
   * dispatches. merge: force either way.
   */
  layernormBackwardBlock(plan, { input, params, merge = null }) {
    const { rows, C, jobs, grads, sums = null } = params, regions = sums?.regions ?? [], sumIn = input.sumIn ?? null;
    const same = jobs.length === LAYERNORM_PARAM_JOBS && ["dout", "x", "stats", "wOff"].every((k) => jobs[1][k] === input[k]);
    const scratch = sumIn ? this._sumInRegion(sumIn, input.rows, input.C, input.dout)[0] : null;
    const along = regions.length === 0 || (this._sumsAlong(regions, grads) && (!sumIn || regions[0].buffers[0] === scratch));
    const k = layernormBlockEndKernels(C, this.subgroupWidth), kernel = k.kernel(!!sumIn, regions.length > 0);
    if (!(merge ?? kernel.buffers.length <= this.storageBufferLimit) || !same || !along || (sumIn && sumIn.flags)) {
      this.layernormBackwardInput(plan, input);
      return this.layernormBackwardParams(plan, params);
    }
    const rowGroups = k.rowGroups(rows), nx = layernormBackwardParamsWorkgroups(C);
    const values = { rows, C, w_off: input.wOff, flags: input.accumulate ? 1 : 0, dx_in: input.dxIn ?? 0, dx_out: input.dxOut ?? 0,
      w_off0: jobs[0].wOff, w_off1: jobs[1].wOff, row_groups: rowGroups, nx };
    const buffers = [input.dout, input.x, input.stats, input.params, input.dx];
    if (sumIn) {
      Object.assign(values, { src: sumIn.src, len: sumIn.len, splits: sumIn.splits });
      buffers.push(scratch);
    }
    buffers.push(jobs[0].dout, jobs[0].x, jobs[0].stats, grads);
    let groups = rowGroups + LAYERNORM_PARAM_JOBS * nx;
    if (regions.length) {
      if (!sumIn) buffers.push(regions[0].buffers[0]);
      const taken = this._takeSums(sums);
      Object.assign(values, taken.values);
      groups += taken.workgroups;
    }
    return plan.add(kernel, values, buffers, grid1d(groups));
  }

  /**
   * The split-K sums in `sums` as a LayerNorm parameter dispatch's uniforms (splitRegionValues), and
   * the workgroups of 256 elements they need there; empties sums, whose final sums that dispatch takes.
   */
  _takeSums(sums) {
    const { values, end } = splitRegionValues(sums.regions);
    sums.regions = [];
    return { values, workgroups: Math.ceil(end / 256) };
  }

  /** Whether split-K sums can come along with a LayerNorm parameter dispatch: plain weight gradients into grads, one dispatch's worth. */
  _sumsAlong(regions, grads) {
    return regions.length <= SPLIT_REGIONS && regions.every((r) => r.flags === 0 && r.buffers[0] === regions[0].buffers[0] && r.buffers[3] === grads);
  }

  /** Both halves of one LayerNorm's backward (its bias right after its weight in grads). */
  layernormBackward(plan, { rows, C, dout, x, stats, params, wOff, bOff, dx, accumulate, dxIn = 0, dxOut = 0, grads }) {
    if (bOff !== wOff + C) throw new Error("LayerNorm bias gradient must follow its weight gradient");
    this.layernormBackwardInput(plan, { rows, C, dout, x, stats, params, wOff, dx, accumulate, dxIn, dxOut });
    this.layernormBackwardParams(plan, { rows, C, jobs: [{ dout, x, stats, wOff }], grads });
  }

  embeddingForward(plan, { rows, T, C, past, tokens, params, wteOff, wpeOff, out }) {
    return plan.add(embeddingForward, { rows, T, C, past, wte_off: wteOff, wpe_off: wpeOff }, [tokens, params, out], grid1d(Math.ceil((rows * C) / 256)));
  }

  /**
   * The embedding's backward, ln_f's parameter gradients (lnf: {dout, x, stats, wOff, bOff}, its
   * bias's right after its weight's) and the gradient norm's partial sums of squares over all n gradients,
   * in one dispatch: run it after every other gradient is final. partials: normPartialCount() floats.
   * headSlabs: the region (a SplitSums') of the tied head's weight gradient, left as split-K slabs,
   * which the token sums start from instead of from grads. Returns how many partials it writes, which
   * adamwUpdate sums (adamwValues' `parts`).
   */
  embeddingBackwardNorm(plan, { B, T, C, V, order, dres, grads, wteOff, wpeOff, lnf, n, partials, headSlabs = null }) {
    if (lnf.bOff !== lnf.wOff + C) throw new Error("LayerNorm bias gradient must follow its weight gradient");
    const groups = embeddingGroups(V, T, C), parts = normPartials(n), workgroups = groups.token + groups.position + C + parts;
    const values = { V, B, T, C, wte_off: wteOff, wpe_off: wpeOff, token_groups: groups.token, position_groups: groups.position,
      lnf_w_off: lnf.wOff, n, parts };
    const buffers = [order, dres, grads, partials, lnf.dout, lnf.x, lnf.stats];
    if (headSlabs) {
      const r = headSlabs;
      if (r.c_off !== wteOff || r.batches !== 1 || r.len !== V * C || r.flags !== 0 || r.buffers[3] !== grads) {
        throw new Error("embeddingBackwardNorm headSlabs: the split-K slabs of the tied head's plain (V,C) weight gradient into grads at wte");
      }
      plan.add(embeddingBackwardNormSlabs, { ...values, head_src: r.src, head_len: r.len, head_splits: r.splits }, [...buffers, r.buffers[0]], grid1d(workgroups));
    } else {
      plan.add(embeddingBackwardNorm, values, buffers, grid1d(workgroups));
    }
    return workgroups;
  }

  /** losses: (rows) per-row losses (their mean: adamwUpdate's scal[2]). */
  crossEntropyForward(plan, { rows, V, logits, targets, losses }) {
    plan.add(crossEntropyForward, { rows, V }, [logits, targets, losses], grid1d(crossEntropyWorkgroups(rows)));
  }

  /** As crossEntropyForward, and logits overwritten with d(mean loss)/d(logits) (one fused kernel). */
  crossEntropyBackward(plan, { rows, V, logits, targets, losses }) {
    plan.add(crossEntropyBackward, { rows, V, scale: 1 / rows }, [logits, targets, losses], grid1d(crossEntropyWorkgroups(rows)));
  }

  /** One query row per head (a decoded token) takes attention_decode where no layout is asked for. */
  attentionForward(plan, { B, T, kvT, past, H, C, q, k, v, out, lse, layout }) {
    const D = C / H, values = { T, kvT, past, H, C, scale: 1 / Math.sqrt(D) };
    if (T === 1 && !layout && attentionDecodeFits(D, kvT, this.workgroupLimit)) {
      return plan.add(attentionDecodeFor(D, kvT), values, [q, k, v, out, lse], attentionDecodeGrid(B * H));
    }
    const A = attentionFor("forward", D, B * H * T, layout, this.subgroupWidth);
    return plan.add(A.fwd, values, [q, k, v, out, lse], attentionGrid(T, B * H, A.layout));
  }

  /**
   * Whether the decode chain (decode_row.js: attentionDecodeQkv and mlpDecode a block, logitsDecode)
   * serves a model of width C, H heads and a window of kvT on this device: its kernels' workgroup
   * memory fits, and every offset it reads as vec4s (vec4Offsets: the parameters', the q/k/v views'
   * stride) is a multiple of 4 floats.
   */
  decodeChainServes({ C, H, kvT, vec4Offsets }) {
    return attentionDecodeQkvFits(C, H, kvT, this.workgroupLimit) && mlpDecodeFits(C, this.workgroupLimit)
      && logitsDecodeFits(C, this.workgroupLimit) && vec4Offsets.every((x) => x % 4 === 0);
  }

  /**
   * A decoded token's block up to o_proj (one row, B = T = 1) in one dispatch, a workgroup per head
   * (attention_decode_qkv.js): row = {base, baseOff, partsOff, nparts, biasOff, store, storeOff} (the
   * residual row as summedRow takes it: base + bias + nparts partial rows of `parts` from partsOff,
   * stored at store), or in block 0 {embed: {tokens, wteOff, wpeOff}, store, storeOff} (the token's
   * embedding at position past); ln: {wOff, bOff, eps}; q/k/v weights and biases wStride floats apart
   * into qkv's views ({buffer, stride}) at row past; o_proj's weight at oOff, its partial rows into
   * parts at partsOutOff.
   */
  attentionDecodeQkv(plan, { C, H, kvT, past, row, params, wOff, wStride, biasOff, ln, oOff, qkv, parts, partsOutOff }) {
    const D = C / H, embed = row.embed ?? null;
    if (!attentionDecodeQkvFits(C, H, kvT, this.workgroupLimit)) throw new Error(`attentionDecodeQkv: C = ${C}, ${H} heads, ${kvT} keys do not fit this device`);
    return plan.add(attentionDecodeQkvFor(C, D, kvT, !!embed), { past, w_off: wOff, w_stride: wStride, bias_off: biasOff,
      qkv_stride: qkv.stride, ln_w_off: ln.wOff, ln_b_off: ln.bOff, o_off: oOff, parts_out_off: partsOutOff,
      wte_off: embed?.wteOff ?? 0, wpe_off: embed?.wpeOff ?? 0, ...summedRowValues(row), scale: 1 / Math.sqrt(D), ln_eps: ln.eps },
    [embed ? embed.tokens : row.base, params, parts, row.store, qkv.buffer], attentionDecodeGrid(H));
  }

  /**
   * A decoded token's MLP in one dispatch, a workgroup per slice of hidden units (mlp_decode.js): row as
   * attentionDecodeQkv's; ln: ln2 {wOff, bOff, eps}; fc_in's weight and bias at inOff, inBiasOff,
   * fc_out's weight at outOff, its partial rows into parts at partsOutOff.
   */
  mlpDecode(plan, { C, row, params, ln, inOff, inBiasOff, outOff, parts, partsOutOff }) {
    if (!mlpDecodeFits(C, this.workgroupLimit)) throw new Error(`mlpDecode: C = ${C} does not fit this device`);
    return plan.add(mlpDecodeFor(C), { ln_w_off: ln.wOff, ln_b_off: ln.bOff, in_off: inOff, in_bias_off: inBiasOff, out_off: outOff,
      parts_out_off: partsOutOff, ...summedRowValues(row), ln_eps: ln.eps }, [row.base, params, parts, row.store], mlpDecodeGrid(C));
  }

  /** A decoded token's ln_f and logits (logits_decode.js): row as attentionDecodeQkv's; ln: ln_f's; the head's weight at wOff. */
  logitsDecode(plan, { C, V, row, params, ln, wOff, parts, logits, logitsOff = 0 }) {
    if (!logitsDecodeFits(C, this.workgroupLimit)) throw new Error(`logitsDecode: C = ${C} does not fit this device`);
    return plan.add(logitsDecodeFor(C), { V, ln_w_off: ln.wOff, ln_b_off: ln.bOff, w_off: wOff, logits_off: logitsOff,
      ...summedRowValues(row), ln_eps: ln.eps }, [row.base, params, parts, row.store, logits], logitsDecodeGrid(V));
  }

  /**
   * A decoded token sampled from its logits (sample_decode.js): draws[step] the step's uniform, the
   * token into tokens[0] and the step's record (token, certain, logits) into samples. Returns the
   * dispatch index, whose sampling uniforms a new generation replaces (sampleDecodeValues()).
   */
  sampleDecode(plan, { V, logits, logitsOff = 0, draws, tokens, samples, batch, step, temperature, topK }) {
    if (!sampleDecodeFits(V)) throw new Error(`sampleDecode: a vocabulary of ${V} is more than one workgroup's`);
    return plan.add(sampleDecode, { V, logits_off: logitsOff, step, ...sampleDecodeValues(temperature, topK) },
      [logits, draws, tokens, samples, batch], [1, 1]);
  }

  /** Compiles decodeTokens' pipeline for `model` (and `next`, as decodeTokens) without blocking (PipelineCache.prepare). */
  prepareDecodeTokens(model, next = decodeTokensKeepsNext(model)) {
    const { nLayer, nHead, dModel, ctx } = model;
    return this.pipelines.prepare(decodeTokensFor({ nLayer, nHead, dModel, ctx }, next));
  }

  /**
   * Up to TOKENS_BATCH (decoder.js) tokens decoded and sampled in one dispatch of one workgroup (decode_tokens.js),
   * the window kept on the GPU: model {nLayer, nHead, dModel, ctx, vocabSize}; values: the kernel's
   * uniforms (the batch's steps and whether to rebuild the window first, the parameters' offsets, the
   * KV cache's layout, the sampling's); buffers: window, params, kv (every layer's q/k/v views), draws,
   * samples, rows (the rebuild's scratch). next: each step computes the next window's row too, so
   * that a restart copies rows instead of rebuilding them (by decodeTokensKeepsNext, which laid out
   * the KV cache; false for a benchmark's column). Returns the dispatch index, whose steps and
   * sampling a batch replaces.
   */
  decodeTokens(plan, { model, values, window, params, kv, draws, samples, rows, next = decodeTokensKeepsNext(model) }) {
    if (!decodeTokensFits(model, this.workgroupLimit)) throw new Error(`decodeTokens: the model does not fit one workgroup of this device`);
    const { nLayer, nHead, dModel, ctx } = model;
    if (next && !decodeTokensKeepsNext(model)) throw new Error("decodeTokens: the next window's rows do not fit");
    return plan.add(decodeTokensFor({ nLayer, nHead, dModel, ctx }, next), values, [window, params, kv, draws, samples, rows], [1, 1]);
  }

  /**
   * dq, dk, dv in one dispatch. qkv and dqkv: {buffer, stride}, q, k and v (dq, dk, dv) at floats 0,
   * stride and 2·stride of one buffer, each (B,T,C).
   */
  attentionBackward(plan, { B, T, H, C, qkv, out, lse, dout, dqkv, layout }) {
    const D = C / H, A = attentionFor("backward", D, B * H * T, layout, this.subgroupWidth);
    if (qkv.stride % 4 || dqkv.stride % 4) throw new Error("attentionBackward: q, k and v lie a multiple of 4 floats apart");
    plan.add(A.backward, { T, H, C, scale: 1 / Math.sqrt(D), q_stride: qkv.stride, dq_stride: dqkv.stride },
      [qkv.buffer, dout, out, lse, dqkv.buffer], attentionGrid(T, B * H, A.layout, 2));
  }

  /**
   * AdamW over n parameters, the gradients clipped to a global norm of tr.gradClip, and scal = [norm,
   * clip coefficient, the mean of the losses] (values: adamwValues()). Returns the dispatch index,
   * whose step-dependent uniforms adamwStepValues() replaces each step. workgroups: the grid's cap,
   * where not adamwWorkgroups().
   */
  adamwUpdate(plan, { n, params, grads, m, v, decay, partials, losses, scal, values, workgroups = adamwWorkgroups(this.softwareTiles) }) {
    return plan.add(adamwUpdate, values, [params, grads, m, v, decay, partials, losses, scal],
      grid1d(Math.min(Math.ceil(n / 256), workgroups)));
  }
}

/**
 * AdamW's workgroups at most: each sums the norm's partials (≤ normPartialCount) itself. 1024 of 256
 * invocations fill an H100 (132 SMs × 2048 invocations) once, so no second wave re-sums them; fewer
 * were slower at the biggest presets, more no faster (see docs/lab/2026-11-27-wgsl-step-dispatch-costs.md §23);
 * a software adapter pays for each workgroup's barriers and has a few cores, so it gets 16.
 */
function adamwWorkgroups(software) {
  return software ? 16 : 1024;
}

// the embedding backward's workgroups of NORM_THREADS: TOKEN_CHANNELS channels of a token each, then one
// invocation per (position, channel)
const embeddingGroups = (V, T, C) => ({ token: V * Math.ceil(C / TOKEN_CHANNELS), position: Math.ceil((T * C) / NORM_THREADS) });

/** The most partials embeddingBackwardNorm writes for V tokens and T positions of C channels (and ln_f's C columns). */
export function normPartialCount(V, T, C) {
  const groups = embeddingGroups(V, T, C);
  return groups.token + groups.position + C + NORM_PARTIALS;
}

/** Split-K products whose final sums are recorded later, together (Ops.matmul's `sums`). */
/** The uniforms of up to SPLIT_REGIONS split-K sums (splitRegionFields), and their elements' end. */
function splitRegionValues(group) {
  const values = {};
  let end = 0;
  for (let r = 0; r < SPLIT_REGIONS; r++) {
    const g = group[r];
    if (g) {
      if (g.buffers.some((b, i) => b !== group[0].buffers[i])) throw new Error("split-K sums of one dispatch must share their buffers");
      end += g.batches * g.len;
    }
    const fields = splitRegionFields(r);
    REGION_FIELDS.forEach((f, i) => { values[fields[i]] = (f === "end" ? end : g?.[f]) ?? 0; });
  }
  return { values, end };
}

export class SplitSums {
  constructor() { this.regions = []; }
  add(region) { this.regions.push(region); return this; }
}

/** AdamW's uniforms for step t (1-based), n parameters, `parts` norm partials and `rows` row losses. */
export function adamwValues(n, tr, t, rows, parts) {
  return {
    n, parts, clip: tr.gradClip, rows, beta1: tr.beta1, beta2: tr.beta2,
    one_minus_beta1: 1 - tr.beta1, one_minus_beta2: 1 - tr.beta2, eps: tr.eps, ...adamwStepValues(tr, t),
  };
}

/**
 * The uniforms of AdamW that change with step t, into `into` (a step reuses one object): the bias
 * corrections, in binary64 as PyTorch computes them, and the two that hold the learning rate `lr`
 * (tr.lr unless a schedule gives this step another: lr_schedule.js).
 */
export function adamwStepValues(tr, t, into = {}, lr = tr.lr) {
  into.decay_factor = 1 - lr * tr.weightDecay;
  into.step_size = lr / (1 - tr.beta1 ** t);
  into.bc2_sqrt = Math.sqrt(1 - tr.beta2 ** t);
  return into;
}
