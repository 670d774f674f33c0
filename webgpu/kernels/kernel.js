// A kernel = WGSL body + its uniform fields + its storage bindings, declared once. The header
// (uniform struct, bindings) and the bind-group layout are both generated from that declaration,
// so a layout always matches each shader's declared access mode (read-only-storage vs storage).
// WGSL is generated here (tiles specialised, loops unrolled); every WGSL template literal is tagged
// /* wgsl */ for editors, and `node tests/webgpu/hosts/dump_wgsl.mjs` writes each variant to a .wgsl file.

/** Bytes of a dispatch's uniforms: each lives in one slot of this size of a plan's uniform buffer (plan.js). */
export const UNIFORM_SLOT_BYTES = 256;

/**
 * @param {string} name  the variant: entry point + specialisation (e.g. matmul_forward_32x64), unique
 * @param {Array<[string, "u32"|"f32"]>} uniforms  fields of `p`, binding 0
 * @param {Array<[string, "read"|"rw", string?]>} buffers  bindings 1..n; element type defaults to f32
 * @param {string} body  WGSL using `p` and the buffer names, declaring `fn <entryPoint>(`
 * @param {string} entryPoint  the compute entry point, named as the C++ function it mirrors (wasm/src)
 */
export function kernel(name, uniforms, buffers, body, entryPoint = name) {
  if (!body.includes(`fn ${entryPoint}(`)) throw new Error(`kernel ${name}: no entry point fn ${entryPoint}(`);
  if (4 * uniforms.length > UNIFORM_SLOT_BYTES) {
    throw new Error(`kernel ${name}: ${uniforms.length} uniforms, at most ${UNIFORM_SLOT_BYTES / 4} (a plan's slot of ${UNIFORM_SLOT_BYTES} bytes)`);
  }
  const struct = /* wgsl */ `struct Params {\n${uniforms.map(([n, t]) => /* wgsl */ `  ${n}: ${t},`).join("\n")}\n}\n`;
  const decls = buffers.map(([n, mode, type = "f32"], i) =>
    /* wgsl */ `@group(0) @binding(${i + 1}) var<storage, ${mode === "rw" ? "read_write" : "read"}> ${n}: array<${type}>;`).join("\n");
  // a body that calls subgroup builtins (subgroups.js) needs the extension enabled, first thing
  const enable = /\bsubgroup[A-Z]\w*\(/.test(body) ? "enable subgroups;\n" : "";
  const code = /* wgsl */ `${enable}${struct}@group(0) @binding(0) var<uniform> p: Params;\n${decls}\n${body}`;
  return { name, entryPoint, uniforms, buffers, code };
}

/** Linear index of an invocation in a 2D grid of 1D workgroups (dispatch1d spreads over y past 65535). */
export const LINEAR_ID = /* wgsl */ `
fn linear_workgroup(wid: vec3u, nwg: vec3u) -> u32 { return wid.y * nwg.x + wid.x; }
`;

/**
 * wg_sum(v, li): the sum of every invocation's v over a workgroup of `threads` (a power of two), as
 * a fixed tree (deterministic), returned to all. Call from uniform control flow.
 */
export const workgroupSum = (threads) => /* wgsl */ `
var<workgroup> red: array<f32, ${threads}>;
fn wg_sum(v: f32, li: u32) -> f32 {
  red[li] = v;
  workgroupBarrier();
  for (var s = ${threads / 2}u; s > 0u; s = s >> 1u) {
    if (li < s) { red[li] = red[li] + red[li + s]; }
    workgroupBarrier();
  }
  let total = red[0];
  workgroupBarrier(); // every invocation has read red[0] before a next wg_sum overwrites it
  return total;
}`;

/** [0, 1, ..., n - 1]: the indices that generated WGSL unrolls over. */
export const range = (n) => Array.from({ length: n }, (_, i) => i);

/** Workgroup counts [x, y] covering n workgroups within the 65535-per-dimension limit. */
export function grid1d(workgroups) {
  const x = Math.min(workgroups, 65535);
  return [x, Math.ceil(workgroups / x)];
}
