// Where a pipelined training step's time goes, on a real GPU (Node + Dawn, the adapter's
// timestamp-query feature): the GPU's own time per step (timestamps around each step's compute pass),
// the GPU's idle gap between steps, the host's cycle between submits, and the time blocked in submit
// and in step() (the loss ring), over N steps after WARMUP awaited ones, for each preset in turn.
//   node webgpu/bench/step_timeline.mjs large,xl [out.json] [N=200] [WARMUP=20]
// Prints "preset ms/step-wall median-GPU-ms-per-step"; out.json also holds every step's GPU time.
// It found xl's 7–8 ms/step in bench.mjs to be ~5.0 ms steps after a transient of 21 ms ones.
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { nodeDevice } from "../node_gpu.js";
import { Trainer } from "../trainer.js";
import { configFromPresets } from "../../site/static/js/model_config.js";
const { device } = await nodeDevice({ features: ["timestamp-query"] }); // GPU times need it
const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const presets = JSON.parse(readFileSync(`${ROOT}site/static/presets.json`, "utf8"));
const corpus = new Uint8Array(readFileSync(`${ROOT}site/static/data/tinyshakespeare.txt`));
const N = Number(process.argv[4] ?? 200), WARMUP = Number(process.argv[5] ?? 20), out = {};
for (const name of process.argv[2].split(",")) {
  const trainer = new Trainer(device, configFromPresets(presets, name), { corpus });
  const qs = device.createQuerySet({ type: "timestamp", count: 2 * N });
  const resolve = device.createBuffer({ size: 16 * N, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC });
  const read = device.createBuffer({ size: 16 * N, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  let timing = -1; // step index whose pass gets timestamps
  const origEnc = device.createCommandEncoder.bind(device);
  device.createCommandEncoder = (d) => {
    const enc = origEnc(d), begin = enc.beginComputePass.bind(enc);
    enc.beginComputePass = (pd = {}) => timing >= 0 ? begin({ ...pd, timestampWrites: { querySet: qs, beginningOfPassWriteIndex: 2 * timing, endOfPassWriteIndex: 2 * timing + 1 } }) : begin(pd);
    return enc;
  };
  const submitMs = [], submitAt = [], stepCallMs = [];
  const origSubmit = device.queue.submit.bind(device.queue);
  device.queue.submit = (cbs) => { const t = performance.now(); origSubmit(cbs); submitMs.push(performance.now() - t); submitAt.push(t); };
  for (let i = 0; i < WARMUP; i++) await (await trainer.step()).loss;
  submitMs.length = 0; submitAt.length = 0;
  const losses = [];
  const t0 = performance.now();
  for (let i = 0; i < N; i++) {
    timing = i;
    const a = performance.now();
    losses.push((await trainer.step()).loss);
    stepCallMs.push(performance.now() - a);
  }
  timing = -1;
  await Promise.all(losses);
  const wall = (performance.now() - t0) / N;
  const enc = origEnc();
  enc.resolveQuerySet(qs, 0, 2 * N, resolve, 0);
  enc.copyBufferToBuffer(resolve, 0, read, 0, 16 * N);
  origSubmit([enc.finish()]);
  await read.mapAsync(GPUMapMode.READ);
  const ts = new BigInt64Array(read.getMappedRange());
  const gpuMs = [], gapMs = [];
  for (let i = 0; i < N; i++) {
    gpuMs.push(Number(ts[2 * i + 1] - ts[2 * i]) / 1e6);
    if (i) gapMs.push(Number(ts[2 * i] - ts[2 * i - 1]) / 1e6);
  }
  read.unmap();
  const med = (a) => [...a].sort((x, y) => x - y)[a.length >> 1];
  const mean = (a) => a.reduce((s, x) => s + x, 0) / a.length;
  const cycle = submitAt.slice(1).map((t, i) => t - submitAt[i]);
  out[name] = { wallMsPerStep: wall, gpuPassMs: { median: med(gpuMs), mean: mean(gpuMs), min: Math.min(...gpuMs), max: Math.max(...gpuMs) },
    gapBetweenPassesMs: { median: med(gapMs), mean: mean(gapMs), max: Math.max(...gapMs) },
    hostCycleMs: { median: med(cycle), mean: mean(cycle) }, submitMs: { median: med(submitMs), mean: mean(submitMs), max: Math.max(...submitMs) },
    stepCallMs: { median: med(stepCallMs), mean: mean(stepCallMs), max: Math.max(...stepCallMs) },
    gpuMsEach: gpuMs.map((x) => +x.toFixed(3)), gapMsEach: gapMs.map((x) => +x.toFixed(3)) };
  console.log(name, wall.toFixed(3), med(gpuMs).toFixed(3));
  device.createCommandEncoder = origEnc;
  device.queue.submit = origSubmit;
  trainer.destroy();
  for (const x of [qs, resolve, read]) x.destroy();
}
if (process.argv[3]) writeFileSync(process.argv[3], JSON.stringify(out, null, 1));
process.exit(0);
