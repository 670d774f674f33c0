// The attention probabilities of one sequence on a Trainer (the page's attention view). The
// FlashAttention-style forward keeps only each row's log-sum-exp, so the probabilities are
// recomputed from the q, k it leaves: the eval forward runs with the sequence as batch row 0, row
// 0's q and k of every layer are read back, and softmax(q kᵀ / √D) with the causal mask is taken
// here, in double (python_ref/look_inside.py attention_weights). Nothing is recorded into the
// trainer's plans; the read-back buffer lives for one call.

/** [buffer, byte offset] of an activation: a view {buffer, offset} of the shared qkv buffer, or a buffer. */
const located = (a) => (a.buffer ? [a.buffer, a.offset] : [a, 0]);

/** Row 0's q and k (T,C) of every layer after the eval forward, as one Float32Array (L, 2, T, C). */
export async function readQK(trainer, T) {
  const { nLayer: L, dModel: C } = trainer.cfg, bytes = 4 * T * C;
  const staging = trainer.device.createBuffer({ label: "attention readback", size: 2 * L * bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  try {
    const enc = trainer.device.createCommandEncoder({ label: "attention readback" });
    trainer.act.layers.forEach((a, l) => {
      for (const [i, act] of [a.q, a.k].entries()) enc.copyBufferToBuffer(...located(act), staging, (2 * l + i) * bytes, bytes);
    });
    trainer.device.queue.submit([enc.finish()]);
    try {
      await staging.mapAsync(GPUMapMode.READ);
    } catch (e) {
      throw new Error(`reading the attention's q and k back from the GPU failed (${e.name}${e.message ? `: ${e.message}` : ""}); the device may have been lost`);
    }
    return new Float32Array(staging.getMappedRange().slice(0));
  } finally {
    staging.destroy();
  }
}

/** tokens (1..ctx bytes) -> Float32Array (L, H, T, T): how much query i attends to key j, 0 for j > i. */
/**
 * Query i's scores against keys 0..i in head h, scores[j] = q_i·k_j · scale (q, k: (T,C) of one layer), in
 * double; returns their maximum. The attention view's weights and the training view's entropy both start here.
 */
export function causalScores(q, k, { C, D, h, i, scale }, scores) {
  let max = -Infinity;
  for (let j = 0; j <= i; j++) {
    let s = 0;
    for (let d = 0; d < D; d++) s += q[i * C + h * D + d] * k[j * C + h * D + d];
    scores[j] = s * scale;
    if (scores[j] > max) max = scores[j];
  }
  return max;
}

export async function attentionWeights(trainer, tokens) {
  const { nLayer: L, nHead: H, dModel: C, ctx } = trainer.cfg, T = tokens.length, D = C / H;
  if (T < 1 || T > ctx) throw new Error(`the attention view takes 1..${ctx} bytes (the context), got ${T}`);
  // row 0 is the sequence; the positions after it and the other rows are zeros, which the causal
  // mask keeps out of row 0's first T positions
  const rows = trainer.tr.batch * ctx, x = new Uint32Array(rows);
  x.set(tokens);
  await trainer.lossOn(x, new Uint32Array(rows));
  const qk = await readQK(trainer, T);
  const out = new Float32Array(L * H * T * T), scale = 1 / Math.sqrt(D), scores = new Float64Array(T);
  for (let l = 0; l < L; l++) {
    const q = qk.subarray(2 * l * T * C, (2 * l + 1) * T * C), k = qk.subarray((2 * l + 1) * T * C, (2 * l + 2) * T * C);
    for (let h = 0; h < H; h++) {
      const P = out.subarray((l * H + h) * T * T, (l * H + h + 1) * T * T);  // (T,T)
      for (let i = 0; i < T; i++) {
        const max = causalScores(q, k, { C, D, h, i, scale }, scores);
        let sum = 0;
        for (let j = 0; j <= i; j++) sum += (scores[j] = Math.exp(scores[j] - max));
        for (let j = 0; j <= i; j++) P[i * T + j] = scores[j] / sum;
      }
    }
  }
  return out;
}
