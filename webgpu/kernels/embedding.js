// Token + position embedding. The backward is a scatter-add without float atomics: the host sorts
// the batch's positions by token (counting sort, O(B·T)), and one invocation per (token, channel)
// sums its rows in ascending position order, so the result is deterministic. C++'s embedding_backward
// is one kernel here whose workgroups split between the token (wte) and position (wpe) sums.
import { kernel, LINEAR_ID, range } from "./kernel.js";

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

// order: [V+1 starts | rows positions sorted by token]; dres: (B,T,C). The first token_groups
// workgroups: grads[wte] += Σ rows of each token (one invocation per (token, channel)); the rest:
// grads[wpe + t*C + c] = Σ_b dres[b,t,c].
export const embeddingBackward = kernel("embedding_backward",
  [["V", "u32"], ["B", "u32"], ["T", "u32"], ["C", "u32"], ["wte_off", "u32"], ["wpe_off", "u32"], ["token_groups", "u32"]],
  [["order", "read", "u32"], ["dres", "read"], ["grads", "rw"]], /* wgsl */ `${LINEAR_ID}
@compute @workgroup_size(256)
fn embedding_backward(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let w = linear_workgroup(wid, nwg);
  if (w < p.token_groups) {
    let i = w * 256u + li;
    if (i >= p.V * p.C) { return; }
    let v = i / p.C;
    let c = i % p.C;
    // the rows are added in ascending position order, ${ROWS_IN_FLIGHT} loads issued before their adds: a
    // frequent byte (a space: ~15% of B·T rows) is a long chain, which one row at a time pays as
    // two dependent loads per row (on an H200 ~50 µs of a 0.63 ms small step)
    var s = 0.0;
    var k = order[v];
    let end = order[v + 1u];
    for (; k + ${ROWS_IN_FLIGHT}u <= end; k += ${ROWS_IN_FLIGHT}u) {
      ${range(ROWS_IN_FLIGHT).map((j) => `let x${j} = dres[order[p.V + 1u + k + ${j}u] * p.C + c];`).join("\n      ")}
      ${range(ROWS_IN_FLIGHT).map((j) => `s = s + x${j};`).join(" ")}
    }
    for (; k < end; k++) { s = s + dres[order[p.V + 1u + k] * p.C + c]; }
    grads[p.wte_off + i] = grads[p.wte_off + i] + s;
    return;
  }
  let i = (w - p.token_groups) * 256u + li;
  if (i >= p.T * p.C) { return; }
  var s = 0.0;
  for (var b = 0u; b < p.B; b++) { s = s + dres[b * p.T * p.C + i]; }
  grads[p.wpe_off + i] = s;
}
`);
