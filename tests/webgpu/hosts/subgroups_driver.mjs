// Drives webgpu/subgroups.js under Node (npm `webgpu`, Dawn on SwiftShader) for
// tests/webgpu/test_webgpu_subgroups.py: prints one JSON object with what the probe found on the real device
// (subgroups asked for, and not), the WGSL module of a kernel that uses them, and the widths that
// made-up probe readbacks give (a mapping the kernels cannot use must turn subgroups off).
import { nodeDevice } from "../../../webgpu/node_gpu.js";
import { widthFromProbe, subgroupWidthOf } from "../../../webgpu/subgroups.js";
import { layernormRowKernels } from "../../../webgpu/kernels/layernorm.js";

const probed = {};
for (const subgroups of [true, false]) {
  const { device, info } = await nodeDevice({ subgroups });
  probed[subgroups ? "asked" : "notAsked"] = { found: subgroupWidthOf(device),
    minSize: info.subgroupMinSize ?? null, features: [...device.features].filter((f) => f === "subgroups") };
  device.destroy();
}

// a readback of `workgroups` workgroups of 256: lane, size, shuffled index, as the probe writes them
function readback({ size = 32, lane = (li) => li % size, xor = (li) => li ^ 1, sizeOf = () => size, workgroups = 2 } = {}) {
  const words = new Uint32Array(workgroups * 256 * 3);
  for (let n = 0; n < workgroups * 256; n++) {
    const li = n % 256;
    words.set([lane(li), sizeOf(n), xor(li)], 3 * n);
  }
  return words;
}
const made = {
  linear32: widthFromProbe(readback(), { subgroupMinSize: 32 }),
  linear64min32: widthFromProbe(readback({ size: 64 }), { subgroupMinSize: 32 }),
  linear64: widthFromProbe(readback({ size: 64 }), {}),
  linear4: widthFromProbe(readback({ size: 4 }), { subgroupMinSize: 4 }),
  reversed: widthFromProbe(readback({ lane: (li) => 31 - (li % 32) }), { subgroupMinSize: 32 }),
  strided: widthFromProbe(readback({ lane: (li) => Math.floor(li / 8) % 32 }), { subgroupMinSize: 32 }),
  badShuffle: widthFromProbe(readback({ xor: (li) => li }), { subgroupMinSize: 32 }),
  mixedSizes: widthFromProbe(readback({ sizeOf: (n) => (n < 256 ? 32 : 16) }), {}),
  oddSize: widthFromProbe(readback({ size: 24 }), {}),
  one: widthFromProbe(readback({ size: 1, xor: (li) => li }), {}),
};
const code = layernormRowKernels(32, 4).forward.code;
console.log(JSON.stringify({ probed, made, enableFirst: code.startsWith("enable subgroups;\n"),
  fallbackEnables: layernormRowKernels(32, 1).forward.code.includes("enable subgroups"), widthUnprobed: subgroupWidthOf({}) }));
