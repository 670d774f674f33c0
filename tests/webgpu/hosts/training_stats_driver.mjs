// Drives the WebGPU engine's measured steps (site/static/js/engines/webgpu_engine.js trainStep({stats}),
// webgpu/training_stats.js) under Node (npm `webgpu`, Dawn; SwiftShader in the tests) for
// tests/webgpu/test_webgpu_training_stats.py: `node training_stats_driver.mjs < jobs.json` runs a list of
// jobs on one device and prints one JSON array.
// A job: {config: {model, training}, seed, steps, every, probe (base64), base? (base64 state), lora?
//   ({rank, alpha, targets, seed}: a fine-tune of `base`), unmeasured? (also train a twin without measuring)}
// -> {losses, measured: [{step, names, sums, entropy, T}], unmeasuredLosses?, sameState?, seconds}
import { readFileSync } from "node:fs";
import { register } from "node:module";
import { fileURLToPath } from "node:url";
import { nodeDevice } from "../../../webgpu/node_gpu.js";
import { configFromPresets } from "../../../site/static/js/model_config.js";

// the engine imports the trainer by its served path: map it to webgpu/ (the same module as this file's)
register("./served_layout_hooks.mjs", import.meta.url);
const { createEngine } = await import("../../../site/static/js/engines/webgpu_engine.js");
const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const presets = JSON.parse(readFileSync(`${ROOT}site/static/presets.json`, "utf8"));
const corpus = new Uint8Array(readFileSync(`${ROOT}site/static/data/tinyshakespeare.txt`));
const fromB64 = (s) => new Uint8Array(Buffer.from(s, "base64"));

const { device } = await nodeDevice();
const fatals = [];

async function run(job, measure) {
  const config = configFromPresets(presets, "tiny", { model: job.config.model, training: job.config.training });
  const engine = await createEngine({ ...config, corpus, seed: job.seed, device, onFatal: (m) => fatals.push(m),
    state: job.base ? fromB64(job.base) : null, lora: job.lora ?? null });
  const probe = fromB64(job.probe), losses = [], measured = [];
  for (let step = 1; step <= job.steps; step++) {
    if (measure && step % job.every === 0) {
      const r = await engine.trainStep({ stats: { probe } });
      const s = await r.stats;
      losses.push(r.loss);
      measured.push({ step: engine.step, names: s.names, sums: Array.from(s.sums), entropy: Array.from(s.entropy), T: s.T });
    } else {
      losses.push((await engine.trainStep()).loss);
    }
  }
  const out = { losses: await Promise.all(losses), measured };
  out.state = job.lora ? await engine.exportLoRAState() : await engine.exportState();
  await engine.destroy();
  return out;
}

const jobs = JSON.parse(readFileSync(0, "utf8"));
const results = [];
for (const job of jobs) {
  const t0 = performance.now();
  const out = await run(job, true);
  if (job.unmeasured) {
    const twin = await run(job, false);
    out.unmeasuredLosses = twin.losses;
    out.sameState = twin.state.length === out.state.length && twin.state.every((b, i) => b === out.state[i]);
  }
  delete out.state;
  out.seconds = (performance.now() - t0) / 1000;
  results.push(out);
}
console.log(JSON.stringify({ results, fatals }));
device.destroy();
process.exit(0);
