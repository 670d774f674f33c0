// Every matmul tile (and split-K count for the weight gradients) on the products of a training step,
// per preset, on a real GPU: the data behind chooseTile/chooseSplits.
//   node webgpu/bench/matmul_tiles.mjs [--presets tiny,small,...] [--square 1024,2048,4096] [--out FILE]
// Each product is timed as reps back-to-back dispatches in one pass (as in a step: each waits for
// the previous one), after a warm-up; µs per product.
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { nodeDevice } from "../node_gpu.js";
import { Ops } from "../ops.js";
import { Plan } from "../plan.js";
import { replay } from "./replay.mjs";
import { MATMUL_TILES, chooseTile, chooseSplits } from "../kernels/matmul.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const args = Object.fromEntries(process.argv.slice(2).map((a, i, all) => a.startsWith("--") ? [a.slice(2), all[i + 1]] : null).filter(Boolean));
const presets = JSON.parse(readFileSync(`${ROOT}site/static/presets.json`, "utf8"));
const names = (args.presets ?? "tiny,small,medium,large,xl,huge,massive").split(",").filter(Boolean);
const squares = (args.square ?? "").split(",").filter(Boolean).map(Number);
const { device } = await nodeDevice();
const ops = new Ops(device);
const S = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST;

/** The products of one training step: [variant, M, N, K, biasGrad, count per step]. */
function stepProducts({ nLayer: L, dModel: C, ctx: T, batch: B }, V) {
  const R = B * T;
  return [
    ["nt", R, C, C, false, 4 * L], ["nt", R, 4 * C, C, false, L], ["nt", R, C, 4 * C, false, L], ["nt", R, V, C, false, 1],
    ["nn", R, C, V, false, 1], ["nn", R, 4 * C, C, false, L], ["nn", R, C, 4 * C, false, L], ["nn", R, C, C, false, 4 * L],
    ["tn", V, C, R, false, 1], ["tn", C, 4 * C, R, true, L], ["tn", 4 * C, C, R, true, L], ["tn", C, C, R, true, 4 * L],
  ];
}

async function time(variant, M, N, K, biasGrad, tile, splits) {
  const len = M * N + (biasGrad ? M : 0);
  const buf = (n) => device.createBuffer({ size: 4 * Math.max(4, n), usage: S });
  const A = buf(M * K), B = buf(N * K), C = buf(len), partials = splits > 1 ? buf(splits * len) : null;
  const plan = new Plan(device, ops.pipelines, "tile bench");
  ops.matmul(plan, variant, { M, N, K, A, B, C, biasGrad, tile, splits, partials });
  plan.freeze();
  const run = (reps) => replay(device, plan, reps);
  await run(3);
  const one = Math.min(await run(1), await run(1));
  const reps = 30;
  const many = await run(reps);
  plan.destroy();
  for (const b of [A, B, C, partials]) if (b) b.destroy();
  return (1000 * (many - one)) / (reps - 1);
}

await time("nt", 2048, 2048, 2048, false, "64x64", 1); // raise the GPU's clocks before timing
const out = [];
for (const name of names) {
  const p = presets.presets[name];
  let chosenTotal = 0, bestTotal = 0;
  for (const [variant, M, N, K, biasGrad, count] of stepProducts(p, presets.model.vocabSize)) {
    const results = [];
    for (const tile of Object.keys(MATMUL_TILES)) {
      for (const splits of variant === "tn" ? [1, 2, 4, 8, 16] : [1]) {
        if (splits > 1 && K / splits < 64) continue;
        results.push({ tile, splits, us: await time(variant, M, N, K, biasGrad, tile, splits) });
      }
    }
    results.sort((a, b) => a.us - b.us);
    const tile = chooseTile(variant, M, N), splits = variant === "tn" ? chooseSplits(M, N, K, tile) : 1;
    const chosen = results.find((r) => r.tile === tile && r.splits === splits) ?? { us: await time(variant, M, N, K, biasGrad, tile, splits) };
    chosenTotal += count * chosen.us;
    bestTotal += count * results[0].us;
    out.push({ preset: name, variant, M, N, K, biasGrad, count, chosen: { tile, splits, us: chosen.us }, results });
    console.error(`${name} ${variant} ${M}x${N}x${K}${biasGrad ? "+bg" : ""} ×${count}: chosen ${tile}/${splits} ${chosen.us.toFixed(1)} us; best ` +
      results.slice(0, 3).map((r) => `${r.tile}/${r.splits} ${r.us.toFixed(1)}`).join(", "));
  }
  console.error(`${name}: matmuls per step ${(chosenTotal / 1000).toFixed(2)} ms as chosen, ${(bestTotal / 1000).toFixed(2)} ms with the best tile each`);
}
for (const n of squares) {
  for (const variant of ["nt", "nn", "tn"]) {
    const results = [];
    for (const tile of Object.keys(MATMUL_TILES)) results.push({ tile, us: await time(variant, n, n, n, false, tile, 1) });
    results.sort((a, b) => a.us - b.us);
    const tile = chooseTile(variant, n, n);
    out.push({ square: n, variant, chosen: tile, results });
    console.error(`square ${variant} ${n}: chosen ${tile} ${(2 * n ** 3 / results.find((r) => r.tile === tile).us / 1e6).toFixed(0)} GFLOP/s; ` +
      results.map((r) => `${r.tile} ${(2 * n ** 3 / r.us / 1e6).toFixed(0)}`).join(", "));
  }
}
if (args.out) writeFileSync(args.out, JSON.stringify(out) + "\n");
device.destroy();
