// Each dispatch's GPU time inside real training steps, on a real GPU (Node + Dawn, timestamp
// queries): the trainer's own step() runs with every dispatch in a compute pass of its own,
// timestamped where the pass begins and ends, so each dispatch is timed in place (its operands where
// the step before left them, the clocks of a running step), unlike the profile's replays of one
// dispatch alone (Trainer.profileStep). Per preset: the median over R steps of each dispatch, summed
// by kernel family; the step's span from the first dispatch's start to the last one's end; and the
// time between dispatches (Dawn's barrier and the next launch).
//   node webgpu/bench/dispatch_timeline.mjs large,huge [out.json] [R=20] [WARMUP=20]
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { nodeDevice } from "../node_gpu.js";
import { Trainer } from "../trainer.js";
import { configFromPresets } from "../../site/static/js/model_config.js";
import { median, raiseClocks, runSteps } from "./replay.mjs";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const presets = JSON.parse(readFileSync(`${ROOT}site/static/presets.json`, "utf8"));
const corpus = new Uint8Array(readFileSync(`${ROOT}site/static/data/tinyshakespeare.txt`));
const R = Number(process.argv[4] ?? 20), WARMUP = Number(process.argv[5] ?? 20);
const { device } = await nodeDevice({ features: ["timestamp-query"], exactTimestamps: true });
// a kernel's family: its name up to the tile or lane count (matmul_pair_backward_input_64x64w_... -> matmul_pair)
const family = (name) => name.replace(/_(\d+x\d+|lanes|d\d+).*$/, "").replace(/^matmul_pair.*/, "matmul_pair");

/**
 * While `timed` is set, a step's compute pass is split into one pass per dispatch, each with its
 * two timestamps (2·i and 2·i + 1 of the query set).
 */
function splitPasses(querySet) {
  const state = { timed: false, count: 0 };
  const createEncoder = device.createCommandEncoder.bind(device);
  device.createCommandEncoder = (descriptor) => {
    const enc = createEncoder(descriptor);
    if (!state.timed) return enc;
    const begin = enc.beginComputePass.bind(enc);
    enc.beginComputePass = () => {
      let pass = null;
      const open = () => {
        if (pass) pass.end();
        const i = state.count++;
        pass = begin({ timestampWrites: { querySet, beginningOfPassWriteIndex: 2 * i, endOfPassWriteIndex: 2 * i + 1 } });
      };
      return {
        setPipeline(p) { open(); pass.setPipeline(p); },
        setBindGroup(...a) { pass.setBindGroup(...a); },
        dispatchWorkgroups(...a) { pass.dispatchWorkgroups(...a); },
        end() { if (pass) pass.end(); },
      };
    };
    return enc;
  };
  return { state, restore: () => { device.createCommandEncoder = createEncoder; } };
}

const out = {};
for (const name of process.argv[2].split(",")) {
  const trainer = new Trainer(device, configFromPresets(presets, name), { corpus });
  const entries = trainer.trainPlan.entries, n = entries.length;
  const querySet = device.createQuerySet({ type: "timestamp", count: 2 * n });
  const resolved = device.createBuffer({ size: 16 * n, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC });
  const readback = device.createBuffer({ size: 16 * n, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  await runSteps(trainer, WARMUP);
  // compiling and the first steps left the GPU idle, so its clocks may still be low: medium timed
  // first in a process read a 5.6 ms step span, against 1.48 when it followed small (H100)
  await raiseClocks(device, trainer.ops);
  const split = splitPasses(querySet);
  const runs = []; // per step: [start, end] of each dispatch in µs from the step's first start
  for (let r = 0; r < R; r++) {
    // the step before keeps the GPU busy, as in training: time the second of two steps in flight
    const before = (await trainer.step()).loss;
    split.state.timed = true;
    split.state.count = 0;
    const loss = (await trainer.step()).loss;
    split.state.timed = false;
    await Promise.all([before, loss]);
    const enc = device.createCommandEncoder();
    enc.resolveQuerySet(querySet, 0, 2 * n, resolved, 0);
    enc.copyBufferToBuffer(resolved, 0, readback, 0, 16 * n);
    device.queue.submit([enc.finish()]);
    await readback.mapAsync(GPUMapMode.READ);
    const ts = new BigInt64Array(readback.getMappedRange().slice(0));
    readback.unmap();
    runs.push(entries.map((_, i) => [Number(ts[2 * i] - ts[0]) / 1e3, Number(ts[2 * i + 1] - ts[0]) / 1e3]));
  }
  split.restore();
  const dispatches = entries.map((e, i) => ({ name: e.kernel.name, us: median(runs.map((run) => run[i][1] - run[i][0])),
    gapUs: i ? median(runs.map((run) => run[i][0] - run[i - 1][1])) : 0 }));
  const families = {};
  for (const d of dispatches) {
    const f = (families[family(d.name)] ??= { family: family(d.name), count: 0, us: 0 });
    f.count += 1;
    f.us += d.us;
  }
  const spanUs = median(runs.map((run) => run[n - 1][1]));
  const busyUs = dispatches.reduce((s, d) => s + d.us, 0), gapUs = dispatches.reduce((s, d) => s + d.gapUs, 0);
  out[name] = { dispatches: n, spanUs, busyUs, gapUs, families: Object.values(families).sort((a, b) => b.us - a.us), each: dispatches };
  console.log(`${name}: ${n} dispatches, step span ${(spanUs / 1e3).toFixed(3)} ms = ${(busyUs / 1e3).toFixed(3)} ms in dispatches + ` +
    `${(gapUs / 1e3).toFixed(3)} ms between them (median ${median(dispatches.slice(1).map((d) => d.gapUs)).toFixed(1)} µs)`);
  for (const f of out[name].families) {
    console.log(`  ${f.family.padEnd(34)} ${String(f.count).padStart(4)} × ${(f.us / f.count).toFixed(1).padStart(7)} µs = ${(f.us / 1e3).toFixed(3)} ms (${(100 * f.us / busyUs).toFixed(0)}%)`);
  }
  trainer.destroy();
  for (const x of [querySet, resolved, readback]) x.destroy();
}
if (process.argv[3]) writeFileSync(process.argv[3], JSON.stringify(out, null, 1) + "\n");
device.destroy();
