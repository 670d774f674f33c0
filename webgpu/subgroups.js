// Subgroups (WGSL `enable subgroups;`): where the device has them, the row reductions of LayerNorm
// and attention's merge of a row's partial results pass values between lanes with
// subgroupShuffleXor instead of through workgroup memory and a barrier.
//
// Those kernels are compiled for a width G: aligned runs of G invocations (by
// local_invocation_index) add their values in a butterfly (masks 1, 2, .. G/2), which leaves the
// same sum in every lane of a run, since each step adds the same two values in both lanes of a pair
// (a + b = b + a exactly). That needs each aligned run of G invocations to lie in one subgroup.
// WGSL does not promise how invocations map to subgroups, so probeSubgroups() checks it on the
// device (subgroup_invocation_id = local_invocation_index mod subgroup_size, a shuffle that reaches
// the expected lane) before any kernel relies on it; G is then the adapter's smallest subgroup size
// (a pipeline may get a larger one; a larger power of two holds whole runs of G).
// G = 1 is the kernels without subgroups: the fallback, and what every device gets until probed.

/** The largest width compiled in: the reductions are no wider (LayerNorm rows of 32 or 64 lanes). */
export const SUBGROUP_WIDTH_MAX = 32;

const PROBE_WORKGROUPS = 16;
const PROBE = /* wgsl */ `enable subgroups;
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(256)
fn probe(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32,
         @builtin(subgroup_invocation_id) sid: u32, @builtin(subgroup_size) size: u32) {
  let i = 3u * (wid.x * 256u + li);
  out[i] = sid;
  out[i + 1u] = size;
  out[i + 2u] = subgroupShuffleXor(li, 1u);
}
`;

const found = new WeakMap(); // device -> { width, reason }

/**
 * A device of `adapter` as `descriptor` asks, with the adapter's subgroups where it has them, probed
 * (probeSubgroups): { device, subgroups: { width, reason } }. subgroups false: none asked for.
 */
export async function requestDeviceWithSubgroups(adapter, descriptor = {}, { subgroups = true } = {}) {
  const wanted = subgroups && adapter.features.has("subgroups") ? ["subgroups"] : [];
  const requiredFeatures = [...new Set([...(descriptor.requiredFeatures ?? []), ...wanted])];
  const device = await adapter.requestDevice({ ...descriptor, requiredFeatures });
  return { device, subgroups: subgroups ? await probeSubgroups(device, adapter.info) : { width: 1, reason: "subgroups turned off" } };
}

/** Why the probe's readback rules subgroups out, or null where every lane is where the kernels assume. */
function checkProbe(words) {
  const size = words[1];
  if (!(size >= 1 && size <= 256 && (size & (size - 1)) === 0)) return `a subgroup size of ${size}`;
  for (let n = 0; n < words.length / 3; n++) {
    const li = n % 256, [sid, s, xored] = words.subarray(3 * n, 3 * n + 3);
    if (s !== size) return `subgroup sizes ${size} and ${s} in one pipeline`;
    if (sid !== li % size) return `invocation ${li} is lane ${sid} of its subgroup, not ${li % size}`;
    if (size > 1 && xored !== (li ^ 1)) return `a shuffle to lane ${li ^ 1} returned ${xored}`;
  }
  return null;
}

/**
 * Whether the kernels may use subgroups on `device`, and their width: { width, reason } (width 1:
 * not used, and reason says why). Recorded for subgroupWidthOf(device). info: the adapter's
 * GPUAdapterInfo (device.adapterInfo where the browser has it).
 */
export async function probeSubgroups(device, info = device.adapterInfo) {
  let result;
  if (!device.features.has("subgroups")) {
    result = { width: 1, reason: "this WebGPU device has no subgroups" };
  } else {
    try {
      result = widthFromProbe(await runProbe(device), info);
    } catch (e) {
      // a compiler that rejects the probe: the kernels run without subgroups, as on a device without them
      result = { width: 1, reason: `subgroups not used: their probe failed (${e.message})` };
    }
  }
  found.set(device, result);
  return result;
}

/** { width, reason } from the probe's readback (words: per invocation, its lane, subgroup size and shuffled index). */
export function widthFromProbe(words, info) {
  const problem = checkProbe(words);
  const width = Math.min(words[1], info?.subgroupMinSize || words[1], SUBGROUP_WIDTH_MAX);
  if (problem) return { width: 1, reason: `subgroups not used: ${problem}` };
  if (width < 2) return { width: 1, reason: "subgroups of one invocation" };
  return { width, reason: `subgroups of ${width} invocations` };
}

async function runProbe(device) {
  const bytes = PROBE_WORKGROUPS * 256 * 3 * 4;
  const out = device.createBuffer({ label: "subgroup probe", size: bytes, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
  const read = device.createBuffer({ label: "subgroup probe readback", size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const pipeline = await device.createComputePipelineAsync({
    layout: "auto", compute: { module: device.createShaderModule({ label: "subgroup probe", code: PROBE }), entryPoint: "probe" },
  });
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: out } }] }));
  pass.dispatchWorkgroups(PROBE_WORKGROUPS);
  pass.end();
  encoder.copyBufferToBuffer(out, 0, read, 0, bytes);
  device.queue.submit([encoder.finish()]);
  await read.mapAsync(GPUMapMode.READ);
  const words = new Uint32Array(read.getMappedRange().slice(0));
  read.unmap();
  out.destroy();
  read.destroy();
  return words;
}

/** The width probeSubgroups() found for `device`; 1 (no subgroups) where it has not run. */
export const subgroupWidthOf = (device) => found.get(device)?.width ?? 1;

/** WGSL statements: v (a variable) summed over aligned runs of `width` lanes, from shuffle mask `from` (runs of lanes `from` apart). */
export function shuffleSum(v, width, from = 1) {
  const steps = [];
  for (let mask = from; mask < width; mask *= 2) steps.push(`${v} = ${v} + subgroupShuffleXor(${v}, ${mask}u);`);
  return steps.join("\n  ");
}
