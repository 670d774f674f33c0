// The WGSL trainer timed in a browser's WebGPU, inside a module worker as the site trains: the adapter
// and device asked for as the site's WebGPU engine asks (site/static/js/engines/webgpu_engine.js), each
// preset timed by the loop bench.mjs times it with under Node (time_trainer.js). Posts {line} as each
// preset ends, then {result} or {error}.
import { Ops } from "../../webgpu/ops.js";
import { trainerLimits } from "../../webgpu/trainer.js";
import { requestDeviceWithSubgroups } from "../../webgpu/subgroups.js";
import { isSoftwareAdapter } from "../../webgpu/software_adapter.js";
import { configFromPresets } from "../../site/static/js/model_config.js";
import { timeTrainer, describeEntry } from "./time_trainer.js";
import { timeDecode } from "./time_decode.js";

self.onmessage = async ({ data }) => {
  try {
    self.postMessage({ result: await bench(data) });
  } catch (err) {
    self.postMessage({ error: String(err && err.stack ? err.stack : err) });
  }
};

/** "Chromium 150.0.7871.100": the full version, which the reduced user-agent string no longer carries. */
async function browserVersion() {
  const brands = navigator.userAgentData ? (await navigator.userAgentData.getHighEntropyValues(["fullVersionList"])).fullVersionList : [];
  const named = brands.find((b) => !/not.a.brand/i.test(b.brand));
  return named ? `${named.brand} ${named.version}` : navigator.userAgent;
}

/**
 * job: the page's query, as strings: presets (comma-separated) with steps, warmup, blocks, clocksMs, pageLoop; decodePresets
 * (comma-separated) with decode (time_decode.js's job, as JSON). Neither: the adapter only.
 */
async function bench(job) {
  if (!navigator.gpu) throw new Error("navigator.gpu is missing: this browser offers no WebGPU to a worker");
  const adapter = await navigator.gpu.requestAdapter({ powerPreference: "high-performance" });
  if (!adapter) throw new Error("WebGPU offers no adapter (blocked, or no usable GPU driver)");
  const info = adapter.info;
  // a software adapter's clocks mean nothing, and the busy work that raises a GPU's takes minutes there
  // (browser_bench.py --allow-software runs it without asking for the adapter first)
  const software = isSoftwareAdapter(info);
  const out = { adapter: { vendor: info.vendor, architecture: info.architecture, device: info.device, description: info.description,
    isFallbackAdapter: info.isFallbackAdapter ?? null }, browser: await browserVersion(), presets: [] };
  const names = (job.presets ?? "").split(",").filter(Boolean), decodeNames = (job.decodePresets ?? "").split(",").filter(Boolean);
  if (!names.length && !decodeNames.length) return out;
  const { device, subgroups } = await requestDeviceWithSubgroups(adapter, { label: "TinyGPT bench", requiredLimits: trainerLimits(adapter) });
  out.subgroups = subgroups;
  const presets = await (await fetch("/site/static/presets.json")).json();
  const corpus = new Uint8Array(await (await fetch("/site/static/data/tinyshakespeare.txt")).arrayBuffer());
  const ops = new Ops(device);
  for (const name of names) {
    const { entry } = await timeTrainer(device, ops, name, configFromPresets(presets, name), corpus,
      { steps: Number(job.steps), warmup: Number(job.warmup), blocks: Number(job.blocks ?? 1), clocksMs: software ? 0 : Number(job.clocksMs ?? 300),
        pageLoop: Number(job.pageLoop ?? 0) });
    out.presets.push(entry);
    self.postMessage({ line: describeEntry(entry) });
  }
  out.decode = [];
  const decodeJob = decodeNames.length ? JSON.parse(job.decode) : null;
  for (const name of decodeNames) {
    const timed = await timeDecode(device, configFromPresets(presets, name), decodeJob), { kv, recompute } = timed;
    out.decode.push({ preset: name, ...timed });
    const rate = (mode) => (decodeJob.newTokens / (mode.ms / 1000)).toFixed(0);
    const behind = Object.entries(timed.variants).map(([variant, mode]) => `, ${variant} ${rate(mode)}`).join("");
    self.postMessage({ line: `${name} decode: KV cache ${rate(kv)} tokens/s, recompute ${rate(recompute)} (${(recompute.ms / kv.ms).toFixed(1)}×)${behind}` });
  }
  device.destroy();
  return out;
}
