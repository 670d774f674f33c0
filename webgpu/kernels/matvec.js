// One row times a weight matrix: the forward product C (1,N) = A(1,K)·B(N,K)ᵀ of a decoded token, with
// matmul.js's forward epilogues (bias, accumulate, residual, GELU) and its LayerNorm prologue, on the
// same uniforms and bindings, so Ops.matmul takes it for any unsplit forward product of one row.
// A tile of matmul.js spends all but one of its BM rows on nothing here, and puts only N/BN workgroups
// to work (12 at massive's C = 384), each running its K-loop alone. Here each output is one dot
// product of K: LANES invocations take a strided share of it each, reading B's row n (PyTorch's
// [out, in] weight: contiguous along K) in runs, and their partial sums meet in a fixed tree, so the
// result does not depend on timing. COLS outputs a workgroup: N/COLS workgroups at work.
import { kernel, range, workgroupSum } from "./kernel.js";
import { GELU_FNS } from "./gelu.js";
import { MATMUL_UNIFORMS, MATMUL_BUFFERS, LN_UNIFORMS, LN_BUFFERS, vecBuffers } from "./matmul.js";

const LANES = 32; // invocations per output: a warp of most GPUs, so a column's loads are contiguous
const COLS = 8; // outputs per workgroup
const THREADS = LANES * COLS;
export const MAX_UNROLL = 4; // steps of a lane's share of K whose loads are in flight at once (a round)

/**
 * A lane's steps a round for K (vec: vec4 steps): all of its steps up to MAX_UNROLL, since a round's
 * steps past K cost loads for nothing.
 */
export const matvecUnroll = (K, vec) => Math.min(MAX_UNROLL, Math.ceil(K / (LANES * (vec ? 4 : 1))));

/** Workgroups [x, y] for a product of N outputs (z: its batches). */
export const matvecGrid = (N) => [Math.ceil(N / COLS), 1];

// the WGSL of the sum of a W-wide value's components, in a fixed order
const componentSum = (W) => (W === 4 ? (x) => `((${x}).x + (${x}).y) + ((${x}).z + (${x}).w)` : (x) => x);

/**
 * WGSL declaring `mean` and `rstd` of a row of `count` floats for a LayerNorm, as layernorm_forward:
 * two passes (the mean, then the squares about it), every invocation of `threads` summing a strided
 * share of W-wide elements (at(k): the WGSL of the row's value at element k), the shares meeting in
 * kernel.js's wg_sum tree (declared by the caller). Call from uniform control flow.
 */
export function rowStatistics({ at, count, W, threads }) {
  const sum = componentSum(W);
  return /* wgsl */ `
  var row_sum = 0.0;
  for (var k = li * ${W}u; k < ${count}; k += ${threads * W}u) { let x = ${at("k")}; row_sum = row_sum + ${sum("x")}; }
  let mean = wg_sum(row_sum, li) / f32(${count});
  var row_sq = 0.0;
  for (var k = li * ${W}u; k < ${count}; k += ${threads * W}u) { let d = ${at("k")} - mean; row_sq = row_sq + ${sum("d * d")}; }
  let rstd = 1.0 / sqrt(wg_sum(row_sq, li) / f32(${count}) + p.ln_eps);`;
}

/**
 * vec: A, B (and LN) read as vec4s: K, the offsets and the strides multiples of 4 floats.
 * ln: with matmul.js's LayerNorm prologue over the row (A holds x; LN_UNIFORMS).
 * unroll: a lane's steps a round (matvecUnroll).
 */
export function matvecKernel(vec = false, ln = false, unroll = MAX_UNROLL) {
  const W = vec ? 4 : 1, T = vec ? "vec4f" : "f32", zero = vec ? "vec4f(0.0)" : "0.0";
  const at = (i) => (vec ? `(${i}) / 4u` : i); // an element index as an index into A, B or LN
  const sum = componentSum(W);
  const prologue = /* wgsl */ `${rowStatistics({ at: (k) => `A[${at(`a_base + ${k}`)}]`, count: "p.K", W, threads: THREADS })}
  if (li == 0u) { row_stats = vec2f(mean, rstd); }
  workgroupBarrier();
  // the first workgroup stores what layernorm_forward would: LayerNorm(x) and (mean, rstd)
  if (wid.x == 0u && wid.z == 0u) {
    for (var k = li * ${W}u; k < p.K; k += ${THREADS * W}u) { LN[${at("a_base + k")}] = load_a(a_base, k); }
    if (li == 0u) { LNS[p.ln_stats_off] = mean; LNS[p.ln_stats_off + 1u] = rstd; }
  }`;
  const loadA = ln ? /* wgsl */ `
var<workgroup> row_stats: vec2f; // (mean, rstd) of the row
// x normalised, times the LayerNorm's weight w, plus its bias c
fn ln_apply(x: ${T}, w: ${T}, c: ${T}) -> ${T} { return (x - row_stats.x) * row_stats.y * w + c; }
fn load_a(base: u32, k: u32) -> ${T} {
  return ln_apply(A[${at("base + k")}], B[${at("p.ln_w_off + k")}], B[${at("p.ln_b_off + k")}]);
}` : /* wgsl */ `
fn load_a(base: u32, k: u32) -> ${T} { return A[${at("base + k")}]; }`;
  // A lane's steps, `unroll` a round, every load of a round issued before the first product waits on
  // one: a step at a time waited out a load's latency each time (massive's K = 1536: 12 in a row). A
  // step past K reads the row's last element and multiplies it by 0, which leaves the sum as it is.
  // The loads of the round from k (names suffixed s): B's element, and A's, or with the LayerNorm x
  // and the norm's weight and bias, which the products combine with ln_apply
  const stepLoads = (k, s) => range(unroll).map((u) => {
    const at_k = (base) => at(`${base} + min(k${s}${u}, p.K - ${W}u)`);
    return /* wgsl */ `    let k${s}${u} = ${k} + ${u * LANES * W}u;
    let b${s}${u} = select(${zero}, B[${at_k("b_row")}], k${s}${u} < p.K);
${ln ? `    let x${s}${u} = A[${at_k("a_base")}];
    let w${s}${u} = B[${at_k("p.ln_w_off")}];
    let c${s}${u} = B[${at_k("p.ln_b_off")}];` : `    let a${s}${u} = A[${at_k("a_base")}];`}`;
  }).join("\n");
  const stepProducts = (s) => range(unroll).map((u) => (ln
    ? `    acc = acc + ln_apply(x${s}${u}, w${s}${u}, c${s}${u}) * b${s}${u};`
    : `    acc = acc + a${s}${u} * b${s}${u};`)).join("\n");
  const entryPoint = "matvec_forward";
  const name = `${entryPoint}${vec ? "_vec4" : ""}${ln ? "_ln" : ""}_u${unroll}`;
  return kernel(name, [...MATMUL_UNIFORMS.map((f) => [f, "u32"]), ...(ln ? LN_UNIFORMS : [])],
    vecBuffers([...MATMUL_BUFFERS, ...(ln ? LN_BUFFERS : [])], vec, ["A", "B", "LN"]),
    /* wgsl */ `${GELU_FNS}
const LANES = ${LANES}u;
${workgroupSum(THREADS)}
${loadA}

// lid.x: the lane, lid.y: the workgroup's output column; workgroup z: the batch
@compute @workgroup_size(${LANES}, ${COLS}, 1)
fn ${entryPoint}(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
        @builtin(local_invocation_index) li: u32) {
  let batch = wid.z;
  let a_base = p.a_off + batch * p.a_zs;
  let n = wid.x * ${COLS}u + lid.y;
  let nc = min(n, p.N - 1u); // a column past N computes column N - 1's sum, never stored
  let b_row = p.b_off + batch * p.b_zs + nc * p.K;
  // The epilogue's operands and the first round's are loaded before anything waits on a load (with
  // the LayerNorm: before its statistics' reductions), so that their latencies overlap.
  var bias_v = 0.0;
  var c_v = 0.0;
  var r_v = 0.0;
  if ((p.flags & 1u) != 0u) { bias_v = bias[p.bias_off + batch * p.bias_zs + nc]; }
  if ((p.flags & 2u) != 0u) { c_v = C[p.c_off + batch * p.c_zs + nc]; }
  if ((p.flags & 4u) != 0u) { r_v = R[p.r_off + nc]; }
${stepLoads(`lid.x * ${W}u`, "f")}${ln ? prologue : ""}
  var acc = ${zero};
${stepProducts("f")}
  for (var kr = lid.x * ${W}u + ${unroll * LANES * W}u; kr < p.K; kr += ${unroll * LANES * W}u) {
${stepLoads("kr", "")}
${stepProducts("")}
  }
  // the column's LANES partial sums, halved in a fixed tree within its run of wg_sum's red
  red[li] = ${sum("acc")};
  workgroupBarrier();
  for (var s = LANES / 2u; s > 0u; s = s >> 1u) {
    if (lid.x < s) { red[li] = red[li] + red[li + s]; }
    workgroupBarrier();
  }
  if (lid.x != 0u || n >= p.N) { return; }
  var v = red[li];
  if ((p.flags & 1u) != 0u) { v = v + bias_v; }
  if ((p.flags & 2u) != 0u) { v = v + c_v; }
  if ((p.flags & 4u) != 0u) { v = v + r_v; }
  let idx = p.c_off + batch * p.c_zs + n;
  C[idx] = v;
  if ((p.flags & 16u) != 0u) { G[idx] = gelu(v); }
}
`, entryPoint);
}
