// The playground's backend: one module Worker that holds at most one model on one engine
// (engines/wasm_engine.js or engines/webgpu_engine.js), trains it on the corpus the page sends
// (bytes + identity, checked there: corpus_checks.js), keeps it in OPFS (checkpoint_store.js) and
// streams samples as raw bytes (the page renders them: sample_text.js). The messages are in backend_protocol.md.
// Training runs here in bursts and yields to the message queue between them, so Stop and Sample
// are heard within a burst; generation yields between tokens, so its Stop is heard within one.
// The worker owns "the model in this tab": one record (model_record.js) that every `loaded` and `model`
// message carries, which the page draws every view from. Other tabs are met through model_locks.js: the
// tab that trains a saved model holds its Web Lock, and every change to the saved models is broadcast.
import { openStore, DeletedModelError } from "./checkpoint_store.js";
import { readTinyGPT, writeTinyGPT, writeCompactF16, paramCount, TinyGPTFileError } from "./tinygpt_file.js";
import { configFromPresets, configFromHeader } from "./model_config.js";
import { yieldToMessages } from "./yield_to_messages.js";
import { loadPresets } from "./presets.js";
import { StepStream, burst, BURST_MS } from "./step_stream.js";
import { corporaOf, extendCorpora, hyperOf, optimiserNote } from "./model_record.js";
import { learningRateAt } from "./lr_schedule.js";
import { lockedIds, modelsChannel, tabFeatures, tryLock } from "./model_locks.js";
import { plainFileError } from "./file_errors.js";
import * as lora from "./finetune_worker.js";
import { measuredNext, summarise } from "./training_stats.js";
import { runOf } from "./runs_compare.js";

const PROBE_STEPS = 3;

const engineModules = {
  wasm: () => import("./engines/wasm_engine.js"),
  webgpu: () => import("./engines/webgpu_engine.js"),
};

let storeOpened = null;   // Promise of {store, reason}
// The model in memory: {engine, backend, runId (its saved row), name, preset, config, corpus (the engine's:
// what it trains and evaluates on now), trainedCorpus (what it last trained on, the header's `corpus`),
// corpora and segmentFrom (every corpus before the current stretch, and where that stretch began),
// targetSteps, lossHistory, valHistory, lastSaved, source, openedAtStep, optimizerState, deleted, readOnly,
// lock (the writer's lock while a run holds it), training}
let current = null;
const channel = modelsChannel();
let stopRequested = false;
let stopHeard = () => {};  // wakes a training loop that waits for the model while a sample holds it
let fatal = null;         // the engine's death sentence (device lost): training stops at the next step
let sampleAbort = null;   // the AbortController of the sample in progress
let statsEvery = 0;       // the training view: a step measured every statsEvery steps (0: off; the page's `trainingView`)

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
const MB = 1024 * 1024;
const mb = (n) => `${(n / MB).toFixed(1)} MB`;

/** A .tinygpt the page sent that cannot be read: the message is in plain words for the upload control. */
class FileRefused extends Error {}

/** Why a model cannot be written here: another tab holds its writer's lock. */
const busyElsewhere = (name) => `"${name}" is training in another tab of this browser, which alone may write it: ` +
  "it cannot be resumed, continued, renamed or deleted here until it stops there (you can open it here to sample)";

/** The corpus of a message: {bytes: Uint8Array, identity: {name, bytes, sha256}}. */
function corpusOf(msg) {
  const c = msg.corpus;
  if (!c?.bytes || !c.identity?.sha256) throw new Error("no corpus came with the request: choose one in the Train section");
  return { bytes: c.bytes instanceof Uint8Array ? c.bytes : new Uint8Array(c.bytes), identity: c.identity };
}

const newRunId = () => Date.now().toString(36) + Math.random().toString(36).slice(2, 8);

function summary(item, locked) {
  const h = item.header;
  const lastLoss = h.lossHistory?.length ? h.lossHistory[h.lossHistory.length - 1][1] : null;
  const step = stepOfFile(item.file);
  const vals = Array.isArray(h.valHistory) ? h.valHistory : [];
  const best = vals.reduce((b, e) => (b === null || e[1] < b[1] ? e : b), null);
  const here = current?.lock && current.runId === item.id;
  return {
    id: item.id, name: h.name ?? h.preset ?? "model", preset: h.preset ?? null,
    shape: shapeOf(h.config ?? h.baseConfig),
    step, targetSteps: h.training?.steps ?? null,
    loss: h.finalLoss ?? lastLoss, valLoss: h.bestVal ?? null, valStep: best ? best[0] : null, savedAt: h.savedAt ?? null,
    bytes: item.size, backend: h.run?.backend ?? null, corpus: h.corpus ?? null, corpora: corporaOf(h, step),
    busy: locked.has(item.id) ? (here ? "here" : "elsewhere") : null, ...lora.rowOf(h),
  };
}

const stepOfFile = (file) => Number(file.match(/-(\d+)\.(?:tinygpt|tgla)$/)[1]);
const shapeOf = ({ nLayer, nHead, dModel, ctx }) => ({ nLayer, nHead, dModel, ctx });

/** The store that keeps the model in memory, or saved row `id`: the models' or (a fine-tune) the fine-tunes'. */
async function storeOf(what) {
  const fineTune = typeof what === "string" ? await lora.isSavedFineTune(what) : Boolean(what?.lora);
  return fineTune ? lora.adapterStore() : store();
}

async function listCheckpoints() {
  const { store: s } = await store();
  const { store: a } = await lora.adapterStore();
  const locked = await lockedIds();
  const items = [...(s ? await s.list() : []), ...(a ? await a.list() : [])]
    .sort((x, y) => String(y.header.savedAt).localeCompare(String(x.header.savedAt)));
  post({ type: "checkpoints", items: items.map((it) => summary(it, locked)) });
}

/** The saved models changed (here or in another tab): this tab's model learns whether its row went or was renamed. */
async function savedModelsChanged(news = {}) {
  const c = current;
  const { store: s } = await storeOf(c);
  if (c && s && !c.deleted && c.lastSaved !== null && await s.isDeleted(c.runId)) {
    c.deleted = true;
    postRecord();
  }
  if (c && news.what === "renamed" && news.id === c.runId) {
    c.name = news.name;
    postRecord();
  }
  await listCheckpoints();
}
channel.onChange((news) => { savedModelsChanged(news).catch(() => {}); });

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
async function makeEngine(backend, config, { corpus, seed, state = null, dataState = null, lora: adapters = null, loraState = null }) {
  const module = await engineModules[backend]();
  fatal = null;
  return module.createEngine({ ...config, corpus, seed, state, dataState, lora: adapters, loraState,
    onFatal: (message) => {
      fatal = message;
      post({ type: "error", message, fatal: true });
    } });
}

/** Every corpus the model in memory trained on, the stretch in progress included. */
const corporaNow = (c = current) => extendCorpora(c.corpora, c.corpus, c.segmentFrom, c.engine.step);

/** The record of the model in memory (model_record.js), as the page draws it. */
function record() {
  const c = current;
  const { nLayer, nHead, dModel, ctx } = c.config.model;
  return {
    id: c.runId, name: c.name, preset: c.preset, shape: { nLayer, nHead, dModel, ctx }, paramCount: c.engine.paramCount,
    backend: c.backend, description: c.engine.description, step: c.engine.step, openedAtStep: c.openedAtStep,
    targetSteps: c.targetSteps, source: c.source, corpus: c.trainedCorpus, engineCorpus: c.corpus, corpora: corporaNow(),
    hyper: hyperOf(c.config.training), optimizerState: c.optimizerState, savedStep: c.lastSaved, deleted: c.deleted,
    readOnly: c.readOnly, training: c.training, tokensPerStep: c.config.training.batch * c.config.model.ctx,
    kind: c.lora ? "lora" : "model", lora: lora.recordOf(c),
  };
}

/** The record again, after something the page shows changed (a save, a delete, a rename, a run's start or end). */
function postRecord() {
  if (current) post({ type: "model", record: record() });
}

function announce(notice = null) {
  const c = current;
  post({ type: "loaded", ...record(), description: c.engine.description, notice,
    lossHistory: c.lossHistory, valHistory: c.valHistory });
}

/** The whole .tinygpt of the model in memory: state with moments and everything to resume it. */
async function checkpointBytes() {
  const c = current;
  if (c.lora) return lora.adapterBytes(c);  // a fine-tune's checkpoint is its adapter file
  await c.stream?.drain();  // the file's loss history reaches the step its weights are at
  const state = await c.engine.exportState();
  return writeTinyGPT({ config: c.config.model, header: runHeader(c), state });
}

/** What a checkpoint's header says of the run (a model's and a fine-tune's alike). */
function runHeader(c) {
  const last = c.lossHistory[c.lossHistory.length - 1];
  const vals = c.valHistory.map(([, v]) => v);
  const training = { ...c.config.training, steps: c.targetSteps };
  const corpora = corporaNow(c);
  return {
    name: c.name, preset: c.preset, training,
    dataState: c.engine.dataState(), corpus: corpora.length ? corpusIdentity(corpora[corpora.length - 1]) : c.trainedCorpus ?? c.corpus,
    corpora, lossHistory: c.lossHistory, valHistory: c.valHistory,
    finalLoss: last ? last[1] : null, bestVal: vals.length ? Math.min(...vals) : null,
    run: { id: c.runId, backend: c.backend, engine: c.engine.description },
  };
}

const corpusIdentity = ({ name, bytes, sha256 }) => ({ name, bytes, sha256 });

/**
 * Saves the model in memory to OPFS (if there is one, it changed since the last save and its row was not
 * deleted). Outside a run it takes the row's writer's lock itself; the phase says how far the save is.
 */
async function checkpoint() {
  const c = current;
  const { store: s } = await storeOf(c);
  if (!s || c.lastSaved === c.engine.step || c.deleted) return;
  const step = c.engine.step;
  const saying = c.stopping ? "Stopping: " : "";
  phase("saving", `${saying}saving a checkpoint at step ${step}…`);
  const bytes = await checkpointBytes();
  const progress = ({ phase: what, done, total }) => phase("saving", what === "writing"
    ? `${saying}saving step ${step}: ${mb(done)} of ${mb(total)} written…`
    : `${saying}saving step ${step}: checking the ${mb(total)} written…`);
  const lock = c.lock ? null : await tryLock(c.runId);
  try {
    if (!c.lock && !lock) throw new Error(`not saved: ${busyElsewhere(c.name)}`);
    if (c.lora) await lora.keepBase(s, c);
    await s.save(c.runId, step, bytes, progress);
    c.lastSaved = step;
    post({ type: "saved", id: c.runId, step, bytes: bytes.length, at: Date.now() });
    postRecord();
    channel.post("saved");
    await listCheckpoints();  // the run's row shows from its first save, at the step last saved
  } catch (e) {
    if (e instanceof DeletedModelError) {
      c.deleted = true;
      postRecord();
    }
    post({ type: "notice", message: String(e.message) });
  } finally {
    lock?.release();
  }
}

/**
 * The run's writer's lock on the model in memory, taken before its first step (refused with a sentence
 * when another tab holds it). A saved row that another tab trained on since this tab loaded it is not
 * written over: this run is saved as a new model.
 */
async function takeWriterLock() {
  const c = current;
  if (c.lock) return;
  const { store: s } = await storeOf(c);
  if (s && c.lastSaved !== null && !c.deleted) {
    const row = (await s.list()).find((it) => it.id === c.runId);
    const rowStep = row ? stepOfFile(row.file) : null;
    if (rowStep !== null && rowStep !== c.lastSaved) {
      const locked = await lockedIds();
      if (locked.has(c.runId)) throw new Error(busyElsewhere(c.name));
      c.runId = newRunId();
      c.lastSaved = null;
      post({ type: "notice", message: `Another tab trained the saved "${c.name}" on to step ${rowStep} since it was ` +
        `loaded here at step ${c.engine.step}: this run is saved as a new model, and that one is left as it is.` });
    }
  }
  const lock = await tryLock(c.runId);
  if (!lock) throw new Error(busyElsewhere(c.name));
  c.lock = lock;
  c.readOnly = false;
}

function releaseWriterLock(c) {
  c.lock?.release();
  c.lock = null;
}

async function trainLoop(checkpointSeconds) {
  const c = current;
  stopRequested = false;
  await takeWriterLock();
  c.corpora = corporaNow();
  c.segmentFrom = c.engine.step;
  c.trainedCorpus = c.corpus;
  c.training = true;
  c.stopping = false;
  postRecord();
  channel.post("training");
  if (c.deleted) {
    post({ type: "notice", message: "This model was deleted from Saved models (in this tab or another), so this run is " +
      "not saved: download it to keep it." });
  }
  try {
    await trainSteps(c, checkpointSeconds);
  } finally {
    c.training = false;
    c.stopping = false;
    releaseWriterLock(c);
    channel.post("trained");
  }
  if (c !== current) return;
  postRecord();
  phase("idle", "");
  post({ type: "done", step: c.engine.step, targetSteps: c.targetSteps, stopped: c.engine.step < c.targetSteps });
  await listCheckpoints();
}

async function trainSteps(c, checkpointSeconds) {
  const evalEvery = c.config.training.evalEvery;
  phase("training", "Training…");
  let lastSave = performance.now();
  let last = performance.now();
  // each step's learning rate from the schedule (lr_schedule.js), handed to the engine before the step
  const training = c.config.training;
  const stepper = {
    get step() { return c.engine.step; },
    trainStep: async () => {
      c.engine.setLearningRate(learningRateAt(c.engine.step, c.targetSteps, training));
      if (!measuredNext(c.engine.step, statsEvery)) return c.engine.trainStep();
      const stepped = await c.engine.trainStep({ stats: true });
      postStats(c, c.engine.step, stepped.stats);
      return stepped;
    },
  };
  // steps stay queued from one burst to the next (step_stream.js); what needs every loss drains them
  c.stream = new StepStream(stepper, c.engine.stepsInFlight, (step, loss) => {
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
  if (fatal) return;  // a lost device answers no more reads; the last checkpoint is what remains
  await c.stream.drain();
  // Not behind the lock: a sample still running only reads the weights, as the export does.
  await checkpoint();
}

/** A measured step's statistics (training_stats.js), summarised for the page's training view. */
function postStats(c, step, stats) {
  const { nHead } = c.config.model;
  stats.then((m) => post({ type: "stats", id: c.runId, step, adapters: Boolean(c.lora), backend: c.backend, probeBytes: m.T,
    ...summarise(m.names, m.sums, { entropy: m.entropy, nHead, T: m.T }) })).catch(() => {});
}

/** The training view on (`every` steps) or off (0), for the run in progress and the next ones. */
function trainingView({ every }) {
  statsEvery = Number.isSafeInteger(every) && every > 0 ? every : 0;
}

/** The runs view: what the headers of saved models `ids` say of their runs (runs_compare.js), never their weights. */
async function runs({ ids }) {
  const listed = await Promise.all([store(), lora.adapterStore()].map(async (opening) => {
    const { store: s } = await opening;
    return s ? s.list() : [];
  }));
  const byId = new Map(listed.flat().map((it) => [it.id, it]));
  post({ type: "runs", items: ids.filter((id) => byId.has(id)).map((id) => runOf(byId.get(id))) });
}

/** The training settings of a new run: the preset's, with the form's steps, seed and hyper-parameters. */
function newRunTraining({ seed, steps, hyper = {} }) {
  const training = { seed, steps };
  for (const key of ["lr", "batch", "weightDecay", "warmupSteps", "lrSchedule"]) {
    if (hyper[key] !== undefined && hyper[key] !== null) training[key] = hyper[key];
  }
  return training;
}

/** A new model of `preset`, or (preset null) of `shape`, the shape of a loaded model that is no preset's. */
async function train({ backend, preset, shape = null, steps, seed, checkpointSeconds, hyper, ...msg }) {
  const corpus = corpusOf(msg);
  await cancelSample();
  const p = await loadPresets();
  const config = configFromPresets(p, preset ?? p.defaultPreset, { model: preset ? {} : shape, training: newRunTraining({ seed, steps, hyper }) });
  config.training.warmupSteps ??= p.page.warmupSteps;
  config.training.lrSchedule ??= p.page.lrSchedule;
  const what = preset ?? `${shape.nLayer}-layer ${shape.dModel}-wide`;
  phase("loading", `Creating the ${what} model on ${backend === "webgpu" ? "WebGPU" : "WebAssembly"}…`);
  await exclusive(release);
  const engine = await makeEngine(backend, config, { corpus: corpus.bytes, seed });
  current = { engine, backend, runId: newRunId(), name: `${what}, seed ${seed}`, preset: preset ?? null, config, corpus: corpus.identity,
    trainedCorpus: null, corpora: [], segmentFrom: 0, targetSteps: steps, lossHistory: [], valHistory: [], lastSaved: null,
    source: "new", openedAtStep: 0, optimizerState: true, deleted: false, readOnly: false, lock: null, training: false };
  announce();
  await trainLoop(checkpointSeconds);
}

/** The engine of the model in memory trains and evaluates on `corpus` from now on. */
async function switchCorpus(corpus) {
  const c = current;
  if (!corpus || corpus.identity.sha256 === c.corpus.sha256) return;
  await exclusive(() => c.engine.setCorpus(corpus.bytes));
  if (c.lora) c.lora.corpusBytes = corpus.bytes;
  c.corpora = corporaNow();
  c.segmentFrom = c.engine.step;
  c.corpus = corpus.identity;
}

async function continueTraining({ steps, checkpointSeconds, ...msg }) {
  await cancelSample();
  if (!current) throw new Error("there is no model in memory to continue: train one or resume a saved one");
  if (current.engine.loraMerged) throw new Error("the fine-tune's adapters are merged into its weights: unmerge them before it trains on");
  if (msg.corpus) await switchCorpus(corpusOf(msg));
  current.targetSteps = current.engine.step + steps;
  announce();
  await trainLoop(checkpointSeconds);
}

/** Builds the engine for a parsed .tinygpt; the model in memory is replaced only once that worked. */
async function adopt(backend, parsed, { runId, source, name, corpus, readOnly = false }) {
  if (parsed.lora) return lora.adopt(backend, parsed, { runId, source, name, corpus, readOnly });
  const { header } = parsed;
  const { identity } = corpus;
  const notices = [];
  if (header.corpus?.sha256 && header.corpus.sha256 !== identity.sha256) {
    notices.push(`This model was trained on ${header.corpus.name ?? "another corpus"} (${header.corpus.bytes ?? "?"} bytes, ` +
      `sha256 ${String(header.corpus.sha256).slice(0, 12)}…), not on the chosen corpus ${identity.name}: ` +
      `its validation loss here is measured on ${identity.name}, and Train will ask which corpus it continues on.`);
  }
  const config = configFromHeader(header, await loadPresets());
  phase("loading", `Loading ${name} on ${backend === "webgpu" ? "WebGPU" : "WebAssembly"}…`);
  const dataState = header.dataState ?? { seed: config.training.seed, batchesDrawn: 0 };
  const engine = await makeEngine(backend, config, { corpus: corpus.bytes, seed: dataState.seed, state: parsed.state, dataState });
  await exclusive(release);
  current = { engine, backend, runId, name, preset: header.preset ?? null, config, corpus: identity,
    trainedCorpus: header.corpus?.sha256 ? corpusIdentity(header.corpus) : null, corpora: corporaOf(header, parsed.step),
    segmentFrom: parsed.step, targetSteps: Math.max(header.training?.steps ?? 0, parsed.step), lossHistory: header.lossHistory ?? [],
    valHistory: header.valHistory ?? [], lastSaved: source === "saved" ? parsed.step : null, source, openedAtStep: parsed.step,
    optimizerState: parsed.includesOptimizerState, deleted: false, readOnly, lock: null, training: false };
  const note = optimiserNote(record());
  if (note) notices.push(note);
  const notice = notices.length ? notices.join(" ") : null;
  announce(notice);
  return notice;
}

/** The newest checkpoint of saved model `id`: {parsed, name, busy (another tab trains it)}. */
async function readSaved(id) {
  const { store: s, reason } = await storeOf(id);
  if (!s) throw new Error(`there are no saved checkpoints: ${reason}`);
  const { parsed } = await s.read(id);
  return { parsed, name: parsed.header.name ?? parsed.header.preset ?? "model" };
}

async function resume({ backend, id, checkpointSeconds, ...msg }) {
  const corpus = corpusOf(msg);
  await cancelSample();
  const lock = await tryLock(id);  // one writer per saved model: refused at once when another tab trains it
  if (!lock) {
    const { name } = await readSaved(id).catch(() => ({ name: "this model" }));
    throw new Error(busyElsewhere(name));
  }
  try {
    const { parsed, name } = await readSaved(id);
    await adopt(backend, parsed, { runId: id, source: "saved", name, corpus });
  } catch (e) {
    lock.release();
    throw e;
  }
  current.lock = lock;
  phase("idle", "");
  await trainLoop(checkpointSeconds);
}

/** Saved model `id` in memory to sample, evaluate and look inside, without training it. */
async function open({ backend, id, ...msg }) {
  const corpus = corpusOf(msg);
  await cancelSample();
  const { parsed, name } = await readSaved(id);
  const readOnly = (await lockedIds()).has(id);
  await adopt(backend, parsed, { runId: id, source: "saved", name, corpus, readOnly });
  phase("idle", "");
  await listCheckpoints();
}

/** An uploaded .tinygpt, or the demo model (`source` "demo"): both take this one path. */
async function load({ backend, bytes, name, source = "upload", ...msg }) {
  const corpus = corpusOf(msg);
  await cancelSample();
  let parsed;
  try {
    parsed = readTinyGPT(new Uint8Array(bytes));  // refuses a bad file before anything changes
  } catch (e) {
    if (e instanceof TinyGPTFileError) throw new FileRefused(plainFileError(name, e.message));
    throw e;
  }
  const notice = await adopt(backend, parsed, { runId: newRunId(), source, name, corpus });
  // saved rows are keyed by content: a model byte-identical to a saved one is that row, not a new copy
  const { store: s } = await store();
  const state = s ? await exclusive(() => current.engine.exportState()) : null;
  const same = s ? await s.findIdentical(state, current.engine.step) : null;
  if (same) {
    current.runId = same;
    current.lastSaved = current.engine.step;
    const row = (await s.list()).find((it) => it.id === same);
    current.name = row?.header.name ?? current.name;
    postRecord();
    post({ type: "notice", message: `${name} is the same model as the saved "${current.name}" (byte for byte): ` +
      `it is that row in Saved models, not a second copy.${notice ? ` ${notice}` : ""}` });
  } else {
    await exclusive(checkpoint);
  }
  phase("idle", "");
  await listCheckpoints();
}

async function sample({ prompt, temperature, topK, maxNewTokens, seed, compare = false }) {
  // Registered before anything is awaited: a Train, load or Stop that comes while this sample still
  // waits for the model (behind a save, say) cancels it too. Registered after that wait, a sample could
  // miss its cancellation and then hold the model for all its tokens while training waited behind it.
  const controller = new AbortController();
  sampleAbort?.abort();
  sampleAbort = controller;
  try {
    await exclusive(() => {});  // the sample before this one has let go of the model
    if (!current) throw new Error("there is no model yet: train one, resume a saved one or upload a .tinygpt");
    // a fine-tune, side by side: the base alone first (stream "base"), then with the adapters, from the same seed
    if (compare && current.lora && !current.engine.loraMerged) {
      await generateSample({ prompt, temperature, topK, maxNewTokens, seed, adapters: false, stream: "base" }, controller);
    }
    await generateSample({ prompt, temperature, topK, maxNewTokens, seed, adapters: current.lora ? true : undefined }, controller);
  } finally {
    if (sampleAbort === controller) sampleAbort = null;
  }
}

/** The sample's tokens, streamed to the page, until maxNewTokens or the controller's abort. */
function generateSample({ prompt, temperature, topK, maxNewTokens, seed, adapters = undefined, stream = "main" }, controller) {
  return exclusive(async () => {
    const t0 = performance.now();
    let ttftMs = null, tokens = 0, chunk = [], chunkTop = [];  // chunkTop: each byte's top next bytes (logit view)
    let lastPost = t0;
    // raw bytes: a byte-level model may emit any byte, and a character may span tokens; the page renders them
    const flush = () => {
      const elapsed = (performance.now() - t0) / 1000;
      post({ type: "text", stream, bytes: Uint8Array.from(chunk), top: chunkTop, tokens, ttftMs, tokensPerSecond: tokens / Math.max(elapsed, 1e-6) });
      chunk = [];
      chunkTop = [];
      lastPost = performance.now();
    };
    const bytes = new TextEncoder().encode(prompt || "\n");  // an empty prompt starts from a newline
    const made = await current.engine.generate(bytes, { temperature, topK, seed, maxNewTokens, signal: controller.signal, adapters,
      onToken: (t, top) => {
        ttftMs ??= performance.now() - t0;
        tokens++;
        chunk.push(t);
        chunkTop.push(top);
        if (performance.now() - lastPost > 30) flush();
      } });
    flush();
    post({ type: "sampleDone", stream, tokens: made, cancelled: controller.signal.aborted });
  });
}

async function download({ id, compact, what = null }) {
  // a fine-tune's files: its adapter (.tgla) or its merged model (.tinygpt); a fine-tune's "checkpoint" is its adapter
  const fineTune = id === null ? Boolean(current?.lora) : await lora.isSavedFineTune(id);
  if (what || fineTune) return lora.download({ id, what: what ?? (compact ? "merged" : "adapter"), compact });
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
async function probe({ backend, preset, shape = null, steps, ...msg }) {
  const { bytes } = corpusOf(msg);
  const p = await loadPresets();
  const config = shape ? configFromPresets(p, p.defaultPreset, { model: shape }) : configFromPresets(p, preset);
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
  // a fine-tune: also its base's loss alone (baseValLoss; null for a model, or while the adapters are merged in)
  const { valLoss, baseValLoss = null } = await exclusive(async () => (c.lora ? lora.evaluateBoth(c) : { valLoss: await c.engine.evaluate() }));
  post({ type: "evaluated", step: c.engine.step, valLoss, baseValLoss, corpus: c.corpus.name, windows: c.config.training.evalWindows,
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
  post({ type: "features", opfs: !!s, opfsReason: reason, tabs: tabFeatures() });
  await listCheckpoints();
}

/** Deletes saved models, each only when no tab trains it (its writer's lock is free); says which were refused. */
async function remove({ id, ids = [id] }) {
  const refused = [];
  for (const one of ids) {
    const { store: s } = await storeOf(one);
    if (!s) break;
    const row = (await s.list()).find((it) => it.id === one);
    const name = row?.header.name ?? row?.header.preset ?? "this model";
    const lock = current?.lock && current.runId === one ? null : await tryLock(one);
    if (!lock) {
      refused.push(`"${name}" was not deleted: ${current?.lock && current.runId === one ? "it is training in this tab: stop it first"
        : "it is training in another tab of this browser, which alone may write it: stop it there first"}.`);
      continue;
    }
    try {
      await s.remove(one);
    } finally {
      lock.release();
    }
    if (current?.runId === one && !current.deleted) {
      current.deleted = true;
      postRecord();
    }
  }
  if (refused.length) post({ type: "refused", during: "delete", message: refused.join(" ") });
  channel.post("deleted");
  await listCheckpoints();
}

/** Renames a saved model (its newest checkpoint's header), when no other tab trains it. */
async function rename({ id, name }) {
  const { store: s, reason } = await storeOf(id);
  if (!s) throw new Error(`there are no saved checkpoints: ${reason}`);
  const clean = String(name).trim().slice(0, 200);
  if (!clean) throw new Error("a saved model's name cannot be empty");
  const lock = await tryLock(id);
  if (!lock) {
    post({ type: "refused", during: "rename", message: `Not renamed: ${busyElsewhere("This model")}.` });
    return;
  }
  try {
    await s.rename(id, clean);
  } finally {
    lock.release();
  }
  if (current?.runId === id) {
    current.name = clean;
    postRecord();
  }
  channel.post("renamed");
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
  open,
  rename,
  stop: () => {
    stopRequested = true;
    stopHeard();
    if (current?.training) {
      current.stopping = true;
      phase("stopping", "Stopping: the step in progress ends, then the model is saved…");
    }
  },
  stopSample: () => { sampleAbort?.abort(); },
  delete: remove,
  trainingView,
  runs,
  finetune: lora.finetune,
  attach: lora.attach,
  merge: lora.merge,
  unmerge: lora.unmerge,
};

// what the fine-tunes' module (finetune_worker.js) shares with the rest of the worker
lora.install({
  get current() { return current; },
  adoptModel: (model) => (current = model),
  post, phase, exclusive, corpusOf, cancelSample, makeEngine, release, announce, postRecord, record, checkpoint, trainLoop,
  listCheckpoints, newRunId, corporaNow, runHeader, FileRefused,
});

self.onmessage = async ({ data: msg }) => {
  try {
    const handler = handlers[msg.type];
    if (!handler) throw new Error(`unknown message type ${msg.type}`);
    await loadPresets();  // once: the .tinygpt reader and writer take presets.json's defaults and rules
    await handler(msg);
  } catch (e) {
    phase("idle", "");
    // a step that failed because the device was lost: the page already has the fatal sentence
    // (the list is sent again: the run's last checkpoint is what Resume now picks up)
    if (fatal && ["train", "continue", "resume", "finetune"].includes(msg.type)) {
      await listCheckpoints().catch(() => {});
      return;
    }
    post({ type: "error", message: String(e?.message || e), during: msg.type, fatal: false, source: msg.source ?? null,
      file: e instanceof FileRefused });
  }
};
