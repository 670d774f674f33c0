// LoRA's kernels (webgpu/lora.js records them; wasm/src/lora.h is the C++ twin). An adapted Linear
// y = x·Wᵀ + b with A: (r,K) = [r, in], B: (N,r) = [out, r] and s = alpha / r. On the GPU a step runs the
// base's own products on merged weights, so that the adapters cost no dispatch of their own in the
// forward or in the input gradients (docs/architecture.md "LoRA on the GPU" says why):
//
//   merge     W' (N,K) = W + (s·B)·A          a copy, never in place lora_merge_into (per target, all blocks)
//   forward   y  (M,N) = x·W'ᵀ + b                                   the base's matmul on W'
//   backward  dx (M,K) = dy·W'                = dy·W + s·(dy·B)·A    the base's matmul on W'
//             u  (M,r) = s·(x·Aᵀ),  d (M,r) = s·(dy·B)                lora_grad_partials: a block of rows,
//             dB (N,r) = dyᵀ·u,     dA (r,K) = dᵀ·x                    their share of dA and dB
//             dA, dB   = Σ over the row blocks, in order               lora_grads_sum (all adapters at once)
//   merge in place: W (N,K) += (±s·B)·A                               lora_merge (merge and unmerge)
//
// u and d are row-local: a block's u (d) depends on its rows of x (dy) alone, so lora_grad_partials
// forms them for its rows, keeps them in a scratch buffer (a storage barrier, no workgroup memory of
// size r: any rank fits) and sums its rows' share of every dA and dB element of its targets (up to
// three on the same rows: q, k and v share ln1). Every sum here has one order for a given shape, so a
// step's bits never vary and resume stays bit-exact.
import { kernel, LINEAR_ID, range, workgroupSum } from "./kernel.js";
import { NORM_THREADS } from "./adamw.js";

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

/**
 * lora_grad_partials for T targets (1..3) on the same input rows x (M,K) at x_off of X: target t's output
 * gradient dy (M,N) at y_off_t of Y, its adapters A (r,K) at a_off_t and B (N,r) right after in Ad.
 * Workgroup w takes rows m0 = w·R .. m0 + R - 1 (R = rows): u[m, t, j] = scale·Σ_k x[m,k]·A_t[j,k] and
 * d[m, t, j] = scale·Σ_n dy_t[m,n]·B_t[n,j] into UD (u at m·T·r + t·r + j, d q_off floats further), then
 * its share of target t's gradients at Pt[w·q + a_off_t + e]: e < r·K: dA[j, k] = Σ_m d[m,t,j]·x[m,k];
 * else dB[n, j] = Σ_m dy_t[m,n]·u[m,t,j] (m over its rows, in order): the adapters' layout, so that
 * lora_grads_sum adds the blocks' shares of every adapter element alike.
 */
export function loraGradPartialsKernel(T) {
  if (!(T >= 1 && T <= 3)) throw new Error(`loraGradPartialsKernel: 1..3 targets, got ${T}`);
  const uniforms = [["M", "u32"], ["K", "u32"], ["N", "u32"], ["r", "u32"], ["rows", "u32"], ["q", "u32"], ["x_off", "u32"], ["d_off", "u32"],
    ["scale", "f32"], ...range(T).flatMap((t) => PARTIAL_TARGET_FIELDS.map((f) => [`${f}${t}`, "u32"]))];
  return kernel(`lora_grad_partials_t${T}`, uniforms, [["X", "read"], ["Y", "read"], ["Ad", "read"], ["UD", "rw"], ["Pt", "rw"]], /* wgsl */ `${LINEAR_ID}
${PARTIAL_TARGET_FIELDS.map((f) => picker(f, T)).join("\n")}
@compute @workgroup_size(${LORA_THREADS})
fn lora_grad_partials(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let w = linear_workgroup(wid, nwg);
  let m0 = w * p.rows;
  let TR = ${T}u * p.r;
  // u and d of this block's rows, (row, target, j) with j fastest
  for (var o = li; o < p.rows * TR; o += ${LORA_THREADS}u) {
    let m = m0 + o / TR;
    let t = (o % TR) / p.r;
    let j = o % p.r;
    if (m < p.M) {
      let a = a_off(t);
      let xb = p.x_off + m * p.K;
      let ab = a + j * p.K;
      var su = 0.0;
      for (var k = 0u; k < p.K; k++) { su = su + X[xb + k] * Ad[ab + k]; }
      let yb = y_off(t) + m * p.N;
      let bb = a + p.r * p.K + j;
      var sd = 0.0;
      for (var n = 0u; n < p.N; n++) { sd = sd + Y[yb + n] * Ad[bb + n * p.r]; }
      let at = m * TR + t * p.r + j;
      UD[at] = p.scale * su;
      UD[p.d_off + at] = p.scale * sd;
    }
  }
  storageBarrier(); // this block's u and d, written above, are read below by other invocations
  let last = min(m0 + p.rows, p.M);
  let per = p.r * (p.K + p.N);
  for (var o = li; o < ${T}u * per; o += ${LORA_THREADS}u) {
    let t = o / per;
    let e = o % per;
    var acc = 0.0;
    if (e < p.r * p.K) {
      let j = e / p.K;
      let k = e % p.K;
      for (var m = m0; m < last; m++) { acc = acc + UD[p.d_off + m * TR + t * p.r + j] * X[p.x_off + m * p.K + k]; }
    } else {
      let f = e - p.r * p.K;
      let n = f / p.r;
      let j = f % p.r;
      let yb = y_off(t) + n;
      for (var m = m0; m < last; m++) { acc = acc + Y[yb + m * p.N] * UD[m * TR + t * p.r + j]; }
    }
    Pt[w * p.q + a_off(t) + e] = acc;
  }
}
`, "lora_grad_partials");
}

/**
 * Every adapter's gradient from its shares, G[i] = Σ_w Pt[w·n + i] over the row blocks w < blocks in
 * order, and the gradient norm's partial sums of squares as lora_norm_partials leaves them: workgroup w
 * of `parts` takes i = w·256 + lane, then every parts·256 (the trainer's norm partials, kernels/adamw.js,
 * which adamw_update adds in a fixed order).
 */
export const loraGradsSum = kernel("lora_grads_sum", [["n", "u32"], ["blocks", "u32"], ["parts", "u32"]], [["Pt", "read"], ["G", "rw"], ["partials", "rw"]],
  /* wgsl */ `${LINEAR_ID}${workgroupSum(NORM_THREADS)}
@compute @workgroup_size(${NORM_THREADS})
fn lora_grads_sum(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let w = linear_workgroup(wid, nwg);
  var squares = 0.0;
  for (var i = w * ${NORM_THREADS}u + li; i < p.n; i += p.parts * ${NORM_THREADS}u) {
    var g = Pt[i];
    for (var b = 1u; b < p.blocks; b++) { g = g + Pt[b * p.n + i]; }
    G[i] = g;
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
