// The trainer under Node (npm `webgpu`): echo '{"preset": "tiny", "overrides": {...}, "steps": 5}' | node train_node.mjs
// (and "deferWeightGrads": the Trainer's option). Prints {"adapter", "losses", "headDeferred"} as JSON. The same
// module the browser worker runs, unchanged.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { nodeDevice } from "../../webgpu/node_gpu.js";
import { Trainer } from "../../webgpu/trainer.js";
import { configFromPresets } from "../../site/static/js/model_config.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const job = JSON.parse(readFileSync(0, "utf8"));
const { device, info } = await nodeDevice();
const presets = JSON.parse(readFileSync(`${ROOT}site/static/presets.json`, "utf8"));
const config = configFromPresets(presets, job.preset, job.overrides ?? {});
const corpus = new Uint8Array(readFileSync(`${ROOT}site/static/data/tinyshakespeare.txt`));
const trainer = new Trainer(device, config, { corpus, seed: job.seed ?? config.training.seed, deferWeightGrads: job.deferWeightGrads });
const pending = [];
for (let i = 0; i < job.steps; i++) pending.push((await trainer.step()).loss);
const losses = await Promise.all(pending);
const { headDeferred } = trainer;
trainer.destroy();
console.log(JSON.stringify({ adapter: info.architecture || info.vendor, losses, headDeferred }));
device.destroy();
