// Token + position embedding. The backward is a scatter-add without float atomics: the host sorts
// the batch's positions by token (counting sort, O(B·T)), and one invocation per (token, channel)
// sums its rows in ascending position order, so the result is deterministic. C++'s embedding_backward
// is one kernel here whose workgroups split between the token (wte) and position (wpe) sums, ln_f's
// parameter gradients, and the gradient norm's partial sums.
import { kernel, LINEAR_ID, range, workgroupSum } from "./kernel.js";
import { NORM_THREADS } from "./adamw.js";
import { columnSums } from "./layernorm.js";
import { sumSlabs } from "./matmul.js";

// tokens: (rows) -> out: (rows,C) = wte[token] + wpe[past + t], t = row mod T
export const embeddingForward = kernel("embedding_forward",
  [["rows", "u32"], ["T", "u32"], ["C", "u32"], ["past", "u32"], ["wte_off", "u32"], ["wpe_off", "u32"]],
  [["tokens", "read", "u32"], ["params", "read"], ["out", "rw"]], /* wgsl */ `${LINEAR_ID}
@compute @workgroup_size(256)
fn embedding_forward(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let i = linear_workgroup(wid, nwg) * 256u + li;
  if (i >= p.rows * p.C) { return; }
  let r = i / p.C;
  let c = i % p.C;
  out[i] = params[p.wte_off + tokens[r] * p.C + c] + params[p.wpe_off + (p.past + r % p.T) * p.C + c];
}
`);

const ROWS_IN_FLIGHT = 8;
// A token's rows are summed by TOKEN_LANES invocations, lane j taking its j-th, (j+8)-th, ... rows,
// then the lanes' sums added in lane order: the chain of a frequent byte (a space: ~15% of B·T rows,
// ~230 at medium), two dependent loads a row, is an eighth as long. A workgroup is TOKEN_CHANNELS
// channels of one token, TOKEN_LANES lanes each.
const TOKEN_LANES = 8;
export const TOKEN_CHANNELS = NORM_THREADS / TOKEN_LANES;

// order: [V+1 starts | rows positions sorted by token]; dres: (B,T,C); grads: (n). The embedding's
// backward, the last gradients of a step, ln_f's parameter gradients, and the gradient norm's partial
// sums of squares in one dispatch (two dependent launches fewer), each workgroup leaving its sum of
// squares in partials[w]: the first token_groups workgroups: grads[wte] += Σ rows of each token (the
// workgroup of token v's channels from TOKEN_CHANNELS·x: TOKEN_LANES invocations per (token, channel)),
// squared as written; the next position_groups: grads[wpe + t*C + c]
// = Σ_b dres[b,t,c], likewise; the next C: column c of ln_f's weight and bias gradients (lnf_dout, its
// input lnf_x and stats (mean, rstd) per row: layernorm_backward_params' sums, the row lanes' sums added
// as a fixed tree), likewise; the last parts: every other gradient, final by now, invocation g of them
// summing g, g + parts·256, ... (wasm/src/adamw.cpp grad_global_norm's partials, mirrored by adamw_update).
// withSlabs: the tied head's weight gradient is still split-K slabs (the trainer's deferred group), from
// float head_src of `slabs`, head_len apart: the token sums start from their sum, in matmul_split_final's
// order, instead of from grads[wte], so that sum needs no dispatch of its own.
const embeddingBackwardNormKernel = (withSlabs) => kernel(`embedding_backward_norm${withSlabs ? "_slabs" : ""}`,
  [["V", "u32"], ["B", "u32"], ["T", "u32"], ["C", "u32"], ["wte_off", "u32"], ["wpe_off", "u32"], ["token_groups", "u32"],
    ["position_groups", "u32"], ["lnf_w_off", "u32"], ["n", "u32"], ["parts", "u32"],
    ...(withSlabs ? [["head_src", "u32"], ["head_len", "u32"], ["head_splits", "u32"]] : [])],
  [["order", "read", "u32"], ["dres", "read"], ["grads", "rw"], ["partials", "rw"], ["lnf_dout", "read"], ["lnf_x", "read"], ["lnf_stats", "read"],
    ...(withSlabs ? [["slabs", "read"]] : [])], /* wgsl */ `${LINEAR_ID}${workgroupSum(NORM_THREADS)}${withSlabs ? /* wgsl */ `
fn head_weight_grad(i: u32) -> f32 {
  ${sumSlabs("slabs", "p.head_src", "p.head_splits", "p.head_len", "i")}
  return v;
}` : ""}
var<workgroup> token_part: array<f32, ${NORM_THREADS}>; // each lane's sum of its rows
@compute @workgroup_size(${NORM_THREADS})
fn embedding_backward_norm(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let w = linear_workgroup(wid, nwg); // uniform: each branch below, and its wg_sums, is taken by a whole workgroup
  var squares = 0.0;
  if (w < p.token_groups) {
    let blocks = (p.C + ${TOKEN_CHANNELS - 1}u) / ${TOKEN_CHANNELS}u;
    let v = w / blocks;
    let c = (w % blocks) * ${TOKEN_CHANNELS}u + li % ${TOKEN_CHANNELS}u;
    let lane = li / ${TOKEN_CHANNELS}u;
    // the lane's rows in ascending position order, ${ROWS_IN_FLIGHT} loads issued before their adds (one row
    // at a time, each would wait for two dependent loads)
    var s = 0.0;
    if (c < p.C) {
      let end = order[v + 1u];
      for (var k = order[v] + lane; k < end; k += ${ROWS_IN_FLIGHT * TOKEN_LANES}u) {
        ${range(ROWS_IN_FLIGHT).map((j) => `var x${j} = 0.0;\n        if (k + ${j * TOKEN_LANES}u < end) { x${j} = dres[order[p.V + 1u + k + ${j * TOKEN_LANES}u] * p.C + c]; }`).join("\n        ")}
        ${range(ROWS_IN_FLIGHT).map((j) => `s = s + x${j};`).join(" ")}
      }
    }
    token_part[li] = s;
    workgroupBarrier();
    if (lane == 0u && c < p.C) {
      var t = 0.0;
      for (var l = 0u; l < ${TOKEN_LANES}u; l++) { t = t + token_part[l * ${TOKEN_CHANNELS}u + li]; }
      let i = v * p.C + c;
      let g = ${withSlabs ? "head_weight_grad(i)" : "grads[p.wte_off + i]"} + t;
      grads[p.wte_off + i] = g;
      squares = g * g;
    }
  } else if (w < p.token_groups + p.position_groups) {
    let i = (w - p.token_groups) * ${NORM_THREADS}u + li;
    if (i < p.T * p.C) {
      var s = 0.0;
      for (var b = 0u; b < p.B; b++) { s = s + dres[b * p.T * p.C + i]; }
      grads[p.wpe_off + i] = s;
      squares = s * s;
    }
  } else if (w < p.token_groups + p.position_groups + p.C) {
    let c = w - p.token_groups - p.position_groups;
    var dw = 0.0;
    var db = 0.0;
    ${columnSums(["lnf_dout", "lnf_x", "lnf_stats"], "li", `${NORM_THREADS}u`, "p.B * p.T")}
    let gw = wg_sum(dw, li);
    let gb = wg_sum(db, li);
    if (li == 0u) {
      grads[p.lnf_w_off + c] = gw;
      grads[p.lnf_w_off + p.C + c] = gb;
      squares = gw * gw + gb * gb;
    }
  } else {
    let first = w - p.token_groups - p.position_groups - p.C;
    for (var i = first * ${NORM_THREADS}u + li; i < p.n; i += p.parts * ${NORM_THREADS}u) {
      let ownedHere = (i >= p.wte_off && i < p.wte_off + p.V * p.C) || (i >= p.wpe_off && i < p.wpe_off + p.T * p.C)
        || (i >= p.lnf_w_off && i < p.lnf_w_off + 2u * p.C);
      if (!ownedHere) { let g = grads[i]; squares = squares + g * g; }
    }
  }
  let total = wg_sum(squares, li);
  if (li == 0u) { partials[w] = total; }
}
`, "embedding_backward_norm");
export const embeddingBackwardNorm = embeddingBackwardNormKernel(false);
export const embeddingBackwardNormSlabs = embeddingBackwardNormKernel(true);
