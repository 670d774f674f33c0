// "The model in this tab", as one record. The worker owns it (worker.js builds it from a new run or a
// checkpoint header and sends it in `loaded` and `model` messages, backend_protocol.md); the page keeps
// the one copy it receives (window.playground.loaded), moves its step on with each `step`, and draws the
// status, the continue-or-new question, the form, the saved models' current row, the sample header and
// the look-inside line from it. The functions here are pure (no DOM, no worker): tests/site/
// test_model_record.py runs them under Node.
//
// A record: {id, name, preset, shape: {nLayer, nHead, dModel, ctx}, paramCount, backend, description,
//   step, openedAtStep, targetSteps, source, corpus: {name, bytes, sha256} (the corpus it trains on
//   now), corpora: [{name, bytes, sha256, fromStep, toStep}] (every corpus it trained on, in order),
//   hyper: {lr, batch, warmupSteps, lrSchedule, weightDecay, seed}, optimizerState (false: weights
//   only, e.g. a float16 file), savedStep (the step of its saved row, null if none), deleted (its row
//   was deleted), readOnly (opened while another tab trains it), training}

export const SOURCE_WORDS = { new: "trained here", saved: "saved checkpoint", upload: "uploaded", demo: "the demo model",
  finetune: "a LoRA fine-tune made here" };
export const SCHEDULE_WORDS = { none: "constant", cosine: "cosine" };
const SHAPE_KEYS = ["nLayer", "nHead", "dModel", "ctx"];

const n = (x) => x.toLocaleString("en");
const engineName = (b) => (b === "webgpu" ? "WebGPU" : "WebAssembly");

/**
 * Every corpus a checkpoint trained on: its header's `corpora`, or, for a file written before that key
 * existed, its `corpus` from step 0 to `step` (nothing when it records no corpus or no step was taken).
 */
export function corporaOf(header, step) {
  if (Array.isArray(header?.corpora)) return header.corpora.map((c) => ({ ...c }));
  const c = header?.corpus;
  if (!c?.sha256 || step <= 0) return [];
  return [{ name: c.name, bytes: c.bytes, sha256: c.sha256, fromStep: 0, toStep: step }];
}

/**
 * The list after training on `identity` from step `from` to step `to`: the last entry grows when it is
 * the same corpus and ends at `from`; otherwise a new entry is added. A run of no steps adds nothing.
 */
export function extendCorpora(corpora, identity, from, to) {
  const out = corpora.map((c) => ({ ...c }));
  if (to <= from) return out;
  const last = out[out.length - 1];
  if (last && last.sha256 === identity.sha256 && last.toStep === from) last.toStep = to;
  else out.push({ name: identity.name, bytes: identity.bytes, sha256: identity.sha256, fromStep: from, toStep: to });
  return out;
}

/** The hyper-parameters the page shows and a run uses, from a config's training section. */
export function hyperOf(training) {
  return {
    lr: training.lr, batch: training.batch, warmupSteps: training.warmupSteps ?? 0,
    lrSchedule: training.lrSchedule ?? "none", weightDecay: training.weightDecay, seed: training.seed,
  };
}

/** The preset whose shape this is, or null (a model of its own shape). */
export function presetOfShape(shape, presets, named = null) {
  const fits = (name) => presets.presets[name] && SHAPE_KEYS.every((k) => presets.presets[name][k] === shape[k]);
  if (named && fits(named)) return named;
  return Object.keys(presets.presets).find(fits) ?? null;
}

export const shapeWords = (s) => `${s.nLayer} layers, ${s.dModel} wide, ${s.nHead} heads, context ${s.ctx}`;

/** "tiny at step 1762 of 2000" (the name a person gave it, or its preset, or "a model"). */
export function describe(record) {
  const target = record.targetSteps > record.step ? ` of ${n(record.targetSteps)}` : "";
  return `${record.name ?? record.preset ?? "a model"} at step ${n(record.step)}${target}`;
}

/** The status line when a model has just been loaded, opened or created: never "Finished". */
export function loadedStatus(record) {
  const what = record.preset ?? "a model";
  const target = record.targetSteps > record.step ? ` of ${n(record.targetSteps)}` : "";
  const words = record.source === "new" ? "new" : record.source === "finetune" ? "a new LoRA fine-tune" : SOURCE_WORDS[record.source];
  const readOnly = record.readOnly ? " Opened read-only: another tab of this browser is training it." : "";
  return `Loaded ${what} at step ${record.step}${target} (${words}).${readOnly}`;
}

/**
 * What the form shows for this record: {preset (a preset name, or null for a shape of its own), label
 * (that shape in words), steps (the steps still to go, else the run's length), hyper}.
 */
export function formFor(record, presets) {
  const preset = presetOfShape(record.shape, presets, record.preset);
  const left = record.targetSteps - record.step;
  const runLength = record.targetSteps || presets.presets[preset]?.steps || presets.presets[presets.defaultPreset].steps;
  return { preset, label: `the loaded model: ${shapeWords(record.shape)}`, steps: left > 0 ? left : runLength, hyper: record.hyper };
}

/** Why continuing this model does not resume its optimiser, or null. */
export function optimiserNote(record) {
  if (record.optimizerState || record.step === 0) return null;
  return "This model's file holds its weights only (no AdamW moments, as in a float16 file): continuing it restarts " +
    "the optimiser, its moments starting from zero as at step 0, because moments rounded to float16 could not resume " +
    "the run exactly. Its losses will not follow the original run's.";
}

/** Where the loaded model stays if a new one replaces it, in words. */
function keptWords(record, opfs) {
  if (!opfs) return "is kept only if you download it first";
  if (record.deleted) return "was deleted from Saved models: it is only in this tab, and a new model replaces it";
  if (record.savedStep === null || record.savedStep === undefined) return "is not saved: download it first to keep it";
  return `stays in Saved models at step ${n(record.savedStep)}`;
}

/** The continue-or-new question, from the record as it is now. */
export function continueQuestion(record, { steps, newPreset, opfs }) {
  const h = record.hyper;
  const settings = `learning rate ${h.lr}, ${SCHEDULE_WORDS[h.lrSchedule] ?? h.lrSchedule} schedule` +
    `${h.warmupSteps ? ` after ${n(h.warmupSteps)} warm-up steps` : ""}, batch ${h.batch}, weight decay ${h.weightDecay}`;
  const parts = [
    `${describe(record)} is loaded on ${engineName(record.backend)}.`,
    `Continue it for ${n(steps)} more steps with its own settings (${settings}), or start a new ` +
      `${newPreset ?? "model"} model (the loaded one ${keptWords(record, opfs)}).`,
  ];
  const note = optimiserNote(record);
  if (note) parts.push(note);
  return parts.join(" ");
}

/** The corpus question, when the model last trained on another corpus than the chosen one; null when they agree. */
export function corpusQuestion(modelCorpus, chosen) {
  if (!modelCorpus?.sha256 || modelCorpus.sha256 === chosen.sha256) return null;
  return `This model was trained on ${modelCorpus.name} (${n(modelCorpus.bytes)} bytes); the corpus chosen in Train is ` +
    `${chosen.name} (${n(chosen.bytes)} bytes). Which should it train on now?`;
}

/** "tinyshakespeare.txt" or "fox.txt (steps 1–50), then tinyshakespeare.txt (steps 51–80)". */
export function corporaWords(corpora) {
  if (!corpora?.length) return "—";
  if (corpora.length === 1) return corpora[0].name;
  return corpora.map((c) => `${c.name} (steps ${n(c.fromStep + 1)}–${n(c.toStep)})`).join(", then ");
}
