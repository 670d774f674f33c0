// What the browser-driven tests call (through Playwright's page.evaluate): thin wrappers that move
// bytes as base64 and run the real modules on navigator.gpu. The same calls also run inside a
// module Web Worker (worker_entry.js), which is where the site trains.
import { runKernelCases } from "./kernel_cases.js";
import { moduleErrors } from "./compile_check.js";
import { pipelinesOf } from "../../../webgpu/ops.js";
import { Trainer, trainerLimits } from "../../../webgpu/trainer.js";
import { Decoder } from "../../../webgpu/decoder.js";
import { requestDeviceWithSubgroups } from "../../../webgpu/subgroups.js";
import { configFromPresets } from "../../../site/static/js/model_config.js";

export function toBase64(u8) {
  let s = "";
  for (let i = 0; i < u8.length; i += 0x8000) s += String.fromCharCode.apply(null, u8.subarray(i, i + 0x8000));
  return btoa(s);
}
export function fromBase64(b64) {
  const s = atob(b64), out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}
const f32b64 = (f) => toBase64(new Uint8Array(f.buffer, f.byteOffset, f.byteLength));

let devicePromise = null;
export function gpuDevice() {
  devicePromise ??= (async () => {
    if (!navigator.gpu) throw new Error("navigator.gpu is missing: WebGPU is not enabled in this browser");
    const adapter = await navigator.gpu.requestAdapter();
    if (!adapter) throw new Error("no WebGPU adapter");
    const { device, subgroups } = await requestDeviceWithSubgroups(adapter, { requiredLimits: trainerLimits(adapter) });
    device.addEventListener("uncapturederror", (e) => console.error(`WebGPU error: ${e.error.message}`));
    return { adapter, device, subgroups };
  })();
  return devicePromise;
}

export async function adapterInfo() {
  const { adapter, subgroups } = await gpuDevice();
  return { vendor: adapter.info.vendor, architecture: adapter.info.architecture, description: adapter.info.description, subgroups };
}

/** Runs kernel cases; inputs and outputs as base64. */
export async function kernelCases(cases, inputsB64) {
  const { device } = await gpuDevice();
  const inputs = Object.fromEntries(Object.entries(inputsB64).map(([k, v]) => [k, fromBase64(v)]));
  const out = await runKernelCases(device, cases, inputs);
  return Object.fromEntries(Object.entries(out).map(([k, v]) => [k, f32b64(v)]));
}

/**
 * Compiles WGSL kernels into shader modules on this page's device (compile_check.js moduleErrors):
 * Chromium's own WGSL validation of each. No pipelines: SwiftShader's LLVM JIT takes 1-21 s a
 * pipeline, so the kernel cases make theirs here and null_backend_pipelines.mjs makes every variant's
 * on Dawn's Null backend. sources: [{name, also, code}], dump_wgsl.mjs's files (also: the other kernel
 * names of the same source). -> {compiled, alreadyMade (of those, the ones whose pipeline this page has
 * made already: a kernel case's, by any of its names), failures: [{name, errors}]}
 */
export async function compileWgsl(sources) {
  const { device } = await gpuDevice();
  const made = pipelinesOf(device).byName;
  const result = { compiled: 0, alreadyMade: 0, failures: [] };
  for (const { name, also, code } of sources) {
    const errors = await moduleErrors(device, name, code);
    if (errors.length) result.failures.push({ name, errors });
    else result.compiled += 1;
    if ([name, ...also].some((n) => made.has(n))) result.alreadyMade += 1;
  }
  return result;
}

async function loadPresets() { return (await fetch("/site/static/presets.json")).json(); }
async function loadCorpus(path) { return new Uint8Array(await (await fetch(path)).arrayBuffer()); }

/**
 * A training session as the tests use it. job: {preset, overrides, seed, corpus (URL path), state (base64)?,
 * steps, fixedBatch: {x, y}?, lossBatch: {x, y}?, exportState, evaluate, decode: [tokens]?, generate: {...}?,
 * matmulTiles: "gpu" | "software", subgroupWidth, deferWeightGrads (Trainer's options)?}
 */
export async function trainJob(job) {
  const { device } = await gpuDevice();
  const presets = await loadPresets();
  const config = configFromPresets(presets, job.preset, job.overrides ?? {});
  const corpus = job.corpus ? await loadCorpus(job.corpus) : null;
  const trainer = new Trainer(device, config, { corpus, seed: job.seed ?? config.training.seed, state: job.state ? fromBase64(job.state) : null,
    matmulTiles: job.matmulTiles, subgroupWidth: job.subgroupWidth, deferWeightGrads: job.deferWeightGrads });
  const result = { P: trainer.P, losses: [], subgroupWidth: trainer.ops.subgroupWidth, headDeferred: trainer.headDeferred };
  let decoder = null; // made where the job decodes, on the trained weights
  try {
    if (job.initialWeights) result.initialWeights = f32b64(await trainer.weights());
    const fixed = job.fixedBatch ? { x: Uint32Array.from(job.fixedBatch.x), y: Uint32Array.from(job.fixedBatch.y) } : null;
    if (job.stopBelow !== undefined) {
      // the overfit gate: await each loss, stop once it is below the bar
      for (let i = 0; i < job.steps; i++) {
        const loss = await (await trainer.step(fixed)).loss;
        result.losses.push(loss);
        if (loss < job.stopBelow) break;
      }
    } else {
      const pending = [];
      for (let i = 0; i < (job.steps ?? 0); i++) pending.push((await trainer.step(fixed)).loss);
      result.losses = await Promise.all(pending);
    }
    if (job.lossBatch) result.batchLoss = await trainer.lossOn(Uint32Array.from(job.lossBatch.x), Uint32Array.from(job.lossBatch.y));
    if (job.evaluate) result.valLoss = await trainer.evaluate();
    if (job.exportState) result.state = toBase64(await trainer.exportState());
    if (job.decode || job.generate) decoder = new Decoder(trainer);
    if (job.decode) {
      result.decodeLogits = (await decoder.decodeLogits(job.decode)).map(f32b64);
      result.decodeKernels = [...new Set(decoder.genPlan.entries.map((e) => e.kernel.name))];
    }
    if (job.generate) {
      const streamed = [];
      const out = await decoder.generate(Uint8Array.from(job.generate.prompt), { ...job.generate, onToken: (t) => streamed.push(t) });
      result.generated = Array.from(out);
      result.streamed = streamed;
    }
  } finally {
    decoder?.destroy(); // a page need not wait for its background compile
    trainer.destroy();
  }
  return result;
}

/** The same job, run inside a module Web Worker (worker_entry.js): the site's configuration. */
export function trainJobInWorker(job) {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL("./worker_entry.js", import.meta.url), { type: "module" });
    worker.onmessage = (e) => { worker.terminate(); e.data.error ? reject(new Error(e.data.error)) : resolve(e.data.result); };
    worker.onerror = (e) => { worker.terminate(); reject(new Error(e.message)); };
    worker.postMessage(job);
  });
}
