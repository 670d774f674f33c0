// The runs view's data: what a saved model's header says of its run (runOf: never its weights), and what
// differs between two or more runs (runDifferences): their models, training settings, corpora and engines,
// and for a fine-tune its LoRA settings and its base. Pure functions: the worker builds the runs, the page
// (runs_view.js) draws them, tests/site/test_runs_compare.py runs them under Node.
import { corporaWords } from "./model_record.js";

const ENGINE_WORDS = { wasm: "WebAssembly", webgpu: "WebGPU" };
const n = (x) => (Number.isFinite(x) ? x.toLocaleString("en") : "—");
const num = (x) => (x === undefined || x === null ? "—" : String(x));

/**
 * One saved row ({id, file, header} of checkpoint_store.js's or adapter_store.js's list) as a run:
 * {id, name, step, kind ("model" | "lora"), preset, shape, training, lora, base, corpora, backend, engine,
 * lossHistory, valHistory, finalLoss, bestVal, savedAt}.
 */
export function runOf({ id, file, header: h }) {
  const step = Number(/-(\d+)\.(?:tinygpt|tgla)$/.exec(file)?.[1] ?? h.step ?? 0);
  const config = h.config ?? h.baseConfig ?? {};
  const pairs = (list) => (Array.isArray(list) ? list.filter((e) => Array.isArray(e) && e.length === 2 && Number.isFinite(e[1])) : []);
  const lossHistory = pairs(h.lossHistory), valHistory = pairs(h.valHistory);
  const last = lossHistory[lossHistory.length - 1];
  const corpora = Array.isArray(h.corpora) ? h.corpora : h.corpus?.sha256 && step > 0
    ? [{ ...h.corpus, fromStep: 0, toStep: step }] : [];
  return {
    id, name: h.name ?? h.preset ?? "model", step, kind: h.baseConfig ? "lora" : "model", preset: h.preset ?? null,
    shape: { nLayer: config.nLayer, nHead: config.nHead, dModel: config.dModel, ctx: config.ctx },
    training: h.training ?? {}, lora: h.baseConfig ? (h.lora ?? {}) : null,
    base: h.baseConfig ? { name: h.base?.name ?? "a base model", step: h.base?.step ?? null, preset: h.base?.preset ?? null,
      sha256: h.baseWeightsSha256 ?? null, corpora: h.baseCorpora ?? (h.baseCorpus ? [h.baseCorpus] : []) } : null,
    corpora, backend: h.run?.backend ?? null, engine: h.run?.engine ?? null,
    lossHistory, valHistory, finalLoss: h.finalLoss ?? (last ? last[1] : null),
    bestVal: h.bestVal ?? (valHistory.length ? Math.min(...valHistory.map(([, v]) => v)) : null), savedAt: h.savedAt ?? null,
  };
}

/** "a fine-tune (LoRA) of small, seed 1 at step 1,500" or "a model". */
export function kindWords(run) {
  if (run.kind !== "lora") return "a model";
  const b = run.base;
  return `a fine-tune (LoRA) of ${b.name}${b.step !== null ? ` at step ${n(b.step)}` : ""}`;
}

const shapeWords = (s) => (s.nLayer ? `${s.nLayer} layers × ${s.dModel} wide, ${s.nHead} heads, context ${s.ctx}` : "—");
const scheduleWords = (t) => (t.lrSchedule === "cosine" ? "cosine" : "constant") + (t.warmupSteps ? `, ${n(t.warmupSteps)} warm-up steps` : "");

// Each row of the table: its label, what it says of one run, and the part of a run it describes.
const ROWS = [
  ["What it is", kindWords, "model"],
  ["Base model", (r) => (r.base ? `${r.base.name}${r.base.step !== null ? ` (step ${n(r.base.step)})` : ""}` : "—"), "model"],
  ["Preset", (r) => r.preset ?? "(its own shape)", "model"],
  ["Shape", (r) => shapeWords(r.shape), "model"],
  ["Steps", (r) => `${n(r.step)}${r.training.steps > r.step ? ` of ${n(r.training.steps)}` : ""}`, "training"],
  ["Learning rate", (r) => num(r.training.lr), "training"],
  ["Schedule", (r) => scheduleWords(r.training), "training"],
  ["Batch", (r) => num(r.training.batch), "training"],
  ["Weight decay", (r) => num(r.training.weightDecay), "training"],
  ["Gradient clip", (r) => num(r.training.gradClip), "training"],
  ["AdamW β1, β2, ε", (r) => `${num(r.training.beta1)}, ${num(r.training.beta2)}, ${num(r.training.eps)}`, "training"],
  ["Seed", (r) => num(r.training.seed), "training"],
  ["Validation", (r) => `${num(r.training.valFraction)} of the corpus, ${num(r.training.evalWindows)} windows every ${num(r.training.evalEvery)} steps`, "training"],
  ["LoRA rank, alpha", (r) => (r.lora ? `${num(r.lora.rank)}, ${num(r.lora.alpha)}` : "—"), "lora"],
  ["LoRA targets", (r) => (r.lora?.targets ? r.lora.targets.join(", ") : "—"), "lora"],
  ["Corpus", (r) => corporaWords(r.corpora), "corpus"],
  ["Base's corpus", (r) => (r.base ? corporaWords(r.base.corpora) : "—"), "corpus"],
  ["Engine", (r) => (r.backend ? ENGINE_WORDS[r.backend] ?? r.backend : "—"), "engine"],
  ["Engine in detail", (r) => r.engine ?? "—", "engine"],
];

/**
 * What differs between the runs: {differ: [{label, part, values}], same: [{label, value}], results:
 * [{label, values}]}: each row's words per run, the rows whose words differ first, those equal for all
 * apart (a row that says nothing of any run, such as LoRA's for plain models, is left out), and the
 * results (last training loss, best validation loss) of every run.
 */
export function runDifferences(runs) {
  const differ = [], same = [];
  for (const [label, words, part] of ROWS) {
    const values = runs.map(words);
    if (values.every((v) => v === "—")) continue;
    if (values.every((v) => v === values[0])) same.push({ label, value: values[0] });
    else differ.push({ label, part, values });
  }
  const loss = (x) => (Number.isFinite(x) ? x.toFixed(4) : "—");
  const results = [
    { label: "Last training loss", values: runs.map((r) => loss(r.finalLoss)) },
    { label: "Best validation loss", values: runs.map((r) => loss(r.bestVal)) },
  ];
  return { differ, same, results };
}
