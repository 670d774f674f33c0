// Global gradient norm, clipping and AdamW (docs/determinism.md § The training step), as
// wasm/src/adamw.h. The norm's partial sums of squares come from the embedding's backward, the last
// gradient written, in the same dispatch (kernels/embedding.js embedding_backward_norm), and
// adamw_update does the rest. Every AdamW workgroup sums the partials itself, in one fixed order, so
// each gets the same norm and clip coefficient without a single-workgroup dispatch (and the barrier
// before and after it) between the two: clip_gradients never runs on its own, each gradient is
// scaled as it is read. Workgroup 0 also writes `scal` = [norm, clip coefficient, the step's mean
// loss] for the host, the loss riding along in a dispatch that runs once per step anyway.
import { kernel, LINEAR_ID, workgroupSum } from "./kernel.js";

// The norm's workgroups of 256 (NORM_THREADS) over n gradients: each sums a fixed strided subset into
// one partial. Up to 256k invocations keep enough loads in flight to stream a big model's gradients
// at memory speed (16k invocations with long loops did not); a small model gets fewer, each with ~8
// gradients, rather than invocations with none: a software adapter pays for every workgroup of this
// kernel, which with 1024 was a large share of tiny's step.
export const NORM_PARTIALS = 1024;
export const NORM_THREADS = 256;
export const normPartials = (n) => Math.max(1, Math.min(NORM_PARTIALS, Math.ceil(n / (8 * NORM_THREADS))));

// One AdamW step over all n parameters; bit i of `decay` says whether parameter i is decayed (2D+
// tensors). step_size = lr / (1 - beta1^t) and bc2_sqrt = sqrt(1 - beta2^t) come from the host in
// binary64. partials: (parts) -> norm (their sum in a fixed order), coefficient = min(1, clip / (norm + 1e-6));
// losses: (rows) -> scal[2] = their mean. The grid is capped (adamwWorkgroups), each invocation
// striding over the parameters, so the partials are re-summed by at most that many workgroups.
export const adamwUpdate = kernel("adamw_update",
  [["n", "u32"], ["parts", "u32"], ["clip", "f32"], ["rows", "u32"], ["decay_factor", "f32"], ["beta1", "f32"], ["beta2", "f32"],
    ["one_minus_beta1", "f32"], ["one_minus_beta2", "f32"], ["step_size", "f32"], ["bc2_sqrt", "f32"], ["eps", "f32"]],
  [["params", "rw"], ["grads", "read"], ["m", "rw"], ["v", "rw"], ["decay", "read", "u32"], ["partials", "read"],
    ["losses", "read"], ["scal", "rw"]], /* wgsl */ `${workgroupSum(NORM_THREADS)}${LINEAR_ID}
@compute @workgroup_size(${NORM_THREADS})
fn adamw_update(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  var s = 0.0;
  for (var i = li; i < p.parts; i += ${NORM_THREADS}u) { s = s + partials[i]; }
  let norm = sqrt(wg_sum(s, li));
  let coefficient = min(1.0, p.clip / (norm + 1e-6));
  let w = linear_workgroup(wid, nwg); // uniform: the loss's barriers run in workgroup 0 only
  if (w == 0u) {
    var l = 0.0;
    for (var i = li; i < p.rows; i += ${NORM_THREADS}u) { l = l + losses[i]; }
    let loss = wg_sum(l, li) / f32(p.rows);
    if (li == 0u) { scal[0] = norm; scal[1] = coefficient; scal[2] = loss; }
  }
  let stride = nwg.x * nwg.y * ${NORM_THREADS}u;
  for (var i = w * ${NORM_THREADS}u + li; i < p.n; i += stride) {
    let g = grads[i] * coefficient;
    var x = params[i];
    if (((decay[i >> 5u] >> (i & 31u)) & 1u) != 0u) { x = x * p.decay_factor; }
    let m1 = p.beta1 * m[i] + p.one_minus_beta1 * g;
    let v1 = p.beta2 * v[i] + p.one_minus_beta2 * g * g;
    m[i] = m1;
    v[i] = v1;
    params[i] = x - p.step_size * m1 / (sqrt(v1) / p.bc2_sqrt + p.eps);
  }
}
`);
