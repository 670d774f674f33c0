// Causal self-attention, FlashAttention-2 style. q, k, v, out: (B,T,C) with head h on channels
// h·D .. h·D+D-1. The forward keeps a running max and sum per query (online softmax) and saves one
// log-sum-exp per row; the backward recomputes P from q, k and that statistic, so no T×T matrix
// ever exists (memory linear in T). No atomics: dQ and dK/dV are two halves of one dispatch, each
// workgroup owning a block of rows of one of them.
//
// Parallel layout (all kernels): a workgroup owns ROWS rows (queries; keys for dK/dV) of one
// (batch, head) and gives each row SPLIT invocations. The other side (keys; queries) streams
// through workgroup memory in tiles of TILE rows; invocation t of a row takes rows t, t+SPLIT, ...
// of each tile and keeps its own partial state (softmax max and sum and accumulator, or gradient
// sums) in registers, so no barrier is needed per key. Afterwards the SPLIT partial states of a row
// are merged through workgroup memory in a fixed order (deterministic), or, with subgroups at least
// SPLIT wide (subgroups.js), by shuffles in a fixed butterfly, no barrier. Head rows are read as vec4
// (D is a multiple of 4); shared rows are padded by one vec4 so that invocations reading different
// rows at once hit different banks. D is compiled in.
import { kernel, range } from "./kernel.js";
import { shuffleSum } from "../subgroups.js";

const WORKGROUP_BYTES = 16384;

// Unrolls every `for (var i = 0u; i < NAME; i++) { ... }` whose bound is one of the compile-time
// constants given, so that private arrays (the per-invocation accumulators) are indexed by
// constants only and stay in registers: the driver does not unroll Tint's loops reliably, and one
// dynamic index sends the whole array to (slow) local memory.
function unrollLoops(code, bounds) {
  const head = new RegExp(`for \\(var (\\w+) = 0u; \\1 < (${Object.keys(bounds).join("|")}); \\1\\+\\+\\) \\{`);
  for (let m = head.exec(code); m; m = head.exec(code)) {
    let depth = 1, end = m.index + m[0].length;
    while (depth) depth += { "{": 1, "}": -1 }[code[end++]] ?? 0;
    const body = code.slice(m.index + m[0].length, end - 1), name = new RegExp(`(?<![.\\w])${m[1]}\\b`, "g");
    const copies = Array.from({ length: bounds[m[2]] }, (_, i) => `{${body.replace(name, `${i}u`)}}`);
    code = code.slice(0, m.index) + copies.join("\n") + code.slice(end);
  }
  return code;
}
const pow2Floor = (x) => 2 ** Math.floor(Math.log2(x));

/**
 * Each kind's layout options (attentionLayout), from timing every layout on every preset's shape on
 * a GPU (see docs/lab/2026-11-25-wgsl-step-vs-pytorch.md §15, §17 and
 * docs/lab/2026-11-26-wgsl-step-subgroups.md §21): the backward carries four gradient accumulators a
 * row where the forward carries one, so it wants fewer invocations a row (as two kernels, 4
 * invocations instead of 8 made the backward faster and the forward slower); as one dispatch (dq and
 * dk/dv side by side), 64 rows of 2 invocations with 16-row tiles were the fastest layout at large,
 * xl, huge and massive. The forward's invocations take two query rows each, so each key and value
 * vec4 read from workgroup memory feeds two rows' FMAs: faster alone, even within a step's run-to-run
 * spread. The backward's four accumulators a row leave no registers for a second row.
 */
export const ATTENTION_LAYOUTS = { forward: { queries: 2 }, backward: { rows: 64, split: 2, tile: 16 } };

/**
 * Up to this many query rows over all heads (B·H·T), both kinds take COMPACT_ATTENTION_LAYOUTS: tiny,
 * small and medium (1536, 3072 and 6144 rows; large has 9216, xl 8192). There the layouts above
 * give an H100 too few workgroups (small's backward: 96 of 128 invocations for 132 SMs), or a
 * partial last block (medium's T = 96 in blocks of 64). 16 rows of 4 invocations were the fastest
 * layout for both kinds at all three (see docs/lab/2026-11-27-wgsl-step-dispatch-costs.md §24).
 */
export const COMPACT_ATTENTION_MAX_ROWS = 6144;
const COMPACT_ATTENTION_LAYOUTS = { forward: { rows: 16, split: 4, tile: 32 }, backward: { rows: 16, split: 4, tile: 16 } };

/** The layout options of `kind` for head size D and `rows` query rows over all heads (B·H·T). */
export function attentionLayoutFor(kind, D, rows) {
  if (rows > COMPACT_ATTENTION_MAX_ROWS) return ATTENTION_LAYOUTS[kind];
  const compact = COMPACT_ATTENTION_LAYOUTS[kind];
  return { ...compact, tile: Math.min(compact.tile, fittingTile(D, compact.split)) };
}

// a kernel's name: the head size, a layout other than its kind's default, and whether it merges by
// shuffles (pipelines are cached by name)
function variant(D, { rows, split, tile, queries }, kind, G) {
  const base = attentionLayout(D, ATTENTION_LAYOUTS[kind]);
  const same = rows === base.rows && split === base.split && tile === base.tile && queries === base.queries;
  return `d${D}${same ? "" : `_r${rows}_s${split}_t${tile}_q${queries}`}${shuffles(split, G) ? "_sg" : ""}`;
}

/** Whether a layout of `split` invocations a row merges them by shuffles with subgroups of width G. */
const shuffles = (split, G) => split > 1 && G >= split;

/**
 * rows / queries · split invocations a workgroup, each taking `queries` rows (the forward only); tiles
 * as large as two fit in workgroup memory (≤ 64 rows), or `tile` rows where asked (the layout bench,
 * webgpu/bench/attention_layouts.mjs).
 */
export function attentionLayout(D, { rows = 32, split = 8, tile = null, queries = 1 } = {}) {
  return { rows, split, tile: tile ?? fittingTile(D, split), stride: D / 4 + 1, queries };
}

// the largest power-of-two tile (≤ 64 rows, ≥ split) of which two fit in workgroup memory with room for the rest
const fittingTile = (D, split) => Math.max(split, pow2Floor(Math.min(64, (WORKGROUP_BYTES - 1024) / (2 * (D / 4 + 1) * 16))));

// Compile-time constants of a layout; also the loop bounds that unrollLoops() unrolls.
function constants(D, { rows, split, tile, stride, queries = 1 }) {
  if (rows % queries) throw new Error(`attention layout: ${rows} rows are not ${queries} queries an invocation`);
  const wg = (rows / queries) * split, shared = 2 * tile * stride, round = Math.min(D / 4, Math.floor(shared / wg));
  // the shared tiles, the backward's (lse, delta) and delta's parts of each tile row
  const bytes = shared * 16 + 8 * tile + tile * D;
  if (round < 1 || tile % split || tile > wg || bytes > WORKGROUP_BYTES) throw new Error(`attention layout for D=${D} does not fit`);
  return {
    D4: D / 4, // vec4s per head row
    RS: stride, // row stride of a shared tile in vec4s (padded)
    ROWS: rows, SPLIT: split, WG: wg, TILE: tile,
    PER_THREAD: tile / split, // tile rows each invocation takes
    LOADS: Math.ceil((tile * D) / 4 / wg), // vec4s of each tile operand each invocation loads
    ROUND: round, // vec4s each invocation hands in per merge round
    ROUNDS: Math.ceil(D / 4 / round),
  };
}

// The shared tiles' vec4 i, counted flat (rows of RS), where merge scratch and statistics go
const flat = (i) => `sh[(${i}) / RS][(${i}) % RS]`;

// A kernel body with the layout's constants, the shared tiles (two operands, reused as merge
// scratch) and the merge of the SPLIT partial sums of each row (useShuffles: by subgroup shuffles);
// loops over constants unrolled.
function withPreamble(D, layout, useShuffles, body) {
  const k = constants(D, layout);
  return unrollLoops(/* wgsl */ `${Object.entries(k).map(([n, v]) => /* wgsl */ `const ${n} = ${v}u;`).join("\n")}
// rows [0, TILE): first operand; [TILE, 2·TILE): second. Two-dimensional so that bounds checks
// (WebGPU clamps every dynamic index) clamp a row once for all its vec4s, whose indices are
// constants once unrolled; a flat index needed a clamp per read.
var<workgroup> sh: array<array<vec4f, RS>, 2 * TILE>;

// Replaces each invocation's a by w·a summed over the SPLIT invocations of its row, for the vec4s c
// it owns (owns(c, t)); others are left stale (by shuffles: every vec4 is summed in every lane).
// Call from uniform control flow (barriers, shuffles).
${useShuffles ? /* wgsl */ `fn merge(a: ptr<function, array<vec4f, D4>>, w: f32, li: u32) {
  for (var c = 0u; c < D4; c++) {
    var v = (*a)[c] * w;
    ${shuffleSum("v", k.SPLIT)}
    (*a)[c] = v;
  }
}` : /* wgsl */ `fn merge(a: ptr<function, array<vec4f, D4>>, w: f32, li: u32) {
  let t = li % SPLIT;
  let first = li - t;
  for (var rd = 0u; rd < ROUNDS; rd++) {
    let r0 = rd * ROUND;
    for (var x = 0u; x < ROUND; x++) {
      if (r0 + x < D4) { ${flat("li * ROUND + x")} = (*a)[r0 + x] * w; }
    }
    workgroupBarrier();
    for (var x = 0u; x < ROUND; x++) {
      if (r0 + x < D4 && x % SPLIT == t) {
        var sum = vec4f(0.0);
        for (var u = 0u; u < SPLIT; u++) { sum += ${flat("(first + u) * ROUND + x")}; }
        (*a)[r0 + x] = sum;
      }
    }
    workgroupBarrier();
  }
}`}
fn owns(c: u32, t: u32) -> bool { return (c % ROUND) % SPLIT == t; }
${body}`, k);
}

// The next tile's global loads go out while the current tile is multiplied: each invocation holds
// its LOADS vec4s of each operand in registers (pre) until the barrier that ends the tile, then
// stores them into workgroup memory. So a tile's loads never stall the workgroup, whose rows each
// wait on one invocation's loads per tile otherwise.
// WGSL: this invocation's vec4s of rows j .. j+TILE-1 of one head of buf into pre (zeros from row
// `end` on); base: where in buf the tensor starts, in vec4s
const fetchTile = (buf, pre, j, rowBase, times = "", base = "") => /* wgsl */ `
    for (var x = 0u; x < LOADS; x++) {
      let e = li + x * WG;
      let r = e / D4;
      ${pre}[x] = vec4f(0.0);
      if (e < TILE * D4 && ${j} + r < end) { ${pre}[x] = ${buf}[${base}(${rowBase} + ${j} + r) * C4 + h * D4 + e % D4]${times}; }
    }`;
// WGSL: the vec4s fetched into pre, into tile rows [at, at+TILE)
const stashTile = (pre, at) => /* wgsl */ `
    for (var x = 0u; x < LOADS; x++) {
      let e = li + x * WG;
      if (e < TILE * D4) { sh[${at} + e / D4][e % D4] = ${pre}[x]; }
    }`;
const fetchRegisters = (...names) => names.map((n) => `
  var ${n}: array<vec4f, LOADS>;`).join("");

// Workgroup (x, y) = ((batch, head), row block): GPUs start workgroups x fastest, so every head's
// block of one length starts before any shorter block (longest first), and the short blocks fill the
// tail; with blocks fastest, each wave mixed all lengths and the longest ones started late.
// bh: the workgroup's (batch, head); block: its row block, in starting order
const HEAD = (bh) => /* wgsl */ `
  let b = ${bh} / p.H;
  let h = ${bh} % p.H;
  let C4 = p.C / 4u;
  let t = li % SPLIT;`;
// the longest (last) query block first
const QUERY_BLOCK = (block) => /* wgsl */ `
  let q0 = ((p.T + ROWS - 1u) / ROWS - 1u - ${block}) * ROWS;
  let qi = q0 + li / SPLIT;
  let valid = qi < p.T;`;
const vec4s = (names, mode) => names.map((n) => [n, mode, "vec4f"]);

// q: queries at absolute positions past..past+T-1, query row r at row past + r of q's binding (a decoded
// token's q lies at its position, as its k and v do in theirs: one batched product writes all three);
// k, v: (B,kvT,C) keys 0..; out: (B,T,C); lse: (B,H,T)
// G: the subgroup width (1: none). Each invocation takes `queries` rows of its workgroup (R below),
// rows/queries apart, so that every key vec4 it reads from workgroup memory serves R rows' FMAs.
export function attentionForward(D, layout = attentionLayout(D, ATTENTION_LAYOUTS.forward), G = 1) {
  const useShuffles = shuffles(layout.split, G), R = layout.queries, rowsOf = (f) => range(R).map(f).join("\n");
  const D4 = D / 4;
  return kernel(`attention_forward_${variant(D, layout, "forward", G)}`,
    [["T", "u32"], ["kvT", "u32"], ["past", "u32"], ["H", "u32"], ["C", "u32"], ["scale", "f32"]],
    [...vec4s(["q", "k", "v"], "read"), ["out", "rw", "vec4f"], ["lse", "rw"]], /* wgsl */ `
${withPreamble(D, layout, useShuffles, /* wgsl */ `
@compute @workgroup_size(WG)
fn attention_forward(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {${HEAD("wid.x")}
  let q0 = ((p.T + ROWS - 1u) / ROWS - 1u - wid.y) * ROWS; // the longest (last) query block first
${rowsOf((k) => /* wgsl */ `  let qi${k} = q0 + li / SPLIT + ${k * (layout.rows / R)}u;
  let valid${k} = qi${k} < p.T;
  let tq${k} = p.past + qi${k}; // sees keys 0..tq${k}
  var qr${k}: array<vec4f, D4>;
  var acc${k}: array<vec4f, D4>;
  if (valid${k}) {
    for (var c = 0u; c < D4; c++) { qr${k}[c] = q[(p.past + b * p.T + qi${k}) * C4 + h * D4 + c] * p.scale; }
  }
  var mx${k} = -1.0e30;
  var l${k} = 0.0;`)}
  let end = p.past + min(p.T, q0 + ROWS); // keys any query of the block sees${fetchRegisters("pk", "pv")}${fetchTile("k", "pk", "0u", "b * p.kvT")}${fetchTile("v", "pv", "0u", "b * p.kvT")}
  for (var j0 = 0u; j0 < end; j0 += TILE) {${stashTile("pk", "0u")}${stashTile("pv", "TILE")}
    workgroupBarrier();
    if (j0 + TILE < end) {${fetchTile("k", "pk", "(j0 + TILE)", "b * p.kvT")}${fetchTile("v", "pv", "(j0 + TILE)", "b * p.kvT")}
    }
    if (valid0 && j0 <= tq${R - 1}) {
${rowsOf((k) => `      var s${k}: array<f32, PER_THREAD>;\n      var bmax${k} = mx${k};`)}
      for (var i = 0u; i < PER_THREAD; i++) {
        let r = t + i * SPLIT;
${range(D4).map((c) => `        let k${c} = sh[r][${c}u];`).join("\n")}
${rowsOf((k) => `        let sc${k} = ${range(D4).map((c) => `dot(qr${k}[${c}u], k${c})`).reduce((x, y) => `${x} + ${y}`)};
        s${k}[i] = sc${k};
        if (j0 + r <= tq${k}) { bmax${k} = max(bmax${k}, sc${k}); }`)}
      }
${rowsOf((k) => `      let corr${k} = exp(mx${k} - bmax${k});
      l${k} *= corr${k};
      for (var c = 0u; c < D4; c++) { acc${k}[c] *= corr${k}; }`)}
      for (var i = 0u; i < PER_THREAD; i++) {
        let r = t + i * SPLIT;
${rowsOf((k) => `        var pr${k} = 0.0; // masked keys add 0·v, which leaves acc as it is
        if (j0 + r <= tq${k}) { pr${k} = exp(s${k}[i] - bmax${k}); l${k} += pr${k}; }`)}
        for (var c = 0u; c < D4; c++) {
          let vc = sh[TILE + r][c];
${rowsOf((k) => `          acc${k}[c] += pr${k} * vc;`)}
        }
      }
${rowsOf((k) => `      mx${k} = bmax${k};`)}
    }
    workgroupBarrier();
  }
${rowsOf((k) => /* wgsl */ `  {
    // the row's softmax statistics from its SPLIT partial (max, sum) pairs
    ${useShuffles ? /* wgsl */ `var m = mx${k};
    ${range(Math.log2(layout.split)).map((i) => `m = max(m, subgroupShuffleXor(m, ${2 ** i}u));`).join("\n    ")}
    var sum = l${k} * exp(mx${k} - m);
    ${shuffleSum("sum", layout.split)}` : /* wgsl */ `${flat("li")} = vec4f(mx${k}, l${k}, 0.0, 0.0);
    workgroupBarrier();
    let first = li - t;
    var m = -1.0e30;
    for (var u = 0u; u < SPLIT; u++) { m = max(m, ${flat("first + u")}.x); }
    var sum = 0.0;
    for (var u = 0u; u < SPLIT; u++) { sum += ${flat("first + u")}.y * exp(${flat("first + u")}.x - m); }
    workgroupBarrier();`}
    merge(&acc${k}, select(0.0, exp(mx${k} - m) / sum, valid${k}), li);
    if (valid${k}) {
      for (var c = 0u; c < D4; c++) {
        if (owns(c, t)) { out[(b * p.T + qi${k}) * C4 + h * D4 + c] = acc${k}[c]; }
      }
      if (t == 0u) { lse[(b * p.H + h) * p.T + qi${k}] = m + log(sum); }
    }
  }`)}
}
`)}`, "attention_forward");
}

// C++'s attention_backward is two halves of one dispatch here, so that each output block has one
// owner (no atomics) and neither waits for the other: workgroup (x, 2·block) computes dK, dV of key
// block `block`, (x, 2·block + 1) dQ of the query block of the same length. delta_i = dout_i·out_i,
// which both need, each computes for itself (the dK/dV half once per query tile) where a separate
// pass would cost a dispatch. q, k, v lie in one buffer qkv (q at float 0, k at q_stride, v at
// 2·q_stride), dq, dk, dv in dqkv (dq_stride apart); lse: (B,H,T).
// the dK/dV half's fetch of query tile rows j ..: scale·q, and dout, out and lse for each query's delta
const fetchQueries = (j) => `${fetchTile("qkv", "pq", j, "b * p.T", " * p.scale")}${fetchTile("dout", "pd", j, "b * p.T")}${fetchTile("out", "po", j, "b * p.T")}
    pl = 0.0;
    if (li < TILE && ${j} + li < end) { pl = lse[(b * p.H + h) * p.T + ${j} + li]; }`;

export function attentionBackward(D, layout = attentionLayout(D, ATTENTION_LAYOUTS.backward), G = 1) {
  if (layout.queries !== 1) throw new Error("attention backward: one row an invocation");
  return kernel(`attention_backward_${variant(D, layout, "backward", G)}`,
    [["T", "u32"], ["H", "u32"], ["C", "u32"], ["scale", "f32"], ["q_stride", "u32"], ["dq_stride", "u32"]],
    [...vec4s(["qkv", "dout", "out"], "read"), ["lse", "read"], ["dqkv", "rw", "vec4f"]], /* wgsl */ `
${withPreamble(D, layout, shuffles(layout.split, G), /* wgsl */ `
var<workgroup> stats: array<vec2f, TILE>; // (lse, delta) of the tile's queries (dK/dV half)
var<workgroup> delta_parts: array<array<f32, D4>, TILE>; // dout·out of each vec4 of the tile's rows

// dq_i = scale · Σ_{j≤i} ds_ij·k_j, ds_ij = p_ij·(dout_i·v_j − delta_i)
fn backward_q(bh: u32, block: u32, li: u32) {${HEAD("bh")}${QUERY_BLOCK("block")}
  let K4 = p.q_stride / 4u;
  var qr: array<vec4f, D4>;
  var dor: array<vec4f, D4>;
  var dqa: array<vec4f, D4>;
  var row_lse = 0.0;
  var row_delta = 0.0;
  if (valid) {
    let base = (b * p.T + qi) * C4 + h * D4;
    for (var c = 0u; c < D4; c++) {
      qr[c] = qkv[base + c] * p.scale;
      dor[c] = dout[base + c];
      row_delta += dot(dor[c], out[base + c]);
    }
    row_lse = lse[(b * p.H + h) * p.T + qi];
  }
  let end = min(p.T, q0 + ROWS);${fetchRegisters("pk", "pv")}${fetchTile("qkv", "pk", "0u", "b * p.T", "", "K4 + ")}${fetchTile("qkv", "pv", "0u", "b * p.T", "", "2u * K4 + ")}
  for (var j0 = 0u; j0 < end; j0 += TILE) {${stashTile("pk", "0u")}${stashTile("pv", "TILE")}
    workgroupBarrier();
    if (j0 + TILE < end) {${fetchTile("qkv", "pk", "(j0 + TILE)", "b * p.T", "", "K4 + ")}${fetchTile("qkv", "pv", "(j0 + TILE)", "b * p.T", "", "2u * K4 + ")}
    }
    if (valid && j0 <= qi) {
      for (var i = 0u; i < PER_THREAD; i++) {
        let r = t + i * SPLIT;
        if (j0 + r <= qi) {
          var s = 0.0;
          var dp = 0.0;
          for (var c = 0u; c < D4; c++) { s += dot(qr[c], sh[r][c]); dp += dot(dor[c], sh[TILE + r][c]); }
          let ds = exp(s - row_lse) * (dp - row_delta);
          for (var c = 0u; c < D4; c++) { dqa[c] += ds * sh[r][c]; }
        }
      }
    }
    workgroupBarrier();
  }
  merge(&dqa, p.scale, li);
  if (valid) {
    for (var c = 0u; c < D4; c++) {
      if (owns(c, t)) { dqkv[(b * p.T + qi) * C4 + h * D4 + c] = dqa[c]; }
    }
  }
}

// dk_j = Σ_{i≥j} ds_ij·(scale·q_i), dv_j = Σ_{i≥j} p_ij·dout_i
fn backward_kv(bh: u32, block: u32, li: u32) {${HEAD("bh")}
  let K4 = p.q_stride / 4u;
  let DK4 = p.dq_stride / 4u;
  let k0 = block * ROWS; // block 0, which sees every query, first
  let kj = k0 + li / SPLIT;
  let valid = kj < p.T;
  var kr: array<vec4f, D4>;
  var vr: array<vec4f, D4>;
  var dka: array<vec4f, D4>;
  var dva: array<vec4f, D4>;
  if (valid) {
    let base = (b * p.T + kj) * C4 + h * D4;
    for (var c = 0u; c < D4; c++) { kr[c] = qkv[K4 + base + c]; vr[c] = qkv[2u * K4 + base + c]; }
  }
  let end = p.T;${fetchRegisters("pq", "pd", "po")}
  var pl = 0.0; // lse of the fetched tile's query li (li < TILE)
${fetchQueries("k0")}
  for (var j0 = k0; j0 < end; j0 += TILE) {${stashTile("pq", "0u")}${stashTile("pd", "TILE")}
    for (var x = 0u; x < LOADS; x++) {
      let e = li + x * WG;
      if (e < TILE * D4) { delta_parts[e / D4][e % D4] = dot(pd[x], po[x]); }
    }
    if (li < TILE) { stats[li].x = pl; }
    workgroupBarrier();
    if (li < TILE) { // delta of query li, summed as backward_q sums it
      var row_delta = 0.0;
      for (var c = 0u; c < D4; c++) { row_delta += delta_parts[li][c]; }
      stats[li].y = row_delta;
    }
    workgroupBarrier();
    if (j0 + TILE < end) {${fetchQueries("(j0 + TILE)")}
    }
    if (valid) {
      for (var x = 0u; x < PER_THREAD; x++) {
        let r = t + x * SPLIT;
        if (j0 + r >= kj && j0 + r < end) {
          var s = 0.0;
          var dp = 0.0;
          for (var c = 0u; c < D4; c++) { s += dot(sh[r][c], kr[c]); dp += dot(sh[TILE + r][c], vr[c]); }
          let pr = exp(s - stats[r].x);
          let ds = pr * (dp - stats[r].y);
          for (var c = 0u; c < D4; c++) {
            dva[c] += pr * sh[TILE + r][c];
            dka[c] += ds * sh[r][c];
          }
        }
      }
    }
    workgroupBarrier();
  }
  merge(&dka, 1.0, li);
  merge(&dva, 1.0, li);
  if (valid) {
    let base = (b * p.T + kj) * C4 + h * D4;
    for (var c = 0u; c < D4; c++) {
      if (owns(c, t)) { dqkv[DK4 + base + c] = dka[c]; dqkv[2u * DK4 + base + c] = dva[c]; }
    }
  }
}

@compute @workgroup_size(WG)
fn attention_backward(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
  if (wid.y % 2u == 0u) {
    backward_kv(wid.x, wid.y / 2u, li);
  } else {
    backward_q(wid.x, wid.y / 2u, li);
  }
}
`)}`, "attention_backward");
}

/**
 * Workgroup counts of a kernel whose workgroups own `rows` rows of each (batch, head): [B·H, blocks]
 * (halves: the backward's two, [B·H, 2·blocks]).
 */
export const attentionGrid = (T, BH, layout, halves = 1) => [BH, halves * Math.ceil(T / layout.rows)];
