// Column sums of a (rows,N) gradient, deterministic and without atomics, in two passes: partial
// sums over chunks of ROW_CHUNK rows (many invocations, short loops; the LayerNorm parameter
// gradients make their own), then each column adds its chunks in order (here). A Linear's bias
// gradient is fused into its weight-gradient product instead (matmul.js, biasGrad).
import { kernel } from "./kernel.js";

export const ROW_CHUNK = 64;

// partials: (chunks, N) -> grads[out_off + n] = Σ_chunks, in chunk order
export const columnSumFinal = kernel("column_sum_final", [["chunks", "u32"], ["N", "u32"], ["out_off", "u32"]],
  [["partials", "read"], ["grads", "rw"]], `
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3u) {
  let n = gid.x;
  if (n >= p.N) { return; }
  var s = 0.0;
  for (var c = 0u; c < p.chunks; c++) { s = s + partials[c * p.N + n]; }
  grads[p.out_off + n] = s;
}
`);
