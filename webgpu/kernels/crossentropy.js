// Fused softmax + cross-entropy; with flags 1 the logits are
// overwritten in place by d(mean loss)/d(logits) = (softmax - onehot) · scale.
import { kernel, LINEAR_ID } from "./kernel.js";

const WG_REDUCE = `
var<workgroup> red: array<f32, 128>;
fn wg_reduce(v: f32, li: u32, is_max: bool) -> f32 {
  red[li] = v;
  workgroupBarrier();
  for (var s = 64u; s > 0u; s = s >> 1u) {
    if (li < s) { red[li] = select(red[li] + red[li + s], max(red[li], red[li + s]), is_max); }
    workgroupBarrier();
  }
  let r = red[0];
  workgroupBarrier();
  return r;
}
${LINEAR_ID}`;

// logits: (rows,V), targets: (rows) -> losses: (rows); one invocation per row (no barriers)
export const crossEntropy = kernel("cross_entropy",
  [["rows", "u32"], ["V", "u32"], ["flags", "u32"], ["scale", "f32"]],
  [["logits", "rw"], ["targets", "read", "u32"], ["losses", "rw"]], `${LINEAR_ID}
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let row = linear_workgroup(wid, nwg) * 64u + li;
  if (row >= p.rows) { return; }
  let base = row * p.V;
  var mx = -3.0e38;
  for (var i = 0u; i < p.V; i++) { mx = max(mx, logits[base + i]); }
  var s = 0.0;
  for (var i = 0u; i < p.V; i++) { s = s + exp(logits[base + i] - mx); }
  let lse = mx + log(s);
  let t = targets[row];
  losses[row] = lse - logits[base + t];
  if (p.flags == 1u) {
    for (var i = 0u; i < p.V; i++) {
      logits[base + i] = (exp(logits[base + i] - lse) - select(0.0, 1.0, i == t)) * p.scale;
    }
  }
}
`);

// losses: (n) -> out[0] = mean, summed in a fixed order by one workgroup
export const meanLoss = kernel("mean_loss", [["n", "u32"]], [["losses", "read"], ["out", "rw"]], `${WG_REDUCE}
@compute @workgroup_size(128)
fn main(@builtin(local_invocation_index) li: u32) {
  var s = 0.0;
  for (var i = li; i < p.n; i += 128u) { s = s + losses[i]; }
  let total = wg_reduce(s, li, false);
  if (li == 0u) { out[0] = total / f32(p.n); }
}
`);
