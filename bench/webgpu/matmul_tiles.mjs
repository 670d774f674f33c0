// Every matmul tile (and split-K count for the weight gradients) on the products of a training step,
// per preset, on a real GPU: the data behind chooseTile/chooseSplits.
//   node bench/webgpu/matmul_tiles.mjs [--presets tiny,small,...] [--tiles 64x64w,...] [--square 1024,2048,4096] [--out FILE]
// --tiles: only these tiles (default every one); the trainer's own choice is timed in any case.
// --clocks-ms: how long the GPU is kept busy before each preset's timings (default 300; 0 on a
// software adapter, where that busy work takes minutes and the timings mean nothing anyway).
// --reps: back-to-back products per timing (replayMicroseconds' default, 30). --floor-reps: the floor's
// (default --reps). The test on a software adapter takes 10 for the floor (with 2, host noise of a
// millisecond made its time negative) and 4 for the products, 50 ms and more each there. --warmup:
// replays before each timing (replayMicroseconds' default, 3; the test's software adapter has no clocks
// or caches to warm, and takes 0).
// Each product is timed as reps back-to-back dispatches in one pass (as in a step: each waits for
// the previous one), after a warm-up; µs per product. A preset's pipelines are all compiled before
// its timings, right after the GPU's clocks are raised (replay.mjs raiseClocks): compiling idles the
// GPU, and products timed after an idle spell ran up to 3× slower.
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { nodeDevice } from "../../webgpu/node_gpu.js";
import { Ops, SplitSums } from "../../webgpu/ops.js";
import { Plan } from "../../webgpu/plan.js";
import { raiseClocks, replayMicroseconds, benchArgs } from "./replay.mjs";
import { MATMUL_FORMS, MATMUL_TILES, chooseTile, chooseSplits } from "../../webgpu/kernels/matmul.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const args = benchArgs();
const presets = JSON.parse(readFileSync(`${ROOT}site/static/presets.json`, "utf8"));
const names = (args.presets ?? "tiny,small,medium,large,xl,huge,massive").split(",").filter(Boolean);
const squares = (args.square ?? "").split(",").filter(Boolean).map(Number);
const clocksMs = Number(args["clocks-ms"] ?? 300);
const reps = args.reps === undefined ? undefined : Number(args.reps); // undefined: replayMicroseconds' default
const floorReps = args["floor-reps"] === undefined ? reps : Number(args["floor-reps"]);
const warmup = args.warmup === undefined ? undefined : Number(args.warmup); // undefined: replayMicroseconds' default
const tiles = args.tiles ? args.tiles.split(",") : Object.keys(MATMUL_TILES);
for (const t of tiles) if (!MATMUL_TILES[t]) throw new Error(`unknown tile ${t}`);
const { device } = await nodeDevice();
const ops = new Ops(device);
const S = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST;

/** The products of one training step: [form, M, N, K, biasGrad, count per step]. */
const FWD = "forward", DX = "backward_input", DW = "backward_weight";
function stepProducts({ nLayer: L, dModel: C, ctx: T, batch: B }, V) {
  const R = B * T;
  return [
    [FWD, R, C, C, false, 4 * L], [FWD, R, 4 * C, C, false, L], [FWD, R, C, 4 * C, false, L], [FWD, R, V, C, false, 1],
    [DX, R, C, V, false, 1], [DX, R, 4 * C, C, false, L], [DX, R, C, 4 * C, false, L], [DX, R, C, C, false, 4 * L],
    [DW, V, C, R, false, 1], [DW, C, 4 * C, R, true, L], [DW, 4 * C, C, R, true, L], [DW, C, C, R, true, 4 * L],
  ];
}

// A forward or input-gradient product split along K is timed without its final sum: the trainer
// leaves that to the LayerNorm which reads the product (layernormForward's and layernormBackwardInput's
// sumIn), a dispatch it has anyway. A weight gradient's time includes its final sum.
async function time(form, M, N, K, biasGrad, tile, splits, timingReps = reps) {
  const len = M * N + (biasGrad ? M : 0);
  const buf = (n) => device.createBuffer({ size: 4 * Math.max(4, n), usage: S });
  const A = buf(M * K), B = buf(N * K), C = buf(len), partials = splits > 1 ? buf(splits * len) : null;
  const plan = new Plan(device, ops.pipelines, "tile bench");
  ops.matmul(plan, form, { M, N, K, A, B, C, biasGrad, tile, splits, partials, sums: form === DW ? null : new SplitSums() });
  plan.freeze();
  const us = await replayMicroseconds(device, plan, timingReps, warmup);
  plan.destroy();
  for (const b of [A, B, C, partials]) if (b) b.destroy();
  return us;
}

/** Compiles the pipelines of these products ([form, M, N, K, biasGrad, tile, splits]) without running them. */
function compile(products) {
  // Ops checks that split-K slabs fit their buffer, so the stand-in for those is as big as the biggest
  const slabBytes = Math.max(16, ...products.map(([, M, N, , biasGrad, , splits]) => 4 * splits * (M * N + (biasGrad ? M : 0))));
  const stand = device.createBuffer({ size: 16, usage: S }), slabs = device.createBuffer({ size: slabBytes, usage: S });
  const plan = new Plan(device, ops.pipelines, "compile");
  for (const [form, M, N, K, biasGrad, tile, splits] of products) {
    ops.matmul(plan, form, { M, N, K, A: stand, B: stand, C: stand, biasGrad, tile, splits, partials: splits > 1 ? slabs : null });
  }
  stand.destroy();
  slabs.destroy();
}

/**
 * Every tile (and split count) worth timing for a product: weight gradients split K in 1–16, the
 * other forms with K ≥ 128 in 1–4, slabs unsummed (a LayerNorm sums those of fc_out's forward and of
 * fc_in's and q/k/v's input gradients; o_proj's forward split so did not pay: docs/lab/2026-11-25-wgsl-step-vs-pytorch.md §17).
 */
function candidates(form, K) {
  const splits = form === DW ? [1, 2, 4, 8, 16] : K >= 128 ? [1, 2, 3, 4] : [1];
  return tiles.flatMap((tile) => splits.filter((n) => n === 1 || K / n >= 64).map((n) => ({ tile, splits: n })));
}

/** The tile and split count the trainer takes for a product. */
function chosen(form, M, N, K) {
  const tile = chooseTile(form, M, N, K, ops.workgroupLimit);
  return { tile, splits: form === DW ? chooseSplits(M, N, K, tile) : 1 };
}

const out = [];
// the floor: a 4×4×4 product (one workgroup, one K-step), what a dependent dispatch costs with no work
compile([[FWD, 4, 4, 4, false, "32x32w-k32", 1]]);
await raiseClocks(device, ops, clocksMs);
out.push({ floor: true, form: FWD, M: 4, N: 4, K: 4, tile: "32x32w-k32", us: await time(FWD, 4, 4, 4, false, "32x32w-k32", 1, floorReps) });
console.error(`floor: a 4x4x4 product ${out[0].us.toFixed(1)} us`);
for (const name of names) {
  const p = presets.presets[name];
  let chosenTotal = 0, bestTotal = 0;
  const products = stepProducts(p, presets.model.vocabSize);
  compile(products.flatMap(([form, M, N, K, biasGrad]) => [...candidates(form, K), chosen(form, M, N, K)]
    .map(({ tile, splits }) => [form, M, N, K, biasGrad, tile, splits])));
  await raiseClocks(device, ops, clocksMs);
  for (const [form, M, N, K, biasGrad, count] of products) {
    const results = [];
    for (const { tile, splits } of candidates(form, K)) results.push({ tile, splits, us: await time(form, M, N, K, biasGrad, tile, splits) });
    results.sort((a, b) => a.us - b.us);
    const { tile, splits } = chosen(form, M, N, K);
    const mine = results.find((r) => r.tile === tile && r.splits === splits) ?? { us: await time(form, M, N, K, biasGrad, tile, splits) };
    chosenTotal += count * mine.us;
    bestTotal += count * results[0].us;
    out.push({ preset: name, form, M, N, K, biasGrad, count, chosen: { tile, splits, us: mine.us }, results });
    console.error(`${name} ${form} ${M}x${N}x${K}${biasGrad ? "+bg" : ""} ×${count}: chosen ${tile}/${splits} ${mine.us.toFixed(1)} us; best ` +
      results.slice(0, 3).map((r) => `${r.tile}/${r.splits} ${r.us.toFixed(1)}`).join(", "));
  }
  console.error(`${name}: matmuls per step ${(chosenTotal / 1000).toFixed(2)} ms as chosen, ${(bestTotal / 1000).toFixed(2)} ms with the best tile each`);
}
for (const n of squares) {
  compile(Object.keys(MATMUL_FORMS).flatMap((form) => tiles.map((tile) => [form, n, n, n, false, tile, 1])));
  await raiseClocks(device, ops, clocksMs);
  for (const form of Object.keys(MATMUL_FORMS)) {
    const results = [];
    for (const tile of tiles) results.push({ tile, us: await time(form, n, n, n, false, tile, 1) });
    results.sort((a, b) => a.us - b.us);
    const tile = chooseTile(form, n, n, n, ops.workgroupLimit);
    out.push({ square: n, form, chosen: tile, results });
    const mine = results.find((r) => r.tile === tile) ?? { us: await time(form, n, n, n, false, tile, 1) };
    console.error(`square ${form} ${n}: chosen ${tile} ${(2 * n ** 3 / mine.us / 1e6).toFixed(0)} TFLOP/s; ` +
      results.map((r) => `${r.tile} ${(2 * n ** 3 / r.us / 1e6).toFixed(0)}`).join(", "));
  }
}
if (args.out) writeFileSync(args.out, JSON.stringify(out) + "\n");
device.destroy();
