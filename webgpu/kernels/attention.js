// Causal self-attention, FlashAttention-2 style. q, k, v, out: (B,T,C) with head h on channels
// h·D .. h·D+D-1. The forward keeps a running max and sum per query (online softmax) and saves one
// log-sum-exp per row; the backward recomputes P from q, k and that statistic, so no T×T matrix
// ever exists (memory linear in T). No atomics: dK/dV and dQ are two passes, each invocation owning
// one row of its output. D (head size) is compiled in; tile sizes keep workgroup memory ≤ 16 KiB.
import { kernel } from "./kernel.js";

const pow2Floor = (x) => 2 ** Math.floor(Math.log2(x));
export const attentionTiles = (D) => ({ fwdKeys: pow2Floor(Math.min(64, 2048 / D)), bwdRows: pow2Floor(Math.min(64, 1024 / D)) });

const BH = `
  let b = wid.y / p.H;
  let h = wid.y % p.H;`;

// Kernels with one invocation per query row (64 rows a workgroup) that stream K and V through
// workgroup memory in tiles of BKV key rows.
function queryRowsWithKeyTiles(D, BKV) {
  return `const D = ${D}u;
const BQ = 64u;
const BKV = ${BKV}u;
var<workgroup> Ks: array<f32, ${BKV * D}>;
var<workgroup> Vs: array<f32, ${BKV * D}>;
`;
}

// q: (B,T,C) queries at absolute positions past..past+T-1; k, v: (B,kvT,C) keys 0..; out: (B,T,C); lse: (B,H,T)
export function attentionForward(D) {
  const BKV = attentionTiles(D).fwdKeys;
  return kernel(`attention_forward_d${D}`,
    [["T", "u32"], ["kvT", "u32"], ["past", "u32"], ["H", "u32"], ["C", "u32"], ["scale", "f32"]],
    [["q", "read"], ["k", "read"], ["v", "read"], ["out", "rw"], ["lse", "rw"]], `
${queryRowsWithKeyTiles(D, BKV)}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {${BH}
  let qi = wid.x * BQ + li;
  let valid = qi < p.T;
  let tq = p.past + qi;
  var qr: array<f32, D>;
  var acc: array<f32, D>;
  if (valid) {
    let base = (b * p.T + qi) * p.C + h * D;
    for (var d = 0u; d < D; d++) { qr[d] = q[base + d] * p.scale; }
  }
  var mx = -1.0e30;
  var l = 0.0;
  let kv_end = p.past + min(p.T, wid.x * BQ + BQ); // keys any query of this workgroup sees
  for (var j0 = 0u; j0 < kv_end; j0 += BKV) {
    for (var e = li; e < BKV * D; e += BQ) {
      let j = j0 + e / D;
      var kk = 0.0;
      var vv = 0.0;
      if (j < kv_end) { let idx = (b * p.kvT + j) * p.C + h * D + e % D; kk = k[idx]; vv = v[idx]; }
      Ks[e] = kk;
      Vs[e] = vv;
    }
    workgroupBarrier();
    if (valid && j0 <= tq) {
      var s: array<f32, BKV>;
      var bmax = mx;
      for (var jj = 0u; jj < BKV; jj++) {
        var dot = 0.0;
        for (var d = 0u; d < D; d++) { dot = dot + qr[d] * Ks[jj * D + d]; }
        s[jj] = dot;
        if (j0 + jj <= tq) { bmax = max(bmax, dot); }
      }
      let corr = exp(mx - bmax);
      l = l * corr;
      for (var d = 0u; d < D; d++) { acc[d] = acc[d] * corr; }
      for (var jj = 0u; jj < BKV; jj++) {
        if (j0 + jj > tq) { break; }
        let pj = exp(s[jj] - bmax);
        l = l + pj;
        for (var d = 0u; d < D; d++) { acc[d] = acc[d] + pj * Vs[jj * D + d]; }
      }
      mx = bmax;
    }
    workgroupBarrier();
  }
  if (valid) {
    let base = (b * p.T + qi) * p.C + h * D;
    for (var d = 0u; d < D; d++) { out[base + d] = acc[d] / l; }
    lse[(b * p.H + h) * p.T + qi] = mx + log(l);
  }
}
`);
}

// dout, out: (B,T,C) -> delta: (B,H,T) = rowsum(dout · out) per head
export function attentionBackwardDelta(D) {
  return kernel(`attention_backward_delta_d${D}`, [["rows", "u32"], ["T", "u32"], ["H", "u32"], ["C", "u32"]],
    [["dout", "read"], ["out", "read"], ["delta", "rw"]], `
const D = ${D}u;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3u) {
  let i = gid.x; // (row, head)
  if (i >= p.rows * p.H) { return; }
  let r = i / p.H;
  let h = i % p.H;
  var s = 0.0;
  for (var d = 0u; d < D; d++) { s = s + dout[r * p.C + h * D + d] * out[r * p.C + h * D + d]; }
  delta[((r / p.T) * p.H + h) * p.T + r % p.T] = s;
}
`);
}

// One invocation per key j: dk_j = Σ_{i≥j} ds_ij·(scale·q_i), dv_j = Σ_{i≥j} p_ij·dout_i
export function attentionBackwardKV(D) {
  const BQ = attentionTiles(D).bwdRows;
  return kernel(`attention_backward_kv_d${D}`, [["T", "u32"], ["H", "u32"], ["C", "u32"], ["scale", "f32"]],
    [["q", "read"], ["k", "read"], ["v", "read"], ["dout", "read"], ["lse", "read"], ["delta", "read"],
      ["dk", "rw"], ["dv", "rw"]], `
const D = ${D}u;
const BK = 64u;
const BQ = ${BQ}u;
var<workgroup> Qs: array<f32, ${BQ * D}>;
var<workgroup> Os: array<f32, ${BQ * D}>;
var<workgroup> Ls: array<f32, ${BQ}>;
var<workgroup> Ds: array<f32, ${BQ}>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {${BH}
  let kj = wid.x * BK + li;
  let valid = kj < p.T;
  var kr: array<f32, D>;
  var vr: array<f32, D>;
  var dk_acc: array<f32, D>;
  var dv_acc: array<f32, D>;
  if (valid) {
    let base = (b * p.T + kj) * p.C + h * D;
    for (var d = 0u; d < D; d++) { kr[d] = k[base + d]; vr[d] = v[base + d]; }
  }
  for (var i0 = wid.x * BK; i0 < p.T; i0 += BQ) {
    for (var e = li; e < BQ * D; e += BK) {
      let i = i0 + e / D;
      var qq = 0.0;
      var oo = 0.0;
      if (i < p.T) { let idx = (b * p.T + i) * p.C + h * D + e % D; qq = q[idx] * p.scale; oo = dout[idx]; }
      Qs[e] = qq;
      Os[e] = oo;
    }
    for (var e = li; e < BQ; e += BK) {
      let i = i0 + e;
      var ll = 0.0;
      var dd = 0.0;
      if (i < p.T) { ll = lse[(b * p.H + h) * p.T + i]; dd = delta[(b * p.H + h) * p.T + i]; }
      Ls[e] = ll;
      Ds[e] = dd;
    }
    workgroupBarrier();
    if (valid) {
      for (var ii = 0u; ii < BQ; ii++) {
        let i = i0 + ii;
        if (i >= p.T) { break; }
        if (i < kj) { continue; }
        var s = 0.0;
        var dp = 0.0;
        for (var d = 0u; d < D; d++) { s = s + Qs[ii * D + d] * kr[d]; dp = dp + Os[ii * D + d] * vr[d]; }
        let pij = exp(s - Ls[ii]);
        let ds = pij * (dp - Ds[ii]);
        for (var d = 0u; d < D; d++) {
          dv_acc[d] = dv_acc[d] + pij * Os[ii * D + d];
          dk_acc[d] = dk_acc[d] + ds * Qs[ii * D + d];
        }
      }
    }
    workgroupBarrier();
  }
  if (valid) {
    let base = (b * p.T + kj) * p.C + h * D;
    for (var d = 0u; d < D; d++) { dk[base + d] = dk_acc[d]; dv[base + d] = dv_acc[d]; }
  }
}
`);
}

// One invocation per query i: dq_i = scale · Σ_{j≤i} ds_ij·k_j
export function attentionBackwardQ(D) {
  const BKV = attentionTiles(D).bwdRows;
  return kernel(`attention_backward_q_d${D}`, [["T", "u32"], ["H", "u32"], ["C", "u32"], ["scale", "f32"]],
    [["q", "read"], ["k", "read"], ["v", "read"], ["dout", "read"], ["lse", "read"], ["delta", "read"],
      ["dq", "rw"]], `
${queryRowsWithKeyTiles(D, BKV)}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {${BH}
  let qi = wid.x * BQ + li;
  let valid = qi < p.T;
  var qr: array<f32, D>;
  var orow: array<f32, D>;
  var dq_acc: array<f32, D>;
  var li_lse = 0.0;
  var li_delta = 0.0;
  if (valid) {
    let base = (b * p.T + qi) * p.C + h * D;
    for (var d = 0u; d < D; d++) { qr[d] = q[base + d] * p.scale; orow[d] = dout[base + d]; }
    li_lse = lse[(b * p.H + h) * p.T + qi];
    li_delta = delta[(b * p.H + h) * p.T + qi];
  }
  let kv_end = min(p.T, wid.x * BQ + BQ);
  for (var j0 = 0u; j0 < kv_end; j0 += BKV) {
    for (var e = li; e < BKV * D; e += BQ) {
      let j = j0 + e / D;
      var kk = 0.0;
      var vv = 0.0;
      if (j < kv_end) { let idx = (b * p.T + j) * p.C + h * D + e % D; kk = k[idx]; vv = v[idx]; }
      Ks[e] = kk;
      Vs[e] = vv;
    }
    workgroupBarrier();
    if (valid) {
      for (var jj = 0u; jj < BKV; jj++) {
        let j = j0 + jj;
        if (j > qi) { break; }
        var s = 0.0;
        var dp = 0.0;
        for (var d = 0u; d < D; d++) { s = s + qr[d] * Ks[jj * D + d]; dp = dp + orow[d] * Vs[jj * D + d]; }
        let ds = exp(s - li_lse) * (dp - li_delta);
        for (var d = 0u; d < D; d++) { dq_acc[d] = dq_acc[d] + ds * Ks[jj * D + d]; }
      }
    }
    workgroupBarrier();
  }
  if (valid) {
    let base = (b * p.T + qi) * p.C + h * D;
    for (var d = 0u; d < D; d++) { dq[base + d] = dq_acc[d] * p.scale; }
  }
}
`);
}
