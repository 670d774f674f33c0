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
const HOISTED = 48; // vec4 loads of a row product an invocation issues at its kernel's start (see docs/lab/2026-11-29-decode-chain.md §45)

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
 * WGSL of the `loads` of a kernel's pieces ({loads, math}: summedRow, embeddedRow, normalisedRow, rowDots,
 * partialRow), for the kernel's start: none depends on what the kernel computes, so none waits behind a
 * barrier before its piece (see docs/lab/2026-11-29-decode-chain.md §45).
 */
export const loadsFirst = (...pieces) => pieces.map((piece) => piece.loads).join("\n");

// Where a row has at most DECODE_THREADS vec4s, invocation li holds column li: what a column needs from
// memory (the row's base and bias, a LayerNorm's weight and bias) can then be loaded at the kernel's start.
const oneColumnEach = (C4) => C4 <= DECODE_THREADS;

/**
 * A value of column c that a kernel may load at its start: {load (WGSL statements, empty where it may
 * not), value (a WGSL expression, with c in scope)}. at(c): the value's WGSL expression for column c.
 */
function earlyColumn(name, C4, at) {
  return oneColumnEach(C4) ? { load: `\n  let ${name} = ${at("min(li, C4 - 1u)")};`, value: name } : { load: "", value: at("c") };
}

// WGSL running `body` (statements, c in scope) for each vec4 column c of the row that invocation li takes
const columns = (C4, body) => (oneColumnEach(C4) ? `
  if (li < C4) {
    let c = li;${body}
  }` : `
  for (var c = li; c < C4; c += ${DECODE_THREADS}u) {${body}
  }`);

/**
 * WGSL (in a DECODE_THREADS kernel's entry point, uniform control flow; li, wid in scope) that puts
 * into workgroup array `xs` (vec4, C4) the row Base[x_base_off..] + (P[x_bias_off..] + Σ_p
 * Parts[x_parts_off + p·C..]) (p < x_nparts), the partials summed in order of p within each of G
 * groups (p = g, g + G, ...) and the groups in order: the same sum whatever the timing. Workgroup 0
 * stores it at Store[x_store_off..]. scratch: a workgroup vec4 array of summedRowScratch(C4) vec4s
 * (rowArrays' part_sums, or one the kernel shares). As {loads, math}, as rowDots': `loads` (for the
 * kernel's start) takes the column's base and bias.
 */
export function summedRow(C4, scratch = "part_sums") {
  const G = Math.max(1, Math.floor(DECODE_THREADS / C4));
  const base = earlyColumn("row_base", C4, (c) => `Base[p.x_base_off / 4u + ${c}]`);
  const bias = earlyColumn("row_bias", C4, (c) => `P[p.x_bias_off / 4u + ${c}]`);
  // a column's partials from p0: PART_UNROLL of them G apart, loaded before any is added
  const partLoads = (c) => /* wgsl */ `
      let last = p.x_nparts - 1u;
${range(PART_UNROLL).map((u) => `      let v${u} = Parts[p.x_parts_off / 4u + min(p0 + ${u * G}u, last) * C4 + ${c}];`).join("\n")}
${range(PART_UNROLL).map((u) => `      s += select(vec4f(0.0), v${u}, p0 + ${u * G}u < p.x_nparts);`).join("\n")}`;
  const finish = (s) => storedRow(`${base.value} + (${bias.value} + ${s})`);
  const loads = base.load + bias.load;
  if (G === 1) {
    return { loads, math: /* wgsl */ `${columns(C4, `
    var s = vec4f(0.0);
    for (var p0 = 0u; p0 < p.x_nparts; p0 += ${PART_UNROLL}u) {${partLoads("c")}
    }${finish("s")}`)}
  workgroupBarrier();` };
  }
  return { loads, math: /* wgsl */ `
  if (li < ${G}u * C4) {
    let c = li % C4;
    var s = vec4f(0.0);
    for (var p0 = li / C4; p0 < p.x_nparts; p0 += ${G * PART_UNROLL}u) {${partLoads("c")}
    }
    ${scratch}[li] = s;
  }
  workgroupBarrier();${columns(C4, finish(range(G).map((g) => `${scratch}[${g}u * C4 + c]`).join(" + ")))}
  workgroupBarrier();` };
}

/** WGSL: f32 element i of P (bound as vec4s). */
export const scalarP = (i) => `P[(${i}) / 4u][(${i}) % 4u]`;

// xs[c] = x, stored by workgroup 0 too
const storedRow = (x) => /* wgsl */ `
    let x = ${x};
    xs[c] = x;
    if (wid.x == 0u) { Store[p.x_store_off / 4u + c] = x; }`;

/**
 * WGSL putting into `xs` the embedding of the token at Tokens[0], at position p.past (wte at p.wte_off
 * and wpe at p.wpe_off of P), as embedding_forward computes it: block 0's row. Workgroup 0 stores it
 * at Store[x_store_off..], as summedRow. As {loads, math}, as summedRow's.
 */
export function embeddedRow(C4) {
  const row = earlyColumn("row_embedded", C4, (c) => `P[(p.wte_off + Tokens[0] * C) / 4u + ${c}] + P[(p.wpe_off + p.past * C) / 4u + ${c}]`);
  return { loads: row.load, math: `${columns(C4, storedRow(row.value))}
  workgroupBarrier();` };
}

/**
 * WGSL normalising workgroup row `xs` (vec4, C4) in place: LayerNorm with weight and bias at
 * P[w_off..], P[b_off..] (WGSL expressions), as layernorm_forward (its statistics, rowStatistics).
 * Needs kernel.js's workgroupSum(DECODE_THREADS) and p.ln_eps. As {loads, math}, as summedRow's:
 * `loads` takes the column's weight and bias.
 */
export function normalisedRow(C4, wOff, bOff) {
  const w = earlyColumn("ln_w", C4, (c) => `P[${wOff} / 4u + ${c}]`), b = earlyColumn("ln_b", C4, (c) => `P[${bOff} / 4u + ${c}]`);
  return { loads: w.load + b.load, math: /* wgsl */ `${rowStatistics({ at: (k) => `xs[(${k}) / 4u]`, count: "C", W: 4, threads: DECODE_THREADS })}${columns(C4, `
    xs[c] = (xs[c] - mean) * rstd * ${w.value} + ${b.value};`)}
  workgroupBarrier();` };
}

/**
 * WGSL of `count` outputs o = 0..count-1, each the dot product of workgroup row xs (vec4, C4) with
 * P's vec4s from weightRow(o) (a WGSL expression, o a u32 in scope): DOT_LANES invocations an output
 * take a strided share of the row each, every load of it issued at once, and meet in a fixed order in
 * `red` (workgroupSum's array); then store(o, value) runs once per output (WGSL statements), value
 * the dot plus bias(o) where given (a WGSL f32 expression). As {loads, math}: `loads` issues the
 * weights (and biases) of the first passes, up to HOISTED vec4s an invocation (names prefixed `name`;
 * needs li in scope, and what weightRow reads), for the kernel to place at its start, so that their
 * wait on memory overlaps the work before the product; `math` is the product (a later pass loads its
 * own). Uniform control flow.
 */
export function rowDots(name, count, C4, weightRow, store, bias = null) {
  const outs = DECODE_THREADS / DOT_LANES, steps = Math.ceil(C4 / DOT_LANES), passes = Math.ceil(count / outs);
  const early = Math.min(passes, Math.floor(HOISTED / steps));
  const lane = `${name}_lane`, w = (n, s) => `${name}_w${n}_${s}`;
  const weights = (n) => `
    let ${name}_o${n} = min(${n * outs}u + li / ${DOT_LANES}u, ${count - 1}u);
    let ${name}_row${n} = ${weightRow(`${name}_o${n}`)};${bias ? `\n    let ${name}_bias${n} = ${bias(`${name}_o${n}`)};` : ""}
${range(steps).map((s) => `    let ${w(n, s)} = P[${name}_row${n} + min(${lane} + ${s * DOT_LANES}u, C4 - 1u)];`).join("\n")}`;
  const pass = (n) => /* wgsl */ `
  {${n < early ? "" : weights(n)}
    let o = ${name}_o${n};
    var acc = vec4f(0.0);
${range(steps).map((s) => `    acc += select(vec4f(0.0), xs[min(${lane} + ${s * DOT_LANES}u, C4 - 1u)], ${lane} + ${s * DOT_LANES}u < C4) * ${w(n, s)};`).join("\n")}
    red[li] = (acc.x + acc.y) + (acc.z + acc.w);
    workgroupBarrier();
    if (${lane} == 0u && ${n * outs}u + li / ${DOT_LANES}u < ${count}u) {
      var dot = 0.0;
      for (var u = 0u; u < ${DOT_LANES}u; u++) { dot += red[li + u]; }
      ${store("o", bias ? `dot + ${name}_bias${n}` : "dot")}
    }
    workgroupBarrier();
  }`;
  return { loads: `  let ${lane} = li % ${DOT_LANES}u;${range(early).map(weights).join("")}`, math: range(passes).map(pass).join("") };
}

/**
 * WGSL of a partial row: for each output n < C, float n of the row at vec4 rowAt of Parts = the dot
 * product of `len4` vec4s of P from weightAt(n) (a WGSL expression: W's row n, at this workgroup's
 * slice of its inputs) with workgroup values vecAt(i) (a WGSL vec4 expression, i < len4 a constant).
 * One invocation an output, PART_ROUNDS outputs an invocation at a time, all their loads issued at
 * once (an output past C reads row C - 1). The outputs meet in `red` (workgroupSum's array) and go
 * out as vec4s: invocations writing different components of one vec4 would race (WGSL's memory
 * model). As {loads, math}, as rowDots': where one round of outputs covers the row, `loads` issues
 * all the weights (names prefixed `name`), else it is empty and `math` loads them round by round.
 * Needs li in scope; uniform control flow.
 */
export function partialRow(name, C, len4, weightAt, vecAt, rowAt) {
  const rounds = Math.min(PART_ROUNDS, Math.ceil(C / DECODE_THREADS)), once = C <= rounds * DECODE_THREADS;
  const n0 = once ? "0u" : "n0", w = (r, i) => `${name}_w${r}_${i}`;
  const first = (r) => `(${n0} + ${r * DECODE_THREADS}u)`; // the round's first output
  const weights = range(rounds).map((r) => `    let ${name}_at${r} = ${weightAt(`min(${first(r)} + li, ${C - 1}u)`)};
${range(len4).map((i) => `    let ${w(r, i)} = P[${name}_at${r} + ${i}u];`).join("\n")}`).join("\n");
  const sums = range(rounds).map((r) => `    {
      var acc = vec4f(0.0);
${range(len4).map((i) => `      acc += ${w(r, i)} * ${vecAt(i)};`).join("\n")}
      red[li] = (acc.x + acc.y) + (acc.z + acc.w);
    }
    workgroupBarrier();
    if (li < ${DECODE_THREADS / 4}u && ${first(r)} + 4u * li < ${C}u) {
      Parts[${rowAt} + ${first(r)} / 4u + li] = vec4f(red[4u * li], red[4u * li + 1u], red[4u * li + 2u], red[4u * li + 3u]);
    }
    workgroupBarrier();`).join("\n");
  if (once) return { loads: `\n${weights}`, math: `\n  {\n${sums}\n  }` };
  return { loads: "", math: /* wgsl */ `
  for (var n0 = 0u; n0 < ${C}u; n0 += ${rounds * DECODE_THREADS}u) {
${weights}
${sums}
  }` };
}
