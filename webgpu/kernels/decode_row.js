// WGSL pieces of the decode chain: a decoded token's block as two dispatches, each a workgroup's
// share of one row (attention_decode_qkv.js: ln1, q/k/v, attention and o_proj's share of a head, and
// in block 0 the embedding first; mlp_decode.js: ln2, fc_in and fc_out's share of a slice of the
// hidden units) and its head as a third (logits_decode.js). A product whose inputs are split among
// workgroups (o_proj over heads, fc_out over hidden slices) leaves one partial row per workgroup; the
// next dispatch starts from the row its residual stream holds plus the bias plus those partials,
// summed in a fixed order by every workgroup that needs the row (a few KB, from cache), and the first
// workgroup stores the sum: the next residual. So a block costs two dependent launches instead of
// four, and no workgroup waits on another within a dispatch.
import { range, workgroupSum } from "./kernel.js";
import { rowStatistics } from "./matvec.js";

export const DECODE_THREADS = 256;
export const DOT_LANES = 8; // invocations per output of a row product; DECODE_THREADS / DOT_LANES outputs a pass
const PART_UNROLL = 8; // partial rows a summing invocation loads at once
const PART_ROUNDS = 2; // outputs of a partial row an invocation loads at once

/** Uniforms of summedRow. */
export const SUMMED_ROW_UNIFORMS = ["x_base_off", "x_bias_off", "x_parts_off", "x_nparts", "x_store_off"].map((n) => [n, "u32"]);

/** vec4s of workgroup memory summedRow needs besides the row, for a row of C4 vec4s (a scratch it may share). */
const summedRowScratch = (C4) => (DECODE_THREADS >= 2 * C4 ? Math.floor(DECODE_THREADS / C4) * C4 : 0);

/**
 * Bindings 1..4 of a chain kernel, as summedRow reads and stores the row: its base (or what takes its
 * place), the parameters, the partial rows (parts: their access) and the store.
 */
export const rowBindings = (parts = "rw", base = ["Base", "read", "vec4f"]) =>
  [base, ["P", "read", "vec4f"], ["Parts", parts, "vec4f"], ["Store", "rw", "vec4f"]];

/**
 * A chain kernel's row of width C in workgroup memory: `decls` (the constants C and C4, workgroupSum's
 * red, the row xs, and summedRow's scratch `part_sums` unless shared: ownScratch false) and their
 * `bytes`.
 */
export function rowArrays(C, ownScratch = true) {
  const scratch = ownScratch ? summedRowScratch(C / 4) : 0;
  return {
    decls: /* wgsl */ `
const C = ${C}u;
const C4 = ${C / 4}u;
${workgroupSum(DECODE_THREADS)}
var<workgroup> xs: array<vec4f, C4>; // the row, then its LayerNorm
${scratch ? `var<workgroup> part_sums: array<vec4f, ${scratch}>;` : ""}`,
    bytes: 4 * C + 16 * scratch + 4 * DECODE_THREADS,
  };
}

/**
 * WGSL (in a DECODE_THREADS kernel's entry point, uniform control flow; li, wid in scope) that puts
 * into workgroup array `xs` (vec4, C4) the row Base[x_base_off..] + (P[x_bias_off..] + Σ_p
 * Parts[x_parts_off + p·C..]) (p < x_nparts), the partials summed in order of p within each of G
 * groups (p = g, g + G, ...) and the groups in order: the same sum whatever the timing. Workgroup 0
 * stores it at Store[x_store_off..]. scratch: a workgroup vec4 array of summedRowScratch(C4) vec4s
 * (rowArrays' part_sums, or one the kernel shares).
 */
export function summedRow(C4, scratch = "part_sums") {
  const G = Math.max(1, Math.floor(DECODE_THREADS / C4));
  // a column's partials from p0: PART_UNROLL of them G apart, loaded before any is added
  const partLoads = (c) => /* wgsl */ `
      let last = p.x_nparts - 1u;
${range(PART_UNROLL).map((u) => `      let v${u} = Parts[p.x_parts_off / 4u + min(p0 + ${u * G}u, last) * C4 + ${c}];`).join("\n")}
${range(PART_UNROLL).map((u) => `      s += select(vec4f(0.0), v${u}, p0 + ${u * G}u < p.x_nparts);`).join("\n")}`;
  const finish = (c, s) => storedRow(c, `Base[p.x_base_off / 4u + ${c}] + (P[p.x_bias_off / 4u + ${c}] + ${s})`);
  if (G === 1) {
    return /* wgsl */ `
  for (var c = li; c < C4; c += ${DECODE_THREADS}u) {
    var s = vec4f(0.0);
    for (var p0 = 0u; p0 < p.x_nparts; p0 += ${PART_UNROLL}u) {${partLoads("c")}
    }${finish("c", "s")}
  }
  workgroupBarrier();`;
  }
  return /* wgsl */ `
  if (li < ${G}u * C4) {
    let c = li % C4;
    var s = vec4f(0.0);
    for (var p0 = li / C4; p0 < p.x_nparts; p0 += ${G * PART_UNROLL}u) {${partLoads("c")}
    }
    ${scratch}[li] = s;
  }
  workgroupBarrier();
  for (var c = li; c < C4; c += ${DECODE_THREADS}u) {${finish("c", range(G).map((g) => `${scratch}[${g}u * C4 + c]`).join(" + "))}
  }
  workgroupBarrier();`;
}

// xs[c] = x, stored by workgroup 0 too
const storedRow = (c, x) => /* wgsl */ `
    let x = ${x};
    xs[${c}] = x;
    if (wid.x == 0u) { Store[p.x_store_off / 4u + ${c}] = x; }`;

/**
 * WGSL putting into `xs` the embedding of the token at Tokens[0], at position p.past (wte at p.wte_off
 * and wpe at p.wpe_off of P), as embedding_forward computes it: block 0's row. Workgroup 0 stores it
 * at Store[x_store_off..], as summedRow.
 */
export function embeddedRow() {
  return /* wgsl */ `
  for (var c = li; c < C4; c += ${DECODE_THREADS}u) {${storedRow("c", "P[(p.wte_off + Tokens[0] * C) / 4u + c] + P[(p.wpe_off + p.past * C) / 4u + c]")}
  }
  workgroupBarrier();`;
}

/**
 * WGSL normalising workgroup row `xs` (vec4, C4) in place: LayerNorm with weight and bias at
 * P[w_off..], P[b_off..] (WGSL expressions), as layernorm_forward (its statistics, rowStatistics).
 * Needs kernel.js's workgroupSum(DECODE_THREADS) and p.ln_eps.
 */
export function normalisedRow(wOff, bOff) {
  return /* wgsl */ `${rowStatistics({ at: (k) => `xs[(${k}) / 4u]`, count: "C", W: 4, threads: DECODE_THREADS })}
  for (var c = li; c < C4; c += ${DECODE_THREADS}u) { xs[c] = (xs[c] - mean) * rstd * P[${wOff} / 4u + c] + P[${bOff} / 4u + c]; }
  workgroupBarrier();`;
}

/**
 * WGSL of `count` outputs o = 0..count-1, each the dot product of workgroup row xs (vec4, C4) with
 * P's vec4s from weightRow(o) (a WGSL expression, o a u32 in scope): DOT_LANES invocations an output
 * take a strided share of the row each, every load of it issued at once, and meet in a fixed order in
 * `red` (workgroupSum's array); then store(o, dot) runs once per output (WGSL statements). Needs
 * li in scope; uniform control flow.
 */
export function rowDots(count, C4, weightRow, store) {
  const outs = DECODE_THREADS / DOT_LANES, steps = Math.ceil(C4 / DOT_LANES);
  const pass = (n) => /* wgsl */ `
  {
    let o = min(${n * outs}u + li / ${DOT_LANES}u, ${count - 1}u);
    let lane = li % ${DOT_LANES}u;
    let w_row = ${weightRow("o")};
${range(steps).map((s) => `    let w${s} = P[w_row + min(lane + ${s * DOT_LANES}u, C4 - 1u)];`).join("\n")}
    var acc = vec4f(0.0);
${range(steps).map((s) => `    acc += select(vec4f(0.0), xs[min(lane + ${s * DOT_LANES}u, C4 - 1u)], lane + ${s * DOT_LANES}u < C4) * w${s};`).join("\n")}
    red[li] = (acc.x + acc.y) + (acc.z + acc.w);
    workgroupBarrier();
    if (lane == 0u && ${n * outs}u + li / ${DOT_LANES}u < ${count}u) {
      var dot = 0.0;
      for (var u = 0u; u < ${DOT_LANES}u; u++) { dot += red[li + u]; }
      ${store("o", "dot")}
    }
    workgroupBarrier();
  }`;
  return range(Math.ceil(count / outs)).map(pass).join("");
}

/**
 * WGSL of a partial row: for each output n < C, float n of the row at vec4 rowAt of Parts = the dot
 * product of `len4` vec4s of P from weightAt(n) (a WGSL expression: W's row n, at this workgroup's
 * slice of its inputs) with workgroup values vecAt(i) (a WGSL vec4 expression, i < len4 a constant).
 * One invocation an output, PART_ROUNDS outputs an invocation at a time, all their loads issued at
 * once (an output past C reads row C - 1). The outputs meet in `red` (workgroupSum's array) and go
 * out as vec4s: invocations writing different components of one vec4 would race (WGSL's memory
 * model). Needs li in scope; uniform control flow.
 */
export function partialRow(C, len4, weightAt, vecAt, rowAt) {
  const rounds = Math.min(PART_ROUNDS, Math.ceil(C / DECODE_THREADS));
  const first = (r) => `(n0 + ${r * DECODE_THREADS}u)`; // the round's first output
  return /* wgsl */ `
  for (var n0 = 0u; n0 < ${C}u; n0 += ${rounds * DECODE_THREADS}u) {
${range(rounds).map((r) => `    let w_at${r} = ${weightAt(`min(${first(r)} + li, ${C - 1}u)`)};
${range(len4).map((i) => `    let w${r}_${i} = P[w_at${r} + ${i}u];`).join("\n")}`).join("\n")}
${range(rounds).map((r) => `    {
      var acc = vec4f(0.0);
${range(len4).map((i) => `      acc += w${r}_${i} * ${vecAt(i)};`).join("\n")}
      red[li] = (acc.x + acc.y) + (acc.z + acc.w);
    }
    workgroupBarrier();
    if (li < ${DECODE_THREADS / 4}u && ${first(r)} + 4u * li < ${C}u) {
      Parts[${rowAt} + ${first(r)} / 4u + li] = vec4f(red[4u * li], red[4u * li + 1u], red[4u * li + 2u], red[4u * li + 3u]);
    }
    workgroupBarrier();`).join("\n")}
  }`;
}
