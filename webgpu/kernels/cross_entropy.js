// Softmax cross-entropy, as wasm/src/cross_entropy.h: cross_entropy_forward writes each row's loss;
// cross_entropy_backward writes the same losses and overwrites the logits in place with
// d(mean loss)/d(logits) = (softmax - onehot) · scale. The backward is fused with the forward (C++
// saves each row's log-sum-exp between its two functions instead): the training step reads the
// logits once, and its loss comes from the same pass.
import { kernel, LINEAR_ID } from "./kernel.js";

// One row per CE_LANES cooperating invocations (CE_ROWS_PER_GROUP rows per workgroup of 256):
// adjacent lanes read adjacent logits, and the row's max and Σexp meet in workgroup memory, where
// every lane of the row combines the CE_LANES partials in the same fixed order: on a GPU it is about
// 8× faster than one invocation per row (docs/lab/2026-11-26-wgsl-step-subgroups.md).
const CE_LANES = 32;
const CE_ROWS_PER_GROUP = 256 / CE_LANES;

/** Workgroups for `rows` rows (two-dimensional past 65535, see grid1d). */
export const crossEntropyWorkgroups = (rows) => Math.ceil(rows / CE_ROWS_PER_GROUP);

// logits: (rows,V), targets: (rows) -> losses: (rows) (and, backward, dlogits in place of logits)
const crossEntropyKernel = (entryPoint, backward) => kernel(entryPoint,
  [["rows", "u32"], ["V", "u32"], ...(backward ? [["scale", "f32"]] : [])],
  [["logits", backward ? "rw" : "read"], ["targets", "read", "u32"], ["losses", "rw"]], /* wgsl */ `${LINEAR_ID}
const LANES = ${CE_LANES}u;
var<workgroup> row_max: array<f32, 256>;
var<workgroup> row_sum: array<f32, 256>;
@compute @workgroup_size(256)
fn ${entryPoint}(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let row = linear_workgroup(wid, nwg) * ${CE_ROWS_PER_GROUP}u + li / LANES;
  let lane = li % LANES;
  let lane0 = li - lane; // the row's lane 0 in workgroup memory
  // lanes past the last row read row p.rows - 1 (they must reach the barriers) and write nothing
  let base = min(row, p.rows - 1u) * p.V;
  var m = -3.0e38;
  for (var i = lane; i < p.V; i += LANES) { m = max(m, logits[base + i]); }
  row_max[li] = m;
  workgroupBarrier();
  var mx = -3.0e38;
  for (var k = 0u; k < LANES; k++) { mx = max(mx, row_max[lane0 + k]); }
  var s = 0.0;
  for (var i = lane; i < p.V; i += LANES) { s = s + exp(logits[base + i] - mx); }
  row_sum[li] = s;
  workgroupBarrier();
  var total = 0.0;
  for (var k = 0u; k < LANES; k++) { total = total + row_sum[lane0 + k]; }
  let lse = mx + log(total);
  if (row >= p.rows) { return; }
  let t = targets[row];
  // the lane owning logit t reads it, before it (and only it) overwrites it with the gradient
  if (t % LANES == lane) { losses[row] = lse - logits[base + t]; }${backward ? /* wgsl */ `
  for (var i = lane; i < p.V; i += LANES) {
    logits[base + i] = (exp(logits[base + i] - lse) - select(0.0, 1.0, i == t)) * p.scale;
  }` : ""}
}
`, entryPoint);

export const crossEntropyForward = crossEntropyKernel("cross_entropy_forward", false);
export const crossEntropyBackward = crossEntropyKernel("cross_entropy_backward", true);
