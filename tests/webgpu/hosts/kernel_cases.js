// Single-kernel cases for tests/webgpu/test_webgpu_kernels.py, independent of the host (browser or Node):
// each case names an op, its shapes and its inputs (raw little-endian bytes by name); each output
// comes back as a Float32Array. The Python side computes the references and compares.
import { Ops, SplitSums, adamwValues, normPartialCount } from "../../../webgpu/ops.js";
import { Plan } from "../../../webgpu/plan.js";
import { ATTENTION_LAYOUTS, attentionLayoutFor } from "../../../webgpu/kernels/attention.js";
import { recordLoraGradPartials, recordLoraGradsSum, recordLoraMergeInto, recordLoraMerge } from "../../../webgpu/lora.js";

/**
 * cases: [{id, op, ...shapes}], inputs: {name: Uint8Array} -> {"<id>_<output>": Float32Array}. A case
 * runs without subgroups unless it says `subgroups: true`: then at the width the device's probe found
 * (subgroups.js), which comes back as its output "width".
 */
export async function runKernelCases(device, cases, inputs) {
  const plain = new Ops(device, { subgroupWidth: 1 }), withSubgroups = new Ops(device);
  let ops = plain; // the case's, as it asks (the recorders below read it)
  const S = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
  const created = [];
  const make = (size) => { const b = device.createBuffer({ size: Math.max(16, size), usage: S }); created.push(b); return b; };
  const input = (name) => {
    const raw = inputs[name];
    if (!raw) throw new Error(`case input ${name} missing`);
    const b = make(raw.length);
    device.queue.writeBuffer(b, 0, raw);
    return b;
  };
  const empty = (n) => make(4 * n);
  // a decode chain case's row: x its base, stored 8 floats into `store`
  const chainRow = (c, store) => ({ ...c.row, base: input(`${c.id}_x`), store, storeOff: 8 });
  // split-K weight gradients' slabs, each product's at a multiple of 64 floats (256-byte binding offsets),
  // and `extra` floats of room after them
  const slabFloats = (p) => Math.ceil((p.splits * (p.M * p.N + (p.biasGrad ? p.M : 0))) / 64) * 64;
  const splitPartials = (products, extra = 0) => empty(Math.max(1, products.reduce((n, p) => n + slabFloats(p), 0) + extra));
  // n floats of buffer from byte offset
  async function read(buffer, n, offset = 0) {
    const staging = device.createBuffer({ size: Math.max(16, 4 * n), usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const enc = device.createCommandEncoder();
    enc.copyBufferToBuffer(buffer, offset, staging, 0, Math.max(16, 4 * n));
    device.queue.submit([enc.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    const out = new Float32Array(staging.getMappedRange().slice(0, 4 * n));
    staging.destroy();
    return out;
  }

  const run = {
    matmul(c, plan) {
      const len = c.M * c.N + (c.biasGrad ? c.M : 0), batches = c.batches ?? 1, cLen = c.cLen ?? len;
      const C = c.accumulate ? input(`${c.id}_C0`) : empty(cLen), G = c.gelu ? empty(cLen) : null;
      // a LayerNorm prologue: its output at A's offsets, (mean, rstd) of rows 0 .. aOff / K + M
      const lnLen = c.aOff + c.M * c.K, statsLen = 2 * (c.aOff / c.K + c.M);
      const ln = c.ln ? { ...c.ln, out: empty(lnLen), stats: empty(statsLen) } : null;
      // a cross-entropy prologue: the logits' gradient at A's offsets, each row's loss
      const ce = c.ce ? { ...c.ce, targets: input(`${c.id}_targets`), losses: empty(c.M), out: empty(c.M * c.K) } : null;
      ops.matmul(plan, c.form, { M: c.M, N: c.N, K: c.K, A: input(`${c.id}_A`), aOff: c.aOff, ln, ce, B: input(`${c.id}_B`), bOff: c.bOff,
        C, bias: c.bias ? input(`${c.id}_bias`) : null, biasOff: c.biasOff ?? 0, R: c.residual ? input(`${c.id}_R`) : null,
        accumulate: c.accumulate, biasGrad: c.biasGrad, gelu: G, geluGradOf: c.geluGrad ? input(`${c.id}_H`) : null,
        tile: c.tile, splits: c.splits ?? 1, partials: c.splits ? empty(batches * c.splits * len) : null,
        batches, kcat: c.kcat ?? 1, strides: c.strides ?? {}, vec: c.vec });
      return { C: [C, cLen], ...(G ? { G: [G, cLen] } : {}),
        ...(ln ? { LN: [ln.out, lnLen], LNS: [ln.stats, statsLen] } : {}), ...(ce ? { DL: [ce.out, c.M * c.K], losses: [ce.losses, c.M] } : {}) };
    },
    // several split-K backward_weight products into one C, their sums in one dispatch
    matmul_split_sums(c, plan) {
      const partials = splitPartials(c.products), C = empty(c.cLen), sums = new SplitSums();
      let partialsOff = 0;
      c.products.forEach((p, i) => {
        ops.matmul(plan, "backward_weight", { M: p.M, N: p.N, K: p.K, A: input(`${c.id}_A${i}`), B: input(`${c.id}_B${i}`), C, cOff: p.cOff,
          biasGrad: p.biasGrad, tile: p.tile, splits: p.splits, partials, partialsOff, sums });
        partialsOff += slabFloats(p);
      });
      ops.recordSplitSums(plan, sums);
      return { C: [C, c.cLen] };
    },
    // weight gradients dW = Aᵀ·B (+ db), each batched, on one tile in one dispatch (the trainer's deferred
    // ones): product p reads A input p.a and B input p.b (inputs that products share), all write C, the
    // split ones their slabs first, summed after
    matmul_group(c, plan) {
      const As = c.aInputs.map((n) => input(`${c.id}_${n}`)), Bs = c.bInputs.map((n) => input(`${c.id}_${n}`));
      const C = empty(c.cLen), partials = empty(c.partialsLen), sums = new SplitSums();
      const products = c.products.map(({ a, b, ...p }) => ({ ...p, A: As[a], B: Bs[b], C, biasGrad: true, tile: c.tile, partials, sums }));
      if (ops.matmulGroup(plan, products) === null) throw new Error(`${c.id}: the products do not share a dispatch`);
      ops.recordSplitSums(plan, sums);
      return { C: [C, c.cLen] };
    },
    layernorm(c, plan) {
      const { rows, C } = c, out = empty(rows * C), stats = empty(2 * rows), dx = input(`${c.id}_dx0`), grads = empty(c.nParams);
      const x = input(`${c.id}_x`), params = input(`${c.id}_params`), dout = input(`${c.id}_dout`);
      ops.layernormForward(plan, { rows, C, x, params, wOff: c.wOff, bOff: c.bOff, out, stats, eps: c.eps });
      // apart: dx[rows·C..] = dx[0..] + the input gradient (the trainer keeping a gradient's stages apart)
      const dxOut = c.apart ? rows * C : 0;
      ops.layernormBackward(plan, { rows, C, dout, x, stats, params, wOff: c.wOff, bOff: c.bOff, dx, accumulate: true, dxOut, grads });
      return { out: [out, rows * C], stats: [stats, 2 * rows], dx: [dx, rows * C + dxOut], grads: [grads, c.nParams] };
    },
    // split-K products left unsummed for the LayerNorm that reads them (the trainer's fc_out -> next
    // LayerNorm, fc_in's and q/k/v's input gradients -> LayerNorm backward): x = G·Wᵀ + bias + R split
    // into slabs, LayerNorm(x) summing them; dout = dH·W2 split likewise, the LayerNorm's dx from it
    layernorm_summed(c, plan) {
      const { rows, C, K, splits, tile } = c, params = input(`${c.id}_params`), partials = empty(splits * rows * C);
      const x = empty(rows * C), out = empty(rows * C), stats = empty(2 * rows), dout = empty(rows * C), dx = input(`${c.id}_dx0`);
      const forward = new SplitSums(), backward = new SplitSums();
      ops.matmul(plan, "forward", { M: rows, N: C, K, A: input(`${c.id}_G`), B: input(`${c.id}_W`), C: x, bias: params, biasOff: c.biasOff,
        R: input(`${c.id}_R`), tile, splits, partials, sums: forward });
      ops.layernormForward(plan, { rows, C, x, params, wOff: c.wOff, bOff: c.bOff, out, stats, eps: c.eps, sumIn: forward.regions[0] });
      ops.matmul(plan, "backward_input", { M: rows, N: C, K, A: input(`${c.id}_dH`), B: input(`${c.id}_W2`), C: dout, tile, splits, partials, sums: backward });
      ops.layernormBackwardInput(plan, { rows, C, dout, x, stats, params, wOff: c.wOff, dx, accumulate: true, sumIn: backward.regions[0] });
      return { x: [x, rows * C], out: [out, rows * C], stats: [stats, 2 * rows], dout: [dout, rows * C], dx: [dx, rows * C] };
    },
    // a Linear's input and weight gradients in one dispatch: dX = dY·W (times gelu'(H)), dW = dYᵀ·X (+ db)
    matmul_pair(c, plan) {
      const { R, Nout, Nin, splits } = c, dY = input(`${c.id}_dY`), dX = empty(R * Nin), dW = empty(Nout * Nin + Nout);
      const partials = splits > 1 ? empty(splits * (Nout * Nin + Nout)) : null;
      const dxSplit = c.dxSplits ? { splits: c.dxSplits, partials: empty(c.dxSplits * R * Nin) } : {};
      ops.matmulPair(plan, { M: R, N: Nin, K: Nout, A: dY, B: input(`${c.id}_W`), C: dX, geluGradOf: c.gelu ? input(`${c.id}_H`) : null, tile: c.tiles?.[0], ...dxSplit },
        { M: Nout, N: Nin, K: R, A: dY, B: input(`${c.id}_X`), C: dW, biasGrad: true, splits, partials, tile: c.tiles?.[1] });
      return { dX: [dX, R * Nin], dW: [dW, Nout * Nin + Nout] };
    },
    // two LayerNorms' parameter gradients in one dispatch, with the split-K sums of c.products there too
    layernorm_params(c, plan) {
      const { rows, C } = c, grads = empty(c.nParams), sums = new SplitSums();
      // c.slabs: room after the products' slabs for the second LayerNorm's (below), as the trainer keeps them
      const partials = splitPartials(c.products, (c.slabs ?? 0) * rows * C + 16);
      let partialsOff = 0;
      c.products.forEach((p, i) => {
        ops.matmul(plan, "backward_weight", { M: p.M, N: p.N, K: p.K, A: input(`${c.id}_A${i}`), B: input(`${c.id}_B${i}`), C: grads, cOff: p.cOff,
          biasGrad: p.biasGrad, tile: p.tile, splits: p.splits, partials, partialsOff, sums });
        partialsOff += slabFloats(p);
      });
      const jobs = c.wOffs.map((wOff, j) => ({ dout: input(`${c.id}_dout${j}`), x: input(`${c.id}_x${j}`), stats: input(`${c.id}_stats${j}`), wOff }));
      if (c.merge === undefined) {
        ops.layernormBackwardParams(plan, { rows, C, jobs, grads, sums });
        return { grads: [grads, c.nParams] };
      }
      // and job 1's input gradient, added to dx: in the same dispatch (merge) or the two as before;
      // c.slabs: job 1's dout = dH·W2 in that many split-K slabs, which the rows sum into dout
      let sumIn = null;
      if (c.slabs) {
        const backward = new SplitSums();
        jobs[1].dout = empty(rows * C);
        ops.matmul(plan, "backward_input", { M: rows, N: C, K: c.K, A: input(`${c.id}_dH`), B: input(`${c.id}_W2`), C: jobs[1].dout, tile: "64x64w",
          splits: c.slabs, partials, partialsOff, sums: backward });
        sumIn = backward.regions[0];
      }
      const dx = input(`${c.id}_dx0`), first = plan.entries.length, dxOut = c.apart ? rows * C : 0;
      ops.layernormBackwardBlock(plan, { input: { rows, C, ...jobs[1], params: input(`${c.id}_params`), dx, accumulate: true, dxOut, sumIn },
        params: { rows, C, jobs, grads, sums }, merge: c.merge });
      const dispatches = plan.entries.length - first;
      if (dispatches !== (c.merge ? 1 : 2)) throw new Error(`${c.id}: ${dispatches} dispatches with merge ${c.merge}`);
      return { grads: [grads, c.nParams], dx: [dx, rows * C + dxOut], dout1: [jobs[1].dout, rows * C] };
    },
    embedding(c, plan) {
      const { B, T, C, V } = c, rows = B * T, out = empty(rows * C), grads = input(`${c.id}_grads0`);
      const tokens = input(`${c.id}_tokens`), params = input(`${c.id}_params`);
      ops.embeddingForward(plan, { rows, T, C, past: 0, tokens, params, wteOff: c.wteOff, wpeOff: c.wpeOff, out });
      // the same embedding at positions past.., as the first LayerNorm computes it (ln_f's weights)
      const embedded = empty(rows * C), normed = empty(rows * C), stats = empty(2 * rows);
      ops.layernormForward(plan, { rows, C, x: embedded, params, wOff: c.lnfOff, bOff: c.lnfOff + C, out: normed, stats, eps: c.eps,
        embed: { T, past: c.past, tokens, wteOff: c.wteOff, wpeOff: c.wpeOff } });
      const partials = empty(normPartialCount(V, T, C));
      const lnf = { dout: input(`${c.id}_lnf_dout`), x: input(`${c.id}_lnf_x`), stats: input(`${c.id}_lnf_stats`), wOff: c.lnfOff, bOff: c.lnfOff + C };
      // the tied head's weight gradient left as split-K slabs (the trainer's deferred group), which the token sums start from
      let headSlabs = null;
      if (c.headSplits) {
        const sums = new SplitSums();
        ops.matmul(plan, "backward_weight", { M: V, N: C, K: rows, A: input(`${c.id}_head_dy`), B: input(`${c.id}_head_x`), C: grads, cOff: c.wteOff,
          tile: "64x64w", splits: c.headSplits, partials: empty(c.headSplits * V * C), sums });
        headSlabs = sums.regions[0];
      }
      const parts = ops.embeddingBackwardNorm(plan, { B, T, C, V, order: input(`${c.id}_order`), dres: input(`${c.id}_dres`), grads,
        wteOff: c.wteOff, wpeOff: c.wpeOff, lnf, n: c.nParams, partials, headSlabs });
      return { out: [out, rows * C], grads: [grads, c.nParams], partials: [partials, parts], embedded: [embedded, rows * C],
        normed: [normed, rows * C], stats: [stats, 2 * rows] };
    },
    cross_entropy(c, plan) {
      const logits = input(`${c.id}_logits`), losses = empty(c.rows);
      const record = c.backward ? ops.crossEntropyBackward : ops.crossEntropyForward;
      record.call(ops, plan, { rows: c.rows, V: c.V, logits, targets: input(`${c.id}_targets`), losses });
      return { losses: [losses, c.rows], logits: [logits, c.rows * c.V] };
    },
    attention(c, plan) {
      const { B, T, H, C } = c, n = B * T * C;
      const q = input(`${c.id}_q`), k = input(`${c.id}_k`), v = input(`${c.id}_v`), dout = input(`${c.id}_dout`);
      const out = empty(n), lse = empty(B * H * T);
      // c.wide: the layouts of more than COMPACT_ATTENTION_MAX_ROWS rows, which these small cases would not take
      const layout = (kind) => (c.wide ? ATTENTION_LAYOUTS[kind] : undefined);
      ops.attentionForward(plan, { B, T, kvT: T, past: 0, H, C, q, k, v, out, lse, layout: c.forwardLayout ?? layout("forward") });
      // the backward reads q, k, v from one buffer and writes dq, dk, dv to another, `stride` floats apart
      const stride = Math.ceil(n / 64) * 64, qkv = empty(3 * stride), dqkv = empty(3 * stride);
      ["q", "k", "v"].forEach((x, i) => device.queue.writeBuffer(qkv, 4 * i * stride, inputs[`${c.id}_${x}`]));
      ops.attentionBackward(plan, { B, T, H, C, qkv: { buffer: qkv, stride }, out, lse, dout, dqkv: { buffer: dqkv, stride }, layout: layout("backward") });
      const part = (i) => [dqkv, n, 4 * i * stride];
      return { out: [out, n], lse: [lse, B * H * T], dq: part(0), dk: part(1), dv: part(2) };
    },
    attention_cached(c, plan) {
      const { T, past, kvT, H, C } = c, out = empty(T * C), lse = empty(H * T);
      // tiled: attention.js's kernel for one query too (a layout asked for)
      const layout = c.tiled ? attentionLayoutFor("forward", C / H, H * T) : undefined;
      ops.attentionForward(plan, { B: 1, T, kvT, past, H, C, q: input(`${c.id}_q`), k: input(`${c.id}_k`), v: input(`${c.id}_v`), out, lse, layout });
      return { out: [out, T * C], lse: [lse, H * T] };
    },
    // the decode chain's kernels: the row from x (its base) and the parts buffer, stored 8 floats into `store`
    attention_decode_qkv(c, plan) {
      const { C, H, kvT, past, wOff, wStride, biasOff, lnW, lnB, oOff, qkvStride, partsOut } = c, qkv = input(`${c.id}_qkv`);
      const parts = input(`${c.id}_parts`), store = empty(8 + C);
      // c.row.embed: block 0's, x the token (the first of two u32s) instead of a row
      const row = c.row.embed ? { embed: { ...c.row.embed, tokens: input(`${c.id}_x`) }, store, storeOff: 8 } : chainRow(c, store);
      ops.attentionDecodeQkv(plan, { C, H, kvT, past, row, params: input(`${c.id}_P`),
        wOff, wStride, biasOff, ln: { wOff: lnW, bOff: lnB, eps: c.eps }, oOff, qkv: { buffer: qkv, stride: qkvStride }, parts, partsOutOff: partsOut });
      return { store: [store, 8 + C], qkv: [qkv, 3 * qkvStride], parts: [parts, inputs[`${c.id}_parts`].byteLength / 4] };
    },
    mlp_decode(c, plan) {
      const { C, inOff, inBiasOff, outOff, lnW, lnB, partsOut } = c, parts = input(`${c.id}_parts`), store = empty(8 + C);
      ops.mlpDecode(plan, { C, row: chainRow(c, store), params: input(`${c.id}_P`),
        ln: { wOff: lnW, bOff: lnB, eps: c.eps }, inOff, inBiasOff, outOff, parts, partsOutOff: partsOut });
      return { store: [store, 8 + C], parts: [parts, inputs[`${c.id}_parts`].byteLength / 4] };
    },
    logits_decode(c, plan) {
      const { C, V, wOff, lnW, lnB, logitsOff } = c, store = empty(8 + C), logits = empty(logitsOff + V);
      ops.logitsDecode(plan, { C, V, row: chainRow(c, store), params: input(`${c.id}_P`),
        ln: { wOff: lnW, bOff: lnB, eps: c.eps }, wOff, parts: input(`${c.id}_parts`), logits, logitsOff });
      return { store: [store, 8 + C], logits: [logits, logitsOff + V] };
    },
    adamw(c, plan) {
      const n = c.n, params = input(`${c.id}_params`), grads = input(`${c.id}_grads`), m = input(`${c.id}_m`), v = input(`${c.id}_v`);
      // the norm's partial sums of squares, as embeddingBackwardNorm leaves them
      const partials = input(`${c.id}_partials`), scal = empty(4);
      ops.adamwUpdate(plan, { n, params, grads, m, v, decay: input(`${c.id}_decay`), partials, losses: input(`${c.id}_losses`), scal,
        values: adamwValues(n, c.training, c.t, c.rows, c.parts), workgroups: c.workgroups });
      return { scal: [scal, 3], params: [params, n], m: [m, n], v: [v, n] };
    },
    // LoRA (webgpu/lora.js, kernels/lora.js): the merged copies of a target's weights in every block, the
    // row blocks' shares of an adapted Linear's gradients and their sum, their norm's partials, a merge into W
    lora_merge_into(c, plan) {
      const Wm = input(`${c.id}_Wm`);
      recordLoraMergeInto(ops, plan, { N: c.N, K: c.K, r: c.r, L: c.L, srcStride: c.srcStride, dstStride: c.dstStride, aStride: c.aStride,
        scale: c.scale, targets: c.targets, W: input(`${c.id}_W`), Wm, Ad: input(`${c.id}_Ad`) });
      return { Wm: [Wm, c.wmLen] };
    },
    lora_grad_partials(c, plan) {
      const UD = empty(c.udLen), Pt = empty(c.blocks * c.q), G = empty(c.q), partials = empty(c.parts);
      const blocks = recordLoraGradPartials(ops, plan, { M: c.M, K: c.K, N: c.N, r: c.r, q: c.q, scale: c.scale, xOff: c.xOff, dOff: c.dOff,
        targets: c.targets, X: input(`${c.id}_X`), Y: input(`${c.id}_Y`), Ad: input(`${c.id}_Ad`), UD, Pt });
      if (blocks !== c.blocks) throw new Error(`${c.id}: ${blocks} row blocks, the case expects ${c.blocks}`);
      const parts = recordLoraGradsSum(ops, plan, { n: c.q, blocks, Pt, G, partials });
      if (parts !== c.parts) throw new Error(`${c.id}: ${parts} norm partials, the case expects ${c.parts}`);
      return { UD: [UD, c.udLen], G: [G, c.q], partials: [partials, parts] };
    },
    lora_merge(c, plan) {
      const W = input(`${c.id}_W`);
      recordLoraMerge(ops, plan, { N: c.N, K: c.K, r: c.r, wOff: c.wOff, aOff: c.aOff, bOff: c.bOff, scale: c.scale, W, L: input(`${c.id}_L`) });
      return { W: [W, c.wLen] };
    },
  };

  const results = {};
  for (const c of cases) {
    ops = c.subgroups ? withSubgroups : plain;
    if (c.subgroups) results[`${c.id}_width`] = Float32Array.of(ops.subgroupWidth);
    // a shader that does not compile, or a dispatch the device refuses, fails the case with the device's
    // message, not as outputs left at zero
    device.pushErrorScope("validation");
    const plan = new Plan(device, ops.pipelines, c.id);
    const outputs = run[c.op](c, plan);
    plan.freeze();
    const enc = device.createCommandEncoder();
    const pass = enc.beginComputePass();
    plan.encode(pass);
    pass.end();
    device.queue.submit([enc.finish()]);
    const refused = await device.popErrorScope();
    if (refused) throw new Error(`kernel case ${c.id} (${c.op}): ${refused.message}`);
    for (const [name, [buf, count, offset]] of Object.entries(outputs)) results[`${c.id}_${name}`] = await read(buf, count, offset);
    plan.destroy();
  }
  for (const b of created) b.destroy();
  return results;
}
