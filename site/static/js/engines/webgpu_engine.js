// The WebGPU engine of the backend protocol (backend_protocol.md): webgpu/trainer.js, and its
// decoder (webgpu/decoder.js) for samples, on a device of this browser's (or, in Node tests, the
// caller's) adapter, behind the engine interface.
// Works in a module Worker and in Node: it touches navigator.gpu only when no adapter is passed in.
import { Trainer, trainerLimits, checkLimits } from "../../../webgpu/trainer.js";
import { Decoder } from "../../../webgpu/decoder.js";
import { SECURE_CONTEXT_NEEDED } from "../wasm_loader.js";
import { attentionWeights } from "../../../webgpu/inspect.js";
import { StepStats, attentionEntropy } from "../../../webgpu/training_stats.js";
import { isSoftwareAdapter } from "../../../webgpu/software_adapter.js";
import { requestDeviceWithSubgroups } from "../../../webgpu/subgroups.js";
import { softmax, topBytes } from "../next_byte.js";
import { STEPS_IN_FLIGHT } from "../step_stream.js";

/** The adapter's name in words, from whatever GPUAdapterInfo offers. */
function adapterName(adapter) {
  const info = adapter.info ?? {};
  const parts = [info.vendor, info.architecture, info.description].filter(Boolean);
  return parts.length ? [...new Set(parts)].join(" ") : "an unnamed WebGPU adapter";
}

const isSoftware = (adapter) => isSoftwareAdapter(adapter.info);

/** An adapter of `gpu` (navigator.gpu by default); throws a sentence when there is none. */
async function requestAdapter(gpu = globalThis.navigator?.gpu) {
  if (!gpu && globalThis.isSecureContext === false) throw new Error(`WebGPU needs a secure context: this page is ${SECURE_CONTEXT_NEEDED}`);
  if (!gpu) throw new Error("this browser has no WebGPU (navigator.gpu is missing)");
  let adapter;
  try {
    adapter = await gpu.requestAdapter({ powerPreference: "high-performance" });
  } catch (e) {
    throw new Error(`asking for a WebGPU adapter failed: ${e.message}`);
  }
  if (!adapter) throw new Error("WebGPU is present but offers no adapter (blocked, or no usable GPU driver)");
  return adapter;
}

/** {ok, software, name, reason}: whether WebGPU can train here, on what, and why not. */
export async function probe(gpu = globalThis.navigator?.gpu) {
  try {
    const adapter = await requestAdapter(gpu);
    return { ok: true, software: isSoftware(adapter), name: adapterName(adapter), reason: null,
      subgroups: Boolean(adapter.features?.has("subgroups")), f16: Boolean(adapter.features?.has("shader-f16")) };
  } catch (e) {
    return { ok: false, software: false, name: null, reason: e.message, subgroups: false, f16: false };
  }
}

/**
 * {bytes, fits, reason, where}: GPU memory for this model (every buffer of training, evaluation and
 * generation) and whether the adapter's limits allow it. `adapter`: for tests, else navigator.gpu's.
 * lora ({rank, alpha, targets}): a LoRA fine-tune's figure (the base frozen: no gradients or moments of its own).
 */
export async function requirements({ model, training, rules, adapter = null, lora = null }) {
  const { totalBytes } = Trainer.requirements({ model, training, rules }, { lora });
  let chosen;
  try {
    chosen = adapter ?? await requestAdapter();
  } catch (e) {
    return { bytes: totalBytes, fits: false, reason: e.message, where: "WebGPU" };
  }
  const reason = checkLimits({ model, training, rules }, chosen.limits, { lora });
  return { bytes: totalBytes, fits: reason === null, reason, where: `WebGPU on ${adapterName(chosen)}` };
}

/**
 * A device with exactly the limits the trainer depends on, each at the adapter's own value, and
 * subgroups where offered: { device, subgroups } (requestDeviceWithSubgroups).
 */
async function requestTrainerDevice(adapter) {
  return requestDeviceWithSubgroups(adapter, { label: "TinyGPT", requiredLimits: trainerLimits(adapter) });
}

/**
 * The trainer on `device`, inside error scopes: a buffer the GPU cannot allocate (out of memory) or
 * a rejected limit surfaces here as an Error, not later as an uncaptured error.
 */
async function createTrainer(device, config, options) {
  device.pushErrorScope("out-of-memory");
  device.pushErrorScope("validation");
  let trainer = null, thrown = null;
  try {
    trainer = new Trainer(device, config, options);
  } catch (e) {
    thrown = e;
  }
  const validation = await device.popErrorScope();
  const outOfMemory = await device.popErrorScope();
  const failure = thrown?.message ?? outOfMemory?.message ?? validation?.message;
  if (failure === undefined) return trainer;
  trainer?.destroy();
  throw new Error(`creating the model on the GPU failed: ${failure}`);
}

function checkDataState(ds) {
  const ok = ds && Number.isSafeInteger(ds.seed) && ds.seed >= 0 && Number.isSafeInteger(ds.batchesDrawn) && ds.batchesDrawn >= 0;
  if (!ok) throw new Error(`dataState must be {seed, batchesDrawn} with non-negative integers, got ${JSON.stringify(ds)}`);
}

/**
 * The engine interface of backend_protocol.md. Tests under Node pass `device` (and `adapter`, for
 * its name); the page passes neither and gets navigator.gpu's. A model that exceeds the adapter's
 * limits is refused with the sentence of checkLimits() before anything is created.
 * LoRA (backend_protocol.md, "LoRA fine-tuning"): lora {rank, alpha, targets, seed} makes a fine-tune of
 * the base in `state` (webgpu/lora.js): the adapters from their init stream of lora.seed, or from
 * loraState (the adapter state, 4 + 4Q or 4 + 12Q bytes, as tg_lora_export_state lays it out).
 */
export async function createEngine({ model, training, initStd, rules, corpus, seed, state = null, dataState = null, onFatal = () => {}, device = null, adapter = null,
  lora = null, loraState = null }) {
  const config = { model, training, initStd, rules };
  if (dataState) checkDataState(dataState);
  if (loraState && !lora) throw new Error("loraState without lora: say which adapters the state is of");
  const chosen = adapter ?? (device ? null : await requestAdapter());
  const tooBig = checkLimits(config, device ? device.limits : chosen.limits, { lora });
  if (tooBig) throw new Error(tooBig);
  const ownDevice = !device;
  // a device passed in keeps what its owner found (probeSubgroups), and the description says nothing of it
  const { device: gpu, subgroups } = device ? { device, subgroups: null } : await requestTrainerDevice(chosen);
  const name = chosen ? adapterName(chosen) : "the given WebGPU device";

  // the first fatal sentence wins: a lost device also fails every step still in flight
  let dead = null, destroyed = false;
  const fatal = (message) => {
    if (dead || destroyed) return;
    dead = message;
    onFatal(message);
  };
  gpu.lost.then((info) => fatal(`the WebGPU device was lost (${info.reason}: ${info.message}); `
    + "training has stopped, and the last checkpoint is kept"));
  const onError = (e) => fatal(`WebGPU error: ${e.error.message}`);
  gpu.addEventListener("uncapturederror", onError);

  let trainer;
  try {
    trainer = await createTrainer(gpu, config, { corpus, seed, state, lora });
    if (loraState) trainer.lora.importState(loraState);
  } catch (e) {
    trainer?.destroy();
    destroyed = true;
    gpu.removeEventListener("uncapturederror", onError);
    if (ownDevice) gpu.destroy();
    throw e;
  }
  if (dataState) {
    trainer.seed = dataState.seed;
    trainer.batchesDrawn = dataState.batchesDrawn;
  }
  const alive = () => { if (dead) throw new Error(dead); };
  // made at the first sample, on the trainer's weights: its KV cache and samplers' buffers (counted in
  // Trainer.requirements) are not taken from the GPU before they are needed. A fine-tune's decoder reads a
  // copy of the weights, refreshed at each sample with the adapters merged into it or not (lora.js says why)
  let decoder = null;
  const adapters = trainer.lora;
  let measured = null;  // the training view's StepStats, made at the first measured step
  const needLoRA = (what) => {
    if (!adapters) throw new Error(`${what}: this model is not a LoRA fine-tune`);
    return adapters;
  };

  return {
    kind: "webgpu",
    // a sentence, as the WebAssembly engine's: the page follows it with the parameter count
    description: `WebGPU on ${name}` + (subgroups ? `, ${subgroups.reason}` : "") + (chosen && isSoftware(chosen) ? " (software: correct, not fast)" : "") + ".",
    paramCount: trainer.P,
    // a fine-tune's settings and adapter manifest (Q = paramCount), or null
    lora: adapters && { ...adapters.config, paramCount: adapters.Q,
      tensors: adapters.tensors.map(({ name, shape, offset, numel }) => ({ name, shape, offset, numel })) },
    stepsInFlight: chosen && isSoftware(chosen) ? STEPS_IN_FLIGHT.software : STEPS_IN_FLIGHT.gpu,
    get step() { return adapters ? adapters.step : trainer.stepCount; }, // a fine-tune: the adapters' AdamW steps
    dataState: () => ({ seed: trainer.seed, batchesDrawn: trainer.batchesDrawn }),
    // the learning rate of the steps queued from now on (the worker's schedule, lr_schedule.js)
    setLearningRate(lr) { trainer.lr = lr; },
    // trains and evaluates on `bytes` from now on; the data stream's position stays where it is
    setCorpus(bytes) { trainer.setCorpus(bytes); },
    // queues one step (one submit); its loss resolves once the GPU is done, without blocking the next.
    // stats (true, or {probe}: a window of 1..ctx bytes, by default the corpus's first ctx): the step measured
    // for the training view (still one submit: webgpu/training_stats.js), then the attention entropy of the
    // probe; returns once both are read back, so the next step starts from the weights they describe
    async trainStep({ stats = null } = {}) {
      alive();
      if (!stats) return trainer.step();
      measured ??= new StepStats(trainer);
      const probe = stats.probe ?? trainer.train.subarray(0, model.ctx);
      const { loss } = await trainer.step(null, measured.measure());
      const sums = await measured.read();
      const entropy = await attentionEntropy(trainer, probe);
      return { loss, stats: Promise.resolve({ names: measured.names, sums, entropy, T: probe.length }) };
    },
    async evaluate() {
      alive();
      return trainer.evaluate();
    },
    // the trainer waits for every loss in flight before it reads the weights back; a fine-tune: 4 + 4P
    // bytes, the base's step and weights (the merged ones while merged)
    async exportState() {
      alive();
      return trainer.exportState();
    },
    // LoRA: the adapter state (4 + 12Q bytes with AdamW's moments: exact resume with dataState; 4 + 4Q without)
    async exportLoRAState({ moments = true } = {}) {
      alive();
      return needLoRA("exportLoRAState").exportState({ moments });
    },
    importLoRAState(bytes) { needLoRA("importLoRAState").importState(bytes); },
    // the merged model's state (4 + 4P: the base's step | W + (alpha / r)·B·A), the model left as it is
    async exportMergedState() {
      alive();
      return needLoRA("exportMergedState").mergedState();
    },
    // W ± (alpha / r)·B·A in place: merged, every forward runs the merged model and training is refused
    mergeLoRA() { needLoRA("mergeLoRA").merge(); },
    unmergeLoRA() { needLoRA("unmergeLoRA").unmerge(); },
    get loraMerged() { return adapters ? adapters.merged : false; },
    // whether evaluate, attention and (by default) generate add the adapters; training needs them on
    setLoRAEnabled(enabled) { needLoRA("setLoRAEnabled").setEnabled(enabled); },
    get loraEnabled() { return adapters ? adapters.enabled : false; },
    // adapters (a fine-tune): sample with them (default: loraEnabled) or from the base alone
    async generate(prompt, { temperature, topK, seed: sampleSeed, maxNewTokens, onToken, signal, adapters: withAdapters = undefined }) {
      alive();
      decoder ??= new Decoder(trainer, adapters ? { params: adapters.samplingWeights() } : {});
      adapters?.prepareSampling(withAdapters ?? adapters.enabled);
      const made = await decoder.generate(prompt, { temperature, topK, seed: sampleSeed, maxNewTokens, signal,
        onToken: (token, logits) => onToken(token, topBytes(softmax(logits))) });
      return made.length;
    },
    // tokens (1..ctx bytes) -> {T, weights: Float32Array (nLayer, nHead, T, T)}
    async attention(tokens) {
      alive();
      return { T: tokens.length, weights: await attentionWeights(trainer, tokens) };
    },
    // returns the decoder's promise of its background work's end, which a Node process awaits
    destroy() {
      destroyed = true;
      gpu.removeEventListener("uncapturederror", onError);
      const settled = Promise.resolve(decoder?.destroy());
      measured?.destroy();
      trainer.destroy();
      if (ownDevice) gpu.destroy();
      return settled;
    },
  };
}
