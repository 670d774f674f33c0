// The playground page: says what this browser can use, talks to one backend Worker (worker.js,
// protocol in backend_protocol.md) that trains, checkpoints and samples, and shows what it does.
import { LossChart } from "./loss_chart.js";
import { browserSupport, item, resolveBackend } from "./backend_choice.js";
import { readFields, reportFieldErrors } from "./form_checks.js";
import { SavedModels } from "./saved_models.js";
import { ModelForm, LOADED_SHAPE } from "./model_form.js";
import { continueQuestion, corpusQuestion, loadedStatus } from "./model_record.js";
import { loadPresets } from "./presets.js";
import { fieldLimits } from "../../../webgpu/config_rules.js";
import { paramCount } from "./tinygpt_file.js";
import { isAdapterFile } from "./adapter_file.js";
import * as wasmEngine from "./engines/wasm_engine.js";
import * as webgpuEngine from "./engines/webgpu_engine.js";
import { CorpusPicker } from "./corpus_picker.js";
import { SampleView } from "./sample_text.js";
import { startPressureChip } from "./pressure_chip.js";
import { throttledText } from "./throttled_text.js";
import { AttentionView } from "./attention_view.js";
import { LogitView } from "./logit_view.js";
import { labelCellsByHeader } from "./table_cards.js";
import { FineTunePanel } from "./finetune.js";
import { TrainingView } from "./training_view.js";
import { RunsView } from "./runs_view.js";

const $ = (id) => document.getElementById(id);
const presets = await loadPresets();
const limits = presets.page;
// Each form field's bounds, from presets.json's rules: the page's own (rules.page) where it narrows a
// field, else the level's (a training or sampling field as python_ref and the engines accept it).
const rules = presets.rules;
const pageLimits = (name) => fieldLimits(rules.page[name]);
const chart = new LossChart($("chart"), $("chart-summary"));
const sampleView = new SampleView($("sample-output"));
const logitView = new LogitView({ strip: $("logit-tokens"), panel: $("logit-panel") });
const attentionView = new AttentionView({ canvas: $("attention-canvas"), layer: $("attention-layer"), head: $("attention-head"),
  zoom: $("attention-zoom"), scroll: $("attention-scroll"), cell: $("attention-cell") });
const sayStatus = throttledText($("status-live"));  // the visible line changes every step; a screen reader hears it once a second
const DEMO_URL = new URL("../models/demo-large.tinygpt", import.meta.url);
const DEMO_PRESET = "large";
const SOURCE_WORDS = { new: "trained here", saved: "saved checkpoint", upload: "uploaded", demo: "the demo model",
  finetune: "a LoRA fine-tune made here" };
/** {preset, ctx, valFraction, shorter} of a preset: what a corpus is checked against (shorter: the presets of a
 * shorter context, which a corpus too short for this one may still train: corpus_checks.js names them). */
const modelForm = new ModelForm(presets);
const splitModel = (preset) => {
  const { model, training } = modelForm.config(preset);
  const shorter = Object.entries(presets.presets).filter(([, p]) => p.ctx < model.ctx).map(([name, p]) => ({ preset: name, ctx: p.ctx }));
  return { preset: preset === LOADED_SHAPE ? "the loaded model" : preset, ctx: model.ctx, valFraction: training.valFraction, shorter };
};
const corpus = new CorpusPicker(() => splitModel($("preset").value));
const MB = 1024 * 1024;
const mb = (bytes) => (bytes >= 1024 * MB ? `${(bytes / 1024 / MB).toFixed(2)} GB` : `${(bytes / MB).toFixed(1)} MB`);
const backendName = (b) => (b === "webgpu" ? "WebGPU" : "WebAssembly");

// What the page shows, also readable by tests and devtools: every loss by step, exactly as computed.
const playground = (window.playground = { losses: [], valLosses: [], loaded: null, phase: "idle", saved: [], opfs: null, runsEnded: 0,
  corpus: null, evaluated: null });
Object.defineProperty(playground, "attentionLayout", { get: () => attentionView.layout });  // the heatmap as drawn: {cell, labelEvery, font, size, T}
let support = null;
let worker = null;
let busy = { training: false, sampling: false };
let recentMs = [];
let status = null;
let stopping = null;  // performance.now() of the Stop click, until the run has ended
const savedModels = new SavedModels({ post: (m) => worker.postMessage(m), model: () => playground.loaded,
  actions: { resume, open: openSaved, download } });
const trainingView = new TrainingView({ panels: $("stats-panels"), grad: $("stats-grad"), ratio: $("stats-ratio"),
  entropy: $("stats-entropy"), legend: $("stats-legend"), heads: $("stats-heads"), summary: $("stats-summary"), note: $("stats-note") });
const runsView = new RunsView({ post: (m) => worker.postMessage(m), selected: () => savedModels.selectedIds() });
const fineTune = new FineTunePanel({ presets, post: (m) => worker.postMessage(m), model: () => playground.loaded,
  run: fineTuneRun, started: () => { busy.training = true; refreshControls(); } });

function setStatus(text, error = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", error);
  sayStatus(text);
}
function notice(text) {
  $("notice").hidden = !text;
  $("notice").textContent = text ?? "";
}

function refreshControls() {
  const t = busy.training;
  $("start").disabled = t;
  $("stop").disabled = !t || stopping !== null;
  for (const id of ["preset", "backend", "steps", "seed", "checkpoint-seconds", "upload", "measure", "load-demo", "lr", "batch",
    "warmup-steps", "lr-schedule", "weight-decay"]) $(id).disabled = t;
  $("evaluate").disabled = !playground.loaded || t;
  $("sample-button").disabled = !playground.loaded || busy.sampling;
  $("sample-stop").disabled = !busy.sampling;
  $("attention-button").disabled = !playground.loaded;
  $("download").disabled = !playground.loaded || t;
  $("download-fp16").disabled = !playground.loaded || t;
  savedModels.setTraining(t);
  fineTune.setTraining(t);
}

function formatStatus() {
  const s = status;
  const parts = [`step ${s.step}/${s.steps}`, `loss ${s.loss.toFixed(4)}`];
  if (s.valLoss !== null) parts.push(`validation ${s.valLoss.toFixed(4)}`);
  if (s.msPerStep) {
    parts.push(`${Math.round(s.tokensPerStep / (s.msPerStep / 1000)).toLocaleString("en")} tokens/s`);
    parts.push(`${s.msPerStep.toFixed(1)} ms/step`);
    if (busy.training && s.steps > s.step) parts.push(`ETA ${eta((s.steps - s.step) * s.msPerStep)}`);
  }
  return parts.join(" · ");
}
function eta(ms) {
  const s = Math.round(ms / 1000);
  return s < 60 ? `${s} s` : s < 3600 ? `${Math.floor(s / 60)} min ${s % 60} s` : `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/** The browser's features, and OPFS as the worker found it (the worker is where checkpoints are written). */
function renderFeatures() {
  if (!support || playground.opfs === null || !playground.pressure) return;
  const opfs = item(playground.opfs, playground.opfs ? "Origin private file system (OPFS): checkpoints survive a refresh"
    : `No OPFS: ${playground.opfsReason}`);
  const tabs = playground.tabs ? [item(playground.tabs.locks, playground.tabs.locksText), item(playground.tabs.channel, playground.tabs.channelText)] : [];
  $("features").replaceChildren(...support.items, opfs, ...tabs, item(playground.pressure.ok, playground.pressure.text));
}

// ---- the backend worker ----

function startWorker() {
  worker = new Worker(new URL("./worker.js", import.meta.url), { type: "module" });
  worker.onmessage = ({ data }) => onMessage(data);
  worker.onerror = (e) => {
    busy = { training: false, sampling: false };
    refreshControls();
    setStatus(`Error: the backend worker failed (${e.message || "see the console"})`, true);
  };
  worker.postMessage({ type: "hello" });
  worker.postMessage(trainingViewMessage());  // a restarted worker measures as the page says
}

/** The training view's setting as the worker takes it: every K steps, or 0 (off, or K not valid: its error is shown). */
function trainingViewMessage() {
  const on = $("stats-on").checked;
  const { values, errors } = checkedFields($("stats-errors"), { statsEvery: [$("stats-every"), "Training view every", pageLimits("statsEvery")] });
  trainingView.show(on && !errors.length);
  return { type: "trainingView", every: on && !errors.length ? values.statsEvery : 0 };
}

/** A worker stuck inside one long call (a big model being created) cannot hear Stop: end it. */
function restartWorker(why) {
  worker.terminate();
  busy = { training: false, sampling: false };
  playground.loaded = null;
  playground.phase = "idle";
  startWorker();
  refreshControls();
  setStatus(why);
}

const handlers = {
  features({ opfs, opfsReason, tabs }) {
    playground.opfs = opfs;
    playground.opfsReason = opfsReason;
    playground.tabs = tabs;
    renderFeatures();
    const missing = [tabs.locks ? null : tabs.locksText, tabs.channel ? null : tabs.channelText].filter(Boolean);
    $("tabs-note").textContent = missing.length ? `${missing.join(". ")}.` : "";
    $("tabs-note").classList.toggle("warning", missing.length > 0);
    $("opfs-note").textContent = opfs ? "Checkpoints are kept in this browser's private storage (OPFS) and survive a refresh."
      : `Checkpoints cannot be kept here: ${opfsReason}. The model stays in memory; download it to keep it.`;
    $("opfs-note").classList.toggle("error", !opfs);
  },
  checkpoints({ items }) {
    playground.saved = items;
    savedModels.render(items);
    runsView.selectionChanged();
    markCurrentRow();
    refreshControls();
  },
  phase({ phase, text }) {
    playground.phase = phase;
    if (text && phase === "loading") setStatus(text);
    // an upload's first save is quick and its "Loaded …" line says more; a run's saves are shown, and
    // after Stop the line says what the stop waits for (the step in progress, then the save's progress)
    if (text && ["saving", "stopping"].includes(phase) && busy.training && stopping) setStatus(`Stopping… ${text.replace(/^Stopping: /, "")}`);
    else if (text && phase === "saving" && busy.training && status) setStatus(`${formatStatus()} · ${text}`);
  },
  loaded(m) {
    if (m.id !== viewsOf) clearModelViews();  // a sample and a heatmap speak of the model they came from
    if (m.id !== trainingView.id) trainingView.reset(m.id);  // the training view speaks of the model it measured
    playground.loaded = m;
    playground.fatal = null;
    playground.losses = [];
    playground.valLosses = [];
    chart.reset(m.targetSteps || m.step || 1);
    for (const [s, l] of m.lossHistory) { playground.losses[s] = l; chart.addTrain(s, l); }
    for (const [s, l] of m.valHistory) { playground.valLosses[s] = l; chart.addVal(s, l); }
    const last = m.lossHistory[m.lossHistory.length - 1];
    const lastVal = m.valHistory[m.valHistory.length - 1];
    status = { step: m.step, steps: m.targetSteps, loss: last ? last[1] : NaN, valLoss: lastVal ? lastVal[1] : null,
      msPerStep: 0, tokensPerStep: m.tokensPerStep };
    recentMs = [];
    $("build").textContent = `${m.description} ${m.paramCount.toLocaleString("en")} parameters.`;
    modelForm.follow(m);  // the form describes the model in memory: its preset or shape, steps to go, settings
    for (const key of needs.keys()) if (key.endsWith(` ${LOADED_SHAPE}`)) needs.delete(key);  // another shape now
    showPresetInfo();
    markPresetsThatCannotFit();
    markCurrentRow();
    notice(m.notice);
    $("evaluation").textContent = "";
    $("upload-error").textContent = "";
    setStatus(loadedStatus(m));
    fineTune.follow(m);
    refreshControls();
  },
  /** The worker's record changed (a save, a delete, a rename, a run's start or end): the page's one copy follows. */
  model({ record }) {
    if (!playground.loaded) return;  // the worker was restarted: its model went with it
    Object.assign(playground.loaded, record);
    markCurrentRow();
    fineTune.follow(playground.loaded);
  },
  refused(m) { savedModels.say(m.message); },
  /** A measured step (the training view, training_stats.js): for tests and devtools, every one received. */
  stats(m) {
    (playground.stats ??= []).push(m);
    trainingView.add(m);
  },
  runs({ items }) { runsView.show(items); },
  step(m) {
    recentMs.push(m.ms);
    if (recentMs.length > 20) recentMs.shift();
    Object.assign(status, { step: m.step, loss: m.loss, msPerStep: recentMs.reduce((a, b) => a + b) / recentMs.length });
    if (playground.loaded) playground.loaded.step = m.step;
    playground.losses[m.step] = m.loss;
    chart.addTrain(m.step, m.loss);
    if (!stopping) setStatus(formatStatus());
  },
  eval(m) {
    status.valLoss = m.valLoss;
    playground.valLosses[m.step] = m.valLoss;
    chart.addVal(m.step, m.valLoss);
    setStatus(formatStatus());
  },
  saved(m) { playground.lastSaved = m; savedModels.saved(); },
  done(m) {
    busy.training = false;
    stopping = null;
    playground.runsEnded++;
    status.step = m.step;
    if (playground.loaded) {
      playground.loaded.step = m.step;
      modelForm.followSteps(playground.loaded);  // Steps offers what is left of the run
    }
    refreshControls();
    if (!playground.fatal) setStatus(`${m.stopped ? "Stopped" : "Finished"}: ${formatStatus()}`);
  },
  text(m) {
    if (m.stream === "base") { fineTune.baseText(m); return; }  // a fine-tune's base, beside it
    sampleView.append(m.bytes);
    logitView.append(m.bytes, m.top);
    if (m.tokens) {
      $("sample-stats").textContent = `time to first token ${m.ttftMs.toFixed(0)} ms · ${m.tokens} tokens · ` +
        `${m.tokensPerSecond.toFixed(0)} tokens/s`;
    }
  },
  sampleDone(m) {
    if (m.stream === "base") { fineTune.baseDone(); return; }
    sampleView.append([], true);  // an unfinished character at the end is shown as its bytes
    busy.sampling = false;
    if (m.cancelled) {
      const stats = $("sample-stats");
      stats.textContent = m.tokens ? `${stats.textContent} · stopped` : "Stopped before its first token.";
    }
    refreshControls();
  },
  file({ name, bytes }) {
    const url = URL.createObjectURL(new Blob([bytes], { type: "application/octet-stream" }));
    const a = Object.assign(document.createElement("a"), { href: url, download: name });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60_000);
  },
  probe(m) {
    $("measure").disabled = busy.training;
    $("eta").textContent = `Measured on ${backendName(m.backend)}: ${m.msPerStep.toFixed(1)} ms/step, so ` +
      `${m.steps.toLocaleString("en")} steps of ${m.preset} take about ${eta(m.steps * m.msPerStep)}.`;
  },
  evaluated(m) {
    playground.evaluated = m;
    $("evaluate").disabled = busy.training;
    // the saved row's Validation is another number: the lowest one measured while it trained, on its own corpus
    const row = playground.saved.find((it) => it.id === playground.loaded?.id && Number.isFinite(it.valLoss));
    const differs = row ? ` Saved models lists ${row.valLoss.toFixed(4)} as its Validation: the lowest loss measured while it ` +
      `trained${row.valStep ? ` (at step ${row.valStep})` : ""}, on the corpus it trained on; this is the model as it is now.` : "";
    $("evaluation").textContent = `Validation loss ${m.valLoss.toFixed(4)} at step ${m.step} on ${m.corpus} ` +
      `(${m.windows} windows of ${m.ctx} bytes from its validation split), computed by ${backendName(m.backend)}.` +
      `${fineTune.evaluated(m)}${differs}`;
  },
  attention(m) {
    // what the page drew, for tests and devtools: {tokens, nLayer, nHead, T, weights (nLayer, nHead, T, T)}
    playground.attention = m;
    viewsOf = playground.loaded?.id ?? null;
    attentionView.show(m);
    $("attention-info").textContent = `${m.T} bytes through the model at step ${m.step}, computed by ${backendName(m.backend)}.`;
  },
  notice(m) { notice(m.message); },
  error(m) {
    if (m.during === "evaluate") $("evaluate").disabled = busy.training || !playground.loaded;
    if (m.during === "probe") {
      $("measure").disabled = busy.training;
      $("eta").textContent = `Could not measure: ${m.message}`;
      return;
    }
    if (m.fatal || ["train", "continue", "resume", "load", "finetune", "attach"].includes(m.during)) {
      busy.training = false;
      stopping = null;
      playground.runsEnded++;
    }
    if (["load", "attach"].includes(m.during) && m.source !== "demo" && !m.fatal) {
      // a file that was not loaded is said beside the upload control, in plain words; the status line is the run's
      refreshControls();
      uploadError(m.file ? m.message : `That file was not loaded: ${m.message}`);
      return;
    }
    if (m.fatal || m.during === "sample") busy.sampling = false;
    refreshControls();
    const where = m.during === "load" ? "That file was not loaded" : m.during === "resume" ? "That checkpoint was not resumed" : "Error";
    if (m.fatal) {
      // the engine is gone: what remains is the last checkpoint, which Resume picks up
      playground.fatal = m.message;
      playground.loaded = null;
      refreshControls();
    }
    const kept = m.fatal ? ". Resume it from Saved models." : "";
    setStatus(`${where}: ${m.message}${kept}`, true);
  },
};

function onMessage(m) {
  handlers[m.type]?.(m);
}

/** The sample (text, header, logit view) and the attention heatmap: cleared when another model comes in. */
let viewsOf = null;  // the id of the model they were drawn from
function clearModelViews() {
  viewsOf = null;
  sampleView.clear();
  fineTune.clear();
  logitView.clear();
  attentionView.clear();
  for (const id of ["sample-model", "sample-settings", "sample-stats", "attention-info"]) $(id).textContent = "";
  $("reuse-seed").hidden = true;
}

/** Why an upload was refused, beside the upload control (and for tests and devtools). */
let beforeReading = null;  // the status line before "Reading <file>…": a refused file puts it back
function uploadError(text) {
  $("upload-error").textContent = text;
  playground.uploadError = text;
  if (text && beforeReading !== null) setStatus(beforeReading.text, beforeReading.error);
  beforeReading = null;
}

function markCurrentRow() {
  for (const tr of document.querySelectorAll("#checkpoints tbody tr")) {
    tr.classList.toggle("current", tr.dataset.id === playground.loaded?.id);
  }
}

// ---- training ----

/** Reads a form's fields and shows their errors in `box`, each tied to its field, the first focused. */
function checkedFields(box, spec) {
  const result = readFields(spec);
  reportFieldErrors(box, spec, result);
  return result;
}

function trainingFields() {
  return checkedFields($("train-errors"), {
    steps: [$("steps"), "Steps", pageLimits("steps")],
    seed: [$("seed"), "Seed", fieldLimits(rules.training.seed)],
    checkpointSeconds: [$("checkpoint-seconds"), "Save every", pageLimits("checkpointSeconds")],
    ...modelForm.spec(),
  });
}

function chosenBackend() {
  return resolveBackend($("backend").value, support.gpu);
}

async function presetNeeds(name, backend, corpusBytes = 0) {
  const config = modelForm.config(name);
  const engine = backend === "webgpu" ? webgpuEngine : wasmEngine;
  return engine.requirements(config, corpusBytes);
}

async function startNew(values, backend) {
  const name = $("preset").value;
  const words = modelForm.chosenWords();
  const hyper = modelForm.hyper(values);
  const chosen = await corpus.chosen(splitModel(name));  // a corpus that cannot train this preset: nothing starts
  const need = await presetNeeds(name, backend, chosen.bytes.length);
  if (!need.fits) throw new Error(`${words} does not fit here: ${need.reason}`);
  if (need.bytes > limits.confirmAboveBytes && !confirm(`${words} needs ${mb(need.bytes)} of memory on ${backendName(backend)} ` +
    "and a step may take minutes. Start it?")) return;
  busy.training = true;
  refreshControls();
  sampleView.clear();
  playground.corpus = chosen.identity;
  const shape = name === LOADED_SHAPE ? modelForm.shape : null;  // a new model of the loaded model's own shape
  worker.postMessage({ type: "train", backend, preset: shape ? null : name, shape, steps: values.steps, seed: values.seed,
    checkpointSeconds: values.checkpointSeconds, corpus: chosen, hyper });
}

/** Shows `dialog` (a <dialog> whose form is method=dialog) and resolves to the value of the button that closed it. */
function ask(dialog) {
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => dialog.addEventListener("close", () => resolve(dialog.returnValue), { once: true }));
}

/** Continue this model or start a new one: asked whenever a model is loaded, from the model's record as it is now. */
function askContinueOrNew() {
  const l = playground.loaded;
  $("continue-text").textContent = continueQuestion(l, { steps: Number($("steps").value), newPreset: modelForm.chosenWords(),
    opfs: playground.opfs });
  return ask($("continue-dialog"));
}

/** {preset, ctx, valFraction} that a corpus is checked against for a model of this record or saved row. */
const splitOf = (m) => ({ preset: m.preset ?? m.name ?? "this model", ctx: m.shape.ctx, valFraction: presets.training.valFraction });

/**
 * The corpus a run of a model trains on. When the corpus it last trained on is not the one chosen in
 * Train, the person is asked first: this model's corpus (where this tab holds its text), the chosen one,
 * or cancel (null). The model's own corpus is never replaced without that answer.
 */
async function trainingCorpus(modelCorpus, split) {
  const chosen = await corpus.chosen(split);
  const question = corpusQuestion(modelCorpus, chosen.identity);
  if (!question) return chosen;
  const own = await corpus.find(modelCorpus.sha256, split);
  $("corpus-question").textContent = question;
  $("corpus-model").textContent = `${modelCorpus.name} (this model's corpus)`;
  $("corpus-chosen").textContent = `${chosen.identity.name} (the chosen one)`;
  $("corpus-model").disabled = !own;
  $("corpus-missing").textContent = own ? "" : `The text of ${modelCorpus.name} is not in this tab: to train on it, choose it ` +
    "under Corpus (paste it, pick its file or fetch its rows), then press Train or Resume again.";
  playground.corpusQuestion = question;
  const answer = await ask($("corpus-dialog"));
  return answer === "model" ? own : answer === "chosen" ? chosen : null;
}

async function onTrain(e) {
  e.preventDefault();
  const { values, errors } = trainingFields();
  if (errors.length) return;
  try {
    const { backend, why } = chosenBackend();
    $("backend-choice").textContent = why;
    await corpus.chosen();  // a corpus that cannot train the chosen preset is refused before any question
    if (playground.loaded) {
      const answer = await askContinueOrNew();
      if (answer === "continue") {
        const l = playground.loaded;
        const trainOn = await trainingCorpus(l.corpus, splitOf(l));
        if (!trainOn) return;
        busy.training = true;
        refreshControls();
        worker.postMessage({ type: "continue", steps: values.steps, checkpointSeconds: values.checkpointSeconds, corpus: trainOn });
        return;
      }
      if (answer !== "new") return;
    }
    await startNew(values, backend);
  } catch (err) {
    $("train-errors").textContent = err.message;
  }
}

async function onMeasure() {
  const { values, errors } = trainingFields();
  if (errors.length) return;
  try {
    const { backend } = chosenBackend();
    const chosen = await corpus.chosen();
    $("measure").disabled = true;
    $("eta").textContent = `Timing a few steps of ${$("preset").value} on ${backendName(backend)}…`;
    const shape = $("preset").value === LOADED_SHAPE ? modelForm.shape : null;
    worker.postMessage({ type: "probe", backend, preset: shape ? modelForm.chosenWords() : $("preset").value, shape,
      steps: values.steps, corpus: chosen });
  } catch (err) {
    $("train-errors").textContent = err.message;
  }
}

/**
 * Stop answers at once: the line says "Stopping…" and the button goes off before the worker hears it; the
 * worker's phases then say what the stop waits for (the step in progress, the save and its progress).
 */
function onStop() {
  if (playground.phase === "loading") {
    restartWorker("Stopped while the model was being created: nothing was trained, saved checkpoints are kept.");
    return;
  }
  stopping = performance.now();
  playground.stopClickedAt = stopping;
  $("stop").disabled = true;
  const at = playground.loaded?.step ?? status?.step;
  setStatus(`Stopping… ${at !== undefined ? `the step after ${at} ends` : "the step in progress ends"}, then the model is saved.`);
  worker.postMessage({ type: "stop" });
}

// ---- saved models, upload, download ----

async function resume(item) {
  const { values, errors } = trainingFields();
  if (errors.length) return;
  let backend, trainOn;
  try {
    ({ backend } = chosenBackend());
    trainOn = await trainingCorpus(item.corpus, splitOf(item));
  } catch (err) { $("train-errors").textContent = err.message; return; }
  if (!trainOn) return;
  busy.training = true;
  refreshControls();
  worker.postMessage({ type: "resume", backend, id: item.id, checkpointSeconds: values.checkpointSeconds, corpus: trainOn });
}

/** A saved model into memory without training: to sample, evaluate and look inside (evaluated on the chosen corpus). */
async function openSaved(item) {
  if (busy.training) { savedModels.say("Stop training before opening another model."); return; }
  let backend, chosen;
  try {
    ({ backend } = chosenBackend());
    chosen = await corpus.chosen(splitOf(item));
  } catch (err) { savedModels.say(`"${item.name}" was not opened: ${err.message}`); return; }
  savedModels.say("");
  setStatus(`Opening ${item.name}…`);
  worker.postMessage({ type: "open", backend, id: item.id, corpus: chosen });
}

/** `how`: compact (true: fp16 weights) for a model; "adapter" or "merged" for a fine-tune. */
function download(id, how) {
  worker.postMessage(typeof how === "string" ? { type: "download", id, what: how } : { type: "download", id, compact: how });
}

/** What a fine-tune takes from the Train section (finetune.js): backend, seed, save interval and the chosen corpus. */
async function fineTuneRun(l) {
  const { values, errors } = checkedFields($("train-errors"), {
    seed: [$("seed"), "Seed", fieldLimits(rules.training.seed)],
    checkpointSeconds: [$("checkpoint-seconds"), "Save every", pageLimits("checkpointSeconds")],
  });
  if (errors.length) throw new Error("fix the Train section's fields first (Seed, Save every)");
  const { backend, why } = chosenBackend();
  $("backend-choice").textContent = why;
  const chosen = await corpus.chosen(splitOf(l));
  playground.corpus = chosen.identity;
  return { backend, seed: values.seed, checkpointSeconds: values.checkpointSeconds, corpus: chosen };
}

async function upload(file) {
  if (!file) return;
  if (busy.training) { uploadError("Stop training before loading another model."); return; }
  if (playground.loaded && !playground.opfs && !confirm("The model in memory is not saved anywhere (no OPFS here). Replace it?")) return;
  let bytes;
  try {
    bytes = await file.arrayBuffer();
  } catch (e) {
    uploadError(`${file.name} was not loaded: the file (${mb(file.size)}) cannot be read in this tab (${e.message}).`);
    return;
  }
  uploadError("");
  if (isAdapterFile(new Uint8Array(bytes, 0, Math.min(4, bytes.byteLength)))) {
    await attachAdapter(bytes, file.name);
    return;
  }
  await loadModel(bytes, file.name, "upload");
}

/** An uploaded adapter (.tgla): on its base, kept in this browser or the model in memory; refused with the reason otherwise. */
async function attachAdapter(bytes, name) {
  let backend, chosen;
  try {
    ({ backend } = chosenBackend());
    chosen = await corpus.chosen(playground.loaded ? splitOf(playground.loaded) : splitModel($("preset").value));
  } catch (err) {
    uploadError(`${name} was not loaded: ${err.message}`);
    return;
  }
  beforeReading = { text: $("status").textContent, error: $("status").classList.contains("error") };
  setStatus(`Reading ${name}…`);
  worker.postMessage({ type: "attach", backend, bytes, name, corpus: chosen }, [bytes]);
}

/** An uploaded file and the demo model take this one path to the worker. */
async function loadModel(bytes, name, source, preset = $("preset").value) {
  let backend, chosen;
  try {
    ({ backend } = chosenBackend());
    chosen = await corpus.chosen(splitModel(preset));
  } catch (err) {
    if (source === "upload") uploadError(`${name} was not loaded: ${err.message}`);
    else setStatus(`That file was not loaded: ${err.message}`, true);
    return;
  }
  beforeReading = { text: $("status").textContent, error: $("status").classList.contains("error") };
  setStatus(`Reading ${name}…`);
  worker.postMessage({ type: "load", backend, bytes, name, source, corpus: chosen }, [bytes]);
}

async function loadDemo() {
  if (busy.training) { setStatus("Stop training before loading another model.", true); return; }
  if (playground.loaded && !playground.opfs && !confirm("The model in memory is not saved anywhere (no OPFS here). Replace it?")) return;
  setStatus("Fetching the demo model…");
  let bytes;
  try {
    const r = await fetch(DEMO_URL);
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    bytes = await r.arrayBuffer();
  } catch (e) {
    setStatus(`That file was not loaded: the demo model ${DEMO_URL.pathname} could not be fetched (${e.message}).`, true);
    return;
  }
  await loadModel(bytes, "demo-large.tinygpt", "demo", DEMO_PRESET);
}

// ---- sampling ----

/** A sample seed nobody typed: 32 random bits (the engines take any integer below 2^53; these are short to copy). */
const randomSeed = () => crypto.getRandomValues(new Uint32Array(1))[0];

function onSample(e) {
  e.preventDefault();
  if ($("sample-button").disabled) return;  // Ctrl+Enter while a sample runs, or before there is a model
  const { values, errors } = checkedFields($("sample-errors"), {
    temperature: [$("temperature"), "Temperature", pageLimits("temperature")],
    topK: [$("top-k"), "Top-k", { ...fieldLimits(rules.sampling.topK), max: presets.model.vocabSize }],  // past the vocabulary: all tokens anyway
    maxNewTokens: [$("max-new"), "Tokens", pageLimits("maxNewTokens")],
    seed: [$("sample-seed"), "Seed", { ...fieldLimits(rules.sampling.seed), optional: true }],  // empty: random
  });
  if (errors.length) return;
  const { temperature, topK, maxNewTokens } = values, random = values.seed === null;
  const seed = random ? randomSeed() : values.seed, prompt = $("prompt").value;
  busy.sampling = true;
  refreshControls();
  sampleView.clear();
  logitView.clear();
  const l = playground.loaded;
  viewsOf = l.id;
  playground.logits = logitView.steps;  // each sampled byte with its top-5 [{byte, p}], for tests and devtools
  playground.sample = { prompt, seed, random, temperature, topK, maxNewTokens, model: l.id };  // what was asked
  sampleView.append(new TextEncoder().encode(prompt));
  $("sample-stats").textContent = "";
  $("sample-model").textContent = `From ${l.lora ? l.name : l.preset ?? l.name ?? "a model"} at step ${l.step} ` +
    `(${SOURCE_WORDS[l.source]}), on ${backendName(l.backend)}.`;
  const compare = fineTune.compare();
  fineTune.sampleStarted(prompt, compare);
  // the seed is shown with every sample: a random one can be typed in (or reused) to get this text again
  $("sample-settings").textContent = `Seed ${seed}${random ? " (picked at random)" : ""} · temperature ${temperature} · ` +
    `top-k ${topK} · up to ${maxNewTokens} tokens.`;
  $("reuse-seed").hidden = !random;
  worker.postMessage({ type: "sample", prompt, temperature, topK, maxNewTokens, seed, compare });
}

/** Ctrl+Enter (⌘+Enter) in the prompt samples; a plain Enter is a new line of the prompt. */
function onPromptKey(e) {
  if (e.key !== "Enter" || !(e.ctrlKey || e.metaKey)) return;
  e.preventDefault();
  $("sample-form").requestSubmit();
}

function reuseSeed() {
  $("sample-seed").value = String(playground.sample.seed);
  $("reuse-seed").hidden = true;
  $("sample-seed").focus();
}

// ---- what each preset needs here ----

async function showPresetInfo() {
  corpus.refresh();  // the corpus's split depends on the preset's context, however the preset was set
  const name = $("preset").value;
  const config = modelForm.config(name);
  const parts = [`${paramCount(config.model).toLocaleString("en")} parameters`];
  for (const backend of ["wasm", "webgpu"]) {
    if (backend === "webgpu" && !support.gpu.ok) continue;
    try {
      const need = await presetNeeds(name, backend);
      parts.push(`${backendName(backend)}: needs ${mb(need.bytes)}${need.fits ? "" : ` — does not fit (${need.reason})`}`);
    } catch (e) {
      parts.push(`${backendName(backend)}: ${e.message}`);
    }
  }
  $("preset-info").textContent = parts.join(" · ");
}

/**
 * Presets that cannot fit the backend chosen now (Backend, Auto resolved) are disabled in the list, the
 * reason in their label, and listed under it; marked again whenever Backend or Preset changes. A chosen
 * preset that cannot fit stays chosen (Train refuses it, saying why) and the line under the list says so.
 */
const needs = new Map();  // `${backend} ${preset}` -> Promise of requirements(): the same answer each time
let marking = 0;
async function markPresetsThatCannotFit() {
  const run = ++marking;
  let backend = null;
  try { ({ backend } = chosenBackend()); } catch { /* WebGPU picked where it cannot run: the backend line says why */ }
  const options = [...$("preset").options], marks = [];
  for (const option of options) {
    const key = `${backend} ${option.value}`;
    if (backend && !needs.has(key)) needs.set(key, presetNeeds(option.value, backend).catch((e) => ({ fits: false, reason: e.message })));
    marks.push(backend ? await needs.get(key) : { fits: true });
  }
  if (run !== marking) return;  // Backend changed meanwhile: the later marking speaks
  const where = backendName(backend), disabled = [];
  options.forEach((option, i) => {
    const { fits, reason } = marks[i];
    option.dataset.label ??= option.text;
    option.disabled = !fits;
    option.title = fits ? "" : `${where}: ${reason}`;
    option.text = fits ? option.dataset.label : `${option.dataset.label} (does not fit ${where} here: ${reason})`;
    if (!fits) disabled.push(`${option.value} (${where}: ${reason})`);
  });
  const chosen = $("preset").selectedOptions[0], limits = $("preset-limits");
  limits.textContent = (disabled.length ? `Disabled here: ${disabled.join("; ")}.` : "") +
    (chosen?.disabled ? ` The chosen preset, ${chosen.value}, cannot train on ${where} here: pick another preset or backend.` : "");
  limits.classList.toggle("error", Boolean(chosen?.disabled));
  playground.presetsMarked = { backend, disabled: options.filter((o) => o.disabled).map((o) => o.value) };  // for tests
}

// ---- wiring ----

$("steps").value = presets.presets[$("preset").value].steps;
$("preset").addEventListener("change", () => {
  modelForm.presetChosen();  // a preset's steps and batch (the loaded model's own shape keeps the form as it is)
  $("eta").textContent = "";
  showPresetInfo();
  markPresetsThatCannotFit();
});
$("backend").addEventListener("change", () => {
  try { $("backend-choice").textContent = chosenBackend().why; } catch (e) { $("backend-choice").textContent = e.message; }
  markPresetsThatCannotFit();
});
$("train-form").addEventListener("submit", onTrain);
for (const [id, event] of [["stats-on", "change"], ["stats-every", "change"]]) {
  $(id).addEventListener(event, () => worker.postMessage(trainingViewMessage()));
}
$("stats-form").addEventListener("submit", (e) => { e.preventDefault(); worker.postMessage(trainingViewMessage()); });
$("stop").addEventListener("click", onStop);
$("measure").addEventListener("click", onMeasure);
$("sample-form").addEventListener("submit", onSample);
$("prompt").addEventListener("keydown", onPromptKey);
$("reuse-seed").addEventListener("click", reuseSeed);
labelCellsByHeader($("checkpoints"));  // saved models as cards on a narrow screen: each value beside its column's name
$("sample-stop").addEventListener("click", () => worker.postMessage({ type: "stopSample" }));
$("download").addEventListener("click", () => download(null, false));
$("download-fp16").addEventListener("click", () => download(null, true));
$("load-demo").addEventListener("click", loadDemo);
$("evaluate").addEventListener("click", () => { $("evaluate").disabled = true; worker.postMessage({ type: "evaluate" }); });
$("attention-form").addEventListener("submit", (e) => { e.preventDefault(); worker.postMessage({ type: "attention", prompt: $("prompt").value }); });
$("upload").addEventListener("change", (e) => { upload(e.target.files[0]); e.target.value = ""; });
document.addEventListener("dragover", (e) => e.preventDefault());
document.addEventListener("drop", (e) => { e.preventDefault(); upload(e.dataTransfer.files[0]); });

startWorker();
refreshControls();
[support, playground.pressure] = await Promise.all([browserSupport(), startPressureChip($("pressure"))]);
renderFeatures();
$("backend-choice").textContent = chosenBackend().why;
await showPresetInfo();
await markPresetsThatCannotFit();
