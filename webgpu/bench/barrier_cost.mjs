// What a barrier costs one workgroup of 256 invocations, under Node (npm `webgpu`, Dawn): the one-workgroup
// decode kernel (decode_tokens.js) runs some 55 workgroupBarriers a step and its window rebuild 15
// storageBarriers, so their price bounds what fewer phases could save. Each variant loops `iterations`
// times over a read of workgroup memory and an FMA, with nothing, a workgroupBarrier, or a write to a
// storage buffer and a storageBarrier in each iteration; µs an iteration from replayMicroseconds (replays
// in one submit less one alone), 4096 iterations less none. A software adapter's figures say nothing.
//   node webgpu/bench/barrier_cost.mjs
// Prints one JSON line: ns an iteration of each variant.
import { nodeDevice } from "../node_gpu.js";
import { Ops } from "../ops.js";
import { Plan } from "../plan.js";
import { kernel } from "../kernels/kernel.js";
import { raiseClocks, replayMicroseconds } from "./replay.mjs";

const ITERATIONS = 4096;
const variant = (name, each) => kernel(`barrier_cost_${name}`, [["iterations", "u32"]], [["out", "rw"]], /* wgsl */ `
var<workgroup> values: array<f32, 256>;

@compute @workgroup_size(256)
fn barrier_cost_${name}(@builtin(local_invocation_index) li: u32) {
  values[li] = f32(li);
  workgroupBarrier();
  var v = 0.0;
  for (var i = 0u; i < p.iterations; i++) {
    v = v * 0.999 + values[(li + i) & 255u];
    ${each}
  }
  out[li] = v;
}
`);
const VARIANTS = {
  none: variant("none", ""),
  workgroupBarrier: variant("workgroup", "workgroupBarrier();"),
  storageBarrier: variant("storage", "out[li] = v;\n    storageBarrier();"),
};

const { device, info } = await nodeDevice();
const ops = new Ops(device);
const out = device.createBuffer({ size: 4 * 256, usage: GPUBufferUsage.STORAGE });
const plans = {};
for (const [name, k] of Object.entries(VARIANTS)) {
  for (const iterations of [0, ITERATIONS]) {
    const plan = new Plan(device, ops.pipelines, `${name} ${iterations}`);
    plan.add(k, { iterations }, [out], [1, 1]);
    plan.freeze();
    await replayMicroseconds(device, plan, 2); // compiled before the clocks are raised
    plans[`${name} ${iterations}`] = plan;
  }
}
await raiseClocks(device, ops);
const ns = {};
for (const name of Object.keys(VARIANTS)) {
  const full = await replayMicroseconds(device, plans[`${name} ${ITERATIONS}`], 20);
  const empty = await replayMicroseconds(device, plans[`${name} 0`], 20);
  ns[name] = +((1000 * (full - empty)) / ITERATIONS).toFixed(1);
}
console.log(JSON.stringify({ adapter: [info.vendor, info.architecture, info.description].filter(Boolean).join(" "), nsAnIteration: ns,
  workgroupBarrierNs: +(ns.workgroupBarrier - ns.none).toFixed(1), storageBarrierNs: +(ns.storageBarrier - ns.none).toFixed(1) }));
for (const plan of Object.values(plans)) plan.destroy();
device.destroy();
process.exit(0);
