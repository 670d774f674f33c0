// Recording helpers: one method per layer operation, named as its C++ function in wasm/src (which
// may record several kernels), turning shapes and buffers into a kernel's uniforms and workgroup
// counts. The trainer and the kernel tests both record through these. A method and the kernel it
// records may share a name (geluForward): inside a method the name is the imported kernel.
import { grid1d } from "./kernels/kernel.js";
import { matmulKernel, matmulGrid, chooseTile, splitChunk, matmulSplitFinal, MATMUL_FLAGS } from "./kernels/matmul.js";
import { layernormKernels, layernormBackwardParams, layernormBackwardParamsWorkgroups } from "./kernels/layernorm.js";
import { geluForward, geluBackward } from "./kernels/gelu.js";
import { embeddingForward, embeddingBackwardTokens, embeddingBackwardPositions } from "./kernels/embedding.js";
import { crossEntropyForward, crossEntropyBackward, crossEntropyWorkgroups, meanLoss } from "./kernels/cross_entropy.js";
import { attentionForward, attentionBackwardKV, attentionBackwardQ, attentionLayout, attentionGrid } from "./kernels/attention.js";
import { gradGlobalNormPartials, clipCoefficient, adamwUpdate, NORM_PARTIALS } from "./kernels/adamw.js";
import { PipelineCache } from "./plan.js";

const matmulKernels = new Map();
function matmulFor(form, tile, split, kcat) {
  const key = `${form}_${tile}_${split}_${kcat}`;
  if (!matmulKernels.has(key)) matmulKernels.set(key, matmulKernel(form, tile, split, kcat));
  return matmulKernels.get(key);
}
const attentionKernels = new Map();
function attentionFor(D) {
  if (!attentionKernels.has(D)) {
    const layout = attentionLayout(D);
    attentionKernels.set(D, { layout, fwd: attentionForward(D, layout), q: attentionBackwardQ(D, layout), kv: attentionBackwardKV(D, layout) });
  }
  return attentionKernels.get(D);
}

const cachesByDevice = new WeakMap(); // pipelines are shared by every trainer of a device

export class Ops {
  constructor(device) {
    this.device = device;
    if (!cachesByDevice.has(device)) cachesByDevice.set(device, new PipelineCache(device));
    this.pipelines = cachesByDevice.get(device);
    // bound where a kernel's optional input (bias, residual) is unused
    this.dummy = device.createBuffer({ label: "unused binding", size: 16, usage: GPUBufferUsage.STORAGE });
  }

  /**
   * C[cOff..] (M,N) = op(A)·op(B) (+ bias) (+ C if accumulate) (+ R); offsets in elements; form: a
   * key of MATMUL_FORMS (forward, backward_input, backward_weight).
   * biasGrad (backward_weight only): also C[cOff + M·N + m] = Σ_k A[k, m], the Linear's bias gradient.
   * splits > 1: split-K through `partials` (batches·splits·(M·N [+ M]) floats), see matmulKernel.
   * batches > 1: that many products in one dispatch, operand i at offset + i·stride (strides:
   * {a, b, c, bias}); kcat > 1: the sum of kcat products (strides {a, b}) into one C.
   */
  matmul(plan, form, { M, N, K, A, aOff = 0, B, bOff = 0, C, cOff = 0, bias = null, biasOff = 0, R = null, rOff = 0,
    accumulate = false, biasGrad = false, tile = chooseTile(form, M, N), splits = 1, partials = null,
    batches = 1, kcat = 1, strides = {} }) {
    if (biasGrad && (form !== "backward_weight" || bias || accumulate || R)) throw new Error("biasGrad: a plain backward_weight product only");
    if (batches > 1 && (kcat > 1 || R || (splits > 1 && (bias || accumulate)))) throw new Error("matmul batches: no kcat, residual, or split-K epilogue");
    const flags = (bias ? MATMUL_FLAGS.bias : 0) | (accumulate ? MATMUL_FLAGS.accumulate : 0) | (R ? MATMUL_FLAGS.residual : 0)
      | (biasGrad ? MATMUL_FLAGS.biasGrad : 0);
    const grid = matmulGrid(M, N, tile), len = M * N + (biasGrad ? M : 0);
    const { a: a_zs = 0, b: b_zs = 0, c: c_zs = 0, bias: bias_zs = 0 } = strides;
    const uniforms = { M, N, K, a_off: aOff, b_off: bOff, c_off: cOff, bias_off: biasOff, r_off: rOff, flags,
      k_chunk: K * kcat, len, splits: 1, kcat, a_zs, b_zs, c_zs, bias_zs };
    if (splits === 1) {
      return plan.add(matmulFor(form, tile, false, kcat > 1), uniforms, [A, B, bias ?? this.dummy, R ?? this.dummy, C], [grid[0], grid[1], batches]);
    }
    plan.add(matmulFor(form, tile, true, kcat > 1), { ...uniforms, splits, k_chunk: splitChunk(K * kcat, splits, tile) },
      [A, B, this.dummy, this.dummy, partials], [grid[0], grid[1], batches * splits]);
    return plan.add(matmulSplitFinal, { len, N, splits, c_off: cOff, bias_off: biasOff, r_off: rOff, flags: flags & ~MATMUL_FLAGS.biasGrad, batches, c_zs },
      [partials, bias ?? this.dummy, R ?? this.dummy, C], grid1d(Math.ceil((batches * len) / 256)));
  }

  layernormForward(plan, { rows, C, x, params, wOff, bOff, out, stats, eps }) {
    const k = layernormKernels(C);
    return plan.add(k.forward, { rows, C, w_off: wOff, b_off: bOff, eps }, [x, params, out, stats], grid1d(k.workgroups(rows)));
  }

  /**
   * dx (+)= LayerNorm backward; then the weight and bias gradients into grads (they must lie
   * contiguously, bias right after weight, as in the manifest).
   */
  layernormBackward(plan, { rows, C, dout, x, stats, params, wOff, bOff, dx, accumulate, grads }) {
    if (bOff !== wOff + C) throw new Error("LayerNorm bias gradient must follow its weight gradient");
    const k = layernormKernels(C);
    plan.add(k.backwardInput, { rows, C, w_off: wOff, flags: accumulate ? 1 : 0 }, [dout, x, stats, params, dx], grid1d(k.workgroups(rows)));
    plan.add(layernormBackwardParams, { rows, C, w_off: wOff }, [dout, x, stats, grads], [layernormBackwardParamsWorkgroups(C), 1]);
  }

  geluForward(plan, { n, h, g }) { return plan.add(geluForward, { n }, [h, g], grid1d(Math.ceil(n / 256))); }
  geluBackward(plan, { n, h, dg }) { return plan.add(geluBackward, { n }, [h, dg], grid1d(Math.ceil(n / 256))); }

  embeddingForward(plan, { rows, T, C, past, tokens, params, wteOff, wpeOff, out }) {
    return plan.add(embeddingForward, { rows, T, C, past, wte_off: wteOff, wpe_off: wpeOff }, [tokens, params, out], grid1d(Math.ceil((rows * C) / 256)));
  }

  embeddingBackward(plan, { B, T, C, V, order, dres, grads, wteOff, wpeOff }) {
    plan.add(embeddingBackwardTokens, { V, C, wte_off: wteOff }, [order, dres, grads], grid1d(Math.ceil((V * C) / 256)));
    plan.add(embeddingBackwardPositions, { B, T, C, wpe_off: wpeOff }, [dres, grads], grid1d(Math.ceil((T * C) / 256)));
  }

  /** losses: (rows) per-row losses; lossOut (optional): their mean. */
  crossEntropyForward(plan, { rows, V, logits, targets, losses, lossOut = null }) {
    plan.add(crossEntropyForward, { rows, V }, [logits, targets, losses], grid1d(crossEntropyWorkgroups(rows)));
    if (lossOut) plan.add(meanLoss, { n: rows }, [losses, lossOut], [1, 1]);
  }

  /** As crossEntropyForward, and logits overwritten with d(mean loss)/d(logits) (one fused kernel). */
  crossEntropyBackward(plan, { rows, V, logits, targets, losses, lossOut = null }) {
    plan.add(crossEntropyBackward, { rows, V, scale: 1 / rows }, [logits, targets, losses], grid1d(crossEntropyWorkgroups(rows)));
    if (lossOut) plan.add(meanLoss, { n: rows }, [losses, lossOut], [1, 1]);
  }

  attentionForward(plan, { B, T, kvT, past, H, C, q, k, v, out, lse }) {
    const D = C / H, A = attentionFor(D);
    return plan.add(A.fwd, { T, kvT, past, H, C, scale: 1 / Math.sqrt(D) }, [q, k, v, out, lse], attentionGrid(T, B * H, A.layout));
  }

  attentionBackward(plan, { B, T, H, C, q, k, v, out, lse, dout, delta, dq, dk, dv }) {
    const D = C / H, A = attentionFor(D), scale = 1 / Math.sqrt(D);
    const grid = attentionGrid(T, B * H, A.layout);
    plan.add(A.q, { T, H, C, scale }, [q, k, v, dout, out, lse, delta, dq], grid); // also writes delta, which dK/dV reads
    plan.add(A.kv, { T, H, C, scale }, [q, k, v, dout, lse, delta, dk, dv], grid);
  }

  /** scal = [global norm, clip coefficient] of all n gradients (what clip_gradients would scale by). */
  gradGlobalNorm(plan, { n, grads, partials, scal, clip }) {
    plan.add(gradGlobalNormPartials, { n }, [grads, partials], [NORM_PARTIALS, 1]);
    plan.add(clipCoefficient, { parts: NORM_PARTIALS, clip }, [partials, scal], [1, 1]);
  }

  /** Returns the dispatch index, whose step-dependent uniforms adamwValues() fills each step. */
  adamwUpdate(plan, { n, params, grads, m, v, decay, scal, values }) {
    return plan.add(adamwUpdate, values, [params, grads, m, v, decay, scal], grid1d(Math.ceil(n / 256)));
  }
}

export { NORM_PARTIALS };

/** AdamW's uniforms for step t (1-based): bias corrections in binary64, as PyTorch computes them. */
export function adamwValues(n, tr, t) {
  return {
    n, decay_factor: 1 - tr.lr * tr.weightDecay, beta1: tr.beta1, beta2: tr.beta2,
    one_minus_beta1: 1 - tr.beta1, one_minus_beta2: 1 - tr.beta2,
    step_size: tr.lr / (1 - tr.beta1 ** t), bc2_sqrt: Math.sqrt(1 - tr.beta2 ** t), eps: tr.eps,
  };
}
