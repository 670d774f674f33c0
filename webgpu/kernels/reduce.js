// Bias gradients: column sums of a (rows,N) gradient, one invocation per column, rows summed in order
// (deterministic, no atomics). The residual adds of the forward pass live in the matmul epilogue.
import { kernel } from "./kernel.js";

// dout: (rows,N) -> grads[out_off + n] = Σ_r dout[r,n]
export const columnSum = kernel("column_sum", [["rows", "u32"], ["N", "u32"], ["out_off", "u32"]],
  [["dout", "read"], ["grads", "rw"]], `
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3u) {
  let n = gid.x;
  if (n >= p.N) { return; }
  var s = 0.0;
  for (var r = 0u; r < p.rows; r++) { s = s + dout[r * p.N + n]; }
  grads[p.out_off + n] = s;
}
`);
