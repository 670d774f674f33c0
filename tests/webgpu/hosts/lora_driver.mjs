// Drives LoRA fine-tuning on the WGSL trainer (webgpu/lora.js) under Node (npm `webgpu`, Dawn; SwiftShader
// in the tests) for tests/webgpu/test_webgpu_lora.py: `node lora_driver.mjs < jobs.json` runs a list of jobs
// on one device (SwiftShader compiles each pipeline once for all of them) and prints one JSON array.
// Jobs:
//   {kind: "kernels", cases, inputs}: kernel_cases.js's runKernelCases (inputs base64), outputs base64
//   {kind: "finetune", config: {model, training}, lora, base (base64 state), steps, resumeAt?, evaluate?,
//    lossBatch?, startState? (an adapter state to start from, base64) and startDrawn (its batches drawn)}: a LoRA trainer on the base, `steps` steps of the data stream (with resumeAt: that many,
//    the adapter state exported with its moments, a fresh trainer on the same base importing it, the rest);
//    {losses, adapterState (base64, with moments), valLoss, dispatches, stepsAt}
//   {kind: "merge", config, lora, base, adapterState (or adapterStateFrom: an earlier job's index), batch {x, y}}: losses with the adapters, disabled,
//    merged in place, unmerged; the merged state; tokens sampled with and without the adapters
//   {kind: "buffers", config, lora}: every createBuffer of a LoRA trainer and its Decoder vs Trainer.requirements
//   {kind: "engine", config, lora, base, steps, resumeAt, prompt, maxNewTokens}: the engine's LoRA calls
//   {kind: "requirements", preset, lora}: Trainer.requirements, full and LoRA
//   {kind: "refusals", config, lora, base}: the sentences of what a LoRA trainer refuses
import { readFileSync } from "node:fs";
import { register } from "node:module";
import { fileURLToPath } from "node:url";
import { nodeDevice } from "../../../webgpu/node_gpu.js";
import { Trainer, checkLimits } from "../../../webgpu/trainer.js";
import { Decoder } from "../../../webgpu/decoder.js";
import { configFromPresets } from "../../../site/static/js/model_config.js";
import { runKernelCases } from "./kernel_cases.js";

// the engine imports the trainer by its served path: map it to webgpu/ (the same module as this file's)
register("./served_layout_hooks.mjs", import.meta.url);
const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const presets = JSON.parse(readFileSync(`${ROOT}site/static/presets.json`, "utf8"));
const corpus = new Uint8Array(readFileSync(`${ROOT}site/static/data/tinyshakespeare.txt`));
const fromB64 = (s) => new Uint8Array(Buffer.from(s, "base64"));
const toB64 = (u8) => Buffer.from(u8.buffer, u8.byteOffset, u8.byteLength).toString("base64");
const configOf = (c) => configFromPresets(presets, "tiny", { model: c.model, training: c.training });

const { device, info } = await nodeDevice();

const trainerFor = (job, extra = {}) => new Trainer(device, configOf(job.config), { corpus, seed: job.config.training.seed, state: fromB64(job.base),
  lora: job.lora, ...extra });

async function train(trainer, n) {
  const pending = [];
  for (let i = 0; i < n; i++) pending.push((await trainer.step()).loss);
  return Promise.all(pending);
}

const jobs = {
  async kernels({ cases, inputs }) {
    const raw = Object.fromEntries(Object.entries(inputs).map(([k, v]) => [k, fromB64(v)]));
    const out = await runKernelCases(device, cases, raw);
    return Object.fromEntries(Object.entries(out).map(([k, v]) => [k, toB64(new Uint8Array(v.buffer, v.byteOffset, v.byteLength))]));
  },

  async finetune(job) {
    const t0 = performance.now();
    let trainer = trainerFor(job);
    if (job.startState) { // another engine's adapter state, and its data stream's position
      trainer.lora.importState(fromB64(job.startState));
      trainer.batchesDrawn = job.startDrawn;
    }
    const dispatches = trainer.dispatches;
    const stepsAt = [];
    let losses;
    if (job.resumeAt) {
      const first = await train(trainer, job.resumeAt);
      const saved = await trainer.lora.exportState(), drawn = trainer.batchesDrawn, step = trainer.lora.step;
      trainer.destroy();
      trainer = trainerFor(job);
      trainer.lora.importState(saved);
      trainer.batchesDrawn = drawn;
      stepsAt.push(step, trainer.lora.step);
      losses = first.concat(await train(trainer, job.steps - job.resumeAt));
    } else {
      losses = await train(trainer, job.steps);
    }
    const adapterState = await trainer.lora.exportState();
    const out = { losses, adapterState: toB64(adapterState), dispatches, stepsAt, step: trainer.lora.step, batchesDrawn: trainer.batchesDrawn };
    if (job.evaluate) out.valLoss = await trainer.evaluate();
    if (job.lossBatch) out.batchLoss = await trainer.lossOn(Uint32Array.from(job.lossBatch.x), Uint32Array.from(job.lossBatch.y));
    trainer.destroy();
    out.seconds = (performance.now() - t0) / 1000;
    return out;
  },

  async merge(job) {
    const trainer = trainerFor(job), lora = trainer.lora;
    lora.importState(fromB64(job.adapterState));
    const x = Uint32Array.from(job.batch.x), y = Uint32Array.from(job.batch.y), loss = () => trainer.lossOn(x, y);
    const out = { adapted: await loss() };
    lora.setEnabled(false);
    out.disabled = await loss();
    const baseState = await trainer.exportState();
    lora.setEnabled(true);
    out.mergedState = toB64(await lora.mergedState());
    out.stillAdapted = await loss();
    // sampling: a Decoder on the sampling copy, with the adapters merged into it and without
    const decoder = new Decoder(trainer, { params: lora.samplingWeights() });
    const prompt = new TextEncoder().encode(job.prompt);
    const sample = async (withAdapters) => {
      lora.prepareSampling(withAdapters);
      return Array.from(await decoder.generate(prompt, { maxNewTokens: job.maxNewTokens, temperature: 0.8, topK: 40, seed: 7 }));
    };
    out.sampledWith = await sample(true);
    out.sampledWithout = await sample(false);
    lora.prepareSampling(true);
    out.logitsWith = Array.from(await decoder.decodeLogits(Array.from(prompt))).map((l) => Array.from(l));
    lora.prepareSampling(false);
    out.logitsWithout = Array.from(await decoder.decodeLogits(Array.from(prompt))).map((l) => Array.from(l));
    await decoder.destroy();
    lora.merge();
    out.merged = await loss();
    out.mergedExport = toB64(await trainer.exportState());
    out.refusedWhileMerged = await trainer.step().then(() => null, (e) => e.message);
    lora.unmerge();
    out.unmerged = await loss();
    const unmergedState = await trainer.exportState();
    const a = new Float32Array(baseState.buffer, 4), b = new Float32Array(unmergedState.buffer, 4);
    let worst = 0;
    for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
    out.unmergeMaxAbs = worst;
    trainer.destroy();
    return out;
  },

  async buffers(job) {
    const created = [], createBuffer = device.createBuffer.bind(device);
    device.createBuffer = (d) => { created.push({ label: d.label ?? "", size: d.size, usage: d.usage }); return createBuffer(d); };
    const config = configOf(job.config);
    const trainer = new Trainer(device, config, { corpus, seed: config.training.seed, lora: job.lora });
    await train(trainer, 1);
    const decoder = new Decoder(trainer, { params: trainer.lora.samplingWeights() });
    trainer.lora.prepareSampling(true);
    await decoder.generate(new Uint8Array([10]), { maxNewTokens: 1, temperature: 1, topK: 1 });
    await trainer.exportState();
    await trainer.lora.exportState();
    await decoder.destroy();
    trainer.destroy();
    delete device.createBuffer;
    const { buffers, ...need } = Trainer.requirements(config, { lora: job.lora });
    const full = Trainer.requirements(config);
    return { created, need, buffers, fullTotal: full.totalBytes, fullBuffers: full.buffers, checkLimits: checkLimits(config, device.limits, { lora: job.lora }),
      usage: { STORAGE: GPUBufferUsage.STORAGE, UNIFORM: GPUBufferUsage.UNIFORM, MAP_READ: GPUBufferUsage.MAP_READ } };
  },

  // the engine's LoRA calls (site/static/js/engines/webgpu_engine.js): `steps` steps, then resumeAt + the rest
  // through exportLoRAState and dataState into a new engine; sampling with and without; merge and unmerge
  async engine(job) {
    const { createEngine } = await import("../../../site/static/js/engines/webgpu_engine.js");
    const config = configOf(job.config), state = fromB64(job.base), fatals = [];
    const make = (extra = {}) => createEngine({ ...config, corpus, seed: config.training.seed, state, lora: job.lora, device,
      onFatal: (m) => fatals.push(m), ...extra });
    const run = async (engine, n) => {
      const pending = [];
      for (let i = 0; i < n; i++) pending.push((await engine.trainStep()).loss);
      return Promise.all(pending);
    };
    const prompt = new TextEncoder().encode(job.prompt);
    const sample = async (engine, adapters) => {
      const tokens = [];
      await engine.generate(prompt, { temperature: 0.8, topK: 40, seed: 7, maxNewTokens: job.maxNewTokens, onToken: (b) => tokens.push(b), adapters });
      return tokens;
    };
    const whole = await make();
    const out = { lora: whole.lora, paramCount: whole.paramCount, losses: await run(whole, job.steps) };
    out.step = whole.step;
    const wholeState = await whole.exportLoRAState();
    out.sampledWith = await sample(whole, true);
    out.sampledWithout = await sample(whole, false);
    out.sampledDefault = await sample(whole, undefined);
    out.mergedState = toB64(await whole.exportMergedState());
    whole.mergeLoRA();
    out.mergedFlag = whole.loraMerged;
    out.mergedExport = toB64(await whole.exportState());
    out.refusedWhileMerged = await whole.trainStep().then(() => null, (e) => e.message);
    whole.unmergeLoRA();
    await whole.destroy();
    const first = await make();
    out.firstLosses = await run(first, job.resumeAt);
    const saved = await first.exportLoRAState(), dataState = first.dataState();
    out.savedBytes = saved.length;
    out.dataState = dataState;
    await first.destroy();
    const resumed = await make({ loraState: saved, dataState });
    out.resumedStep = resumed.step;
    out.resumedLosses = await run(resumed, job.steps - job.resumeAt);
    const resumedState = await resumed.exportLoRAState();
    out.sameFinalState = resumedState.length === wholeState.length && resumedState.every((b, i) => b === wholeState[i]);
    await resumed.destroy();
    out.notLoRA = await (async () => {
      const plain = await createEngine({ ...config, corpus, seed: config.training.seed, device });
      try {
        plain.mergeLoRA();
        return null;
      } catch (e) {
        return e.message;
      } finally {
        await plain.destroy();
      }
    })();
    out.fatals = fatals;
    return out;
  },

  // Trainer.requirements of a preset, full and LoRA (no GPU needed)
  async requirements(job) {
    const config = configFromPresets(presets, job.preset);
    return { full: Trainer.requirements(config), lora: Trainer.requirements(config, { lora: job.lora }) };
  },

  async refusals(job) {
    const out = {};
    const attempt = async (name, f) => {
      try {
        await f();
        out[name] = null;
      } catch (e) {
        out[name] = e.message;
      }
    };
    await attempt("rank", () => trainerFor({ ...job, lora: { ...job.lora, rank: 0 } }));
    await attempt("alpha", () => trainerFor({ ...job, lora: { ...job.lora, alpha: -1 } }));
    await attempt("targets", () => trainerFor({ ...job, lora: { ...job.lora, targets: ["q_proj", "wte"] } }));
    const trainer = trainerFor(job);
    await attempt("length", () => trainer.lora.importState(new Uint8Array(12)));
    const bad = await trainer.lora.exportState();
    new DataView(bad.buffer).setFloat32(4 + 4 * (2 * trainer.lora.Q + 3), -1, true);
    await attempt("negative v", () => trainer.lora.importState(bad));
    trainer.lora.setEnabled(false);
    await attempt("disabled step", () => trainer.step());
    trainer.lora.setEnabled(true);
    trainer.lora.merge();
    await attempt("import while merged", () => trainer.lora.importState(bad));
    await attempt("merge twice", () => trainer.lora.merge());
    trainer.lora.unmerge();
    await attempt("unmerge twice", () => trainer.lora.unmerge());
    trainer.destroy();
    return out;
  },
};

const input = JSON.parse(readFileSync(0, "utf8"));
const results = [];
for (const job of input) {
  if (!jobs[job.kind]) throw new Error(`job kind must be one of ${Object.keys(jobs).join(", ")}`);
  if (job.adapterStateFrom !== undefined) job.adapterState = results[job.adapterStateFrom].adapterState; // an earlier job's
  results.push(await jobs[job.kind](job));
}
console.log(JSON.stringify({ adapter: info.architecture || info.vendor, results }));
device.destroy();
