// GELU in GPT-2's tanh form, elementwise over n values.
import { kernel, LINEAR_ID } from "./kernel.js";

const GELU_COMMON = /* wgsl */ `
const S = 0.7978845608028654; // sqrt(2/pi)
// clamped: tanh(±10) is ±1 in f32 already, and some tanh implementations overflow past that
fn tanh_arg(x: f32) -> f32 { return clamp(S * (x + 0.044715 * x * x * x), -10.0, 10.0); }
${LINEAR_ID}`;

// h: (n) -> g: (n)
export const geluForward = kernel("gelu_forward", [["n", "u32"]], [["h", "read"], ["g", "rw"]], /* wgsl */ `${GELU_COMMON}
@compute @workgroup_size(256)
fn gelu_forward(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let i = linear_workgroup(wid, nwg) * 256u + li;
  if (i >= p.n) { return; }
  let x = h[i];
  g[i] = 0.5 * x * (1.0 + tanh(tanh_arg(x)));
}
`);

// dg: (n) gradient w.r.t. the GELU output, turned in place into the gradient w.r.t. its input h
export const geluBackward = kernel("gelu_backward", [["n", "u32"]], [["h", "read"], ["dg", "rw"]], /* wgsl */ `${GELU_COMMON}
@compute @workgroup_size(256)
fn gelu_backward(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let i = linear_workgroup(wid, nwg) * 256u + li;
  if (i >= p.n) { return; }
  let x = h[i];
  let t = tanh(tanh_arg(x));
  let local = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * S * (1.0 + 3.0 * 0.044715 * x * x);
  dg[i] = dg[i] * local;
}
`);
