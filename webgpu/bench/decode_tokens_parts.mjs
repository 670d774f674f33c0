// What a one-workgroup decode batch (decode_tokens.js) spends its time on, under Node (npm `webgpu`, Dawn):
// the window's rebuild of R rows alone (a batch of no steps), and a batch of 16 steps in the steady state,
// where the window restarts once every 16 tokens (tiny's ctx of 32) and so includes one rebuild of 16 rows.
// Each figure is replayMicroseconds' (replays in one submit less one alone): no host round trip in it.
//   node webgpu/bench/decode_tokens_parts.mjs [preset, default tiny]
// Prints one JSON line: µs of each rebuild, of the batch of 16, and of a step less the restart's rebuild.
import { readFileSync } from "node:fs";
import { nodeDevice } from "../node_gpu.js";
import { Plan } from "../plan.js";
import { Trainer, TOKENS_BATCH } from "../trainer.js";
import { configFromPresets } from "../../site/static/js/model_config.js";
import { sampleDecodeValues } from "../ops.js";
import { raiseClocks, replayMicroseconds } from "./replay.mjs";

const { device, info } = await nodeDevice();
const presets = JSON.parse(readFileSync(new URL("../../site/static/presets.json", import.meta.url), "utf8"));
const name = process.argv[2] ?? "tiny";
const config = configFromPresets(presets, name), ctx = config.model.ctx;
const trainer = new Trainer(device, config, { decodeInOneWorkgroup: true });
trainer._buildGeneration();
const plan = new Plan(device, trainer.ops.pipelines, "decode tokens parts");
const slot = trainer.tokenSlots[0];
trainer.ops.decodeTokens(plan, { model: trainer.cfg, values: { ...trainer._decodeTokensValues(), ...sampleDecodeValues(0.8, 40) },
  window: trainer.genWindow, params: trainer.params, kv: trainer.gen.kv, draws: slot.draws, samples: slot.samples, rows: trainer.genRows });
plan.freeze();
// a mid-range uniform for every step: its token is certain but for rare ties, so that no batch stops early
device.queue.writeBuffer(slot.draws, 0, new Float32Array(TOKENS_BATCH).fill(0.5));
const setWindow = (length) => device.queue.writeBuffer(trainer.genWindow, 0, Uint32Array.from({ length: 1 + ctx }, (_, i) => (i === 0 ? length : 10 + (i % 50))));

await raiseClocks(device, trainer.ops);
const out = { adapter: [info.vendor, info.architecture, info.description].filter(Boolean).join(" "), preset: name, rebuildUs: {} };
for (const rows of [1, 8, Math.floor(ctx / 2), ctx - 1]) {
  setWindow(rows + 1);
  plan.update(0, { rebuild: 1, steps: 0 });
  out.rebuildUs[rows] = +(await replayMicroseconds(device, plan, 40)).toFixed(1);
}
setWindow(Math.floor(ctx / 2) + 1);
plan.update(0, { rebuild: 0, steps: 16 });
out.batchOf16Us = +(await replayMicroseconds(device, plan, 40)).toFixed(1);
out.stepUs = +((out.batchOf16Us - out.rebuildUs[Math.floor(ctx / 2)] * (16 / (ctx - Math.floor(ctx / 2)))) / 16).toFixed(1);
console.log(JSON.stringify(out));
plan.destroy();
trainer.destroy();
device.destroy();
process.exit(0);
