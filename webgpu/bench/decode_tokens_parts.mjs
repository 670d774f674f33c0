// What a one-workgroup decode batch (decode_tokens.js) spends its time on, under Node (npm `webgpu`, Dawn):
// the window's rebuild of R rows alone (a batch of no steps), and a batch of 16 steps in the steady state,
// where the window restarts once every 16 tokens (tiny's ctx of 32). Both variants of the kernel: each
// step computing its token's row of the next window too, whose restart copies rows ("next"), and the
// restart rebuilding 16 rows ("rebuild"). Then the batch's token (the default variant) with 1-4 layers
// (the slope is what a layer costs a step; the intercept the embedding, ln_f, the head and the
// sampler) and with widths of 16-64 (heads of 16 wide). Each figure is replayMicroseconds' (replays in
// one submit less one alone): no host round trip in it. A batch counts only where all 16 of its
// tokens were certain (batchOf16 says why).
//   node webgpu/bench/decode_tokens_parts.mjs [preset, default tiny]
// Prints one JSON line: µs of each rebuild, of the batch of 16 and of a token (the batch ÷ 16) per
// variant, of a step less the restart's rebuild (the rebuilding variant), and of a token by layers
// and by width (null: no uniform tried gave 16 certain tokens).
import { readFileSync } from "node:fs";
import { nodeDevice } from "../node_gpu.js";
import { Plan } from "../plan.js";
import { Trainer, TOKENS_BATCH } from "../trainer.js";
import { sampleRecordFloats } from "../kernels/sample_decode.js";
import { configFromPresets } from "../../site/static/js/model_config.js";
import { sampleDecodeValues } from "../ops.js";
import { raiseClocks, replay, replayMicroseconds } from "./replay.mjs";

const { device, info } = await nodeDevice();
const presets = JSON.parse(readFileSync(new URL("../../site/static/presets.json", import.meta.url), "utf8"));
const name = process.argv[2] ?? "tiny";
const config = configFromPresets(presets, name), ctx = config.model.ctx;

/** A trainer of `model` and its one-dispatch plans, keyed by variant ("next" only where it fits). */
function planned(model) {
  const trainer = new Trainer(device, configFromPresets(presets, name, { model }), { decodeInOneWorkgroup: true });
  trainer._buildGeneration();
  const slot = trainer.tokenSlots[0];
  const planOf = (next) => {
    const plan = new Plan(device, trainer.ops.pipelines, `decode tokens parts ${next}`);
    trainer.ops.decodeTokens(plan, { model: trainer.cfg, values: { ...trainer._decodeTokensValues(), ...sampleDecodeValues(0.8, 40) },
      window: trainer.genWindow, params: trainer.params, kv: trainer.gen.kv, draws: slot.draws, samples: slot.samples, rows: trainer.genRows, next });
    plan.freeze();
    return plan;
  };
  return { trainer, plans: { rebuild: planOf(false), ...(trainer.decodeNextWindow ? { next: planOf(true) } : {}) } };
}
const main = planned({});
const layers = [1, 2, 3, 4].map((nLayer) => planned({ nLayer }));
const widths = [16, 32, 48, 64].map((dModel) => planned({ dModel, nHead: dModel / 16 }));
const trainer = main.trainer, variants = main.plans;
const setWindow = (t, length) => device.queue.writeBuffer(t.genWindow, 0, Uint32Array.from({ length: 1 + ctx }, (_, i) => (i === 0 ? length : 10 + (i % 50))));

/**
 * The steps of one more batch of `plan` whose token was certain. A step that is not certain ends the
 * batch and leaves the window as it was, so every replay after it would time that one step, its
 * record the first and uncertain: a figure counts only where all 16 were certain.
 */
async function certainSteps(t, plan) {
  const { samples, read } = t.tokenSlots[0], bytes = 16 * 4 * sampleRecordFloats(t.cfg.vocabSize);
  await replay(device, plan, 1);
  const enc = device.createCommandEncoder();
  enc.copyBufferToBuffer(samples, 0, read, 0, bytes);
  device.queue.submit([enc.finish()]);
  await read.mapAsync(GPUMapMode.READ);
  const first = t._readSamples(read, 16).findIndex((r) => !r.certain);
  return first === -1 ? 16 : first;
}

/**
 * µs of a batch of 16 steps of `plan` in the steady state, from a rebuilt window of ctx/2 + 1 (whose
 * next window's rows are the steps' to make), with the first of a few uniforms for every step whose
 * 16 tokens are all certain; null where none was.
 */
async function batchOf16(t, plan) {
  for (const u of [0.5, 0.25, 0.75, 0.375, 0.625]) {
    device.queue.writeBuffer(t.tokenSlots[0].draws, 0, new Float32Array(TOKENS_BATCH).fill(u));
    setWindow(t, Math.floor(ctx / 2) + 1);
    plan.update(0, { rebuild: 1, steps: 0 });
    await replay(device, plan, 1);
    plan.update(0, { rebuild: 0, steps: 16 });
    const us = await replayMicroseconds(device, plan, 40);
    if ((await certainSteps(t, plan)) === 16) return us;
  }
  return null;
}

const tokenUs = (us) => us && +(us / 16).toFixed(2);

await raiseClocks(device, trainer.ops);
const out = { adapter: [info.vendor, info.architecture, info.description].filter(Boolean).join(" "), preset: name, rebuildUs: {} };
const plan = variants.rebuild;
for (const rows of [1, 8, Math.floor(ctx / 2), ctx - 1]) {
  setWindow(trainer, rows + 1);
  plan.update(0, { rebuild: 1, steps: 0 });
  out.rebuildUs[rows] = +(await replayMicroseconds(device, plan, 40)).toFixed(1);
}
for (const [variant, p] of Object.entries(variants)) {
  const us = await batchOf16(trainer, p);
  out[variant] = { batchOf16Us: us && +us.toFixed(1), tokenUs: us && +(us / 16).toFixed(2) };
}
out.stepUs = out.rebuild.batchOf16Us && +((out.rebuild.batchOf16Us - out.rebuildUs[Math.floor(ctx / 2)] * (16 / (ctx - Math.floor(ctx / 2)))) / 16).toFixed(1);
out.tokenUsByLayers = {};
for (const { trainer: t, plans } of layers) {
  out.tokenUsByLayers[t.cfg.nLayer] = tokenUs(await batchOf16(t, plans.next ?? plans.rebuild));
}
out.tokenUsByWidth = {};
for (const { trainer: t, plans } of widths) {
  out.tokenUsByWidth[t.cfg.dModel] = tokenUs(await batchOf16(t, plans.next ?? plans.rebuild));
}
console.log(JSON.stringify(out));
for (const { trainer: t, plans } of [main, ...layers, ...widths]) {
  for (const p of Object.values(plans)) p.destroy();
  t.destroy();
}
device.destroy();
process.exit(0);
