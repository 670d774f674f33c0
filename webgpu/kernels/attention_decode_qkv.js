// A decoded token's block up to o_proj in one dispatch, one workgroup per head (the decode chain's
// first half, decode_row.js): the row (the residual stream after the block before: its row plus
// fc_out's bias and partials; in block 0, the token's embedding), ln1, head h's q, k and v, its attention, and o_proj's share of head
// h: the head's D inputs times o_proj's weight, a partial row that mlp_decode.js sums. Head h's
// attention reads only head h's q, k and v, so the workgroup that computes them (3·D outputs of the
// q/k/v product) can attend at once. The new key and value go to the KV cache (the q/k/v views of one
// buffer, row past) and are read back by the same workgroup after a storage barrier.
import { kernel, range } from "./kernel.js";
import { attendBytes, attendOne } from "./attention_decode.js";
import { DECODE_THREADS as THREADS, SUMMED_ROW_UNIFORMS, rowBindings, rowArrays, summedRow, embeddedRow, normalisedRow, rowDots, partialRow, scalarP, loadsFirst } from "./decode_row.js";

/** Bytes of workgroup memory for model width C, head size D, kvT keys (summedRow's scratch: attention's `sums`). */
const fusedBytes = (C, D, kvT) => attendBytes(kvT, THREADS) + rowArrays(C, false).bytes + 4 * 3 * D + 4 * D;

/**
 * Whether the kernel serves this shape on a device with workgroupBytes of workgroup memory: the
 * value lanes split the invocations by vec4s of the head, and one invocation writes each vec4 of the
 * head's q, k and v.
 */
export const attentionDecodeQkvFits = (C, H, kvT, workgroupBytes = 16384) =>
  C % 4 === 0 && (C / H) % 4 === 0 && THREADS % (C / H / 4) === 0 && 3 * (C / H / 4) <= THREADS
  && fusedBytes(C, C / H, kvT) <= workgroupBytes;

export const ATTENTION_DECODE_QKV_UNIFORMS = ["past", "w_off", "w_stride", "bias_off", "qkv_stride",
  "ln_w_off", "ln_b_off", "o_off", "parts_out_off", "wte_off", "wpe_off"].map((n) => [n, "u32"]).concat(SUMMED_ROW_UNIFORMS, [["scale", "f32"], ["ln_eps", "f32"]]);

// Base, P, Parts, Store: the row, as summedRow (decode_row.js) reads and stores it, or with embed
// (block 0) Tokens in Base's place: the row is the token's embedding (embeddedRow, wte and wpe at
// wte_off, wpe_off), and Parts is written only. P: the parameters, the q, k and v weights (D·H × C,
// PyTorch's [out, in]) at w_off + i·w_stride and their biases at bias_off + i·w_stride (i = 0, 1,
// 2), ln1's weight and bias at ln_w_off, ln_b_off, o_proj's weight (C × C) at o_off; qkv: the q, k
// and v views, qkv_stride floats apart, each (kvT, C): this token's row at past; Parts: head h's
// partial row of o_proj (C) at parts_out_off + h·C. Every offset and stride but bias_off a multiple
// of 4 floats (read as vec4s).
export function attentionDecodeQkv(C, D, kvT, embed = false) {
  const C4 = C / 4, D4 = D / 4;
  const attend = attendOne(D, kvT, { kRow: (j) => `KOFF + (${j}) * C4`, vRow: (j) => `2u * KOFF + (${j}) * C4`,
    store: (i, value) => `y[${i}] = ${value};`, kBuf: "qkv", vBuf: "qkv", threads: THREADS });
  // output o of the q/k/v product: o / D says which of the three, o % D its channel of head h
  const qkvRow = (o) => `(p.w_off + (${o} / D) * p.w_stride + (h * D + ${o} % D) * C) / 4u`;
  const qkvBias = (o) => scalarP(`p.bias_off + (${o} / D) * p.w_stride + h * D + ${o} % D`);
  const qkv = rowDots("qkv", 3 * D, C4, qkvRow, (o, value) => `head[${o}] = ${value};`, qkvBias);
  const row = embed ? embeddedRow(C4) : summedRow(C4, "sums"), ln = normalisedRow(C4, "p.ln_w_off", "p.ln_b_off");
  // o_proj's share of head h: its weight's columns h·D.. times the head's output
  const oProj = partialRow("o_proj", C, D4, (n) => `(p.o_off + ${n} * C + h * D) / 4u`, (i) => `y[${i}u]`, "(p.parts_out_off + h * C) / 4u");
  return kernel(`attention_decode_qkv_c${C}_d${D}_k${kvT}${embed ? "_embed" : ""}`, ATTENTION_DECODE_QKV_UNIFORMS,
    [...rowBindings("rw", embed ? ["Tokens", "read", "u32"] : undefined), ["qkv", "rw", "vec4f"]],
    /* wgsl */ `${attend.decls}${rowArrays(C, false).decls}
const D = ${D}u;
var<workgroup> head: array<f32, ${3 * D}>; // this head's q, k and v
var<workgroup> y: array<vec4f, D4>; // this head's attention output

@compute @workgroup_size(THREADS)
fn attention_decode_qkv(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let h = wid.x;
  let keys = p.past + 1u;
  let KOFF = p.qkv_stride / 4u;
${loadsFirst(row, ln, qkv, oProj)}
${row.math}
${ln.math}
${qkv.math}
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
  workgroupBarrier();${oProj.math}
}
`, "attention_decode_qkv");
}
