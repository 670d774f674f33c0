// LoRA's kernels (webgpu/lora.js records them; wasm/src/lora.h is the C++ twin). An adapted Linear
// y = x·Wᵀ + b with A: (r,K) = [r, in], B: (N,r) = [out, r] and s = alpha / r, forward and backward
// side by side (M rows; W and b frozen: no dW ever, only the adapters' gradients and dx):
//
//   forward   u  (M,r) = s·(x (M,K) · Aᵀ)      kept for dB       lora_rows, forward: down then up
//             y  (M,N) += u · Bᵀ               (+ gelu(y): fc_in's activation again)
//   backward  d  (M,r) = s·(dy (M,N) · B)      kept for dA       lora_rows, backward: down then up
//             dx (M,K) += d · A                (· gelu'(h): fc_out's input gradient)
//             dB (N,r) = dyᵀ · u                                  lora_grads
//             dA (r,K) = dᵀ · x
//   merge     W  (N,K) += (±s·B) · A                              lora_merge
//
// The rank-r bottleneck is row-local: a row's u (d) depends on that row of x (dy) alone, and its
// output row on that u alone. So lora_rows gives each workgroup a block of rows and does both halves
// in one dispatch, u passing between them through the buffer that keeps it (a storage barrier, no
// workgroup memory of size r: any rank fits). Its targets: up to three Linears on the same rows
// (q, k and v: one input ln1, three outputs; backward: three dy, one dx summed over them), in one
// dispatch. lora_grads reduces over the M rows, each output's rows in fixed strided slices added in
// a fixed order; every sum here has one order for a given shape, so a step's bits never vary.
import { kernel, LINEAR_ID, range, workgroupSum } from "./kernel.js";
import { GELU_FNS } from "./gelu.js";
import { NORM_THREADS } from "./adamw.js";

export const LORA_THREADS = 256;
/** Rows of a lora_rows workgroup: 8 give large's 1536 rows 192 workgroups. */
export const LORA_ROWS_PER_WORKGROUP = 8;
/** lora_grads: each workgroup's outputs, and the strided slices of the M rows each is summed in. */
export const LORA_GRAD_OUTPUTS = 32;
export const LORA_GRAD_SLICES = LORA_THREADS / LORA_GRAD_OUTPUTS;

// per-target uniform `field` of target t (0..T-1) as a WGSL function of a runtime t
const picker = (field, T) => /* wgsl */ `fn ${field}(t: u32) -> u32 {
${range(T - 1).map((t) => `  if (t == ${t + 1}u) { return p.${field}${t + 1}; }`).join("\n")}
  return p.${field}0;
}`;

const ROWS_TARGET_FIELDS = ["x_off", "wd_off", "u_off", "wu_off", "y_off"];

/**
 * lora_rows for T targets (1..3). mode "forward": one input X (each target's x_off, all equal), T
 * outputs Y (each at its y_off); "backward": T inputs (each target's dy at its x_off), one output
 * (y_off0) that adds every target's d·A. Down: U_t[m, j] = scale · Σ_k X[x_off_t + m·K + k] ·
 * W[wd_off_t + j·wd_sj + k·wd_sk] (k < K), written to U at u_off_t + m·r + j; K-loops split in kg
 * interleaved slices over the invocations (kg a power of two; their sums added in order). Up (`up`):
 * Y[y + m·N + c] += Σ_j U_t[m, j] · W[wu_off_t + j·wu_sj + c·wu_sc] (c < N); epilogue "gelu": also
 * G = gelu(Y) at Y's indices, "geluGrad": Y = (Y + Σ) · gelu'(H) at Y's indices.
 */
export function loraRowsKernel(T, mode, epilogue = "none", up = true) {
  if (!(T >= 1 && T <= 3) || !["forward", "backward"].includes(mode) || !["none", "gelu", "geluGrad"].includes(epilogue)) {
    throw new Error(`loraRowsKernel: 1..3 targets, forward or backward, epilogue none, gelu or geluGrad; got ${T} ${mode} ${epilogue}`);
  }
  if (epilogue !== "none" && (!up || T !== 1 || (epilogue === "gelu") !== (mode === "forward"))) {
    throw new Error("loraRowsKernel: gelu is fc_in's forward, geluGrad fc_out's backward, one target each");
  }
  const name = `lora_rows_${mode}_t${T}${epilogue === "none" ? "" : `_${epilogue}`}${up ? "" : "_down"}`;
  const uniforms = [["M", "u32"], ["K", "u32"], ["N", "u32"], ["r", "u32"], ["rows_per", "u32"], ["kg", "u32"], ["scale", "f32"],
    ["wd_sj", "u32"], ["wd_sk", "u32"], ["wu_sj", "u32"], ["wu_sc", "u32"],
    ...range(T).flatMap((t) => ROWS_TARGET_FIELDS.map((f) => [`${f}${t}`, "u32"]))];
  const buffers = [["X", "read"], ["W", "read"], ["U", "rw"], ...(up ? [["Y", "rw"]] : []),
    ...(epilogue === "gelu" ? [["G", "rw"]] : epilogue === "geluGrad" ? [["H", "read"]] : [])];
  const upForward = /* wgsl */ `
  let E = p.rows_per * ${T}u * p.N;
  for (var e = li; e < E; e += ${LORA_THREADS}u) {
    let i = e / (${T}u * p.N);
    let t = (e / p.N) % ${T}u;
    let c = e % p.N;
    let m = m0 + i;
    if (m < p.M) {
      let ub = u_off(t) + m * p.r;
      let wb = wu_off(t) + c * p.wu_sc;
      var acc = 0.0;
      for (var j = 0u; j < p.r; j++) { acc = acc + U[ub + j] * W[wb + j * p.wu_sj]; }
      let at = y_off(t) + m * p.N + c;
      let y = Y[at] + acc;
      Y[at] = y;${epilogue === "gelu" ? "\n      G[at] = gelu(y);" : ""}
    }
  }`;
  const upBackward = /* wgsl */ `
  let E = p.rows_per * p.N;
  for (var e = li; e < E; e += ${LORA_THREADS}u) {
    let m = m0 + e / p.N;
    let c = e % p.N;
    if (m < p.M) {
      var acc = 0.0;
      for (var t = 0u; t < ${T}u; t++) {
        let ub = u_off(t) + m * p.r;
        let wb = wu_off(t) + c * p.wu_sc;
        for (var j = 0u; j < p.r; j++) { acc = acc + U[ub + j] * W[wb + j * p.wu_sj]; }
      }
      let at = p.y_off0 + m * p.N + c;
      ${epilogue === "geluGrad" ? "Y[at] = (Y[at] + acc) * gelu_grad(H[at]);" : "Y[at] = Y[at] + acc;"}
    }
  }`;
  return kernel(name, uniforms, buffers, /* wgsl */ `${LINEAR_ID}${epilogue === "none" ? "" : GELU_FNS}
${ROWS_TARGET_FIELDS.map((f) => picker(f, T)).join("\n")}
var<workgroup> part: array<f32, ${LORA_THREADS}>;
@compute @workgroup_size(${LORA_THREADS})
fn lora_rows(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let m0 = linear_workgroup(wid, nwg) * p.rows_per;
  let TR = ${T}u * p.r;
  let outs = p.rows_per * TR; // (row, target, j) of this block, j fastest
  let per = ${LORA_THREADS}u / p.kg; // outputs a pass
  let s = li % p.kg; // this invocation's slice of the K loop
  for (var first = 0u; first < outs; first += per) {
    let o = first + li / p.kg;
    let t = (o % TR) / p.r;
    let j = o % p.r;
    let m = m0 + o / TR;
    let mine = o < outs && m < p.M;
    var acc = 0.0;
    if (mine) {
      let xb = x_off(t) + m * p.K;
      let wb = wd_off(t) + j * p.wd_sj;
      for (var k = s; k < p.K; k += p.kg) { acc = acc + X[xb + k] * W[wb + k * p.wd_sk]; }
    }
    part[li] = acc;
    workgroupBarrier();
    if (mine && s == 0u) {
      var sum = part[li];
      for (var q = 1u; q < p.kg; q++) { sum = sum + part[li + q]; }
      U[u_off(t) + m * p.r + j] = p.scale * sum;
    }
    workgroupBarrier();
  }${up ? /* wgsl */ `
  storageBarrier(); // this block's U rows, written above, are read below by other invocations
${mode === "forward" ? upForward : upBackward}` : ""}
}
`, "lora_rows");
}

/**
 * Invocations that share one output's K loop in lora_rows (a power of two, at most 32): as many as
 * leave every invocation of a pass an output, while each slice keeps 8 or more terms.
 */
export function loraSlices(outputs, K) {
  let kg = 1;
  while (kg < 32 && 2 * kg * outputs <= LORA_THREADS && 2 * kg * 8 <= K) kg *= 2;
  return kg;
}

const GRAD_TARGET_FIELDS = ["y_off", "x_off", "u_off", "d_off", "a_off", "b_off"];

/**
 * lora_grads for T targets (1..3): each target's dB (N,r) at b_off = Σ_m Y[y_off + m·N + n] ·
 * U[u_off + m·r + j] and dA (r,K) at a_off = Σ_m D[d_off + m·r + j] · X[x_off + m·K + k], into G.
 * Workgroups: per target wg_b for dB, then wg_a for dA, LORA_GRAD_OUTPUTS outputs each; an output's
 * rows are summed in LORA_GRAD_SLICES interleaved slices (m ≡ slice), then the slices in order.
 */
export function loraGradsKernel(T) {
  if (!(T >= 1 && T <= 3)) throw new Error(`loraGradsKernel: 1..3 targets, got ${T}`);
  const uniforms = [["M", "u32"], ["K", "u32"], ["N", "u32"], ["r", "u32"], ["wg_b", "u32"], ["wg_a", "u32"],
    ...range(T).flatMap((t) => GRAD_TARGET_FIELDS.map((f) => [`${f}${t}`, "u32"]))];
  const O = LORA_GRAD_OUTPUTS, S = LORA_GRAD_SLICES;
  return kernel(`lora_grads_t${T}`, uniforms, [["Y", "read"], ["X", "read"], ["U", "read"], ["D", "read"], ["G", "rw"]], /* wgsl */ `${LINEAR_ID}
${GRAD_TARGET_FIELDS.map((f) => picker(f, T)).join("\n")}
var<workgroup> part: array<f32, ${LORA_THREADS}>;
@compute @workgroup_size(${LORA_THREADS})
fn lora_grads(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let w = linear_workgroup(wid, nwg);
  let per = p.wg_b + p.wg_a;
  let t = w / per;
  let local = w % per;
  let isB = local < p.wg_b; // dB (N,r) = dyᵀ·u, else dA (r,K) = dᵀ·x
  let o = select(local - p.wg_b, local, isB) * ${O}u + li % ${O}u;
  let cols = select(p.K, p.r, isB);
  let a = o / cols;
  let b = o % cols;
  let mine = t < ${T}u && o < select(p.r * p.K, p.N * p.r, isB);
  var acc = 0.0;
  let m0 = li / ${O}u;
  if (mine && isB) {
    let yb = y_off(t) + a;
    let ub = u_off(t) + b;
    for (var m = m0; m < p.M; m += ${S}u) { acc = acc + Y[yb + m * p.N] * U[ub + m * p.r]; }
  } else if (mine) {
    let db = d_off(t) + a;
    let xb = x_off(t) + b;
    for (var m = m0; m < p.M; m += ${S}u) { acc = acc + D[db + m * p.r] * X[xb + m * p.K]; }
  }
  part[li] = acc;
  workgroupBarrier();
  if (mine && li < ${O}u) {
    var sum = part[li];
    for (var q = 1u; q < ${S}u; q++) { sum = sum + part[li + q * ${O}u]; }
    G[select(a_off(t), b_off(t), isB) + o] = sum;
  }
}
`, "lora_grads");
}

/**
 * The adapters' gradient norm's partial sums of squares: workgroup w of `parts` sums g[i]² over
 * i = w·256 + lane, then every parts·256 (the trainer's norm partials, kernels/adamw.js, which
 * adamw_update adds in a fixed order).
 */
export const loraNormPartials = kernel("lora_norm_partials", [["n", "u32"], ["parts", "u32"]], [["grads", "read"], ["partials", "rw"]],
  /* wgsl */ `${LINEAR_ID}${workgroupSum(NORM_THREADS)}
@compute @workgroup_size(${NORM_THREADS})
fn lora_norm_partials(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let w = linear_workgroup(wid, nwg);
  var squares = 0.0;
  for (var i = w * ${NORM_THREADS}u + li; i < p.n; i += p.parts * ${NORM_THREADS}u) { let g = grads[i]; squares = squares + g * g; }
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
