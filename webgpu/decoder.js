// The WebGPU decoder: generation on a Trainer's weights (trainer.js), without copying them. A token
// runs one of two paths, both over a KV cache and sampled on the GPU where the sampler serves:
// - the decode chain (decode_row.js: two dispatches a block and the logits' one, sample_decode.js a
//   dispatch more), up to DECODE_BATCH tokens in one submit, a (re)built window's prefill first in it;
// - one dispatch of one workgroup for a whole batch (decode_tokens.js), for the smallest models,
//   which keeps the window on the GPU and restarts it there.
// The host samples only the tokens the GPU could not tell for certain: the tokens are prng.js's
// sampleToken's either way. No Node or DOM imports: runs as-is in a Web Worker and under Node.
import { SampleStream, sampleToken } from "./prng.js";
import { Plan } from "./plan.js";
import { activationFloats, bufferBytes, createActivations, listActivations, mapForReading, qkvSlots, sameQkv, slotFloats } from "./buffers.js";
import { sampleDecodeFits, sampleDecodeServes, sampleDecodeValues, sampleRecordFloats } from "./kernels/sample_decode.js";
import { decodeRowsFloats, decodeNextRowsFloats, decodeTokensFits, decodeTokensKeepsNext } from "./kernels/decode_tokens.js";
import { mlpDecodeGrid } from "./kernels/mlp_decode.js";

// The most tokens decoded and sampled on the GPU in one submit by the decode chain (Decoder._decodeBatch);
// a batch also ends where the window restarts (every ctx/2 tokens). The host's round trip for a token
// (submit, the wait for the logits, sampling) costs as much as a tiny model's GPU work, and more in a
// browser than under Node, so the fewer submits the better (see
// docs/lab/2026-11-28-decoding-on-the-gpu.md §37–38 and docs/lab/2026-11-29-wgsl-trainer-in-chromium.md §43).
// A batch streams to the page as one burst.
export const DECODE_BATCH = 64;
// The most steps of a batch in one workgroup (decode_tokens.js), whose window restarts do not end a
// batch: fewer batches, fewer submits between a long generation's steps (see
// docs/lab/2026-11-29-decode-batches-on-the-gpu.md §41).
export const TOKENS_BATCH = 64;
// A batch's tokens reach the page together, when its last step is done: on a slow adapter (software,
// a large model) a batch holds only as many steps as the last one ran in this long, so tokens keep
// streaming and Stop is heard within it.
const BATCH_MS = 50;
// The widest model whose batches decode in one workgroup (Decoder._decodesInOneWorkgroup): past it,
// one workgroup's work costs more than the decode chain's launches (see
// docs/lab/2026-11-29-decode-batches-on-the-gpu.md §40).
const DECODE_IN_ONE_WORKGROUP_MAX_WIDTH = 64;
/** What a batch's commands were recorded for (Decoder._takeAhead), and what a batch submitted ahead is (_decodeBatch). */
const batchKey = (pos, n, prefill, slot) => `batch ${pos} ${n} ${prefill} ${slot}`;
const U = () => GPUBufferUsage;

/**
 * Where the decode chain's partial rows lie for width C and H heads (floats): o_proj's, one a head,
 * at oProj; fc_out's, one for each of `slices` slices of hidden units, at fcOut; `floats` in all.
 */
export function decodeChainParts(C, H) {
  const slices = mlpDecodeGrid(C)[0];
  return { oProj: 0, fcOut: H * C, slices, floats: (H + slices) * C };
}

/**
 * Floats of the KV cache where decode_tokens.js serves the model: every layer's q, k and v views (n
 * floats each) in one buffer, then the next window's rows that the kernel keeps past them.
 */
const kvLayersFloats = (model, n) => model.nLayer * 3 * slotFloats(n) + decodeNextRowsFloats(model);

/** Layer l's q, k and v views (n floats each) in `kv`, the buffer of every layer's (kvLayersFloats). */
function qkvLayerViews(kv, l, n) {
  const at = 4 * 3 * l * slotFloats(n);
  return { qkv: { buffer: kv, offset: at, size: 4 * 3 * slotFloats(n) }, ...qkvSlots(kv, at, n) };
}

/**
 * Every buffer a Decoder for `config` creates, as add(label, bytes, storage) in its order (storage:
 * bound to kernels). Mirrors the Decoder's construction; Trainer.requirements counts them.
 */
export function listDecoderBuffers(config, add) {
  const m = config.model, { dModel: C, vocabSize: V, ctx: T } = m;
  const qkv = activationFloats(m, 1, 1, T).qkv, records = 4 * DECODE_BATCH * sampleRecordFloats(V);
  if (decodeTokensFits(m)) add("generate qkv", 4 * kvLayersFloats(m, qkv));
  listActivations(add, m, "generate", 1, 1, T, { ownQkv: !decodeTokensFits(m) });
  add("generate partial rows", 4 * decodeChainParts(C, m.nHead).floats);
  listActivations(add, m, "prefill", 1, T, T, { ownQkv: false }); // its q, k and v are generation's
  add("logits readback", 4 * V, false);
  add("generate draws", 4 * DECODE_BATCH);
  add("generate samples", records);
  add("generate batch tokens", 4 * DECODE_BATCH);
  add("generate chain window", 4 * (T + 1), false);
  for (const i of [0, 1]) add(`samples readback ${i}`, records, false);
  if (decodeTokensFits(m)) {
    add("generate window", 4 * (1 + T));
    add("generate rows", 4 * decodeRowsFloats(m));
    for (const i of [0, 1]) {
      add(`tokens draws ${i}`, 4 * TOKENS_BATCH);
      add(`tokens samples ${i}`, 4 * TOKENS_BATCH * sampleRecordFloats(V));
      add(`tokens readback ${i}`, 4 * TOKENS_BATCH * sampleRecordFloats(V), false);
    }
  }
}

/**
 * Bytes of a Decoder's plan uniforms at most (256 a dispatch): 3 + 9L dispatches decode a token or
 * prefill a window, and the decode chain keeps such a plan for each step of a batch (at most
 * DECODE_BATCH, and ctx) besides the prefill's; its sampler a dispatch for each step and one more;
 * a batch in one workgroup is one dispatch.
 */
export const decoderUniformBytes = (L, ctx) => 256 * ((3 + 9 * L) * (1 + Math.min(DECODE_BATCH, ctx)) + DECODE_BATCH + 1 + 1);

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

export class Decoder {
  /**
   * A decoder of `trainer`'s model: it reads the trainer's weights (whatever training has made of
   * them by each token) and records through its Ops and forward; its own buffers and plans (the KV
   * cache, the prefill's activations, the samplers') are made here and freed by destroy(), which must
   * come before the trainer's.
   * @param {import("./trainer.js").Trainer} trainer
   * @param {{decodeInOneWorkgroup?: boolean, decodeAhead?: boolean, decodeNextWindow?: boolean}} options
   *   decodeInOneWorkgroup: a batch's decoded tokens in one workgroup (decode_tokens.js) or the decode
   *   chain; by default by the rule (_decodesInOneWorkgroup)
   *   decodeAhead: submit the next batch before this one's tokens are read (default true)
   *   decodeNextWindow: in one workgroup, each step computes its token's row of the next window, so
   *   that a restart copies rows instead of rebuilding them (default true, where decodeTokensKeepsNext
   *   says they fit; false for a benchmark's column)
   *   params: the weights it reads, laid out as the trainer's (default the trainer's own; a LoRA
   *   trainer's sampling copy, lora.js samplingWeights)
   */
  constructor(trainer, { decodeInOneWorkgroup = undefined, decodeAhead = true, decodeNextWindow = true, params = trainer.params } = {}) {
    this.trainer = trainer;
    this.device = trainer.device;
    this.cfg = trainer.cfg;
    this.ops = trainer.ops;
    this.params = params;
    this.offsets = trainer.offsets;
    this.projStride = trainer.projStride;
    this.decodeInOneWorkgroup = decodeInOneWorkgroup;
    this.decodeAhead = decodeAhead;
    this.decodeNextWindow = decodeNextWindow && decodeTokensKeepsNext(this.cfg);
    this.buffers = [];
    this._build();
  }

  /** Dispatches (each a dependent GPU launch) of one decoded token. */
  get dispatches() {
    return { decode: this.genPlan.entries.length };
  }

  buffer(label, size, usage) {
    const b = this.device.createBuffer({ label, size: bufferBytes(size), usage });
    this.buffers.push(b);
    return b;
  }

  _build() {
    const ctx = this.cfg.ctx, { dModel: C, nHead: H } = this.cfg, S = U().STORAGE | U().COPY_SRC;
    const make = (label, size, usage) => this.buffer(label, size, usage);
    // where decode_tokens.js fits the model, every layer's KV cache in one buffer, which it reads whole
    const n = activationFloats(this.cfg, 1, 1, ctx).qkv;
    this.kv = decodeTokensFits(this.cfg) ? this.buffer("generate qkv", 4 * kvLayersFloats(this.cfg, n), S) : null;
    this.gen = createActivations(make, this.cfg, "generate", 1, 1, ctx, { qkv: this.kv ? (l) => qkvLayerViews(this.kv, l, n) : null });
    // the decode chain's partial rows between its dispatches (made where it does not serve too: the
    // buffers a decoder needs do not depend on the device)
    const parts = this.buffer("generate partial rows", 4 * decodeChainParts(C, H).floats, S);
    this.chainParts = this._decodeChainServes(this.gen) ? parts : null;
    this.genPlan = new Plan(this.device, this.ops.pipelines, "decode");
    this._recordDecode(this.genPlan, 0);
    this.genPlan.freeze();
    this.genPositions = new Array(ctx); // _placeDecodePlan's records, by position
    // prefill: one forward of a whole window (padded to ctx) whose q, k and v land in the decode's
    // views, k and v as the KV cache at positions 0..: a prompt, or the window after a restart, costs
    // one forward, not one per token (causal attention keeps the padding out of the window's rows;
    // decoding overwrites its k, v)
    const pre = createActivations(make, this.cfg, "prefill", 1, ctx, ctx, { qkv: (l) => sameQkv(this.gen.layers[l]) });
    this.prefill = pre;
    this.prefillPlan = new Plan(this.device, this.ops.pipelines, "prefill");
    this.trainer.recordForward(this.prefillPlan, pre, { B: 1, T: ctx, past: 0, logitRows: ctx, params: this.params });
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

  /** A decoded token's forward at position `past` into `plan`: the decode chain where it serves, else the forward of one row. */
  _recordDecode(plan, past) {
    if (this.chainParts) this._recordDecodeChain(plan, past);
    else this.trainer.recordForward(plan, this.gen, { B: 1, T: 1, past, logitRows: 1, params: this.params });
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
   * the partial rows the dispatch before left in chainParts (block 0's from the token's embedding),
   * and stores that row in the residual buffer.
   */
  _recordDecodeChain(plan, past) {
    const ops = this.ops, { nLayer: L, dModel: C, nHead: H, vocabSize: V, layerNormEps: eps } = this.cfg;
    const A = this.gen, o = this.offsets, P = this.params, parts = this.chainParts, at = decodeChainParts(C, H);
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
        .then(() => { if (this.buffers.length && this.trainer.buffers.length) this._buildTokensPlan(); }, (e) => { this.tokensError = e; }); // no buffers: destroyed
    }
  }

  /** The plan of decode_tokens.js's one dispatch (a batch's steps), with the current sampling. */
  _buildTokensPlan() {
    this.tokensPlan = new Plan(this.device, this.ops.pipelines, "decode tokens");
    for (const { draws, samples } of this.tokenSlots) {
      this.ops.decodeTokens(this.tokensPlan, { model: this.cfg, values: { ...this._decodeTokensValues(), ...this.sampling },
        window: this.genWindow, params: this.params, kv: this.kv, draws, samples, rows: this.genRows, next: this.decodeNextWindow });
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
    const { dModel: C, nHead: H, vocabSize: V, layerNormEps } = this.cfg, o = this.offsets;
    const block = o["blocks.0.ln1.weight"], at = (name) => o[`blocks.0.${name}`] - block;
    const stride = this.gen.layers[0].stride;
    return { rebuild: 0, steps: 0, V, wte_off: o["token_embedding.weight"], wpe_off: o["position_embedding.weight"], block_off: block,
      block_stride: this.trainer.blockStride, ln1_w: at("ln1.weight"), ln1_b: at("ln1.bias"),
      qkv_w: at("attn.q_proj.weight"), qkv_b: at("attn.q_proj.bias"), qkv_stride: this.projStride, o_w: at("attn.o_proj.weight"),
      o_b: at("attn.o_proj.bias"), ln2_w: at("ln2.weight"), ln2_b: at("ln2.bias"), in_w: at("mlp.fc_in.weight"), in_b: at("mlp.fc_in.bias"),
      out_w: at("mlp.fc_out.weight"), out_b: at("mlp.fc_out.bias"), lnf_w: o["ln_f.weight"], lnf_b: o["ln_f.bias"], kv_layer: 3 * stride,
      kv_stride: stride, ln_eps: layerNormEps, scale: 1 / Math.sqrt(C / H) };
  }

  /** Whether _decodeBatch serves this temperature (and the vocabulary): else the host samples every token. */
  _samplesOnGpu(temperature) {
    return Boolean(this.samplePlan) && sampleDecodeServes(temperature);
  }

  /** The decode plan of a batch's step `step` (the first: genPlan), recorded on first use. */
  _decodeSlot(step) {
    while (this.genSlots.length <= step) {
      const plan = new Plan(this.device, this.ops.pipelines, `decode ${this.genSlots.length}`);
      this._recordDecode(plan, 0);
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
   * between tokens. Recording the plan costs the host more than the GPU's work for the token (see
   * docs/lab/2026-11-28-decoding-on-the-gpu.md §35), so each position's record is kept after its first
   * use and put back from then on: generation revisits positions ctx/2..ctx-1 after every restart.
   */
  _placeDecodePlan(pos, plan = this.genPlan) {
    const kept = this.genPositions[pos];
    if (kept) return plan.restore(kept);
    plan.rerecord();
    this._recordDecode(plan, pos);
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
   * recorded while the GPU runs this one: the host's recording no longer waits for the logits (see
   * docs/lab/2026-11-28-decoding-on-the-gpu.md §35). Where the next call asks for another position (a
   * window restart), they are dropped unsubmitted.
   */
  async _decode(token, pos) {
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

  /**
   * Frees the decoder's GPU objects (not the trainer's). Returns a promise that settles when the work
   * begun in the background (the decode kernel's compile) is over: a Node process awaits it before it
   * exits, since Dawn aborts (std::system_error) where the process exits during a compile. A page need not wait.
   */
  destroy() {
    for (const p of [this.prefillPlan, this.samplePlan, this.tokensPlan, ...(this.genSlots ?? [])]) if (p) p.destroy();
    for (const b of this.buffers) b.destroy();
    this.buffers = [];
    return Promise.resolve(this.tokensReady);
  }
}
