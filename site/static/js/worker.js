// The playground's backend: one module Worker that holds at most one model on one engine
// (engines/wasm_engine.js or engines/webgpu_engine.js), trains it on the corpus the page sends
// (bytes + identity, checked there: corpus_checks.js), keeps it in OPFS (checkpoint_store.js) and
// streams samples as raw bytes (the page renders them: sample_text.js). The messages are in backend_protocol.md.
// Training runs here in bursts and yields to the message queue between them, so Stop and Sample
// are heard within a burst; generation yields between tokens, so its Stop is heard within one.
import { openStore } from "./checkpoint_store.js";
import { readTinyGPT, writeTinyGPT, writeCompactF16, paramCount } from "./tinygpt_file.js";
import { configFromPresets, configFromHeader } from "./model_config.js";
import { yieldToMessages } from "./yield_to_messages.js";
import { loadPresets } from "./presets.js";
import { StepStream, burst, BURST_MS } from "./step_stream.js";

const PROBE_STEPS = 3;

const engineModules = {
  wasm: () => import("./engines/wasm_engine.js"),
  webgpu: () => import("./engines/webgpu_engine.js"),
};

let storeOpened = null;   // Promise of {store, reason}
let current = null;       // {engine, backend, runId, preset, config, corpus, targetSteps, lossHistory, valHistory, lastSaved, source}
let stopRequested = false;
let stopHeard = () => {};  // wakes a training loop that waits for the model while a sample holds it
let fatal = null;         // the engine's death sentence (device lost): training stops at the next step
let sampleAbort = null;   // the AbortController of the sample in progress

// Runs jobs one at a time (a training burst, a sample, a save): they share the model.
let tail = Promise.resolve();
const exclusive = (fn) => {
  const run = tail.then(fn);
  tail = run.catch(() => {});
  return run;
};

const post = (m, transfer = []) => postMessage(m, transfer);
const phase = (name, text) => post({ type: "phase", phase: name, text });
const store = () => (storeOpened ??= openStore());

/** The corpus of a message: {bytes: Uint8Array, identity: {name, bytes, sha256}}. */
function corpusOf(msg) {
  const c = msg.corpus;
  if (!c?.bytes || !c.identity?.sha256) throw new Error("no corpus came with the request: choose one in the Train section");
  return { bytes: c.bytes instanceof Uint8Array ? c.bytes : new Uint8Array(c.bytes), identity: c.identity };
}

const newRunId = () => Date.now().toString(36) + Math.random().toString(36).slice(2, 8);

function summary(item) {
  const h = item.header;
  const lastLoss = h.lossHistory?.length ? h.lossHistory[h.lossHistory.length - 1][1] : null;
  return {
    id: item.id, name: h.name ?? h.preset ?? "model", preset: h.preset ?? null,
    step: Number(item.file.match(/-(\d+)\.tinygpt$/)[1]), targetSteps: h.training?.steps ?? null,
    loss: h.finalLoss ?? lastLoss, valLoss: h.bestVal ?? null, savedAt: h.savedAt ?? null, bytes: item.size,
    backend: h.run?.backend ?? null, corpus: h.corpus?.name ?? null,
  };
}

async function listCheckpoints() {
  const { store: s } = await store();
  post({ type: "checkpoints", items: s ? (await s.list()).map(summary) : [] });
}

/** Sends a sample in progress its cancellation and waits until it has let go of the model. */
async function cancelSample() {
  sampleAbort?.abort();
  await exclusive(() => {});
}

function release() {
  current?.engine.destroy();
  current = null;
}

/** A new engine for `config` on `corpus` bytes (state and dataState from a checkpoint, or fresh from seed). */
async function makeEngine(backend, config, { corpus, seed, state = null, dataState = null }) {
  const module = await engineModules[backend]();
  fatal = null;
  return module.createEngine({ ...config, corpus, seed, state, dataState,
    onFatal: (message) => {
      fatal = message;
      post({ type: "error", message, fatal: true });
    } });
}

function announce(notice = null) {
  const c = current;
  post({ type: "loaded", backend: c.backend, description: c.engine.description, paramCount: c.engine.paramCount,
    preset: c.preset, step: c.engine.step, targetSteps: c.targetSteps, source: c.source, id: c.runId, notice,
    tokensPerStep: c.config.training.batch * c.config.model.ctx,
    lossHistory: c.lossHistory, valHistory: c.valHistory });
}

/** The whole .tinygpt of the model in memory: state with moments and everything to resume it. */
async function checkpointBytes() {
  const c = current;
  await c.stream?.drain();  // the file's loss history reaches the step its weights are at
  const state = await c.engine.exportState();
  const last = c.lossHistory[c.lossHistory.length - 1];
  const vals = c.valHistory.map(([, v]) => v);
  const header = {
    name: c.name, preset: c.preset, training: { ...c.config.training, steps: c.targetSteps },
    dataState: c.engine.dataState(), corpus: c.corpus, lossHistory: c.lossHistory, valHistory: c.valHistory,
    finalLoss: last ? last[1] : null, bestVal: vals.length ? Math.min(...vals) : null,
    run: { id: c.runId, backend: c.backend, engine: c.engine.description },
  };
  return writeTinyGPT({ config: c.config.model, header, state });
}

/** Saves the model in memory to OPFS (if there is one and it changed since the last save). */
async function checkpoint() {
  const c = current;
  const { store: s } = await store();
  if (!s || c.lastSaved === c.engine.step) return;
  phase("saving", `Saving a checkpoint at step ${c.engine.step}…`);
  const bytes = await checkpointBytes();
  try {
    await s.save(c.runId, c.engine.step, bytes);
    c.lastSaved = c.engine.step;
    post({ type: "saved", id: c.runId, step: c.engine.step, bytes: bytes.length });
  } catch (e) {
    post({ type: "notice", message: String(e.message) });
  }
}

async function trainLoop(checkpointSeconds) {
  const c = current;
  const evalEvery = c.config.training.evalEvery;
  stopRequested = false;
  phase("training", "Training…");
  let lastSave = performance.now();
  let last = performance.now();
  // steps stay queued from one burst to the next (step_stream.js); what needs every loss drains them
  c.stream = new StepStream(c.engine, c.engine.stepsInFlight, (step, loss) => {
    const now = performance.now();
    c.lossHistory.push([step, loss]);
    post({ type: "step", step, loss, ms: now - last });
    last = now;
  });
  const running = () => !stopRequested && !fatal && c === current;
  const evaluateAt = async (step) => {
    if (step % evalEvery !== 0 && step !== c.targetSteps) return;
    await c.stream.drain();
    const valLoss = await c.engine.evaluate();
    c.valHistory.push([step, valLoss]);
    post({ type: "eval", step, valLoss });
    last = performance.now();  // the evaluation's time is not a step's
  };
  while (c.engine.step < c.targetSteps && running()) {
    // A sample may hold the model; Stop must not wait for it (generation and training never block
    // each other's Stop). A burst that has not begun when Stop comes never touches the engine.
    let began = false;
    const stopped = new Promise((resolve) => { stopHeard = resolve; });
    const work = exclusive(async () => {
      if (!running()) return;
      began = true;
      await burst(c.stream, BURST_MS, { more: () => c.engine.step < c.targetSteps && running(), afterStep: evaluateAt });
      if (performance.now() - lastSave >= checkpointSeconds * 1000) {
        await checkpoint();
        phase("training", "Training…");
        lastSave = performance.now();
        last = lastSave;  // the save's time is not a step's
      }
    });
    await Promise.race([work, stopped]);
    if (began) await work;
    await yieldToMessages();
  }
  if (c !== current) return;
  await c.stream.drain();
  // Not behind the lock: a sample still running only reads the weights, as the export does.
  if (!fatal) await checkpoint();
  phase("idle", "");
  post({ type: "done", step: c.engine.step, targetSteps: c.targetSteps, stopped: c.engine.step < c.targetSteps });
}

async function train({ backend, preset, steps, seed, checkpointSeconds, ...msg }) {
  const corpus = corpusOf(msg);
  await cancelSample();
  const p = await loadPresets();
  const config = configFromPresets(p, preset, { training: { seed, steps } });
  phase("loading", `Creating the ${preset} model on ${backend === "webgpu" ? "WebGPU" : "WebAssembly"}…`);
  await exclusive(release);
  const engine = await makeEngine(backend, config, { corpus: corpus.bytes, seed });
  current = { engine, backend, runId: newRunId(), name: `${preset}, seed ${seed}`, preset, config, corpus: corpus.identity, targetSteps: steps,
    lossHistory: [], valHistory: [], lastSaved: null, source: "new" };
  announce();
  await trainLoop(checkpointSeconds);
}

async function continueTraining({ steps, checkpointSeconds }) {
  await cancelSample();
  if (!current) throw new Error("there is no model in memory to continue: train one or resume a saved one");
  current.targetSteps = current.engine.step + steps;
  announce();
  await trainLoop(checkpointSeconds);
}

/** Builds the engine for a parsed .tinygpt; the model in memory is replaced only once that worked. */
async function adopt(backend, parsed, { runId, source, name, corpus }) {
  const { header } = parsed;
  const { identity } = corpus;
  let notice = null;
  if (header.corpus?.sha256 && header.corpus.sha256 !== identity.sha256) {
    notice = `This model was trained on ${header.corpus.name ?? "another corpus"} (${header.corpus.bytes ?? "?"} bytes, ` +
      `sha256 ${String(header.corpus.sha256).slice(0, 12)}…), not on the chosen corpus ${identity.name}: ` +
      `training continues on ${identity.name}, and its validation loss is measured there.`;
  }
  const config = configFromHeader(header, await loadPresets());
  phase("loading", `Loading ${name} on ${backend === "webgpu" ? "WebGPU" : "WebAssembly"}…`);
  const dataState = header.dataState ?? { seed: config.training.seed, batchesDrawn: 0 };
  const engine = await makeEngine(backend, config, { corpus: corpus.bytes, seed: dataState.seed, state: parsed.state, dataState });
  await exclusive(release);
  current = { engine, backend, runId, name, preset: header.preset ?? null, config, corpus: identity,
    targetSteps: Math.max(header.training?.steps ?? 0, parsed.step), lossHistory: header.lossHistory ?? [],
    valHistory: header.valHistory ?? [], lastSaved: source === "saved" ? parsed.step : null, source };
  announce(notice);
}

async function resume({ backend, id, checkpointSeconds, ...msg }) {
  const corpus = corpusOf(msg);
  await cancelSample();
  const { store: s, reason } = await store();
  if (!s) throw new Error(`there are no saved checkpoints: ${reason}`);
  const { parsed } = await s.read(id);
  await adopt(backend, parsed, { runId: id, source: "saved", name: parsed.header.name ?? parsed.header.preset ?? "model", corpus });
  phase("idle", "");
  if (current.engine.step < current.targetSteps) await trainLoop(checkpointSeconds);
  else post({ type: "done", step: current.engine.step, targetSteps: current.targetSteps, stopped: false });
}

/** An uploaded .tinygpt, or the demo model (`source` "demo"): both take this one path. */
async function load({ backend, bytes, name, source = "upload", ...msg }) {
  const corpus = corpusOf(msg);
  await cancelSample();
  const parsed = readTinyGPT(new Uint8Array(bytes));  // refuses a bad file before anything changes
  await adopt(backend, parsed, { runId: newRunId(), source, name, corpus });
  await exclusive(checkpoint);
  phase("idle", "");
  await listCheckpoints();
}

async function sample({ prompt, temperature, topK, maxNewTokens, seed }) {
  // Registered before anything is awaited: a Train, load or Stop that comes while this sample still
  // waits for the model (behind a save, say) cancels it too. Registered after that wait, a sample could
  // miss its cancellation and then hold the model for all its tokens while training waited behind it.
  const controller = new AbortController();
  sampleAbort?.abort();
  sampleAbort = controller;
  try {
    await exclusive(() => {});  // the sample before this one has let go of the model
    if (!current) throw new Error("there is no model yet: train one, resume a saved one or upload a .tinygpt");
    await generateSample({ prompt, temperature, topK, maxNewTokens, seed }, controller);
  } finally {
    if (sampleAbort === controller) sampleAbort = null;
  }
}

/** The sample's tokens, streamed to the page, until maxNewTokens or the controller's abort. */
function generateSample({ prompt, temperature, topK, maxNewTokens, seed }, controller) {
  return exclusive(async () => {
    const t0 = performance.now();
    let ttftMs = null, tokens = 0, chunk = [], chunkTop = [];  // chunkTop: each byte's top next bytes (logit view)
    let lastPost = t0;
    // raw bytes: a byte-level model may emit any byte, and a character may span tokens; the page renders them
    const flush = () => {
      const elapsed = (performance.now() - t0) / 1000;
      post({ type: "text", bytes: Uint8Array.from(chunk), top: chunkTop, tokens, ttftMs, tokensPerSecond: tokens / Math.max(elapsed, 1e-6) });
      chunk = [];
      chunkTop = [];
      lastPost = performance.now();
    };
    const bytes = new TextEncoder().encode(prompt || "\n");  // an empty prompt starts from a newline
    const made = await current.engine.generate(bytes, { temperature, topK, seed, maxNewTokens, signal: controller.signal,
      onToken: (t, top) => {
        ttftMs ??= performance.now() - t0;
        tokens++;
        chunk.push(t);
        chunkTop.push(top);
        if (performance.now() - lastPost > 30) flush();
      } });
    flush();
    post({ type: "sampleDone", tokens: made, cancelled: controller.signal.aborted });
  });
}

async function download({ id, compact }) {
  let bytes, name;
  if (id === null) {
    if (!current) throw new Error("there is no model in memory to download");
    bytes = await exclusive(checkpointBytes);
    name = `${current.preset ?? "model"}-step${current.engine.step}`;
  } else {
    const { store: s } = await store();
    const saved = await s.read(id);
    bytes = saved.bytes;
    name = `${saved.parsed.header.preset ?? "model"}-step${saved.parsed.step}`;
  }
  if (compact) {
    const parsed = readTinyGPT(bytes);
    const weightsOnly = parsed.state.subarray(0, 4 + 4 * paramCount(parsed.config));
    bytes = writeCompactF16({ config: parsed.config, header: parsed.header, state: weightsOnly });
    name += "-fp16";
  }
  const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  post({ type: "file", name: `${name}.tinygpt`, bytes: buffer }, [buffer]);
}

/** Times a few steps of a throwaway model of `preset` on `backend`, for the page's ETA. */
async function probe({ backend, preset, steps, ...msg }) {
  const { bytes } = corpusOf(msg);
  const config = configFromPresets(await loadPresets(), preset);
  const module = await engineModules[backend]();
  const times = await exclusive(async () => {
    const engine = await module.createEngine({ ...config, corpus: bytes, seed: 0 });
    try {
      const ms = [];
      for (let i = 0; i < PROBE_STEPS; i++) {
        const t0 = performance.now();
        await (await engine.trainStep()).loss;
        ms.push(performance.now() - t0);
      }
      return ms.slice(1);  // the first step compiles pipelines and warms caches
    } finally {
      engine.destroy();
    }
  });
  const msPerStep = times.reduce((a, b) => a + b) / times.length;
  post({ type: "probe", backend, preset, steps, msPerStep });
}

/** The validation loss of the model in memory, as the engine computes it during training. */
async function evaluate() {
  if (!current) throw new Error("there is no model to evaluate: train one, resume one or load one");
  const c = current;
  const valLoss = await exclusive(() => c.engine.evaluate());
  post({ type: "evaluated", step: c.engine.step, valLoss, corpus: c.corpus.name, windows: c.config.training.evalWindows,
    ctx: c.config.model.ctx, backend: c.backend });
}

/** The attention probabilities of the prompt's last ctx bytes in the model in memory (the attention view). */
async function attention({ prompt }) {
  if (!current) throw new Error("there is no model to look inside: train one, resume one or load one");
  const c = current, { nLayer, nHead, ctx } = c.config.model;
  const tokens = new TextEncoder().encode(prompt || "\n").slice(-ctx);  // as sample: an empty prompt is a newline
  const { T, weights } = await exclusive(() => c.engine.attention(tokens));
  post({ type: "attention", tokens, nLayer, nHead, T, weights, step: c.engine.step, backend: c.backend }, [weights.buffer]);
}

async function hello() {
  const { store: s, reason } = await store();
  post({ type: "features", opfs: !!s, opfsReason: reason });
  await listCheckpoints();
}

const handlers = {
  hello,
  train,
  continue: continueTraining,
  resume,
  load,
  sample,
  download,
  list: listCheckpoints,
  probe,
  evaluate,
  attention,
  stop: () => {
    stopRequested = true;
    stopHeard();
  },
  stopSample: () => { sampleAbort?.abort(); },
  delete: async ({ id }) => {
    const { store: s } = await store();
    if (s) await s.remove(id);
    await listCheckpoints();
  },
};

self.onmessage = async ({ data: msg }) => {
  try {
    const handler = handlers[msg.type];
    if (!handler) throw new Error(`unknown message type ${msg.type}`);
    await loadPresets();  // once: the .tinygpt reader and writer take presets.json's defaults and rules
    await handler(msg);
  } catch (e) {
    phase("idle", "");
    // a step that failed because the device was lost: the page already has the fatal sentence
    if (fatal && ["train", "continue", "resume"].includes(msg.type)) return;
    post({ type: "error", message: String(e?.message || e), during: msg.type, fatal: false });
  }
};
