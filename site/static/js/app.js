// The playground page: says what this browser supports, starts training in a module Worker
// (train_worker.js), shows every step's loss and the speed, and streams samples.
import { detectFeatures } from "./wasm_loader.js";
import { LossChart } from "./loss_chart.js";

const $ = (id) => document.getElementById(id);
const presetsUrl = new URL("../presets.json", import.meta.url);

function item(ok, text) {
  const li = document.createElement("li");
  li.className = ok ? "yes" : "no";
  li.textContent = text;
  return li;
}

async function webgpuSupport() {
  if (!navigator.gpu) return [false, "WebGPU: not available in this browser (no navigator.gpu)"];
  try {
    const adapter = await navigator.gpu.requestAdapter();
    if (!adapter) return [false, "WebGPU: navigator.gpu is there but it offers no adapter"];
    const info = adapter.info ?? {};
    const name = [info.vendor, info.architecture, info.description].filter(Boolean).join(" ") || "unnamed adapter";
    const software = adapter.isFallbackAdapter || /swiftshader|llvmpipe/i.test(name);
    return [true, `WebGPU: ${name}${software ? " (a software adapter: correct, not fast)" : ""}`];
  } catch (e) {
    return [false, `WebGPU: requesting an adapter failed (${e.message})`];
  }
}

async function showFeatures() {
  const f = await detectFeatures();
  const list = [
    item(f.simd, f.simd ? "WebAssembly SIMD" : "No WebAssembly SIMD: the slow scalar build will run"),
    item(f.relaxedSimd, f.relaxedSimd ? "WebAssembly relaxed SIMD (fused multiply-add)"
      : "No WebAssembly relaxed SIMD: the build without fused multiply-add will run"),
    item(f.threads, f.threads ? `WebAssembly threads: cross-origin isolated, ${f.cores} cores`
      : `No WebAssembly threads: ${f.threadsMissing}; training runs on one core`),
    item(f.memory64, f.memory64 ? "WebAssembly Memory64 (models over 4 GiB)" : "No WebAssembly Memory64: models are limited to 4 GiB"),
    item(...(await webgpuSupport())),
    item(!!navigator.storage?.getDirectory, navigator.storage?.getDirectory
      ? "Origin private file system (OPFS)" : "No origin private file system (OPFS)"),
  ];
  $("features").replaceChildren(...list);
}

function formatStatus(s) {
  const parts = [`step ${s.step}/${s.steps}`, `loss ${s.loss.toFixed(4)}`];
  if (s.valLoss !== null) parts.push(`validation ${s.valLoss.toFixed(4)}`);
  if (s.msPerStep) {
    parts.push(`${Math.round(s.tokensPerStep / (s.msPerStep / 1000)).toLocaleString("en")} tokens/s`);
    parts.push(`${s.msPerStep.toFixed(1)} ms/step`);
  }
  return parts.join(" · ");
}

async function main() {
  const presets = await (await fetch(presetsUrl)).json();
  const chart = new LossChart($("chart"));
  const worker = new Worker(new URL("./train_worker.js", import.meta.url), { type: "module" });
  let status = null;
  const recentMs = [];
  const setIdle = (idle) => {
    $("start").disabled = !idle;
    $("stop").disabled = idle;
    $("preset").disabled = !idle;
    $("steps").disabled = !idle;
  };
  const presetSteps = () => { $("steps").value = presets.presets[$("preset").value].steps; };
  presetSteps();
  $("preset").addEventListener("change", presetSteps);

  $("train-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const p = presets.presets[$("preset").value];
    const steps = Math.max(1, Math.floor(Number($("steps").value)));
    const config = { ...presets.model, nLayer: p.nLayer, nHead: p.nHead, dModel: p.dModel, ctx: p.ctx, batch: p.batch };
    const t = presets.training;
    status = { step: 0, steps, loss: NaN, valLoss: null, msPerStep: 0, tokensPerStep: p.batch * p.ctx };
    recentMs.length = 0;
    chart.reset(steps);
    setIdle(false);
    $("status").textContent = "Loading the WebAssembly build…";
    $("status").classList.remove("error");
    worker.postMessage({ type: "train", config, training: t, steps, evalEvery: t.evalEvery, evalWindows: t.evalWindows });
  });
  $("stop").addEventListener("click", () => worker.postMessage({ type: "stop" }));
  $("sample-form").addEventListener("submit", (e) => {
    e.preventDefault();
    $("sample-output").textContent = $("prompt").value;
    $("sample-button").disabled = true;
    worker.postMessage({ type: "sample", prompt: $("prompt").value, temperature: Number($("temperature").value),
      topK: Math.floor(Number($("top-k").value)), maxNewTokens: Math.floor(Number($("max-new").value)),
      seed: presets.sampling.seed });
  });

  worker.onmessage = ({ data: m }) => {
    if (m.type === "loaded") {
      $("build").textContent = `WebAssembly build: ${m.build} (${m.threads} thread${m.threads > 1 ? "s" : ""}), ` +
        `${m.paramCount.toLocaleString("en")} parameters. Why: ${m.reason}.`;
      $("sample-button").disabled = false;
    } else if (m.type === "step") {
      recentMs.push(m.ms);
      if (recentMs.length > 20) recentMs.shift();
      Object.assign(status, { step: m.step, loss: m.loss, msPerStep: recentMs.reduce((a, b) => a + b) / recentMs.length });
      chart.addTrain(m.step, m.loss);
      $("status").textContent = formatStatus(status);
    } else if (m.type === "eval") {
      status.valLoss = m.valLoss;
      chart.addVal(m.step, m.valLoss);
      $("status").textContent = formatStatus(status);
    } else if (m.type === "done") {
      setIdle(true);
      $("status").textContent = `${m.stopped ? "Stopped" : "Finished"}: ${formatStatus(status)}`;
    } else if (m.type === "text") {
      $("sample-output").textContent += m.text;
    } else if (m.type === "sampleDone") {
      $("sample-button").disabled = false;
    } else if (m.type === "error") {
      setIdle(true);
      $("sample-button").disabled = false;
      $("status").textContent = `Error: ${m.message}`;
      $("status").classList.add("error");
    }
  };
  worker.onerror = (e) => {
    setIdle(true);
    $("status").textContent = `Error: the training worker failed to start (${e.message || "see the console"})`;
    $("status").classList.add("error");
  };
}

showFeatures();
main();
