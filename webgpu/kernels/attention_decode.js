// Attention of one query row per (batch, head) over its cached keys: a decoded token (T = 1), the
// forward of attention.js on the same uniforms and bindings, so Ops.attentionForward takes it for
// T = 1. attention.js's layouts give each query row SPLIT (4) invocations and stream the keys
// through workgroup memory a tile at a time, a barrier each: for one row, 4 invocations of a
// workgroup work and the keys pass in ctx/TILE serial rounds (docs/lab/2026-11-28-decoding-on-the-gpu.md).
// Here the whole workgroup shares the one row: every invocation scores its own keys straight from
// the cache, the softmax statistics meet in one fixed tree, and the values are summed by (key group,
// vec4 of the head) lanes. What a dispatch this small costs is its chain of waits on memory, so the
// values' first round is loaded with the query and the keys, before anything waits.
import { kernel, range } from "./kernel.js";

const MAX_THREADS = 256;
const UNROLL = 8; // keys a value lane loads at once (a round)

/** Invocations of a decode kernel for kvT keys: one key each up to 256 (at least 64), so that a short window's tree is short. */
export const decodeThreads = (kvT) => Math.min(MAX_THREADS, Math.max(64, 2 ** Math.ceil(Math.log2(kvT))));

/** Bytes of workgroup memory attendOne's arrays take. */
export const attendBytes = (kvT, threads = decodeThreads(kvT)) => 4 * kvT + 24 * threads;

/** Whether a decode kernel for kvT keys of head size D fits `workgroupBytes` of workgroup memory. */
export function attentionDecodeFits(D, kvT, workgroupBytes = 16384) {
  return D % 4 === 0 && decodeThreads(kvT) % (D / 4) === 0 && attendBytes(kvT) <= workgroupBytes;
}

/** Workgroups [x, y]: one per (batch, head). */
export const attentionDecodeGrid = (BH) => [BH, 1];

/**
 * WGSL of one query's attention over keys 0..keys-1 of head h, for a kernel of `threads` invocations
 * (decodeThreads(kvT) where not given; a multiple of D/4): `decls` (module scope) and `body`, which expects in scope li, h, keys, C4, the query
 * (scaled) in `qr: array<vec4f, D4>`, and kRow(j), vRow(j): the vec4 index where key j's row of the
 * cache starts in buffer kBuf, vBuf (its head's D4 vec4s follow h·D4 on). It writes
 * out[outRow·C4 + h·D4 ..] and lse[lseAt], or where given, runs store(i, value) for the output's vec4s
 * i < D4 (WGSL statements) and writes no lse.
 */
export function attendOne(D, kvT, { kRow, vRow, outRow, lseAt, store = null, kBuf = "k", vBuf = "v", threads = decodeThreads(kvT) }) {
  const D4 = D / 4;
  // a value lane's round from key jr: UNROLL keys GROUPS apart; one past the last reads the last one's
  // values and weighs them 0
  const valueLoads = (s, jr) => range(UNROLL).map((u) => `  let v${s}${u} = ${vBuf}[${vRow(`min(${jr} + ${u}u * GROUPS, keys - 1u)`)} + h * D4 + c];`).join("\n");
  const valueSums = (s, jr) => range(UNROLL).map((u) =>
    `  acc += select(0.0, exp(scores[min(${jr} + ${u}u * GROUPS, keys - 1u)] - row.x), ${jr} + ${u}u * GROUPS < keys) * v${s}${u};`).join("\n");
  const decls = /* wgsl */ `
const THREADS = ${threads}u;
const D4 = ${D4}u;
const GROUPS = THREADS / D4; // key groups of the values' pass, D4 lanes each
var<workgroup> scores: array<f32, ${kvT}>;
var<workgroup> stats: array<vec2f, THREADS>; // (max, Σexp) of each invocation's keys, then of the tree's pairs
var<workgroup> sums: array<vec4f, THREADS>; // each lane's share of the output`;
  const body = /* wgsl */ `
  let c = li % D4; // the value lane's vec4 of the head
  let g = li / D4; // and its key group
${valueLoads("f", "g")}
  // scores of keys li, li + THREADS, ..., with this invocation's running max and Σexp
  var mx = -1.0e30;
  var l = 0.0;
  for (var j = li; j < keys; j += THREADS) {
    let kb = ${kRow("j")} + h * D4;
    let s = ${range(D4).map((i) => `dot(qr[${i}], ${kBuf}[kb + ${i}u])`).join(" + ")};
    scores[j] = s;
    let m = max(mx, s);
    l = l * exp(mx - m) + exp(s - m);
    mx = m;
  }
  stats[li] = vec2f(mx, l);
  workgroupBarrier();
  for (var half = THREADS / 2u; half > 0u; half = half >> 1u) {
    if (li < half) {
      let a = stats[li];
      let z = stats[li + half];
      let m = max(a.x, z.x);
      stats[li] = vec2f(m, a.y * exp(a.x - m) + z.y * exp(z.x - m));
    }
    workgroupBarrier();
  }
  let row = stats[0];
  // Σ_j exp(s_j − max)·v_j: lane (g, c) sums vec4 c of keys g, g + GROUPS, ...
  var acc = vec4f(0.0);
${valueSums("f", "g")}
  for (var jr = g + ${UNROLL}u * GROUPS; jr < keys; jr += ${UNROLL}u * GROUPS) {
${valueLoads("", "jr")}
${valueSums("", "jr")}
  }
  sums[li] = acc;
  workgroupBarrier();
  if (li < D4) {
    var total = vec4f(0.0);
    for (var u = 0u; u < GROUPS; u++) { total += sums[u * D4 + li]; }
    ${store ? store("li", "total / row.y") : `out[(${outRow}) * C4 + h * D4 + li] = total / row.y;`}
  }${store ? "" : `
  if (li == 0u) { lse[${lseAt}] = row.x + log(row.y); }`}`;
  return { decls, body };
}

// q: query row b at row past + b of q's binding (its position, where one batched product wrote q, k
// and v); k, v: (B,kvT,C) keys 0..past; out: (B,1,C); lse: (B,H,1). D and kvT are compiled in: the
// scores of every key stay in workgroup memory between the two passes.
export function attentionDecode(D, kvT) {
  const D4 = D / 4;
  const attend = attendOne(D, kvT, { kRow: (j) => `(b * p.kvT + ${j}) * C4`, vRow: (j) => `(b * p.kvT + ${j}) * C4`,
    outRow: "b * p.T", lseAt: "(b * p.H + h) * p.T" });
  return kernel(`attention_decode_d${D}_k${kvT}`,
    [["T", "u32"], ["kvT", "u32"], ["past", "u32"], ["H", "u32"], ["C", "u32"], ["scale", "f32"]],
    [["q", "read", "vec4f"], ["k", "read", "vec4f"], ["v", "read", "vec4f"], ["out", "rw", "vec4f"], ["lse", "rw"]], /* wgsl */ `${attend.decls}

@compute @workgroup_size(THREADS)
fn attention_decode(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  let b = wid.x / p.H;
  let h = wid.x % p.H;
  let C4 = p.C / 4u;
  let keys = p.past + 1u; // the query at position past sees keys 0..past
  let qb = (p.past + b * p.T) * C4 + h * D4;
  var qr: array<vec4f, D4>; // indexed by constants only, so that it stays in registers
${range(D4).map((i) => `  qr[${i}] = q[qb + ${i}u] * p.scale;`).join("\n")}${attend.body}
}
`, "attention_decode");
}
