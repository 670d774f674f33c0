// A decoded token's logits in one dispatch (the decode chain's end, decode_row.js): the row (the last
// block's residual stream plus fc_out's bias and partial rows), ln_f, and the tied head's product
// with the token embedding, OUTPUTS logits a workgroup, each workgroup summing and normalising the
// row itself (C values, cheap) so that none waits on another.
import { kernel } from "./kernel.js";
import { DECODE_THREADS as THREADS, DOT_LANES, SUMMED_ROW_UNIFORMS, rowBindings, rowArrays, summedRow, normalisedRow, rowDots, loadsFirst } from "./decode_row.js";

const OUTPUTS = THREADS / DOT_LANES; // logits a workgroup: one pass of rowDots

/** Workgroups [x, y] for a vocabulary of V. */
export const logitsDecodeGrid = (V) => [Math.ceil(V / OUTPUTS), 1];

/** Whether the kernel serves width C on a device with workgroupBytes of workgroup memory. */
export const logitsDecodeFits = (C, workgroupBytes = 16384) => C % 4 === 0 && rowArrays(C).bytes <= workgroupBytes;

export const LOGITS_DECODE_UNIFORMS = ["V", "ln_w_off", "ln_b_off", "w_off", "logits_off"]
  .map((n) => [n, "u32"]).concat(SUMMED_ROW_UNIFORMS, [["ln_eps", "f32"]]);

// Base, P, Parts, Store: the row, as summedRow (decode_row.js) reads and stores it; P: the parameters,
// ln_f's weight and bias at ln_w_off, ln_b_off, the token embedding (V × C) at w_off; logits: (V) at
// logits_off. Every offset but logits_off a multiple of 4 floats (read as vec4s).
export function logitsDecode(C) {
  const C4 = C / 4;
  const row = summedRow(C4), ln = normalisedRow(C4, "p.ln_w_off", "p.ln_b_off");
  const head = rowDots("head", OUTPUTS, C4, (o) => `(p.w_off + min(first + ${o}, p.V - 1u) * C) / 4u`,
    (o, dot) => `if (first + ${o} < p.V) { logits[p.logits_off + first + ${o}] = ${dot}; }`);
  return kernel(`logits_decode_c${C}`, LOGITS_DECODE_UNIFORMS, [...rowBindings("read"), ["logits", "rw"]], /* wgsl */ `${rowArrays(C).decls}

@compute @workgroup_size(${THREADS})
fn logits_decode(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let first = wid.x * ${OUTPUTS}u; // the workgroup's first logit
${loadsFirst(row, ln, head)}
${row.math}
${ln.math}${head.math}
}
`, "logits_decode");
}
