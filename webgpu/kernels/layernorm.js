// LayerNorm over the last dimension C. Forward and backward give each row `lanes` cooperating
// invocations (256 / lanes rows per workgroup of 256): adjacent lanes read adjacent columns, so
// loads coalesce, and a row's partial sums meet in workgroup memory, where every lane of the row
// adds the row's partials in the same fixed order (one barrier per reduction, no scheduling
// dependence). With subgroups (width G > 1, subgroups.js) runs of G lanes first add theirs by
// shuffles, and only the lanes / G run sums meet in workgroup memory (none where G = lanes: no
// barrier). Forward saves (mean, rstd) per row; backward recomputes x̂ from them. C++'s
// layernorm_backward is two kernels here: layernorm_backward_input (dx, row-parallel) and
// layernorm_backward_params (dw, db, column-parallel).
// 32 lanes suit C ≤ 192; past that 64 lanes are faster, below it no faster (measured on an H200:
// docs/lab/2026-11-26-wgsl-step-subgroups.md).
import { kernel, LINEAR_ID, range } from "./kernel.js";
import { sumSlabs, SPLIT_REGIONS, SUM_REGION_FIELDS, splitRegionFields, splitRegionChain } from "./matmul.js";
import { shuffleSum } from "../subgroups.js";

// fn name(v, li): v summed over the LANES lanes of li's row, the same in every lane; through
// workgroup memory (its own scratch, where it needs any); call from uniform control flow (a barrier).
function rowSum(name, type, lanes, G) {
  const width = Math.min(G, lanes), scratch = `${name}_scratch`;
  if (width === 1) {
    return /* wgsl */ `var<workgroup> ${scratch}: array<${type}, 256>;
fn ${name}(v: ${type}, li: u32) -> ${type} {
  ${scratch}[li] = v;
  workgroupBarrier();
  let lane0 = li - li % LANES;
  var s = ${type}(0.0);
  for (var k = 0u; k < LANES; k++) { s = s + ${scratch}[lane0 + k]; }
  return s;
}`;
  }
  const shuffled = /* wgsl */ `var s = v;
  ${shuffleSum("s", width)}`;
  if (width === lanes) return /* wgsl */ `fn ${name}(v: ${type}, li: u32) -> ${type} {
  ${shuffled}
  return s;
}`;
  return /* wgsl */ `var<workgroup> ${scratch}: array<${type}, ${256 / width}>;
fn ${name}(v: ${type}, li: u32) -> ${type} {
  ${shuffled}
  if (li % ${width}u == 0u) { ${scratch}[li / ${width}u] = s; }
  workgroupBarrier();
  let run0 = (li - li % LANES) / ${width}u;
  var t = ${type}(0.0);
  for (var k = 0u; k < ${lanes / width}u; k++) { t = t + ${scratch}[run0 + k]; }
  return t;
}`;
}

// Opens the entry point (asFunction: a function of the workgroup's linear index w, for a kernel that
// gives its first workgroups to the rows): `row` (may be ≥ p.rows in the last workgroup: such lanes
// still reach every barrier but read row `src` = p.rows - 1 and write nothing: `in_range`), `lane`,
// `base` = src's first element. sums: [[name, type]], the row sums (rowSum) the kernel calls.
const rowMain = (entryPoint, lanes, G, sums, asFunction = false) => /* wgsl */ `${LINEAR_ID}
const LANES = ${lanes}u;
${sums.map(([name, type]) => rowSum(name, type, lanes, G)).join("\n")}
${asFunction ? `fn ${entryPoint}(w: u32, li: u32) {` : /* wgsl */ `@compute @workgroup_size(256)
fn ${entryPoint}(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let w = linear_workgroup(wid, nwg);`}
  let row = w * ${256 / lanes}u + li / LANES;
  let lane = li % LANES;
  let in_range = row < p.rows;
  let src = min(row, p.rows - 1u);
  let base = src * p.C;`;

// sumIn (both row kernels): the row kernel's input is a split-K product's result, left unsummed by
// the product (Ops.matmul's sums): the LayerNorm adds its `splits` slabs of parts[src + z·len ..] in
// order (then the forward's bias and residual, flags 1 and 4), as matmul_split_final would, stores the
// sum where the product's result belongs (the input binding, read_write then), and reads it back in
// its later passes: the product's final sum costs no dispatch of its own. Each lane reads back only
// what it wrote (lanes past the last row, which write nothing, compute rows nobody uses).
const SUM_IN_UNIFORMS = [["src", "u32"], ["len", "u32"], ["splits", "u32"]];
const slabSum = (i) => sumSlabs("parts", "p.src", "p.splits", "p.len", i);

// The forward's input (layernormForward's `input`): "x" as it is; "sum": x is a split-K product
// left unsummed (sumIn, above); "embed": x is the embedding, wte[token] + wpe[past + row mod T] (as
// embedding_forward), computed and stored into x here, so block 0's first LayerNorm costs the
// embedding no dispatch of its own.
const FORWARD_INPUTS = {
  x: { uniforms: [], buffers: [] },
  sum: { uniforms: [...SUM_IN_UNIFORMS, ["bias_off", "u32"], ["flags", "u32"]], buffers: [["parts", "read"], ["R", "read"]] },
  embed: { uniforms: [["T", "u32"], ["past", "u32"], ["wte_off", "u32"], ["wpe_off", "u32"]], buffers: [["tokens", "read", "u32"]] },
};
// element (row src, column c) of the input, stored into x
const forwardInput = {
  sum: /* wgsl */ `
// element i (column c) of the product: its slabs (+ bias) (+ R)
fn input_at(i: u32, src: u32, c: u32) -> f32 {
  ${slabSum("i")}
  if ((p.flags & 1u) != 0u) { v = v + params[p.bias_off + c]; }
  if ((p.flags & 4u) != 0u) { v = v + R[i]; }
  return v;
}`,
  embed: /* wgsl */ `
fn input_at(i: u32, src: u32, c: u32) -> f32 {
  return params[p.wte_off + tokens[src] * p.C + c] + params[p.wpe_off + (p.past + src % p.T) * p.C + c];
}`,
};

// x: (rows,C) -> out: (rows,C); stats: (rows,2) = mean, rstd (variance from a second pass over x:
// no cancellation when |mean| ≫ std, as in the residual stream)
const forwardKernel = (lanes, input, G) => kernel(`layernorm_forward_lanes${lanes}${input === "x" ? "" : `_${input}`}${sgName(lanes, G)}`,
  [["rows", "u32"], ["C", "u32"], ["w_off", "u32"], ["b_off", "u32"], ["eps", "f32"], ...FORWARD_INPUTS[input].uniforms],
  [["x", input === "x" ? "read" : "rw"], ["params", "read"], ["out", "rw"], ["stats", "rw"], ...FORWARD_INPUTS[input].buffers],
  /* wgsl */ `${forwardInput[input] ?? ""}
${rowMain("layernorm_forward", lanes, G, [["row_sum_a", "f32"], ["row_sum_b", "f32"]])}
  var s = 0.0;
  ${input === "x" ? "for (var c = lane; c < p.C; c += LANES) { s = s + x[base + c]; }" : /* wgsl */ `for (var c = lane; c < p.C; c += LANES) {
    let v = input_at(base + c, src, c);
    if (in_range) { x[base + c] = v; }
    s = s + v;
  }`}
  let mean = row_sum_a(s, li) / f32(p.C);
  var q = 0.0;
  for (var c = lane; c < p.C; c += LANES) { let d = x[base + c] - mean; q = q + d * d; }
  let rstd = 1.0 / sqrt(row_sum_b(q, li) / f32(p.C) + p.eps);
  if (!in_range) { return; }
  for (var c = lane; c < p.C; c += LANES) {
    out[base + c] = (x[base + c] - mean) * rstd * params[p.w_off + c] + params[p.b_off + c];
  }
  if (lane == 0u) {
    stats[2u * row] = mean;
    stats[2u * row + 1u] = rstd;
  }
}
`, "layernorm_forward");

// dout: (rows,C) -> dx[dx_out ..] (rows,C), written (flags 0) or added (flags 1: the residual
// stream's gradient) to dx[dx_in ..]; dx_in = dx_out in place, apart where the trainer keeps each
// stage of the residual stream's gradient for the deferred weight gradients
const backwardInputUniforms = (sumIn) => [["rows", "u32"], ["C", "u32"], ["w_off", "u32"], ["flags", "u32"], ["dx_in", "u32"], ["dx_out", "u32"],
  ...(sumIn ? SUM_IN_UNIFORMS : [])];
const backwardInputBuffers = (sumIn) => [["dout", sumIn ? "rw" : "read"], ["x", "read"], ["stats", "read"], ["params", "read"], ["dx", "rw"],
  ...(sumIn ? [["parts", "read"]] : [])];
const backwardInputBody = (lanes, G, sumIn, asFunction = false) => /* wgsl */ `${rowMain("layernorm_backward_input", lanes, G, [["row_sum", "vec2f"]], asFunction)}
  let mean = stats[2u * src];
  let rstd = stats[2u * src + 1u];
  var a = 0.0;
  var b = 0.0;
  for (var c = lane; c < p.C; c += LANES) {
    ${sumIn ? /* wgsl */ `${slabSum("base + c")}
    if (in_range) { dout[base + c] = v; }
    let dn = v * params[p.w_off + c];` : "let dn = dout[base + c] * params[p.w_off + c];"}
    a = a + dn;
    b = b + dn * (x[base + c] - mean) * rstd;
  }
  let sums = row_sum(vec2f(a, b), li) / f32(p.C);
  let mean_dn = sums.x;
  let mean_dn_xhat = sums.y;
  if (!in_range) { return; }
  for (var c = lane; c < p.C; c += LANES) {
    let xhat = (x[base + c] - mean) * rstd;
    var g = (dout[base + c] * params[p.w_off + c] - mean_dn - xhat * mean_dn_xhat) * rstd;
    if (p.flags == 1u) { g = g + dx[p.dx_in + base + c]; }
    dx[p.dx_out + base + c] = g;
  }
}
`;
const backwardInputKernel = (lanes, sumIn, G) => kernel(`layernorm_backward_input_lanes${lanes}${sumIn ? "_sum" : ""}${sgName(lanes, G)}`,
  backwardInputUniforms(sumIn), backwardInputBuffers(sumIn), backwardInputBody(lanes, G, sumIn), "layernorm_backward_input");

/** The lanes per row the row kernels are specialised for. */
export const LAYERNORM_LANES = [32, 64];
// a variant's name: the subgroup width it uses, where it uses any
const sgName = (lanes, G) => (Math.min(G, lanes) > 1 ? `_sg${Math.min(G, lanes)}` : "");
const rowKernels = new Map();

/**
 * The row kernels (forward, backwardInput, their sumIn variants forwardSum, backwardInputSum, and
 * forwardEmbed) of one lane count, for subgroups of width G (1: none).
 */
export function layernormRowKernels(lanes, G = 1) {
  const key = `${lanes}_${Math.min(G, lanes)}`;
  if (!rowKernels.has(key)) {
    rowKernels.set(key, {
      forward: forwardKernel(lanes, "x", G), backwardInput: backwardInputKernel(lanes, false, G),
      forwardSum: forwardKernel(lanes, "sum", G), backwardInputSum: backwardInputKernel(lanes, true, G),
      forwardEmbed: forwardKernel(lanes, "embed", G), rowsPerGroup: 256 / lanes,
    });
  }
  return rowKernels.get(key);
}

// the lanes a row of C takes (see the rule at the top)
const lanesFor = (C) => (C > 192 ? 64 : 32);

/** The row kernels for rows of C (subgroup width G), and their workgroup count for `rows` rows (see grid1d). */
export function layernormKernels(C, G = 1) {
  const k = layernormRowKernels(lanesFor(C), G);
  return { ...k, workgroups: (rows) => Math.ceil(rows / k.rowsPerGroup) };
}

// The parameter gradients in one pass, without scratch: a workgroup owns PARAM_COLS columns and
// sums all rows for them, its 256 invocations as PARAM_COLS columns × (256 / PARAM_COLS) row lanes
// (many short serial loops; the rows were just read, so mostly hit L2); the row lanes' sums then
// meet in workgroup memory and are added in lane order (with subgroups, each run of G lanes first
// adds its G / PARAM_COLS sums of a column by shuffles, and only the runs' sums meet). 2 columns a
// workgroup timed fastest of 1, 2, 4 and 8, and far faster than the former two-pass partial + final
// (docs/lab/2026-11-25-wgsl-step-vs-pytorch.md).
const PARAM_COLS = 2;
const PARAM_ROW_LANES = 256 / PARAM_COLS;

export const layernormBackwardParamsWorkgroups = (C) => Math.ceil(C / PARAM_COLS);

/** LayerNorms whose parameter gradients one layernorm_backward_params dispatch computes (a block's two). */
export const LAYERNORM_PARAM_JOBS = 2;

// Job j: grads[w_off_j + c] = Σ_rows dout_j·x̂_j (the weight's), grads[w_off_j + C + c] = Σ_rows
// dout_j (the bias's); x̂_j from x_j and stats_j. Both jobs have `rows` rows of C; a job's buffers are
// bindings of their own (WGSL cannot pick a binding by index): names(j) = [dout, x, stats], dout a
// binding's name or a function of the element's index giving it.
const jobBindings = (j) => [`dout${j}`, `x${j}`, `stats${j}`];
const element = (dout, i) => (typeof dout === "function" ? dout(i) : `${dout}[${i}]`);
// WGSL: dw += Σ dout·x̂, db += Σ dout over rows first, first + step, ... < rows of column c
export const columnSums = ([dout, x, stats], first, step, rows = "p.rows") => /* wgsl */ `for (var r = ${first}; r < ${rows}; r += ${step}) {
      let d = ${element(dout, "r * p.C + c")};
      dw = dw + d * (${x}[r * p.C + c] - ${stats}[2u * r]) * ${stats}[2u * r + 1u];
      db = db + d;
    }`;
// Each lane's (dw, db) into column_sums[]: as they are (G = 1), or summed over the lanes of the same
// column in each run of G, the run's sums at column_sums[run·PARAM_COLS + column]
const paramsMeet = (G) => (G > PARAM_COLS ? /* wgsl */ `var s = vec2f(dw, db);
  ${shuffleSum("s", G, PARAM_COLS)}
  if (li % ${G}u < ${PARAM_COLS}u) { column_sums[li / ${G}u * ${PARAM_COLS}u + col] = s; }
  workgroupBarrier();` : /* wgsl */ `column_sums[li] = vec2f(dw, db);
  workgroupBarrier();`);
// fn layernorm_params(wx, j, li): columns wx·PARAM_COLS.. of job j (call from uniform control flow)
const paramsFn = (G, names) => /* wgsl */ `
var<workgroup> column_sums: array<vec2f, 256>;
fn layernorm_params(wx: u32, j: u32, li: u32) {
  let col = li % ${PARAM_COLS}u;
  let c = min(wx * ${PARAM_COLS}u + col, p.C - 1u);
  var dw = 0.0;
  var db = 0.0;
  ${range(LAYERNORM_PARAM_JOBS).map((j) => `if (j == ${j}u) {
    ${columnSums(names(j), `li / ${PARAM_COLS}u`, `${PARAM_ROW_LANES}u`)}
  }`).join(" else ")}
  ${paramsMeet(G)}
  if (li >= ${PARAM_COLS}u || wx * ${PARAM_COLS}u + col >= p.C) { return; }
  var total = vec2f(0.0);
  for (var k = 0u; k < ${G > PARAM_COLS ? 256 / G : PARAM_ROW_LANES}u; k++) { total = total + column_sums[col + k * ${PARAM_COLS}u]; }
  let w_off = ${range(LAYERNORM_PARAM_JOBS).slice(1).reduce((acc, j) => `select(${acc}, p.w_off${j}, j == ${j}u)`, "p.w_off0")};
  grads[w_off + c] = total.x;
  grads[w_off + p.C + c] = total.y;
}
`;
// withSums: the same dispatch also finishes up to SPLIT_REGIONS split-K weight gradients, a block's
// (ops.recordSplitSums' regions, each into grads with no epilogue), which nothing reads before the
// optimizer: after the LayerNorms' workgroups, each sums 256 elements' slabs (element g), in
// matmul_split_final's order, so a block's end is one dispatch. The LayerNorms' workgroups come
// first, so their long serial loops start before the short sums.
const sumsUniforms = (withSums) => (withSums ? range(SPLIT_REGIONS).flatMap((r) => splitRegionFields(r, SUM_REGION_FIELDS).map((f) => [f, "u32"])) : []);
const finishFn = (withSums, scratch = "partials") => (withSums ? /* wgsl */ `
fn finish(i_all: u32, src: u32, len: u32, splits: u32, c_off: u32, c_zs: u32) {
  let batch = i_all / len;
  let i = i_all - batch * len;
  ${sumSlabs(scratch, "src + batch * splits * len", "splits", "len", "i")}
  grads[c_off + batch * c_zs + i] = v;
}
` : "");
const finishElement = (g) => splitRegionChain(g, (r) => splitRegionFields(r, SUM_REGION_FIELDS).slice(1).map((f) => `p.${f}`));
const paramsUniforms = (withSums) => [["rows", "u32"], ["C", "u32"], ...range(LAYERNORM_PARAM_JOBS).map((j) => [`w_off${j}`, "u32"]), ...sumsUniforms(withSums)];

// The block's end alone: workgroup (x, y) is column group x of job y, or, from row p.jobs on, sums.
const paramsKernel = (withSums, G) => kernel(`layernorm_backward_params${withSums ? "_sums" : ""}${G > PARAM_COLS ? `_sg${G}` : ""}`,
  [...paramsUniforms(withSums), ...(withSums ? [["jobs", "u32"]] : [])],
  [...range(LAYERNORM_PARAM_JOBS).flatMap((j) => jobBindings(j).map((n) => [n, "read"])), ["grads", "rw"], ...(withSums ? [["partials", "read"]] : [])],
  /* wgsl */ `${paramsFn(G, jobBindings)}${finishFn(withSums)}
@compute @workgroup_size(256)
fn layernorm_backward_params(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {${withSums ? /* wgsl */ `
  if (wid.y >= p.jobs) {
    let g = ((wid.y - p.jobs) * nwg.x + wid.x) * 256u + li;
    ${finishElement("g")}
    return;
  }` : ""}
  layernorm_params(wid.x, wid.y, li);
}
`, "layernorm_backward_params");

// ln1's backward input and the block's end in one dispatch (C++'s layernorm_backward is both): the
// first p.row_groups workgroups are layernorm_backward_input's (dout, x, stats: ln1's; dx: the
// residual stream's gradient, added to), the next 2·p.nx the parameter gradients of job 0 (ln2:
// dout0, x0, stats0) and job 1 (ln1, from the same x and stats), then (withSums) the block's split-K
// sums. sumIn: ln1's dout is a split-K product's slabs, which the rows sum into dout as
// layernorm_backward_input_*_sum does; job 1 adds them itself, in the same order, rather than read
// dout while the rows write it. With both sums, both sets of slabs lie in one scratch buffer (`parts`:
// the trainer keeps them so). It binds 10 storage buffers, more than WebGPU's default 8 (browsers
// commonly offer 10), so Ops uses it only where the device offers them.
const blockEndKernel = (lanes, sumIn, withSums, G) => {
  const paramsG = G > PARAM_COLS ? G : 1;
  const ln1Dout = sumIn ? (i) => `ln1_dout(${i})` : "dout";
  return kernel(`layernorm_backward_block_lanes${lanes}${sumIn ? "_sum" : ""}${withSums ? "_sums" : ""}${sgName(lanes, G)}`,
    [...backwardInputUniforms(sumIn), ...paramsUniforms(withSums).slice(2), ["row_groups", "u32"], ["nx", "u32"]], // rows, C once
    [...backwardInputBuffers(sumIn), ...jobBindings(0).map((n) => [n, "read"]), ["grads", "rw"], ...(withSums && !sumIn ? [["partials", "read"]] : [])],
    /* wgsl */ `${backwardInputBody(lanes, G, sumIn, true)}${sumIn ? /* wgsl */ `
fn ln1_dout(i: u32) -> f32 {
  ${slabSum("i")}
  return v;
}` : ""}${paramsFn(paramsG, (j) => (j === 0 ? jobBindings(0) : [ln1Dout, "x", "stats"]))}${finishFn(withSums, sumIn ? "parts" : "partials")}
@compute @workgroup_size(256)
fn layernorm_backward(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let w = linear_workgroup(wid, nwg); // uniform: each branch is taken by a whole workgroup
  if (w < p.row_groups) {
    layernorm_backward_input(w, li);
    return;
  }
  let v = w - p.row_groups;
  if (v < ${LAYERNORM_PARAM_JOBS}u * p.nx) {
    layernorm_params(v % p.nx, v / p.nx, li);
    return;
  }${withSums ? /* wgsl */ `
  let g = (v - ${LAYERNORM_PARAM_JOBS}u * p.nx) * 256u + li;
  ${finishElement("g")}` : ""}
}
`, "layernorm_backward");
};
const blockEndKernels = new Map();

/** The block-end kernel (blockEndKernel) of `lanes` lanes a row, for subgroups of width G (1: none). */
export function layernormBlockEndKernel(lanes, sumIn, withSums, G = 1) {
  const key = `${lanes}_${G}_${sumIn}_${withSums}`;
  if (!blockEndKernels.has(key)) blockEndKernels.set(key, blockEndKernel(lanes, sumIn, withSums, G));
  return blockEndKernels.get(key);
}

/**
 * The block-end kernels for rows of C, subgroup width G: { kernel(sumIn, withSums), rowGroups(rows) },
 * its rows laid out as layernorm_backward_input's (layernormKernels' workgroups).
 */
export function layernormBlockEndKernels(C, G = 1) {
  const lanes = lanesFor(C);
  return { kernel: (sumIn, withSums) => layernormBlockEndKernel(lanes, sumIn, withSums, G), rowGroups: layernormKernels(C, G).workgroups };
}

const paramsKernels = new Map();

/**
 * layernorm_backward_params for subgroups of width G (1: none), and its twin that also finishes a
 * block's split-K weight gradients (ops.layernormBackwardParams' sums): { plain, withSums }.
 */
export function layernormParamsKernels(G = 1) {
  const width = G > PARAM_COLS ? G : 1;
  if (!paramsKernels.has(width)) paramsKernels.set(width, { plain: paramsKernel(false, width), withSums: paramsKernel(true, width) });
  return paramsKernels.get(width);
}
