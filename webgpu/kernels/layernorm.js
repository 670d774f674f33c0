// LayerNorm over the last dimension C, one invocation per row (rows are short: C ≤ a few thousand,
// and a row-per-invocation kernel needs no barriers, which software adapters execute slowly).
// Forward saves (mean, rstd) per row; backward recomputes x̂ from them.
import { kernel, LINEAR_ID } from "./kernel.js";
import { ROW_CHUNK } from "./reduce.js";

// Opens main() for one invocation per row: \`row\` (< p.rows) and \`base\` = row * p.C are in scope.
const ROW_MAIN = `${LINEAR_ID}
fn row_index(wid: vec3u, nwg: vec3u, li: u32) -> u32 { return linear_workgroup(wid, nwg) * 64u + li; }
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) li: u32) {
  let row = row_index(wid, nwg, li);
  if (row >= p.rows) { return; }
  let base = row * p.C;`;

// x: (rows,C) -> out: (rows,C); stats: (rows,2) = mean, rstd
export const layernormForward = kernel("layernorm_forward",
  [["rows", "u32"], ["C", "u32"], ["w_off", "u32"], ["b_off", "u32"], ["eps", "f32"]],
  [["x", "read"], ["params", "read"], ["out", "rw"], ["stats", "rw"]],
  `${ROW_MAIN}
  var s = 0.0;
  for (var c = 0u; c < p.C; c++) { s = s + x[base + c]; }
  let mean = s / f32(p.C);
  var q = 0.0;
  for (var c = 0u; c < p.C; c++) { let d = x[base + c] - mean; q = q + d * d; }
  let rstd = 1.0 / sqrt(q / f32(p.C) + p.eps);
  for (var c = 0u; c < p.C; c++) {
    out[base + c] = (x[base + c] - mean) * rstd * params[p.w_off + c] + params[p.b_off + c];
  }
  stats[2u * row] = mean;
  stats[2u * row + 1u] = rstd;
}
`);

// dout: (rows,C) -> dx (rows,C), written (flags 0) or added (flags 1: the residual stream's gradient)
export const layernormBackward = kernel("layernorm_backward",
  [["rows", "u32"], ["C", "u32"], ["w_off", "u32"], ["flags", "u32"]],
  [["dout", "read"], ["x", "read"], ["stats", "read"], ["params", "read"], ["dx", "rw"]],
  `${ROW_MAIN}
  let mean = stats[2u * row];
  let rstd = stats[2u * row + 1u];
  var a = 0.0;
  var b = 0.0;
  for (var c = 0u; c < p.C; c++) {
    let dn = dout[base + c] * params[p.w_off + c];
    a = a + dn;
    b = b + dn * (x[base + c] - mean) * rstd;
  }
  let mean_dn = a / f32(p.C);
  let mean_dn_xhat = b / f32(p.C);
  for (var c = 0u; c < p.C; c++) {
    let xhat = (x[base + c] - mean) * rstd;
    var g = (dout[base + c] * params[p.w_off + c] - mean_dn - xhat * mean_dn_xhat) * rstd;
    if (p.flags == 1u) { g = g + dx[base + c]; }
    dx[base + c] = g;
  }
}
`);

// dweight[c] = Σ_rows dout·x̂ and dbias[c] = Σ_rows dout, first per chunk of ROW_CHUNK rows:
// partials: (chunks, 2, C); reduce.js's columnSumFinal then adds the chunks in order (N = 2C)
export const layernormParamPartial = kernel("layernorm_param_partial",
  [["rows", "u32"], ["C", "u32"]],
  [["dout", "read"], ["x", "read"], ["stats", "read"], ["partials", "rw"]],
  `
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3u) {
  let c = gid.x;
  let chunk = gid.y;
  if (c >= p.C) { return; }
  var dw = 0.0;
  var db = 0.0;
  for (var r = chunk * ${ROW_CHUNK}u; r < min(p.rows, chunk * ${ROW_CHUNK}u + ${ROW_CHUNK}u); r++) {
    let d = dout[r * p.C + c];
    dw = dw + d * (x[r * p.C + c] - stats[2u * r]) * stats[2u * r + 1u];
    db = db + d;
  }
  partials[(2u * chunk) * p.C + c] = dw;
  partials[(2u * chunk + 1u) * p.C + c] = db;
}
`);
