// A LoRA fine-tune in the worker (worker.js), as python_ref/finetune.py makes one: the recipe, the adapter
// file it saves (adapter_file.js, docs/format.md "LoRA adapter file": resumable exactly, naming its base by
// the SHA-256 of the base's weights) and the merged model (python_ref save_merged: a plain weights-only
// .tinygpt at step 0). Pure functions of the model in memory's fields: no engine, no OPFS.
import { configFromPresets } from "./model_config.js";
import { presetOfShape } from "./model_record.js";
import { adapterEntries, writeAdapter } from "./adapter_file.js";
import { manifestEntries, nowIsoSeconds, paramCount, writeTinyGPT } from "./tinygpt_file.js";

/** The keys of a fine-tune's header that its merged model keeps (python_ref MERGED_KEYS). */
const MERGED_KEYS = ["preset", "base", "corpus", "corpora", "baseCorpus", "baseCorpora"];

/**
 * The batch a fine-tune of this base takes (python_ref base_batch): its preset's when the base is that
 * preset's shape, else the batch it was trained with.
 */
export function baseBatch(presets, { preset, config }) {
  const named = presetOfShape(config.model, presets, preset);
  return named && named === preset ? presets.presets[named].batch : config.training.batch;
}

/**
 * {model, training, initStd, rules} of a fine-tune of `base` ({preset, config}): presets.json's training
 * recipe with its "lora" lr, weightDecay and steps, the base's batch, then the form's steps, lr and seed;
 * a constant learning rate (python_ref's fine-tune has no schedule).
 */
export function fineTuneConfig(presets, base, { steps, lr, seed }) {
  const d = presets.lora;
  const training = { ...presets.training, batch: baseBatch(presets, base), steps: steps ?? d.steps, lr: lr ?? d.lr,
    weightDecay: d.weightDecay, seed: seed ?? presets.training.seed, warmupSteps: 0, lrSchedule: "none" };
  const named = presets.presets[base.preset] ? base.preset : presets.defaultPreset;
  return configFromPresets(presets, named, { model: base.config.model, training });
}

/** What the adapter file says of its base beyond its hashes (python_ref FineTuneRun.base_identity). */
export const baseWords = (base) => ({ name: base.name, step: base.step, ...(base.preset ? { preset: base.preset } : {}) });

/**
 * The adapter file of a fine-tune: `state` the engine's adapter state (with moments once it has
 * stepped), `meta` the run's keys (training, dataState, corpus, corpora, histories, name, run, savedAt).
 */
export function adapterFileBytes({ config, lora, base, state, meta }) {
  const header = { ...meta, base: baseWords(base) };
  header.savedAt ??= nowIsoSeconds();
  if (base.corpus) header.baseCorpus = base.corpus;
  if (base.corpora?.length) header.baseCorpora = base.corpora;
  if (base.preset) header.preset = base.preset;
  return writeAdapter({ baseConfig: config.model, lora, baseCrc32: base.crc32, baseSha256: base.sha256, header, state });
}

/**
 * The merged model's weights (python_ref LoRA.merged_weights): W + (alpha / r)·B·A in every adapted
 * Linear, float32, from the base's state and the adapter state; returns the state of a weights-only
 * .tinygpt at step 0, the base's state left as it is.
 */
export function mergedState(baseState, model, lora, adapterState) {
  const P = paramCount(model), r = lora.rank, scale = lora.alpha / lora.rank;
  const out = new Uint8Array(4 + 4 * P);
  out.set(baseState.subarray(4, 4 + 4 * P), 4);  // step 0: the merged model is a new model
  const W = new Float32Array(out.buffer, 4, P);
  const adapters = new Float32Array(adapterState.slice(4).buffer);
  const offsets = Object.fromEntries(manifestEntries(model).map((e) => [e.name, e.offset]));
  const entries = adapterEntries(model, lora);
  for (let i = 0; i < entries.length; i += 2) {
    const A = entries[i], B = entries[i + 1], name = A.name.replace(/\.lora_A$/, ".weight");
    const [outF, inF] = [B.shape[0], A.shape[1]], w = offsets[name];
    const row = new Float64Array(inF);
    for (let o = 0; o < outF; o++) {
      row.fill(0);
      for (let k = 0; k < r; k++) {
        const b = adapters[B.offset + o * r + k];
        if (b === 0) continue;
        const a = A.offset + k * inF;
        for (let j = 0; j < inF; j++) row[j] += b * adapters[a + j];
      }
      for (let j = 0; j < inF; j++) W[w + o * inF + j] = Math.fround(W[w + o * inF + j] + Math.fround(scale * Math.fround(row[j])));
    }
  }
  return out;
}

/** The merged model's .tinygpt (python_ref save_merged): the fine-tune's base and corpus keys, and `lora`. */
export function mergedFileBytes({ config, lora, base, adapterState, adapterHeader }) {
  const header = {};
  for (const key of MERGED_KEYS) if (adapterHeader[key] !== undefined) header[key] = adapterHeader[key];
  const step = new DataView(adapterState.buffer, adapterState.byteOffset, 4).getInt32(0, true);
  header.lora = { rank: lora.rank, alpha: lora.alpha, targets: lora.targets, seed: lora.seed, step, baseWeightsSha256: base.sha256 };
  if (adapterHeader.name) header.name = `${adapterHeader.name} (merged)`;
  return writeTinyGPT({ config: config.model, header, state: mergedState(base.state, config.model, lora, adapterState) });
}
