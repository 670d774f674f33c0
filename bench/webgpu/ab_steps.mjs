// Two versions of the WGSL trainer in ONE process on one GPU, their steps interleaved, so that an
// A/B of a few percent is not lost in the drift between separate runs (the same code run twice
// in a row has differed by up to 25% at tiny and small: docs/lab/2026-11-26-wgsl-step-subgroups.md §22–23):
//   node bench/webgpu/ab_steps.mjs --b DIR [--a DIR] [--presets tiny,small] [--rounds 10] [--steps 50]
//                                  [--instances 1] [--warmup 1] [--clocks-ms 300] [--out FILE]
// DIR: a checkout's root (its webgpu/ and site/static/, e.g. from `git archive`); A defaults to this
// checkout. Per preset `instances` trainers a side are built from the same seed and corpus and stay
// resident; each round times `steps` steps of each, A then B (B first on odd rounds). Reports each
// side's median and fastest block in ms/step over all its instances (and, with several, each
// instance's fastest), B's median over A's, and the largest difference between the two sides' losses
// at the same step (0 where the change is bit-identical). The JSON also has each block's wall-clock
// span (ms since the epoch). --warmup: untimed blocks of each trainer before the rounds (default 1; the test on a
// software adapter, where nothing is timed, takes 0).
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { resolve } from "node:path";
import { nodeDevice } from "../../webgpu/node_gpu.js";
import { Ops } from "../../webgpu/ops.js";
import { subgroupWidthOf } from "../../webgpu/subgroups.js";
import { raiseClocks, runSteps, benchArgs, median } from "./replay.mjs";
import { range } from "../../webgpu/kernels/kernel.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const args = benchArgs();
if (!args.b) throw new Error("ab_steps: --b DIR (the other checkout's root) is required");
const presetNames = (args.presets ?? "tiny,small,medium").split(",");
const rounds = Number(args.rounds ?? 10), steps = Number(args.steps ?? 50), instances = Number(args.instances ?? 1);
const clocksMs = Number(args["clocks-ms"] ?? 300); // 0 on a software adapter, whose clocks mean nothing
const warmup = Number(args.warmup ?? 1);

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
  const losses = await runSteps(trainer, steps);
  return { ms: (performance.now() - t0) / steps, losses, span: [start, Date.now()] };
}

const out = { adapter: { vendor: info.vendor, architecture: info.architecture, description: info.description }, subgroupWidth, rounds, steps,
  instances, presets: [] };
console.error(`subgroup width ${subgroupWidth} on both sides`);
for (const name of presetNames) {
  // instances trainers a side, made A, B, A, B, ...: where a trainer's buffers land moves its speed
  // by up to ~2.5% (docs/lab/2026-11-27-wgsl-step-dispatch-costs.md §27), so both sides get each place in the order
  const trainers = { A: [], B: [] }, times = { A: [], B: [] }, spans = { A: [], B: [] }, perInstance = { A: [], B: [] };
  for (let i = 0; i < instances; i++) {
    for (const [key, s] of Object.entries(sides)) {
      trainers[key].push(new s.Trainer(device, s.configFromPresets(s.presets, name), { corpus, subgroupWidth }));
      perInstance[key].push([]);
    }
  }
  const dispatches = Object.fromEntries(Object.entries(trainers).map(([k, t]) => [k, t[0].trainPlan.entries.length]));
  for (let w = 0; w < warmup; w++) for (const t of [...trainers.A, ...trainers.B]) await block(t); // warm-up
  await raiseClocks(device, ops, clocksMs);
  let lossDiff = 0;
  for (let r = 0; r < rounds; r++) {
    // instance by instance, A then B on even rounds, B then A (and the instances backwards) on odd ones
    const order = range(instances).flatMap((i) => ["A", "B"].map((k) => [k, i]));
    if (r % 2) order.reverse();
    const got = { A: [], B: [] };
    for (const [k, i] of order) {
      const b = await block(trainers[k][i]);
      got[k][i] = b;
      times[k].push(b.ms);
      spans[k].push(b.span);
      perInstance[k][i].push(b.ms);
    }
    for (let i = 0; i < instances; i++) {
      got.A[i].losses.forEach((l, s) => { lossDiff = Math.max(lossDiff, Math.abs(l - got.B[i].losses[s])); });
    }
  }
  const fastest = (k) => perInstance[k].map((ms) => Math.min(...ms));
  const row = { preset: name, dispatches, msA: median(times.A), msB: median(times.B), fastestA: Math.min(...times.A),
    fastestB: Math.min(...times.B), ratioBoverA: median(times.B) / median(times.A), maxLossDiff: lossDiff, times, spans,
    instanceFastest: { A: fastest("A"), B: fastest("B") } };
  out.presets.push(row);
  const each = instances > 1 ? ` (instances' fastest: A ${fastest("A").map((x) => x.toFixed(3)).join(" ")}; B ${fastest("B").map((x) => x.toFixed(3)).join(" ")})` : "";
  console.error(`${name}: A ${row.msA.toFixed(3)} ms/step (fastest ${row.fastestA.toFixed(3)}, ${dispatches.A} dispatches), ` +
    `B ${row.msB.toFixed(3)} (fastest ${row.fastestB.toFixed(3)}, ${dispatches.B}), B/A ${row.ratioBoverA.toFixed(3)}, ` +
    `max loss difference ${lossDiff.toExponential(2)}${each}`);
  for (const t of [...trainers.A, ...trainers.B]) t.destroy();
}
const json = JSON.stringify(out, null, 1);
if (args.out) writeFileSync(args.out, json + "\n"); else console.log(json);
device.destroy();
