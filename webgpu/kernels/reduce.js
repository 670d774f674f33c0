// Bias gradients: column sums of a (rows,N) gradient, deterministic and without atomics, in two
// passes: partial sums over chunks of ROW_CHUNK rows (many invocations, short loops), then each
// column adds its chunks in order. The residual adds of the forward pass live in the matmul epilogue.
import { kernel } from "./kernel.js";

export const ROW_CHUNK = 64;

// dout: (rows,N) -> partials: (chunks,N), chunk c summing rows c·ROW_CHUNK ..
export const columnSumPartial = kernel("column_sum_partial", [["rows", "u32"], ["N", "u32"]],
  [["dout", "read"], ["partials", "rw"]], `
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3u) {
  let n = gid.x;
  let chunk = gid.y;
  if (n >= p.N) { return; }
  var s = 0.0;
  for (var r = chunk * ${ROW_CHUNK}u; r < min(p.rows, chunk * ${ROW_CHUNK}u + ${ROW_CHUNK}u); r++) { s = s + dout[r * p.N + n]; }
  partials[chunk * p.N + n] = s;
}
`);

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
