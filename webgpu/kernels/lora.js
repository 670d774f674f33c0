// LoRA's kernels (webgpu/lora.js records them; wasm/src/lora.h is the C++ twin). An adapted Linear
// y = x·Wᵀ + b with A: (r,K) = [r, in], B: (N,r) = [out, r] and s = alpha / r. On the GPU a step runs the
// base's own products on merged weights, so that the adapters cost no dispatch of their own in the
// forward or in the input gradients (docs/architecture.md "LoRA on the GPU" says why):
//
//   merge     W' (N,K) = W + (s·B)·A          a copy, never in place lora_merge_into (per target, all blocks)
//   forward   y  (M,N) = x·W'ᵀ + b                                   the base's matmul on W'
//   backward  dx (M,K) = dy·W'                = dy·W + s·(dy·B)·A    the base's matmul on W'
//             u  (M,r) = s·(x·Aᵀ),  d (M,r) = s·(dy·B)                lora_down
//             dB (N,r) = dyᵀ·u,     dA (r,K) = dᵀ·x                    lora_grad_partials: a block of
//                                                                     rows' share of dA and dB
//             dA, dB   = Σ over the row blocks, in order               lora_grads_sum (all adapters at once)
//   merge in place: W (N,K) += (±s·B)·A                               lora_merge (merge and unmerge)
//
// Each kernel takes up to three targets on the same rows (q, k and v share ln1). These loops are short
// and latency-bound on a GPU, so each lane keeps four loads in flight (sum4) and the work is spread
// over as many workgroups as the shapes allow (docs/lab/2026-12-06-wgsl-lora-on-the-gpu.md). Every sum here has one order for a given shape, so a
// step's bits never vary and resume stays bit-exact.
import { kernel, LINEAR_ID, range, workgroupSum } from "./kernel.js";
import { NORM_PARTIALS, NORM_THREADS } from "./adamw.js";

export const LORA_THREADS = 256;
/** lora_grad_partials' workgroups at most: rows per block double until the rows fit in this many. */
export const LORA_ROW_BLOCKS = 64;

/** Rows of a lora_grad_partials block for M rows (a power of two, 8 or more). */
export function loraBlockRows(M) {
  let R = 8;
  while (Math.ceil(M / R) > LORA_ROW_BLOCKS) R *= 2;
  return R;
}

// per-target uniform `field` of target t (0..T-1) as a WGSL function of a runtime t
const picker = (field, T) => /* wgsl */ `fn ${field}(t: u32) -> u32 {
${range(T - 1).map((t) => `  if (t == ${t + 1}u) { return p.${field}${t + 1}; }`).join("\n")}
  return p.${field}0;
}`;

const MERGE_TARGET_FIELDS = ["src_off", "dst_off", "a_off"];

/**
 * lora_merge_into for T targets (1..3) of one shape: target t's W' (N,K) at dst_off_t + l·dst_stride = W at
 * src_off_t + l·src_stride + Σ_j (scale·B[n, j])·A[j, k], for the blocks l < L: the targets' merged copies in
 * every block, one element a lane. A (r,K) at a_off_t and B (N,r) right after it in the adapters Ad,
 * l·a_stride further in block l. The sum is lora_merge's (s·B rounded first, j in order), so a merged
 * copy equals the sampling copy's bits.
 */
export function loraMergeIntoKernel(T) {
  if (!(T >= 1 && T <= 3)) throw new Error(`loraMergeIntoKernel: 1..3 targets, got ${T}`);
  const uniforms = [["N", "u32"], ["K", "u32"], ["r", "u32"], ["L", "u32"], ["src_stride", "u32"], ["dst_stride", "u32"], ["a_stride", "u32"],
    ["scale", "f32"], ...range(T).flatMap((t) => MERGE_TARGET_FIELDS.map((f) => [`${f}${t}`, "u32"]))];
  return kernel(`lora_merge_into_t${T}`, uniforms, [["W", "read"], ["Wm", "rw"], ["Ad", "read"]], /* wgsl */ `${LINEAR_ID}
${MERGE_TARGET_FIELDS.map((f) => picker(f, T)).join("\n")}
@compute @workgroup_size(${LORA_THREADS})
fn lora_merge_into(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let e = linear_workgroup(wid, nwg) * ${LORA_THREADS}u + li;
  let NK = p.N * p.K;
  if (e >= ${T}u * p.L * NK) { return; }
  let t = e / (p.L * NK);
  let l = (e / NK) % p.L;
  let i = e % NK;
  let n = i / p.K;
  let k = i % p.K;
  let a = a_off(t) + l * p.a_stride;
  let b = a + p.r * p.K + n * p.r;
  var acc = 0.0;
  for (var j = 0u; j < p.r; j++) { acc = acc + (p.scale * Ad[b + j]) * Ad[a + j * p.K + k]; }
  Wm[dst_off(t) + l * p.dst_stride + i] = W[src_off(t) + l * p.src_stride + i] + acc;
}
`, "lora_merge_into");
}

const PARTIAL_TARGET_FIELDS = ["y_off", "a_off"];
/** lora_grad_partials: the workgroups that share a row block, each taking a slice of its dA and dB outputs. */
export const LORA_OUTPUT_GROUPS = 8;

/**
 * WGSL statements that leave in `out` the sum of `term(i)` over i = from, from + step, ... < end, in four
 * interleaved running sums added pairwise at the end: four loads in flight instead of one (these loops
 * are latency-bound), and one order of the additions for a given length, so the bits never vary.
 */
function sum4(out, from, end, step, term) {
  const i = `${out}_i`, at = (k) => (k === 0 ? i : `${i} + ${k}u * ${step}`);
  return /* wgsl */ `var ${out}0 = 0.0; var ${out}1 = 0.0; var ${out}2 = 0.0; var ${out}3 = 0.0;
    var ${i} = ${from};
    for (; ${i} + 3u * ${step} < ${end}; ${i} += 4u * ${step}) {
      ${out}0 = ${out}0 + ${term(at(0))}; ${out}1 = ${out}1 + ${term(at(1))};
      ${out}2 = ${out}2 + ${term(at(2))}; ${out}3 = ${out}3 + ${term(at(3))};
    }
    for (; ${i} < ${end}; ${i} += ${step}) { ${out}0 = ${out}0 + ${term(i)}; }
    let ${out} = (${out}0 + ${out}1) + (${out}2 + ${out}3);`;
}

/**
 * lora_down for T targets (1..3) on the same input rows x (M,K) at x_off of X: target t's output gradient
 * dy (M,N) at y_off_t of Y, its adapters A (r,K) at a_off_t and B (N,r) right after in Ad. One dot product
 * a lane: u[m, t, j] = scale·Σ_k x[m,k]·A_t[j,k] at UD[m·T·r + t·r + j] and d[m, t, j] = scale·Σ_n
 * dy_t[m,n]·B_t[n,j] d_off floats further, for every row.
 */
export function loraDownKernel(T) {
  if (!(T >= 1 && T <= 3)) throw new Error(`loraDownKernel: 1..3 targets, got ${T}`);
  const uniforms = [["M", "u32"], ["K", "u32"], ["N", "u32"], ["r", "u32"], ["x_off", "u32"], ["d_off", "u32"], ["scale", "f32"],
    ...range(T).flatMap((t) => PARTIAL_TARGET_FIELDS.map((f) => [`${f}${t}`, "u32"]))];
  return kernel(`lora_down_t${T}`, uniforms, [["X", "read"], ["Y", "read"], ["Ad", "read"], ["UD", "rw"]], /* wgsl */ `${LINEAR_ID}
${PARTIAL_TARGET_FIELDS.map((f) => picker(f, T)).join("\n")}
@compute @workgroup_size(${LORA_THREADS})
fn lora_down(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let TR = ${T}u * p.r;
  let e = linear_workgroup(wid, nwg) * ${LORA_THREADS}u + li;
  if (e >= 2u * p.M * TR) { return; }
  let o = e % (p.M * TR);
  let m = o / TR;
  let t = (o % TR) / p.r;
  let j = o % p.r;
  let a = a_off(t);
  if (e < p.M * TR) {
    let xb = p.x_off + m * p.K;
    let ab = a + j * p.K;
    ${sum4("su", "0u", "p.K", "1u", (i) => `X[xb + ${i}] * Ad[ab + ${i}]`)}
    UD[o] = p.scale * su;
  } else {
    let yb = y_off(t) + m * p.N;
    let bb = a + p.r * p.K + j;
    ${sum4("sd", "0u", "p.N", "1u", (i) => `Y[yb + ${i}] * Ad[bb + (${i}) * p.r]`)}
    UD[p.d_off + o] = p.scale * sd;
  }
}
`, "lora_down");
}

/**
 * lora_grad_partials for T targets (1..3), after lora_down: row block w (rows m0 = w·R .. m0 + R - 1, R =
 * rows) in LORA_OUTPUT_GROUPS workgroups, each a slice of the block's share of target t's gradients, at
 * Pt[w·q + a_off_t + e]: e < r·K: dA[j, k] = Σ_m d[m,t,j]·x[m,k]; else dB[n, j] = Σ_m dy_t[m,n]·u[m,t,j] (m over
 * the block's rows; x, dy and the adapters' offsets as lora_down's, u and d where it left them): the
 * adapters' layout, so that lora_grads_sum adds the blocks' shares of every adapter element alike.
 */
export function loraGradPartialsKernel(T) {
  if (!(T >= 1 && T <= 3)) throw new Error(`loraGradPartialsKernel: 1..3 targets, got ${T}`);
  const G = LORA_OUTPUT_GROUPS;
  const uniforms = [["M", "u32"], ["K", "u32"], ["N", "u32"], ["r", "u32"], ["rows", "u32"], ["q", "u32"], ["x_off", "u32"], ["d_off", "u32"],
    ...range(T).flatMap((t) => PARTIAL_TARGET_FIELDS.map((f) => [`${f}${t}`, "u32"]))];
  return kernel(`lora_grad_partials_t${T}`, uniforms, [["X", "read"], ["Y", "read"], ["UD", "read"], ["Pt", "rw"]], /* wgsl */ `${LINEAR_ID}
${PARTIAL_TARGET_FIELDS.map((f) => picker(f, T)).join("\n")}
@compute @workgroup_size(${LORA_THREADS})
fn lora_grad_partials(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let w = linear_workgroup(wid, nwg) / ${G}u;
  let g = linear_workgroup(wid, nwg) % ${G}u;
  let m0 = w * p.rows;
  let last = min(m0 + p.rows, p.M);
  let TR = ${T}u * p.r;
  let per = p.r * (p.K + p.N);
  let chunk = (${T}u * per + ${G - 1}u) / ${G}u;
  let end = min(${T}u * per, (g + 1u) * chunk);
  for (var o = g * chunk + li; o < end; o += ${LORA_THREADS}u) {
    let t = o / per;
    let e = o % per;
    var acc = 0.0;
    if (e < p.r * p.K) {
      let db = p.d_off + t * p.r + e / p.K;
      let xb = p.x_off + e % p.K;
      ${sum4("s", "m0", "last", "1u", (i) => `UD[db + (${i}) * TR] * X[xb + (${i}) * p.K]`)}
      acc = s;
    } else {
      let f = e - p.r * p.K;
      let yb = y_off(t) + f / p.r;
      let ub = t * p.r + f % p.r;
      ${sum4("s", "m0", "last", "1u", (i) => `Y[yb + (${i}) * p.N] * UD[ub + (${i}) * TR]`)}
      acc = s;
    }
    Pt[w * p.q + a_off(t) + e] = acc;
  }
}
`, "lora_grad_partials");
}

/** The gradient norm's partial sums lora_grads_sum leaves for n adapters: a workgroup per 256, at most NORM_PARTIALS. */
export const loraNormParts = (n) => Math.max(1, Math.min(NORM_PARTIALS, Math.ceil(n / NORM_THREADS)));

/**
 * Every adapter's gradient from its shares, G[i] = Σ_w Pt[w·n + i] over the row blocks w < blocks (in four
 * interleaved sums, sum4), and the gradient norm's partial sums of squares: workgroup w of `parts` takes
 * i = w·256 + lane, then every parts·256 (the trainer's norm partials, kernels/adamw.js, which adamw_update
 * adds in a fixed order).
 */
export const loraGradsSum = kernel("lora_grads_sum", [["n", "u32"], ["blocks", "u32"], ["parts", "u32"]], [["Pt", "read"], ["G", "rw"], ["partials", "rw"]],
  /* wgsl */ `${LINEAR_ID}${workgroupSum(NORM_THREADS)}
@compute @workgroup_size(${NORM_THREADS})
fn lora_grads_sum(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let w = linear_workgroup(wid, nwg);
  var squares = 0.0;
  for (var e = w * ${NORM_THREADS}u + li; e < p.n; e += p.parts * ${NORM_THREADS}u) {
    ${sum4("g", "0u", "p.blocks", "1u", (i) => `Pt[(${i}) * p.n + e]`)}
    G[e] = g;
    squares = squares + g * g;
  }
  let total = wg_sum(squares, li);
  if (li == 0u && w < p.parts) { partials[w] = total; }
}
`);

/**
 * W (N,K) at w_off += Σ_j (scale·B[n, j]) · A[j, k], B (N,r) at b_off and A (r,K) at a_off of the
 * adapters L: merge (scale = s) and unmerge (scale = -s, which subtracts the very product merge
 * added), one element a lane; C++'s lora_merge rounds s·B first too.
 */
export const loraMerge = kernel("lora_merge", [["N", "u32"], ["K", "u32"], ["r", "u32"], ["w_off", "u32"], ["a_off", "u32"], ["b_off", "u32"],
  ["scale", "f32"]], [["W", "rw"], ["L", "read"]], /* wgsl */ `${LINEAR_ID}
@compute @workgroup_size(${LORA_THREADS})
fn lora_merge(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let e = linear_workgroup(wid, nwg) * ${LORA_THREADS}u + li;
  if (e >= p.N * p.K) { return; }
  let n = e / p.K;
  let k = e % p.K;
  var acc = 0.0;
  for (var j = 0u; j < p.r; j++) { acc = acc + (p.scale * L[p.b_off + n * p.r + j]) * L[p.a_off + j * p.K + k]; }
  W[p.w_off + e] = W[p.w_off + e] + acc;
}
`);
