// What the training view costs the WebAssembly training loop (issue 60): the page's engine
// (site/static/js/engines/wasm_engine.js, in the build and thread count its loader picks here, as the
// page does) trains a preset in blocks of K steps (K = --every), each block once with the view on (its
// last step measured: tg_train_step_stats, tg_attention_entropy of the probe, the sums copied out and
// summarised as the worker does) and once off, the two in alternating order, block after block. Pairing
// short blocks keeps a busy box's slow swings out of the comparison; each figure is a median over the
// blocks: steps/s on and off, the cost (1 - on / off), and a measured and an unmeasured step's ms.
// usage: node --experimental-wasm-relaxed-simd bench/wasm/stats_cost.mjs [--presets tiny,small]
//        [--blocks 40] [--every 10]
// Prints one JSON object: {description (the build, its threads and why), every, blocks, presets: {name: {off, on,
// cost, measured_ms, unmeasured_ms}}}.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { createEngine } from "../../site/static/js/engines/wasm_engine.js";
import { configFromPresets } from "../../site/static/js/model_config.js";
import { summarise } from "../../site/static/js/training_stats.js";

const { values: args } = parseArgs({ options: { presets: { type: "string", default: "tiny,small" },
  blocks: { type: "string", default: "40" }, every: { type: "string", default: "10" } } });
const ROOT = new URL("../../", import.meta.url);
const presets = JSON.parse(readFileSync(new URL("site/static/presets.json", ROOT), "utf8"));
const corpus = new Uint8Array(readFileSync(new URL("site/static/data/tinyshakespeare.txt", ROOT)));
const blocks = Number(args.blocks), every = Number(args.every);
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

/** One block of `every` steps, its last one measured when `on`: {ms, lastMs}. */
async function block(engine, nHead, on) {
  const t0 = performance.now();
  let lastStart = t0;
  for (let i = 0; i < every; i++) {
    lastStart = performance.now();
    if (on && i === every - 1) {
      const r = await engine.trainStep({ stats: true });
      await r.loss;
      const m = await r.stats;
      summarise(m.names, m.sums, { entropy: m.entropy, nHead, T: m.T });
    } else {
      await (await engine.trainStep()).loss;
    }
  }
  const end = performance.now();
  return { ms: end - t0, lastMs: end - lastStart };
}

const out = { every, blocks, presets: {} };
for (const name of args.presets.split(",")) {
  const config = configFromPresets(presets, name);
  const engine = await createEngine({ ...config, corpus, seed: config.training.seed });
  out.description = engine.description;
  const nHead = config.model.nHead;
  await block(engine, nHead, true);  // warm-up: the measuring buffers are made, caches warm
  const on = [], off = [], measured = [], unmeasured = [];
  for (let b = 0; b < blocks; b++) {
    for (const view of b % 2 ? [true, false] : [false, true]) {
      const t = await block(engine, nHead, view);
      (view ? on : off).push(t.ms);
      (view ? measured : unmeasured).push(t.lastMs);
    }
  }
  engine.destroy();
  const onMs = median(on), offMs = median(off);
  out.presets[name] = { off: +(every / (offMs / 1000)).toFixed(1), on: +(every / (onMs / 1000)).toFixed(1),
    cost: +(1 - offMs / onMs).toFixed(4), measured_ms: +median(measured).toFixed(2), unmeasured_ms: +median(unmeasured).toFixed(2) };
}
process.stdout.write(JSON.stringify(out) + "\n");
process.exit(0);  // pthread workers keep Node's event loop alive
