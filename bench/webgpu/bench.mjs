// Real-GPU benchmark of the WGSL trainer under Node (npm `webgpu`, Dawn on Vulkan):
//   node bench/webgpu/bench.mjs [--presets small,medium,...] [--steps N] [--warmup N] [--blocks N] [--sizes 1024,2048,4096]
//                               [--clocks-ms 300] [--page-loop STEPS] [--profile 1] [--out FILE] [--adapter-only 1]
//                               [--lora default|RANK,ALPHA,TARGET+TARGET...]
// --page-loop: also STEPS steps a round in the page's own training loop (time_trainer.js timePageLoop).
// --lora: after each preset's full step, a LoRA fine-tune's step of the same model (webgpu/lora.js) timed the same
// way in the same process, and its time over the full step's ("lora" in the JSON; issue 60 asks ≤ 0.7x at large).
// "default": presets.json's "lora" (rank, alpha, targets; its lr and weightDecay for the fine-tune's AdamW).
// Writes one JSON object (to FILE, else stdout — where Dawn's shader-compiler warnings also land): adapter, per-preset ms/step and tokens/s (one submit per step, the loss
// read back through the ring without stalling, waited for without busy-waiting: replay.mjs runSteps), and matmul GFLOP/s (checked against float64 sums).
// Never run this on a software adapter and call it a speed: --adapter-only 1 prints only the adapter (so a caller,
// `tinygpt bench --all`, can tell SwiftShader from a GPU first). --sizes "" times no matmul.
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { nodeDevice } from "../../webgpu/node_gpu.js";
import { configFromPresets } from "../../site/static/js/model_config.js";
import { Ops } from "../../webgpu/ops.js";
import { MATMUL_FORMS } from "../../webgpu/kernels/matmul.js";
import { Plan } from "../../webgpu/plan.js";
import { raiseClocks, replay, benchArgs, median } from "./replay.mjs";
import { timeTrainer, describeEntry, checkBlocks } from "./time_trainer.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const args = benchArgs();
const presetNames = (args.presets ?? "small,medium,large,xl,huge,massive").split(",");
const steps = Number(args.steps ?? 30), warmup = Number(args.warmup ?? 5);
const blocks = Number(args.blocks ?? 1); // time_trainer.js timeTrainer: the timed steps in equal blocks
checkBlocks(steps, blocks);
const clocksMs = Number(args["clocks-ms"] ?? 300); // 0 on a software adapter, whose clocks mean nothing
const pageLoop = Number(args["page-loop"] ?? 0);
const sizes = (args.sizes ?? "1024,2048,4096").split(",").filter(Boolean).map(Number);

const { device, info, subgroups } = await nodeDevice();
const presets = JSON.parse(readFileSync(`${ROOT}site/static/presets.json`, "utf8"));
const corpus = new Uint8Array(readFileSync(`${ROOT}site/static/data/tinyshakespeare.txt`));
const adapter = { vendor: info.vendor, architecture: info.architecture, device: info.device, description: info.description,
  isFallbackAdapter: info.isFallbackAdapter ?? null };
if (args["adapter-only"]) {
  console.log(JSON.stringify(adapter));
  device.destroy();
  process.exit(0);
}
const out = { adapter, subgroups, presets: [], matmul: [], ...(args.lora ? { lora: [] } : {}) };
// --lora: the fine-tune's settings and its config (presets.json's "lora" lr and weightDecay over the preset's training)
const lora = args.lora ? loraSettings(args.lora) : null;
function loraSettings(spec) {
  const d = presets.lora;
  if (spec === "default") return { rank: d.rank, alpha: d.alpha, targets: d.targets };
  const [rank, alpha, targets] = spec.split(",");
  if (!targets) throw new Error(`--lora ${spec}: "default" or RANK,ALPHA,TARGET+TARGET...`);
  return { rank: Number(rank), alpha: Number(alpha), targets: targets.split("+") };
}
const loraConfig = (config) => ({ ...config, training: { ...config.training, lr: presets.lora.lr, weightDecay: presets.lora.weightDecay } });
console.error(`subgroups: ${subgroups.reason}`);
const ops = new Ops(device);

for (const name of presetNames) {
  const { entry, trainer } = await timeTrainer(device, ops, name, configFromPresets(presets, name), corpus,
    { steps, warmup, blocks, clocksMs, pageLoop, keep: true });
  out.presets.push(entry);
  console.error(describeEntry(entry));
  if (args.profile) entry.profile = await profile(trainer, name);
  trainer.destroy();
  if (lora) {
    const { entry: e } = await timeTrainer(device, ops, name, loraConfig(configFromPresets(presets, name)), corpus,
      { steps, warmup, blocks, clocksMs, trainerOptions: { lora } });
    Object.assign(e, { lora, fullMsPerStep: entry.msPerStep, overFull: e.msPerStep / entry.msPerStep,
      medianBlockOverFull: e.medianBlockMs / entry.medianBlockMs });
    out.lora.push(e);
    console.error(`  LoRA r=${lora.rank} alpha=${lora.alpha} on ${lora.targets.join(",")}: ${describeEntry(e)}; ` +
      `${e.overFull.toFixed(3)}x the full step (median blocks ${e.medianBlockOverFull.toFixed(3)}x)`);
  }
}

/**
 * Where a step's time goes: the host's cost to encode and to submit one step (the GPU may idle
 * while the host records), the latency of one step from idle, and each dispatch's GPU time.
 */
async function profile(trainer, name) {
  const host = { encodeMs: 0, submitMs: 0 };
  const n = 10;
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const enc = device.createCommandEncoder();
    const pass = enc.beginComputePass();
    trainer.trainPlan.encode(pass);
    pass.end();
    const cb = enc.finish();
    const t1 = performance.now();
    device.queue.submit([cb]);
    host.encodeMs += (t1 - t0) / n;
    host.submitMs += (performance.now() - t1) / n;
    await device.queue.onSubmittedWorkDone();
  }
  const t0 = performance.now();
  await (await trainer.step()).loss;
  host.idleStepMs = performance.now() - t0;
  // cumulative GPU time of the step's first dispatches, in step order (5 back-to-back submits each)
  const entries = trainer.trainPlan.entries, prefix = [];
  for (let f = 1; f <= 10; f++) {
    const count = Math.round((f / 10) * entries.length);
    const t = performance.now();
    for (let r = 0; r < 5; r++) {
      const enc = device.createCommandEncoder();
      const pass = enc.beginComputePass();
      trainer.trainPlan.encode(pass, { end: count });
      pass.end();
      device.queue.submit([enc.finish()]);
    }
    await device.queue.onSubmittedWorkDone();
    prefix.push({ dispatches: count, last: entries[count - 1].kernel.name, ms: (performance.now() - t) / 5 });
  }
  console.error(`  ${name}: first dispatches -> ms: ${prefix.map((p) => `${p.dispatches}:${p.ms.toFixed(2)}`).join(" ")}`);
  const rows = await trainer.profileStep();
  const byKernel = {};
  for (const r of rows) {
    const k = (byKernel[r.name] ??= { name: r.name, count: 0, ms: 0 });
    k.count += 1;
    k.ms += r.ms;
  }
  const kernels = Object.values(byKernel).sort((a, b) => b.ms - a.ms);
  const gpuMs = rows.reduce((s, r) => s + r.ms, 0);
  console.error(`  ${name}: encode ${host.encodeMs.toFixed(2)} ms, submit ${host.submitMs.toFixed(2)} ms, one step from idle ${host.idleStepMs.toFixed(2)} ms, ` +
    `sum of ${rows.length} dispatches ${gpuMs.toFixed(2)} ms`);
  for (const k of kernels.slice(0, 12)) console.error(`    ${k.name.padEnd(34)} ${String(k.count).padStart(4)} × ${(1000 * k.ms / k.count).toFixed(1).padStart(8)} µs = ${k.ms.toFixed(3)} ms`);
  return { ...host, prefix, dispatches: rows.length, gpuMs, kernels, rows };
}

// each matmul form (kernels/matmul.js MATMUL_FORMS), square n: GFLOP/s from back-to-back dispatches in one submit.
// The clocks are raised right before each timing: filling the operands, the float64 spot checks and, on a
// fresh machine, compiling each form's pipeline idle the GPU, and the first bench of a device call read
// 7-12 TFLOP/s for 4096³ forms that read 32-35 a minute later (docs/lab/2026-11-25-wgsl-step-vs-pytorch.md §13, §14). The figure
// is the median of MATMUL_ROUNDS such submits: timed once, one form of three read 45% of cuBLAS in some
// calls where the same kernel read 74-79% in others, a ~35 ms timing being as long as a stall of the
// Node binding's wait (docs/lab/2026-11-27-wgsl-step-dispatch-costs.md §29, §32).
const MATMUL_ROUNDS = 5;
for (const n of sizes) {
  const S = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
  const a = new Float32Array(n * n).map(() => Math.random() - 0.5), b = new Float32Array(n * n).map(() => Math.random() - 0.5);
  const A = device.createBuffer({ size: 4 * n * n, usage: S }), B = device.createBuffer({ size: 4 * n * n, usage: S }), C = device.createBuffer({ size: 4 * n * n, usage: S });
  device.queue.writeBuffer(A, 0, a);
  device.queue.writeBuffer(B, 0, b);
  for (const [form, { aT, bT }] of Object.entries(MATMUL_FORMS)) {
    const plan = new Plan(device, ops.pipelines, `matmul ${n}`);
    ops.matmul(plan, form, { M: n, N: n, K: n, A, B, C });
    plan.freeze();
    await replay(device, plan, 2);
    await raiseClocks(device, ops, clocksMs);
    const reps = n <= 1024 ? 50 : n <= 2048 ? 20 : 10, rounds = [];
    for (let r = 0; r < MATMUL_ROUNDS; r++) rounds.push((await replay(device, plan, reps)) / 1000 / reps);
    const seconds = median(rounds);
    // spot check 16 entries against float64 sums
    const staging = device.createBuffer({ size: 4 * n * n, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const enc = device.createCommandEncoder();
    enc.copyBufferToBuffer(C, 0, staging, 0, 4 * n * n);
    device.queue.submit([enc.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    const c = new Float32Array(staging.getMappedRange());
    let maxErr = 0;
    for (let s = 0; s < 16; s++) {
      const i = Math.floor(Math.random() * n), j = Math.floor(Math.random() * n);
      let ref = 0;
      for (let k = 0; k < n; k++) {
        const av = aT ? a[k * n + i] : a[i * n + k];
        const bv = bT ? b[j * n + k] : b[k * n + j];
        ref += av * bv;
      }
      maxErr = Math.max(maxErr, Math.abs(ref - c[i * n + j]));
    }
    staging.unmap();
    staging.destroy();
    out.matmul.push({ n, form, ms: seconds * 1000, roundsMs: rounds.map((x) => x * 1000), gflops: (2 * n * n * n) / seconds / 1e9,
      spotCheckMaxAbsError: maxErr });
    console.error(`matmul ${form} ${n}: ${(2 * n * n * n / seconds / 1e9).toFixed(0)} GFLOP/s (spot-check error ${maxErr.toExponential(2)})`);
    plan.destroy();
  }
  for (const x of [A, B, C]) x.destroy();
}
const json = JSON.stringify(out, null, 1);
if (args.out) writeFileSync(args.out, json + "\n"); else console.log(json);
device.destroy();
