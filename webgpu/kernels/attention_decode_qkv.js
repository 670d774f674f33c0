// A decoded token's ln1, q/k/v product and attention in one dispatch, one workgroup per head. Head h's
// attention reads only head h's q, k and v, so the workgroup that computes them (3·D outputs of the
// q/k/v product) can attend at once, where the unfused token waits for a dispatch boundary between
// the product (matvec.js, with the LayerNorm prologue) and attention_decode.js: one dependent launch
// fewer a block. Each workgroup normalises the row itself (C values, cheap); the first also stores
// what layernorm_forward would, as the prologue does. The new key and value go to the KV cache (the
// q/k/v views of one buffer, row past) and are read back by the same workgroup after a storage barrier.
import { kernel, range, workgroupSum } from "./kernel.js";
import { rowStatistics } from "./matvec.js";
import { attendBytes, attendOne } from "./attention_decode.js";

const THREADS = 256; // whatever the window: the product's passes, not the attention's tree, are the longer part
const LANES = 8; // invocations per q/k/v output; THREADS / LANES outputs a pass

/** Bytes of workgroup memory for model width C, head size D, kvT keys. */
const fusedBytes = (C, D, kvT) => attendBytes(kvT, THREADS) + 4 * C + 4 * 3 * D + 4 * THREADS;

/** Whether the fused kernel serves this shape on a device with workgroupBytes of workgroup memory. */
export const attentionDecodeQkvFits = (C, H, kvT, workgroupBytes = 16384) =>
  C % 4 === 0 && (C / H) % 4 === 0 && THREADS % (C / H / 4) === 0 && fusedBytes(C, C / H, kvT) <= workgroupBytes;

export const ATTENTION_DECODE_QKV_UNIFORMS = ["C", "H", "kvT", "past", "x_off", "w_off", "w_stride", "bias_off", "qkv_stride",
  "ln_w_off", "ln_b_off", "ln_stats_off"].map((n) => [n, "u32"]).concat([["scale", "f32"], ["ln_eps", "f32"]]);

// x: the row (C) at x_off; P: the parameters, the q, k and v weights (D·H × C, PyTorch's [out, in]) at
// w_off + i·w_stride and their biases at bias_off + i·w_stride (i = 0, 1, 2), ln1's weight and bias at
// ln_w_off, ln_b_off; qkv: the q, k and v views, qkv_stride floats apart, each (kvT, C): this token's
// row at past; out: (1, C); lse: (H); LN, LNS: ln1's output (C) at x_off and (mean, rstd) at ln_stats_off.
// Every offset and stride a multiple of 4 floats (read as vec4s).
export function attentionDecodeQkv(C, D, kvT) {
  const C4 = C / 4, D4 = D / 4, outs = THREADS / LANES;
  const steps = Math.ceil(C4 / LANES), passes = Math.ceil((3 * D) / outs);
  const attend = attendOne(D, kvT, { kRow: (j) => `KOFF + (${j}) * C4`, vRow: (j) => `2u * KOFF + (${j}) * C4`,
    outRow: "0u", lseAt: "h", kBuf: "qkv", vBuf: "qkv", threads: THREADS });
  // a pass: outputs o = pass·OUTS + slot, each lane's share of the dot product over xn, its steps
  // loaded at once (constant indices: a step past C4 reads the last vec4 and weighs it 0)
  const pass = (n) => /* wgsl */ `
  {
    let o = min(${n * outs}u + slot, ${3 * D - 1}u);
    let w_row = (p.w_off + (o / D) * p.w_stride + (h * D + o % D) * C) / 4u;
${range(steps).map((s) => `    let w${s} = P[w_row + min(lane + ${s * LANES}u, C4 - 1u)];`).join("\n")}
    var acc = vec4f(0.0);
${range(steps).map((s) => `    acc += select(vec4f(0.0), xn[min(lane + ${s * LANES}u, C4 - 1u)], lane + ${s * LANES}u < C4) * w${s};`).join("\n")}
    red[li] = (acc.x + acc.y) + (acc.z + acc.w);
    workgroupBarrier();
    if (lane == 0u && ${n * outs}u + slot < ${3 * D}u) {
      let bias_at = p.bias_off + (o / D) * p.w_stride + h * D + o % D;
      var dot_o = 0.0;
      for (var u = 0u; u < LANES; u++) { dot_o += red[li + u]; }
      head[o] = dot_o + P[bias_at / 4u][bias_at % 4u];
    }
    workgroupBarrier();
  }`;
  return kernel(`attention_decode_qkv_c${C}_d${D}_k${kvT}`, ATTENTION_DECODE_QKV_UNIFORMS,
    [["X", "read", "vec4f"], ["P", "read", "vec4f"], ["qkv", "rw", "vec4f"], ["out", "rw", "vec4f"], ["lse", "rw"],
      ["LN", "rw", "vec4f"], ["LNS", "rw"]], /* wgsl */ `${attend.decls}
const C = ${C}u;
const C4 = ${C4}u;
const D = ${D}u;
const LANES = ${LANES}u;
${workgroupSum(THREADS)}
var<workgroup> xn: array<vec4f, C4>; // LayerNorm(x)
var<workgroup> head: array<f32, ${3 * D}>; // this head's q, k and v

@compute @workgroup_size(THREADS)
fn attention_decode_qkv(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let h = wid.x;
  let keys = p.past + 1u;
  let KOFF = p.qkv_stride / 4u;
  // ln1 of the row${rowStatistics({ at: (k) => `X[(p.x_off + ${k}) / 4u]`, count: "C", W: 4, threads: THREADS })}
  for (var k = li; k < C4; k += THREADS) {
    let y = (X[p.x_off / 4u + k] - mean) * rstd * P[p.ln_w_off / 4u + k] + P[p.ln_b_off / 4u + k];
    xn[k] = y;
    if (h == 0u) { LN[p.x_off / 4u + k] = y; }
  }
  if (h == 0u && li == 0u) { LNS[p.ln_stats_off] = mean; LNS[p.ln_stats_off + 1u] = rstd; }
  workgroupBarrier();
  // q, k and v of head h: output o (o / D: which, o % D: its channel of the head), LANES lanes each
  let lane = li % LANES;
  let slot = li / LANES;
${range(passes).map(pass).join("\n")}
  // into the KV cache at row past (q too, where the unfused product leaves it), then read back
  if (li < ${3 * D4}u) {
    let which = li / D4;
    let i = li % D4;
    qkv[which * KOFF + p.past * C4 + h * D4 + i] = vec4f(head[4u * li], head[4u * li + 1u], head[4u * li + 2u], head[4u * li + 3u]);
  }
  storageBarrier();
  var qr: array<vec4f, D4>;
${range(D4).map((i) => `  qr[${i}] = vec4f(head[${4 * i}u], head[${4 * i + 1}u], head[${4 * i + 2}u], head[${4 * i + 3}u]) * p.scale;`).join("\n")}
${attend.body}
}
`, "attention_decode_qkv");
}
