// The playground page: says what this browser can use, talks to one backend Worker (worker.js,
// protocol in backend_protocol.md) that trains, checkpoints and samples, and shows what it does.
import { LossChart } from "./loss_chart.js";
import { browserSupport, item, resolveBackend } from "./backend_choice.js";
import { readFields } from "./form_checks.js";
import { renderCheckpoints } from "./checkpoint_table.js";
import { configFromPresets } from "./model_config.js";
import { loadPresets } from "./presets.js";
import { fieldLimits } from "../../../webgpu/config_rules.js";
import { paramCount } from "./tinygpt_file.js";
import * as wasmEngine from "./engines/wasm_engine.js";
import * as webgpuEngine from "./engines/webgpu_engine.js";
import { CorpusPicker } from "./corpus_picker.js";
import { SampleView } from "./sample_text.js";
import { startPressureChip } from "./pressure_chip.js";
import { throttledText } from "./throttled_text.js";
import { AttentionView } from "./attention_view.js";
import { LogitView } from "./logit_view.js";

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
const attentionView = new AttentionView({ canvas: $("attention-canvas"), layer: $("attention-layer"), head: $("attention-head"), cell: $("attention-cell") });
const sayStatus = throttledText($("status-live"));  // the visible line changes every step; a screen reader hears it once a second
const DEMO_URL = new URL("../models/demo-large.tinygpt", import.meta.url);
const DEMO_PRESET = "large";
const SOURCE_WORDS = { new: "trained here", saved: "saved checkpoint", upload: "uploaded", demo: "the demo model" };
/** {preset, ctx, valFraction} of a preset: what a corpus is checked against. */
const splitModel = (preset) => {
  const { model, training } = configFromPresets(presets, preset);
  return { preset, ctx: model.ctx, valFraction: training.valFraction };
};
const corpus = new CorpusPicker(() => splitModel($("preset").value));
const MB = 1024 * 1024;
const mb = (bytes) => (bytes >= 1024 * MB ? `${(bytes / 1024 / MB).toFixed(2)} GB` : `${(bytes / MB).toFixed(1)} MB`);
const backendName = (b) => (b === "webgpu" ? "WebGPU" : "WebAssembly");

// What the page shows, also readable by tests and devtools: every loss by step, exactly as computed.
const playground = (window.playground = { losses: [], valLosses: [], loaded: null, phase: "idle", saved: [], opfs: null, runsEnded: 0,
  corpus: null, evaluated: null });
let support = null;
let worker = null;
let busy = { training: false, sampling: false };
let recentMs = [];
let status = null;

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
  $("stop").disabled = !t;
  for (const id of ["preset", "backend", "steps", "seed", "checkpoint-seconds", "upload", "measure", "load-demo"]) $(id).disabled = t;
  $("evaluate").disabled = !playground.loaded || t;
  $("sample-button").disabled = !playground.loaded || busy.sampling;
  $("sample-stop").disabled = !busy.sampling;
  $("attention-button").disabled = !playground.loaded;
  $("download").disabled = !playground.loaded || t;
  $("download-fp16").disabled = !playground.loaded || t;
  for (const b of document.querySelectorAll("#checkpoints button")) b.disabled = t;
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
  $("features").replaceChildren(...support.items, opfs, item(playground.pressure.ok, playground.pressure.text));
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
  features({ opfs, opfsReason }) {
    playground.opfs = opfs;
    playground.opfsReason = opfsReason;
    renderFeatures();
    $("opfs-note").textContent = opfs ? "Checkpoints are kept in this browser's private storage (OPFS) and survive a refresh."
      : `Checkpoints cannot be kept here: ${opfsReason}. The model stays in memory; download it to keep it.`;
    $("opfs-note").classList.toggle("error", !opfs);
  },
  checkpoints({ items }) {
    playground.saved = items;
    $("no-checkpoints").hidden = items.length > 0;
    renderCheckpoints(document.querySelector("#checkpoints tbody"), items, { resume, download, remove });
    markCurrentRow();
    refreshControls();
  },
  phase({ phase, text }) {
    playground.phase = phase;
    if (text && phase === "loading") setStatus(text);
    // an upload's first save is quick and its "Loaded …" line says more; a run's saves are shown
    if (text && phase === "saving" && busy.training && status) setStatus(`${formatStatus()} · ${text}`);
  },
  loaded(m) {
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
    if (m.preset in presets.presets && $("preset").value !== m.preset) {
      $("preset").value = m.preset;  // the form describes the model in memory
      showPresetInfo();
    }
    markCurrentRow();
    notice(m.notice);
    $("evaluation").textContent = "";
    setStatus(`Loaded ${m.preset ?? "a model"} at step ${m.step} (${m.source === "new" ? "new" : SOURCE_WORDS[m.source]}).`);
    refreshControls();
  },
  step(m) {
    recentMs.push(m.ms);
    if (recentMs.length > 20) recentMs.shift();
    Object.assign(status, { step: m.step, loss: m.loss, msPerStep: recentMs.reduce((a, b) => a + b) / recentMs.length });
    playground.losses[m.step] = m.loss;
    chart.addTrain(m.step, m.loss);
    setStatus(formatStatus());
  },
  eval(m) {
    status.valLoss = m.valLoss;
    playground.valLosses[m.step] = m.valLoss;
    chart.addVal(m.step, m.valLoss);
    setStatus(formatStatus());
  },
  saved(m) { playground.lastSaved = m; worker.postMessage({ type: "list" }); },
  done(m) {
    busy.training = false;
    playground.runsEnded++;
    status.step = m.step;
    refreshControls();
    if (!playground.fatal) setStatus(`${m.stopped ? "Stopped" : "Finished"}: ${formatStatus()}`);
  },
  text(m) {
    sampleView.append(m.bytes);
    logitView.append(m.bytes, m.top);
    if (m.tokens) {
      $("sample-stats").textContent = `time to first token ${m.ttftMs.toFixed(0)} ms · ${m.tokens} tokens · ` +
        `${m.tokensPerSecond.toFixed(0)} tokens/s`;
    }
  },
  sampleDone(m) {
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
    $("evaluation").textContent = `Validation loss ${m.valLoss.toFixed(4)} at step ${m.step} on ${m.corpus} ` +
      `(${m.windows} windows of ${m.ctx} bytes from its validation split), computed by ${backendName(m.backend)}.`;
  },
  attention(m) {
    // what the page drew, for tests and devtools: {tokens, nLayer, nHead, T, weights (nLayer, nHead, T, T)}
    playground.attention = m;
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
    if (m.fatal || ["train", "continue", "resume", "load"].includes(m.during)) {
      busy.training = false;
      playground.runsEnded++;
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

function markCurrentRow() {
  for (const tr of document.querySelectorAll("#checkpoints tbody tr")) {
    tr.classList.toggle("current", tr.dataset.id === playground.loaded?.id);
  }
}

// ---- training ----

function trainingFields() {
  return readFields({
    steps: [$("steps"), "Steps", pageLimits("steps")],
    seed: [$("seed"), "Seed", fieldLimits(rules.training.seed)],
    checkpointSeconds: [$("checkpoint-seconds"), "Save every", pageLimits("checkpointSeconds")],
  });
}

function chosenBackend() {
  return resolveBackend($("backend").value, support.gpu);
}

async function presetNeeds(name, backend, corpusBytes = 0) {
  const config = configFromPresets(presets, name);
  const engine = backend === "webgpu" ? webgpuEngine : wasmEngine;
  return engine.requirements(config, corpusBytes);
}

async function startNew(values, backend) {
  const name = $("preset").value;
  const chosen = await corpus.chosen(splitModel(name));  // a corpus that cannot train this preset: nothing starts
  const need = await presetNeeds(name, backend, chosen.bytes.length);
  if (!need.fits) throw new Error(`${name} does not fit here: ${need.reason}`);
  if (need.bytes > limits.confirmAboveBytes && !confirm(`${name} needs ${mb(need.bytes)} of memory on ${backendName(backend)} ` +
    "and a step may take minutes. Start it?")) return;
  busy.training = true;
  refreshControls();
  sampleView.clear();
  playground.corpus = chosen.identity;
  worker.postMessage({ type: "train", backend, preset: name, steps: values.steps, seed: values.seed,
    checkpointSeconds: values.checkpointSeconds, corpus: chosen });
}

/** Continue this model or start a new one: asked whenever a model is loaded. */
function askContinueOrNew() {
  const l = playground.loaded;
  $("continue-text").textContent = `${l.preset ?? "A model"} at step ${l.step} is loaded on ${backendName(l.backend)}. ` +
    `Continue it for ${$("steps").value} more steps, or start a new ${$("preset").value} model (the loaded one stays saved` +
    `${playground.opfs ? "" : " only if you download it"}).`;
  const dialog = $("continue-dialog");
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => dialog.addEventListener("close", () => resolve(dialog.returnValue), { once: true }));
}

async function onTrain(e) {
  e.preventDefault();
  const { values, errors } = trainingFields();
  $("train-errors").textContent = errors.join(" ");
  if (errors.length) return;
  try {
    const { backend, why } = chosenBackend();
    $("backend-choice").textContent = why;
    if (playground.loaded) {
      const answer = await askContinueOrNew();
      if (answer === "continue") {
        busy.training = true;
        refreshControls();
        worker.postMessage({ type: "continue", steps: values.steps, checkpointSeconds: values.checkpointSeconds });
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
  $("train-errors").textContent = errors.join(" ");
  if (errors.length) return;
  try {
    const { backend } = chosenBackend();
    const chosen = await corpus.chosen();
    $("measure").disabled = true;
    $("eta").textContent = `Timing a few steps of ${$("preset").value} on ${backendName(backend)}…`;
    worker.postMessage({ type: "probe", backend, preset: $("preset").value, steps: values.steps, corpus: chosen });
  } catch (err) {
    $("train-errors").textContent = err.message;
  }
}

function onStop() {
  if (playground.phase === "loading") {
    restartWorker("Stopped while the model was being created: nothing was trained, saved checkpoints are kept.");
  } else {
    worker.postMessage({ type: "stop" });
  }
}

// ---- saved models, upload, download ----

async function resume(id) {
  const { values, errors } = trainingFields();
  if (errors.length) { $("train-errors").textContent = errors.join(" "); return; }
  const saved = playground.saved.find((s) => s.id === id);
  let backend, chosen;
  try {
    ({ backend } = chosenBackend());
    chosen = await corpus.chosen(splitModel(saved?.preset in presets.presets ? saved.preset : $("preset").value));
  } catch (err) { $("train-errors").textContent = err.message; return; }
  busy.training = true;
  refreshControls();
  worker.postMessage({ type: "resume", backend, id, checkpointSeconds: values.checkpointSeconds, corpus: chosen });
}

function download(id, compact) {
  worker.postMessage({ type: "download", id, compact });
}

function remove(item) {
  if (!confirm(`Delete the saved model "${item.name}" (step ${item.step})? This cannot be undone.`)) return;
  worker.postMessage({ type: "delete", id: item.id });
}

async function upload(file) {
  if (!file) return;
  if (busy.training) { setStatus("Stop training before loading another model.", true); return; }
  if (playground.loaded && !playground.opfs && !confirm("The model in memory is not saved anywhere (no OPFS here). Replace it?")) return;
  let bytes;
  try {
    bytes = await file.arrayBuffer();
  } catch (e) {
    setStatus(`That file was not loaded: ${file.name} (${mb(file.size)}) cannot be read in this tab (${e.message}).`, true);
    return;
  }
  await loadModel(bytes, file.name, "upload");
}

/** An uploaded file and the demo model take this one path to the worker. */
async function loadModel(bytes, name, source, preset = $("preset").value) {
  let backend, chosen;
  try {
    ({ backend } = chosenBackend());
    chosen = await corpus.chosen(splitModel(preset));
  } catch (err) { setStatus(`That file was not loaded: ${err.message}`, true); return; }
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

function onSample(e) {
  e.preventDefault();
  const { values, errors } = readFields({
    temperature: [$("temperature"), "Temperature", pageLimits("temperature")],
    topK: [$("top-k"), "Top-k", { ...fieldLimits(rules.sampling.topK), max: presets.model.vocabSize }],  // past the vocabulary: all tokens anyway
    maxNewTokens: [$("max-new"), "Tokens", pageLimits("maxNewTokens")],
  });
  $("sample-errors").textContent = errors.join(" ");
  if (errors.length) return;
  busy.sampling = true;
  refreshControls();
  sampleView.clear();
  logitView.clear();
  playground.logits = logitView.steps;  // each sampled byte with its top-5 [{byte, p}], for tests and devtools
  sampleView.append(new TextEncoder().encode($("prompt").value));
  $("sample-stats").textContent = "";
  const l = playground.loaded;
  $("sample-model").textContent = `From ${l.preset ?? "a model"} at step ${status.step} (${SOURCE_WORDS[l.source]}), ` +
    `on ${backendName(l.backend)}.`;
  worker.postMessage({ type: "sample", prompt: $("prompt").value, ...values, seed: presets.sampling.seed });
}

// ---- what each preset needs here ----

async function showPresetInfo() {
  corpus.refresh();  // the corpus's split depends on the preset's context, however the preset was set
  const name = $("preset").value;
  const config = configFromPresets(presets, name);
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

/** Presets that fit on no backend here are disabled, with the reason in their label. */
async function markPresetsThatCannotFit() {
  const disabled = [];
  for (const option of $("preset").options) {
    const reasons = [];
    for (const backend of support.gpu.ok ? ["wasm", "webgpu"] : ["wasm"]) {
      const need = await presetNeeds(option.value, backend).catch((e) => ({ fits: false, reason: e.message }));
      if (need.fits) { reasons.length = 0; break; }
      reasons.push(`${backendName(backend)}: ${need.reason}`);
    }
    if (reasons.length) {
      option.disabled = true;
      option.title = reasons.join("; ");
      option.textContent += " (too big for this browser)";
      disabled.push(`${option.value} (${reasons.join("; ")})`);
    }
  }
  $("preset-limits").textContent = disabled.length ? `Disabled here: ${disabled.join("; ")}.` : "";
}

// ---- wiring ----

$("steps").value = presets.presets[$("preset").value].steps;
$("preset").addEventListener("change", () => {
  $("steps").value = presets.presets[$("preset").value].steps;
  $("eta").textContent = "";
  showPresetInfo();
});
$("backend").addEventListener("change", () => {
  try { $("backend-choice").textContent = chosenBackend().why; } catch (e) { $("backend-choice").textContent = e.message; }
});
$("train-form").addEventListener("submit", onTrain);
$("stop").addEventListener("click", onStop);
$("measure").addEventListener("click", onMeasure);
$("sample-form").addEventListener("submit", onSample);
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
