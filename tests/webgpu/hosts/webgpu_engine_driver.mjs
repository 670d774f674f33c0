// Drives site/static/js/engines/webgpu_engine.js under Node (npm `webgpu`, Dawn; SwiftShader in the
// tests) for tests/webgpu/test_webgpu_engine.py: `node webgpu_engine_driver.mjs <part>...` runs the parts in
// order in one process and prints one JSON line per part as it ends: {"part", "result"}.
// Parts: probe, limits, train (4 steps, then 2 + 2 through exportState/dataState), generate (abort after 5
// tokens), buffers (every createBuffer of a Trainer and its Decoder vs Trainer.requirements), lost (a destroyed
// device). train, generate, buffers and lost's generation share one device, so that its pipelines compile once
// (SwiftShader takes seconds over each); lost destroys it, so it comes last.
import { readFileSync } from "node:fs";
import { register } from "node:module";
import { fileURLToPath } from "node:url";
import { configFromPresets } from "../../../site/static/js/model_config.js";

// the engine imports the trainer by its served path: map it to webgpu/ before importing either
register("./served_layout_hooks.mjs", import.meta.url);
const { createEngine, requirements, probe } = await import("../../../site/static/js/engines/webgpu_engine.js");
const { Trainer, checkLimits, trainerLimits } = await import("../../../webgpu/trainer.js");
const { requestDeviceWithSubgroups } = await import("../../../webgpu/subgroups.js");
const { Decoder } = await import("../../../webgpu/decoder.js");

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const { create, globals } = await import(new URL("../../../webgpu/node_modules/webgpu/index.js", import.meta.url));
Object.assign(globalThis, globals);
// the GPU instance must outlive every adapter and device (webgpu/node_gpu.js says why)
const gpu = create([]);
const presets = JSON.parse(readFileSync(`${ROOT}site/static/presets.json`, "utf8"));
const corpus = new Uint8Array(readFileSync(`${ROOT}site/static/data/tinyshakespeare.txt`));
const SEED = 1337;

const fatals = []; // the part's
const onFatal = (message) => fatals.push(message);
const adapter = () => gpu.requestAdapter();
// the device the engine would request for itself (its trainer's limits at the adapter's values, subgroups
// where offered), shared by the parts' engines and trainers: each is given it with its adapter, whose name and
// kind (software or not) the engine describes
let shared = null;
async function sharedDevice() {
  if (!shared) {
    const chosen = await adapter();
    shared = { adapter: chosen, device: (await requestDeviceWithSubgroups(chosen, { label: "TinyGPT", requiredLimits: trainerLimits(chosen) })).device };
  }
  return shared;
}
const engineFor = async (name, extra = {}) => {
  const { device, adapter: chosen } = extra.device ? {} : await sharedDevice();
  return createEngine({ ...configFromPresets(presets, name), corpus, seed: SEED, onFatal, device, adapter: chosen, ...extra });
};

/** Queues n steps, then awaits their losses (several in flight, as the worker runs them). */
async function train(engine, n) {
  const pending = [];
  for (let i = 0; i < n; i++) pending.push((await engine.trainStep()).loss);
  return Promise.all(pending);
}

// Few steps: SwiftShader takes seconds per step; the page's e2e test and the trainer's own tests run longer.
const STEPS = 4, RESUME_AT = 2;

const parts = {
  async train() {
    const whole = await engineFor("tiny");
    const losses = await train(whole, STEPS);
    const wholeState = await whole.exportState();
    const { description, stepsInFlight } = whole;
    whole.destroy();

    const first = await engineFor("tiny");
    const firstLosses = await train(first, RESUME_AT);
    const state = await first.exportState(), dataState = first.dataState();
    first.destroy();
    const resumed = await engineFor("tiny", { state, dataState });
    const resumedStep = resumed.step;
    const resumedLosses = await train(resumed, STEPS - RESUME_AT);
    const resumedState = await resumed.exportState();
    const end = { step: resumed.step, dataState: resumed.dataState() };
    resumed.destroy();
    return { description, stepsInFlight, losses, firstLosses, dataState, stateBytes: state.length, resumedStep, resumedLosses, end,
      sameFinalState: wholeState.length === resumedState.length && wholeState.every((b, i) => b === resumedState[i]) };
  },

  async generate() {
    const engine = await engineFor("tiny");
    const prompt = new TextEncoder().encode("ROMEO:");
    const options = { temperature: 0.8, topK: 40, seed: 3, maxNewTokens: 40 };
    const full = [];
    const fullMade = await engine.generate(prompt, { ...options, onToken: (t) => full.push(t) });
    const controller = new AbortController(), streamed = [];
    const made = await engine.generate(prompt, { ...options, signal: controller.signal,
      onToken: (t) => { streamed.push(t); if (streamed.length === 5) controller.abort(); } });
    await engine.destroy();
    return { fullMade, full, made, streamed };
  },

  async buffers() {
    const { device } = await sharedDevice();
    const out = {};
    // "tiny deferred": the tiny preset with its weight gradients deferred, as from medium up, which keeps more buffers
    for (const [name, preset, options] of [["tiny", "tiny", {}], ["small", "small", {}], ["tiny deferred", "tiny", { deferWeightGrads: true }]]) {
      const created = [];
      const createBuffer = device.createBuffer.bind(device);
      device.createBuffer = (d) => { created.push({ label: d.label ?? "", size: d.size, usage: d.usage }); return createBuffer(d); };
      const config = configFromPresets(presets, preset);
      const trainer = new Trainer(device, config, { corpus, seed: SEED, ...options });
      // the decode buffers (by the rule: where generate's engine has compiled tiny's decode_tokens.js kernel on
      // this device, tiny's decoders make its plan too, else the kernel compiles in the background and the
      // decoder is destroyed before its plan is made)
      const decoder = new Decoder(trainer);
      await decoder.generate(new Uint8Array([10]), { maxNewTokens: 1, temperature: 1, topK: 1 });
      await trainer.exportState(); // and the state read-back
      await decoder.destroy();
      trainer.destroy();
      delete device.createBuffer;
      const { buffers, ...need } = Trainer.requirements(config, options);
      out[name] = { created, need, buffers, checkLimits: checkLimits(config, device.limits) };
    }
    out.usage = { STORAGE: GPUBufferUsage.STORAGE, UNIFORM: GPUBufferUsage.UNIFORM };
    return out;
  },

  async limits() {
    const requested = [];
    const fake = { // an adapter offering 1 MiB buffers: small's logits (16·64 rows × 256) need 1 MiB, its train h 1.5 MiB
      info: { vendor: "test", architecture: "fake" },
      limits: { maxStorageBufferBindingSize: 2 ** 20, maxBufferSize: 2 ** 20, maxStorageBuffersPerShaderStage: 8 },
      requestDevice: async (d) => { requested.push(d); throw new Error("requestDevice must not be called"); },
    };
    const config = configFromPresets(presets, "small");
    const need = await requirements({ ...config, adapter: fake });
    let refused = null;
    try {
      await createEngine({ ...config, corpus, seed: SEED, onFatal, adapter: fake });
    } catch (e) {
      refused = e.message;
    }
    const real = await adapter();
    const realLimits = Object.fromEntries(["maxStorageBufferBindingSize", "maxBufferSize"].map((k) => [k, real.limits[k]]));
    const everyPreset = Object.fromEntries(Object.keys(presets.presets).map((n) => [n, checkLimits(configFromPresets(presets, n), real.limits)]));
    return { need, refused, requested: requested.length, realLimits, everyPreset,
      tinyOnReal: await requirements({ ...configFromPresets(presets, "tiny"), adapter: real }) };
  },

  async probe() {
    const fake = (impl) => ({ requestAdapter: impl });
    return {
      none: await probe(null),
      noAdapter: await probe(fake(async () => null)),
      throws: await probe(fake(async () => { throw new Error("adapter request failed for the test"); })),
      fallback: await probe(fake(async () => ({ info: { vendor: "acme", architecture: "gpu9", isFallbackAdapter: true } }))),
      hardware: await probe(fake(async () => ({ info: { vendor: "acme", architecture: "gpu9", description: "Acme GPU 9" } }))),
      real: await probe(gpu),
    };
  },

  async lost() {
    // the outcome of p, or "hung" after 30 s (a timer that ends with p: the process does not wait it out)
    const settle = (p) => {
      let timer;
      const hung = new Promise((r) => { timer = setTimeout(() => r("hung"), 30000); });
      return Promise.race([p.then((v) => `resolved ${v}`, (e) => `rejected: ${e.message}`), hung]).finally(() => clearTimeout(timer));
    };
    // 3. generating on the decode chain, whose next batch is submitted before this one is read, when the
    // device goes: generate rejects, and a batch ahead that no one awaits does not end the process. On the
    // shared device, whose decode pipelines generate compiled (no part can use it after this one)
    const { device: device3 } = await sharedDevice();
    shared = null;
    const generator = new Decoder(new Trainer(device3, configFromPresets(presets, "tiny"), { corpus, seed: SEED }), { decodeInOneWorkgroup: false });
    let made = 0;
    const generateOutcome = await settle(generator.generate(new TextEncoder().encode("ROMEO:"), {
      maxNewTokens: 40, temperature: 0.8, topK: 40, batchMs: Infinity,
      onToken: () => { made += 1; if (made === 3) device3.destroy(); } }).then((t) => `made ${t.length}`));
    await new Promise((r) => setTimeout(r, 500)); // an unhandled rejection would end the process here
    // 1. the engine: a step in flight when its device is destroyed, then the next step
    const device = await (await adapter()).requestDevice();
    const engine = await engineFor("tiny", { device, adapter: null });
    // 2's trainer, beside the engine on its device
    const trainer = new Trainer(device, configFromPresets(presets, "tiny"), { corpus, seed: SEED });
    await (await engine.trainStep()).loss;
    const inFlight = (await engine.trainStep()).loss;
    device.destroy();
    const inFlightOutcome = await settle(inFlight);
    await settle(device.lost);
    let next = null;
    try {
      await engine.trainStep();
    } catch (e) {
      next = e.message;
    }
    engine.destroy();
    // 2. the trainer alone (no engine around it): a step on an already destroyed device rejects its loss, never hangs
    const trainerOutcome = await settle(trainer.step().then((s) => s.loss));
    return { inFlightOutcome, next, trainerOutcome, generateOutcome, tokensBeforeLoss: made, fatals: [...fatals] };
  },
};

const asked = process.argv.slice(2);
const unknown = asked.filter((part) => !parts[part]);
if (!asked.length || unknown.length) throw new Error(`parts must be among ${Object.keys(parts).join(", ")}`);
for (const part of asked) {
  fatals.length = 0;
  const result = await parts[part]();
  console.log(JSON.stringify({ part, result: { ...result, fatals: result.fatals ?? [...fatals] } }));
}
shared?.device.destroy();
