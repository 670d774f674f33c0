// Matrix products C (M,N) = op(A)·op(B) [+ bias(N)] [+ C] [+ R], tiled in workgroup memory with
// register blocking. Three variants read the operands where they lie, so no transpose is ever
// materialised (weights stay PyTorch's [out, in]):
//   "nt": A (M,K) · B(N,K)ᵀ   forward Linear:     y  = x · Wᵀ + b
//   "nn": A (M,K) · B(K,N)    input gradient:     dx = dy · W
//   "tn": A(K,M)ᵀ · B(K,N)    weight gradient:    dW = dyᵀ · x
// A WX×WY workgroup owns a BM×BN tile (BM = WY·TM, BN = WX·TN); invocation (tx, ty) owns rows
// ty + WY·i and columns tx + WX·j (interleaved, so workgroup-memory reads and global writes are
// contiguous across a warp).
import { kernel, LINEAR_ID } from "./kernel.js";

export const MATMUL_FLAGS = { bias: 1, accumulate: 2, residual: 4 };

/**
 * Tile shapes, both 128 invocations: "64" (64×64, 8×4 outputs per invocation) for small or skinny
 * products, "128" (128×64, 8×8 outputs each) for large ones.
 */
export const MATMUL_TILES = {
  64: { WX: 16, WY: 8, BK: 16, TM: 8, TN: 4 },
  128: { WX: 8, WY: 16, BK: 8, TM: 8, TN: 8 },
};
const range = (n) => Array.from({ length: n }, (_, i) => i);
const each = (I, J, f) => range(I).flatMap((i) => range(J).map((j) => f(i, j))).join("\n");
const tileShape = (t) => ({ ...t, BM: t.WY * t.TM, BN: t.WX * t.TN, threads: t.WX * t.WY });

/**
 * split: the split-K form for products with few output tiles and a long K (weight gradients, K = B·T):
 * workgroup z sums K-range [z·k_chunk, (z+1)·k_chunk) into partials[z] (M,N), and matmulSplitFinal
 * adds the partials in order (deterministic, no atomics) and applies bias / accumulate / residual.
 */
export function matmulKernel(variant, tile, split = false) {
  const { WX, WY, BM, BN, BK, TM, TN, threads } = tileShape(MATMUL_TILES[tile]);
  const aT = variant === "tn", bT = variant === "nt";
  return kernel(`matmul_${variant}_${tile}${split ? "_split" : ""}`,
    [["M", "u32"], ["N", "u32"], ["K", "u32"], ["a_off", "u32"], ["b_off", "u32"], ["c_off", "u32"],
      ["bias_off", "u32"], ["r_off", "u32"], ["flags", "u32"], ["k_chunk", "u32"]],
    [["A", "read"], ["B", "read"], ["bias", "read"], ["R", "read"], ["C", "rw"]],
    `
const BM = ${BM}u; const BN = ${BN}u; const BK = ${BK}u; const TM = ${TM}u; const TN = ${TN}u;
const WX = ${WX}u; const WY = ${WY}u; const THREADS = ${threads}u;
var<workgroup> As: array<f32, ${BK * BM}>; // [k][m]
var<workgroup> Bs: array<f32, ${BK * BN}>; // [k][n]

fn load_a(m: u32, k: u32) -> f32 {
  if (m >= p.M || k >= p.K) { return 0.0; }
  return A[p.a_off + ${aT ? "k * p.M + m" : "m * p.K + k"}];
}
fn load_b(k: u32, n: u32) -> f32 {
  if (k >= p.K || n >= p.N) { return 0.0; }
  return B[p.b_off + ${bT ? "n * p.K + k" : "k * p.N + n"}];
}

fn store(m: u32, n: u32, acc: f32, z: u32) {
  if (m >= p.M || n >= p.N) { return; }
  ${split ? "C[(z * p.M + m) * p.N + n] = acc;\n  return;" : ""}
  var v = acc;
  if ((p.flags & 1u) != 0u) { v = v + bias[p.bias_off + n]; }
  let idx = p.c_off + m * p.N + n;
  if ((p.flags & 2u) != 0u) { v = v + C[idx]; }
  if ((p.flags & 4u) != 0u) { v = v + R[p.r_off + m * p.N + n]; }
  C[idx] = v;
}

@compute @workgroup_size(${WX}, ${WY})
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
        @builtin(local_invocation_index) li: u32) {
  let m0 = wid.y * BM;
  let n0 = wid.x * BN;
  // the TM×TN accumulators are unrolled into scalars so that every backend keeps them in registers
${each(TM, TN, (i, j) => `  var c${i}_${j} = 0.0;`)}
  let k_begin = ${split ? "wid.z * p.k_chunk" : "0u"};
  let k_end = ${split ? "min(p.K, k_begin + p.k_chunk)" : "p.K"}; // k_chunk is a multiple of BK
  for (var k0 = k_begin; k0 < k_end; k0 += BK) {
    // consecutive invocations read consecutive addresses of global memory
    for (var e = li; e < BK * BM; e += THREADS) {
      ${aT ? "let kk = e / BM; let mm = e % BM;" : "let mm = e / BK; let kk = e % BK;"}
      As[kk * BM + mm] = load_a(m0 + mm, k0 + kk);
    }
    for (var e = li; e < BK * BN; e += THREADS) {
      ${bT ? "let nn = e / BK; let kb = e % BK;" : "let kb = e / BN; let nn = e % BN;"}
      Bs[kb * BN + nn] = load_b(k0 + kb, n0 + nn);
    }
    workgroupBarrier();
    for (var k = 0u; k < BK; k++) {
${range(TM).map((i) => `      let a${i} = As[k * BM + lid.y + ${i * WY}u];`).join("\n")}
${range(TN).map((j) => `      let b${j} = Bs[k * BN + lid.x + ${j * WX}u];`).join("\n")}
${each(TM, TN, (i, j) => `      c${i}_${j} = c${i}_${j} + a${i} * b${j};`)}
    }
    workgroupBarrier();
  }
${each(TM, TN, (i, j) => `  store(m0 + lid.y + ${i * WY}u, n0 + lid.x + ${j * WX}u, c${i}_${j}, wid.z);`)}
}
`);
}

// partials: (splits, M, N) -> C[c_off..] (M,N) = Σ_z partials[z] (+ bias) (+ C) (+ R), z in order
export const matmulSplitFinal = kernel("matmul_split_final",
  [["M", "u32"], ["N", "u32"], ["splits", "u32"], ["c_off", "u32"], ["bias_off", "u32"], ["r_off", "u32"], ["flags", "u32"]],
  [["partials", "read"], ["bias", "read"], ["R", "read"], ["C", "rw"]], `${LINEAR_ID}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let i = linear_workgroup(wid, nwg) * 256u + li;
  if (i >= p.M * p.N) { return; }
  var v = 0.0;
  for (var z = 0u; z < p.splits; z++) { v = v + partials[z * p.M * p.N + i]; }
  if ((p.flags & 1u) != 0u) { v = v + bias[p.bias_off + i % p.N]; }
  if ((p.flags & 2u) != 0u) { v = v + C[p.c_off + i]; }
  if ((p.flags & 4u) != 0u) { v = v + R[p.r_off + i]; }
  C[p.c_off + i] = v;
}
`);

/**
 * How many K-splits a product gets: enough to reach ~128 workgroups when its output has few tiles
 * and K is long (each split still gets ≥ 256 of K). 1 = no split.
 */
export function chooseSplits(M, N, K, tile = chooseTile(M, N)) {
  const t = tileShape(MATMUL_TILES[tile]);
  const tiles = Math.ceil(M / t.BM) * Math.ceil(N / t.BN);
  if (tiles >= 128 || K < 512) return 1;
  return Math.max(1, Math.min(16, Math.floor(K / 256), Math.ceil(128 / tiles)));
}

/** K per split: a multiple of the tile's BK. */
export function splitChunk(K, splits, tile) {
  const BK = MATMUL_TILES[tile].BK;
  return Math.ceil(K / splits / BK) * BK;
}

/** Large products get the 128-tile kernel once it still yields enough workgroups to fill a GPU. */
export function chooseTile(M, N) {
  return Math.ceil(M / 128) * Math.ceil(N / 64) >= 128 ? 128 : 64;
}

export function matmulGrid(M, N, tile) {
  const t = tileShape(MATMUL_TILES[tile]);
  return [Math.ceil(N / t.BN), Math.ceil(M / t.BM)];
}
