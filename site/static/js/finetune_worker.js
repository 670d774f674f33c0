// LoRA fine-tuning in the backend worker (worker.js; the messages are in backend_protocol.md, "LoRA in the
// page"). A fine-tune is "the model in this tab" like any other: its engine (engines/*_engine.js made with
// `lora`) trains the adapters alone on the frozen base, the worker's one training loop runs it, and its
// checkpoints are adapter files (adapter_file.js) in the fine-tunes' store (adapter_store.js), which also
// keeps its base by the SHA-256 of the base's weights, so a stopped or reloaded fine-tune resumes exactly.
// What the worker's model in memory (`current`) adds for one: lora = {config: {rank, alpha, targets, seed},
// base: {name, step, preset, sha256, crc32, corpus, corpora, config, state}, corpusBytes}.
//
// worker.js hands this module what it shares (install(context)): the model in memory, post, phase, the
// job queue, the engines, the training loop and the save; this module owns no model of its own.
import { openAdapterStore } from "./adapter_store.js";
import { baseIdentity, baseProblem, loraConfig, readAdapter } from "./adapter_file.js";
import { adapterFileBytes, fineTuneConfig, mergedFileBytes } from "./finetune_run.js";
import { configFromHeader } from "./model_config.js";
import { corporaOf, optimiserNote } from "./model_record.js";
import { loadPresets } from "./presets.js";
import { paramCount, readTinyGPT, TinyGPTFileError, writeCompactF16, writeTinyGPT } from "./tinygpt_file.js";
import { plainFileError } from "./file_errors.js";

let ctx = null;
let opened = null;

/** The worker's shared parts (see worker.js). */
export function install(context) { ctx = context; }

/** {store, reason}: the fine-tunes' store in OPFS. */
export const adapterStore = () => (opened ??= openAdapterStore());

const engineName = (b) => (b === "webgpu" ? "WebGPU" : "WebAssembly");
const slug = (text) => String(text ?? "model").replace(/[^0-9A-Za-z._-]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 60) || "model";
const corpusIdentity = ({ name, bytes, sha256 }) => ({ name, bytes, sha256 });

function needFineTune(what) {
  const c = ctx.current;
  if (!c) throw new Error(`there is no model in memory to ${what}`);
  if (!c.lora) throw new Error(`the model in memory is not a LoRA fine-tune: there is nothing to ${what}`);
  return c;
}

/** The record's `lora` (backend_protocol.md): the fine-tune's settings, whether merged, and its base. */
export function recordOf(c) {
  if (!c.lora) return null;
  const { config, base } = c.lora;
  return { rank: config.rank, alpha: config.alpha, targets: config.targets, seed: config.seed, scale: config.alpha / config.rank,
    paramCount: c.engine.lora?.paramCount ?? null, merged: c.engine.loraMerged,
    base: { name: base.name, step: base.step, preset: base.preset ?? null, sha256: base.sha256 } };
}

/** A saved row's `kind`, `lora` and `base` (its header's), for the Saved models table. */
export function rowOf(header) {
  if (!header.baseConfig) return { kind: "model", lora: null, base: null };
  const base = header.base ?? {};
  return { kind: "lora", lora: header.lora, base: { name: base.name ?? "a base model", step: base.step ?? null,
    preset: base.preset ?? null, sha256: header.baseWeightsSha256 ?? null } };
}

/** Whether saved row `id` is a fine-tune (its files are in the fine-tunes' store). */
export async function isSavedFineTune(id) {
  const { store: s } = await adapterStore();
  return s ? (await s._files()).some((f) => f.runId === id) : false;
}

/** The adapter file of the fine-tune in memory: its adapters, AdamW moments and step, and all it needs to resume. */
export async function adapterBytes(c) {
  await c.stream?.drain();  // the file's loss history reaches the step its adapters are at
  const step = c.engine.step;
  const state = await c.engine.exportLoRAState({ moments: step > 0 });
  return adapterFileBytes({ config: c.config, lora: c.lora.config, base: c.lora.base, state, meta: { ...ctx.runHeader(c), step } });
}

/** Before a fine-tune's save: its base is kept (once per distinct base) in the fine-tunes' store. */
export async function keepBase(s, c) {
  const { base } = c.lora;
  await s.putBase(base.sha256, async () => writeTinyGPT({ config: base.config, state: base.state,
    header: { name: base.name, ...(base.preset ? { preset: base.preset } : {}), ...(base.corpus ? { corpus: base.corpus } : {}),
      ...(base.corpora?.length ? { corpora: base.corpora } : {}) } }));
}

/**
 * `finetune`: the model in memory becomes the base of a new LoRA fine-tune on `corpus` (its weights as they
 * are now; a fine-tune's own, merged), on `backend`; the base's validation loss is measured at step 0, the
 * fine-tune is saved at once (with its base) and trains for `steps` steps.
 */
export async function finetune({ backend, lora: settings, steps, lr, seed, checkpointSeconds, ...msg }) {
  const corpus = ctx.corpusOf(msg);
  await ctx.cancelSample();
  const c = ctx.current;
  if (!c) throw new Error("there is no model to fine-tune: load the demo model, open a saved model or upload a .tinygpt first");
  if (c.training) throw new Error("stop training before fine-tuning");
  const presets = await loadPresets();
  const config = fineTuneConfig(presets, { preset: c.preset, config: c.config }, { steps, lr, seed });
  const cfg = loraConfig({ ...settings, seed: config.training.seed });
  ctx.phase("loading", "Fine-tune: reading the base's weights…");
  const P = paramCount(c.config.model);
  const state = await ctx.exclusive(async () => (c.lora ? c.engine.exportMergedState() : (await c.engine.exportState()).slice(0, 4 + 4 * P)));
  const identity = await baseIdentity(state, c.config.model);
  const base = { name: c.lora ? `${c.name} (merged)` : c.name, step: c.lora ? c.lora.base.step : c.engine.step, preset: c.preset,
    ...identity, corpus: c.trainedCorpus, corpora: ctx.corporaNow(c), config: c.config.model, state };
  ctx.phase("loading", `Creating the LoRA fine-tune of ${base.name} on ${engineName(backend)}…`);
  const engine = await ctx.makeEngine(backend, config, { corpus: corpus.bytes, seed: config.training.seed, state, lora: cfg });
  await ctx.exclusive(ctx.release);
  const run = ctx.adoptModel({ engine, backend, runId: ctx.newRunId(), name: `${base.name} + LoRA r${cfg.rank}`, preset: c.preset,
    config, corpus: corpus.identity, trainedCorpus: null, corpora: [], segmentFrom: 0, targetSteps: config.training.steps,
    lossHistory: [], valHistory: [], lastSaved: null, source: "finetune", openedAtStep: 0, optimizerState: true, deleted: false,
    readOnly: false, lock: null, training: false, lora: { config: cfg, base, corpusBytes: corpus.bytes } });
  ctx.announce();
  // the base's validation loss on this corpus (B = 0: the fine-tune computes exactly its base at step 0)
  ctx.phase("loading", "Fine-tune: the base's validation loss on this corpus…");
  const valLoss = await ctx.exclusive(() => engine.evaluate());
  run.valHistory.push([0, valLoss]);
  ctx.post({ type: "eval", step: 0, valLoss });
  await ctx.exclusive(ctx.checkpoint);  // saved at once: the row (and its base) exists before the first step
  ctx.phase("idle", "");
  await ctx.trainLoop(checkpointSeconds);
}

/**
 * The engine of a saved or uploaded adapter file (readAdapter's `parsed`) on its base, which is the one
 * kept under its base's SHA-256, or else `fallback` ({config, state} of the model in memory) when it is
 * that very base; refused with the reason (python_ref's base_problem) when neither is.
 */
async function baseOf(parsed, fallback) {
  const { store: s } = await adapterStore();
  const sha = parsed.header.baseWeightsSha256;
  let missing = null;
  if (s && sha) {
    try {
      const kept = await s.readBase(sha);
      return { config: kept.config, state: kept.state.slice(0, 4 + 4 * paramCount(kept.config)), header: kept.header, step: kept.step };
    } catch (e) {
      missing = e.message;
    }
  }
  if (!fallback) throw new Error(`${missing ?? "its base model is not kept in this browser"}: load its base model first (the one it was fine-tuned from), then upload the adapter again`);
  const problem = baseProblem(parsed, { config: fallback.config, ...(await baseIdentity(fallback.state, fallback.config)) });
  if (problem) throw new Error(`it does not belong to the model in memory: ${problem}`);
  return fallback;
}

/** A saved or uploaded fine-tune becomes the model in memory (on its base); returns the notice, or null. */
export async function adopt(backend, parsed, { runId, source, name, corpus, readOnly = false, fallback = null }) {
  const { header } = parsed;
  const baseFile = await baseOf(parsed, fallback);
  const identity = await baseIdentity(baseFile.state, baseFile.config);
  const problem = baseProblem(parsed, { config: baseFile.config, ...identity });
  if (problem) throw new Error(problem);
  const notices = [];
  if (header.corpus?.sha256 && header.corpus.sha256 !== corpus.identity.sha256) {
    notices.push(`This fine-tune was trained on ${header.corpus.name ?? "another corpus"} (${header.corpus.bytes ?? "?"} bytes), ` +
      `not on the chosen corpus ${corpus.identity.name}: its validation loss here is measured on ${corpus.identity.name}.`);
  }
  const presets = await loadPresets();
  const config = configFromHeader({ ...header, config: parsed.baseConfig }, presets);
  config.training.warmupSteps = 0;
  config.training.lrSchedule = "none";
  const dataState = header.dataState ?? { seed: config.training.seed, batchesDrawn: 0 };
  const step = parsed.step ?? 0;
  ctx.phase("loading", `Loading the fine-tune ${name} on ${engineName(backend)}…`);
  const engine = await ctx.makeEngine(backend, config, { corpus: corpus.bytes, seed: dataState.seed, state: baseFile.state,
    dataState, lora: parsed.lora, loraState: parsed.state });
  await ctx.exclusive(ctx.release);
  const b = header.base ?? {};
  const base = { name: b.name ?? baseFile.header?.name ?? "a base model", step: b.step ?? baseFile.step ?? null,
    preset: b.preset ?? header.preset ?? null, ...identity, corpus: header.baseCorpus ?? null, corpora: header.baseCorpora ?? [],
    config: baseFile.config, state: baseFile.state };
  ctx.adoptModel({ engine, backend, runId, name, preset: header.preset ?? base.preset, config, corpus: corpus.identity,
    trainedCorpus: header.corpus?.sha256 ? corpusIdentity(header.corpus) : null, corpora: corporaOf(header, step), segmentFrom: step,
    targetSteps: Math.max(header.training?.steps ?? 0, step), lossHistory: header.lossHistory ?? [], valHistory: header.valHistory ?? [],
    lastSaved: source === "saved" ? step : null, source, openedAtStep: step, optimizerState: parsed.includesOptimizerState || step === 0,
    deleted: false, readOnly, lock: null, training: false, lora: { config: parsed.lora, base, corpusBytes: corpus.bytes } });
  const note = optimiserNote(ctx.record());
  if (note) notices.push(note);
  const notice = notices.length ? notices.join(" ") : null;
  ctx.announce(notice);
  return notice;
}

/** `attach`: an uploaded adapter file (.tgla) on its base (kept here, or the model in memory); saved as a new fine-tune. */
export async function attach({ backend, bytes, name, ...msg }) {
  const corpus = ctx.corpusOf(msg);
  await ctx.cancelSample();
  let parsed;
  try {
    parsed = readAdapter(new Uint8Array(bytes));
  } catch (e) {
    if (e instanceof TinyGPTFileError) throw new ctx.FileRefused(plainFileError(name, e.message));
    throw e;
  }
  const c = ctx.current;
  let fallback = null;
  if (c) {
    const P = paramCount(c.config.model);
    const state = c.lora ? c.lora.base.state : await ctx.exclusive(async () => (await c.engine.exportState()).slice(0, 4 + 4 * P));
    fallback = { config: c.lora ? c.lora.base.config : c.config.model, state, header: { name: c.lora ? c.lora.base.name : c.name },
      step: c.lora ? c.lora.base.step : c.engine.step };
  }
  try {
    await adopt(backend, parsed, { runId: ctx.newRunId(), source: "upload", name: parsed.header.name ?? name, corpus, fallback });
  } catch (e) {
    throw new ctx.FileRefused(`${name} was not loaded: ${e.message}`);
  }
  await ctx.exclusive(ctx.checkpoint);
  ctx.phase("idle", "");
  await ctx.listCheckpoints();
}

/** `merge` and `unmerge`: W ± (alpha / r)·B·A in place; unmerged, the base is its own weights again, bit for bit. */
export async function merge() {
  const c = needFineTune("merge");
  if (c.training) throw new Error("stop the fine-tune before merging its adapters");
  await ctx.exclusive(() => c.engine.mergeLoRA());
  ctx.postRecord();
}

export async function unmerge() {
  const c = needFineTune("unmerge");
  await ctx.exclusive(async () => {
    c.engine.unmergeLoRA();
    // W - (alpha / r)·B·A rounds: the base goes back in as it was saved, so training resumes on exactly it
    if (c.engine.restoreBase) {
      c.engine.restoreBase(c.lora.base.state);
      return;
    }
    // an engine that cannot take the base back (WebGPU's): a fresh one from the base, the adapters with their
    // moments and the data stream, as a resume from the saved file would make it
    const loraState = await c.engine.exportLoRAState({ moments: true });
    const dataState = c.engine.dataState();
    const engine = await ctx.makeEngine(c.backend, c.config, { corpus: c.lora.corpusBytes, seed: dataState.seed,
      state: c.lora.base.state, dataState, lora: c.lora.config, loraState });
    c.engine.destroy();
    c.engine = engine;
  });
  ctx.postRecord();
}

/** {valLoss, baseValLoss}: the fine-tune's validation loss, and its base's alone (null while merged). */
export async function evaluateBoth(c) {
  const valLoss = await c.engine.evaluate();
  if (c.engine.loraMerged) return { valLoss, baseValLoss: null };
  c.engine.setLoRAEnabled(false);
  try {
    return { valLoss, baseValLoss: await c.engine.evaluate() };
  } finally {
    c.engine.setLoRAEnabled(true);
  }
}

/**
 * `download` of a fine-tune: what "adapter" (the .tgla, resumable) or "merged" (the merged model, a plain
 * .tinygpt; compact: its float16 weights) of the model in memory (id null) or of saved fine-tune `id`.
 */
export async function download({ id, what, compact = false }) {
  let name, bytes;
  if (id === null) {
    const c = needFineTune("download as a fine-tune");
    const file = await ctx.exclusive(() => adapterBytes(c));
    name = `${slug(c.name)}-lora-step${c.engine.step}`;
    if (what === "adapter") bytes = file;
    else bytes = merged(readAdapter(file), c.lora.base, compact);
  } else {
    const { store: s, reason } = await adapterStore();
    if (!s) throw new Error(`there are no saved fine-tunes: ${reason}`);
    const saved = await s.read(id);
    name = `${slug(saved.parsed.header.name)}-lora-step${saved.parsed.step ?? 0}`;
    if (what === "adapter") bytes = saved.bytes;
    else {
      const kept = await s.readBase(saved.parsed.header.baseWeightsSha256);
      bytes = merged(saved.parsed, { sha256: saved.parsed.header.baseWeightsSha256, state: kept.state }, compact);
    }
  }
  if (what !== "adapter") name += compact ? "-merged-fp16" : "-merged";
  const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  ctx.post({ type: "file", name: `${name}.${what === "adapter" ? "tgla" : "tinygpt"}`, bytes: buffer }, [buffer]);
}

function merged(parsed, base, compact) {
  const file = mergedFileBytes({ config: { model: parsed.baseConfig }, lora: parsed.lora, base, adapterState: parsed.state,
    adapterHeader: parsed.header });
  if (!compact) return file;
  const m = readTinyGPT(file);
  return writeCompactF16({ config: m.config, header: m.header, state: m.state });
}
