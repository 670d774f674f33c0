// Two versions of the WGSL trainer in ONE process on one GPU, their steps interleaved, so that an
// A/B of a few percent is not lost in the drift between separate runs (the same code run twice
// in a row has differed by up to 25% at tiny and small: docs/performance.md §22–23):
//   node webgpu/bench/ab_steps.mjs --b DIR [--a DIR] [--presets tiny,small] [--rounds 10] [--steps 50]
//                                  [--clocks-ms 300] [--out FILE]
// DIR: a checkout's root (its webgpu/ and site/static/, e.g. from `git archive`); A defaults to this
// checkout. Per preset both trainers are built from the same seed and corpus and stay resident; each
// round times `steps` steps of A then of B (B first on odd rounds). Reports each side's median and
// fastest block in ms/step, B's median over A's, and the largest difference between the two sides'
// losses at the same step (0 where the change is bit-identical). The JSON also has each block's
// wall-clock span (ms since the epoch).
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { resolve } from "node:path";
import { nodeDevice } from "../node_gpu.js";
import { Ops } from "../ops.js";
import { subgroupWidthOf } from "../subgroups.js";
import { raiseClocks, benchArgs, median } from "./replay.mjs";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const args = benchArgs();
if (!args.b) throw new Error("ab_steps: --b DIR (the other checkout's root) is required");
const presetNames = (args.presets ?? "tiny,small,medium").split(",");
const rounds = Number(args.rounds ?? 10), steps = Number(args.steps ?? 50);
const clocksMs = Number(args["clocks-ms"] ?? 300); // 0 on a software adapter, whose clocks mean nothing

async function side(dir) {
  const root = resolve(dir);
  return {
    Trainer: (await import(`${root}/webgpu/trainer.js`)).Trainer,
    configFromPresets: (await import(`${root}/site/static/js/model_config.js`)).configFromPresets,
    presets: JSON.parse(readFileSync(`${root}/site/static/presets.json`, "utf8")),
  };
}
const sides = { A: await side(args.a ?? ROOT), B: await side(args.b) };
const { device, info } = await nodeDevice();
const ops = new Ops(device);
// The subgroup probe's result lives in the module instance that ran it (this checkout's): each
// side's own subgroups.js would report none, so both are given the width explicitly.
const subgroupWidth = subgroupWidthOf(device);
const corpus = new Uint8Array(readFileSync(`${ROOT}site/static/data/tinyshakespeare.txt`));

/** ms/step over `steps` steps, their losses, and the block's wall-clock span (to match with e.g. nvidia-smi's log). */
async function block(trainer) {
  const t0 = performance.now(), start = Date.now();
  const pending = [];
  for (let i = 0; i < steps; i++) pending.push((await trainer.step()).loss);
  const losses = await Promise.all(pending);
  return { ms: (performance.now() - t0) / steps, losses, span: [start, Date.now()] };
}

const out = { adapter: { vendor: info.vendor, architecture: info.architecture, description: info.description }, subgroupWidth, rounds, steps, presets: [] };
console.error(`subgroup width ${subgroupWidth} on both sides`);
for (const name of presetNames) {
  const trainers = {}, times = { A: [], B: [] }, spans = { A: [], B: [] };
  for (const [key, s] of Object.entries(sides)) trainers[key] = new s.Trainer(device, s.configFromPresets(s.presets, name), { corpus, subgroupWidth });
  const dispatches = Object.fromEntries(Object.entries(trainers).map(([k, t]) => [k, t.trainPlan.entries.length]));
  for (const t of Object.values(trainers)) await block(t); // warm-up
  await raiseClocks(device, ops, clocksMs);
  let lossDiff = 0;
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 ? ["B", "A"] : ["A", "B"], got = {};
    for (const k of order) {
      got[k] = await block(trainers[k]);
      times[k].push(got[k].ms);
      spans[k].push(got[k].span);
    }
    got.A.losses.forEach((l, i) => { lossDiff = Math.max(lossDiff, Math.abs(l - got.B.losses[i])); });
  }
  const row = { preset: name, dispatches, msA: median(times.A), msB: median(times.B), fastestA: Math.min(...times.A),
    fastestB: Math.min(...times.B), ratioBoverA: median(times.B) / median(times.A), maxLossDiff: lossDiff, times, spans };
  out.presets.push(row);
  console.error(`${name}: A ${row.msA.toFixed(3)} ms/step (fastest ${row.fastestA.toFixed(3)}, ${dispatches.A} dispatches), ` +
    `B ${row.msB.toFixed(3)} (fastest ${row.fastestB.toFixed(3)}, ${dispatches.B}), B/A ${row.ratioBoverA.toFixed(3)}, ` +
    `max loss difference ${lossDiff.toExponential(2)}`);
  for (const t of Object.values(trainers)) t.destroy();
}
const json = JSON.stringify(out, null, 1);
if (args.out) writeFileSync(args.out, json + "\n"); else console.log(json);
device.destroy();
