// A decoded token's MLP in one dispatch, one workgroup per slice of the hidden units (the decode
// chain's second half, decode_row.js): the row (the residual stream plus o_proj's bias and the heads'
// partial rows), ln2, fc_in and GELU for the slice's hidden units, and fc_out's share of them: the
// slice's hidden values times fc_out's weight columns, a partial row that the next block's first
// dispatch (or the head's) sums. fc_in's outputs of a slice need the whole row only, and fc_out's
// share of a slice needs those outputs only, so no workgroup waits on another.
import { kernel } from "./kernel.js";
import { GELU_FNS } from "./gelu.js";
import { DECODE_THREADS as THREADS, SUMMED_ROW_UNIFORMS, rowBindings, rowArrays, summedRow, normalisedRow, rowDots, partialRow, scalarP, loadsFirst } from "./decode_row.js";

/** Hidden units a workgroup takes for model width C (4·C of them): 32, or 16 where 32 does not divide them (C is a multiple of 4). */
export const mlpDecodeSlice = (C) => [32, 16].find((s) => (4 * C) % s === 0);

/** Workgroups [x, y]: one per slice. */
export const mlpDecodeGrid = (C) => [(4 * C) / mlpDecodeSlice(C), 1];

/** Whether the kernel serves width C on a device with workgroupBytes of workgroup memory. */
export const mlpDecodeFits = (C, workgroupBytes = 16384) => C % 4 === 0
  && rowArrays(C).bytes + 4 * mlpDecodeSlice(C) <= workgroupBytes;

export const MLP_DECODE_UNIFORMS = ["ln_w_off", "ln_b_off", "in_off", "in_bias_off", "out_off", "parts_out_off"]
  .map((n) => [n, "u32"]).concat(SUMMED_ROW_UNIFORMS, [["ln_eps", "f32"]]);

// Base, P, Parts, Store: the row, as summedRow (decode_row.js) reads and stores it; P: the parameters,
// ln2's weight and bias at ln_w_off, ln_b_off, fc_in's weight (4C × C, PyTorch's [out, in]) at in_off and
// bias at in_bias_off, fc_out's weight (C × 4C) at out_off; Parts: slice j's partial row of fc_out (C)
// at parts_out_off + j·C. Every offset but in_bias_off a multiple of 4 floats (read as vec4s).
export function mlpDecode(C) {
  const C4 = C / 4, S = mlpDecodeSlice(C);
  const row = summedRow(C4), ln = normalisedRow(C4, "p.ln_w_off", "p.ln_b_off");
  const fcIn = rowDots("fc_in", S, C4, (o) => `(p.in_off + (first + ${o}) * C) / 4u`, (o, value) => `hidden[${o}] = gelu(${value});`,
    (o) => scalarP(`p.in_bias_off + first + ${o}`));
  // fc_out's share of the slice: its weight's columns first.. times the slice's hidden values
  const fcOut = partialRow("fc_out", C, S / 4, (n) => `(p.out_off + ${n} * 4u * C + first) / 4u`,
    (i) => `vec4f(hidden[${4 * i}u], hidden[${4 * i + 1}u], hidden[${4 * i + 2}u], hidden[${4 * i + 3}u])`, "(p.parts_out_off + wid.x * C) / 4u");
  return kernel(`mlp_decode_c${C}`, MLP_DECODE_UNIFORMS, rowBindings(), /* wgsl */ `${GELU_FNS}${rowArrays(C).decls}
const S = ${S}u; // hidden units a workgroup
var<workgroup> hidden: array<f32, S>; // gelu(fc_in) of the slice

@compute @workgroup_size(${THREADS})
fn mlp_decode(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let first = wid.x * S; // the slice's first hidden unit
${loadsFirst(row, ln, fcIn, fcOut)}
${row.math}
${ln.math}${fcIn.math}${fcOut.math}
}
`, "mlp_decode");
}
