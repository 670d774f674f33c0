// One preset's training step timed as the benches report it, on any host's device: Node + Dawn
// (bench.mjs) or a browser's WebGPU in a module worker (browser_bench_worker.js), so that the two
// figures come from the same loop.
import { Trainer } from "../trainer.js";
import { raiseClocks, runSteps, median } from "./replay.mjs";

/**
 * Builds a trainer for `config` (the named preset's), runs `warmup` steps, raises the clocks, then
 * times `steps` in `blocks` equal blocks, each drained before the next. msPerStep is the mean of them
 * all, medianBlockMs the typical block's: a machine stalls now and then (one medium block at 2.9
 * ms/step among others at 1.1, docs/performance.md §29), and one mean over 200 steps carries it whole.
 * -> the bench's entry for the preset (and the trainer, for a profile, when keep is set).
 */
export async function timeTrainer(device, ops, name, config, corpus, { steps, warmup, blocks = 1, clocksMs = 300, keep = false }) {
  checkBlocks(steps, blocks);
  const t0 = performance.now();
  const trainer = new Trainer(device, config, { corpus });
  const setupMs = performance.now() - t0; // pipelines, buffers, initial weights
  try {
    // warm-up first: a browser's createComputePipeline returns at once and its GPU process compiles while
    // the first steps wait, the GPU idle and its clocks falling (H200, Chromium: the first 50 timed steps
    // of medium at 4.1 ms, the rest at 0.89, docs/performance.md §43); then the clocks, then the timing
    await runSteps(trainer, warmup);
    await raiseClocks(device, ops, clocksMs);
    const values = [], blockMs = [];
    for (let b = 0; b < blocks; b++) {
      const start = performance.now();
      values.push(...(await runSteps(trainer, steps / blocks)));
      blockMs.push((performance.now() - start) / (steps / blocks));
    }
    const ms = blockMs.reduce((a, b) => a + b) / blocks;
    const tokens = config.training.batch * config.model.ctx;
    const entry = { preset: name, params: trainer.P, batch: config.training.batch, ctx: config.model.ctx, msPerStep: ms,
      tokensPerSecond: tokens / (ms / 1000), blocks, blockMs, medianBlockMs: median(blockMs), setupMs, firstLoss: values[0],
      lastLoss: values[values.length - 1], dispatchesPerStep: trainer.trainPlan.entries.length };
    return keep ? { entry, trainer } : { entry };
  } finally {
    if (!keep) trainer.destroy();
  }
}

/** Throws unless `blocks` divides `steps` into whole blocks (the benches' --blocks and --steps). */
export function checkBlocks(steps, blocks) {
  if (!(Number.isInteger(blocks) && blocks >= 1 && steps % blocks === 0)) throw new Error(`--blocks ${blocks}: a whole divisor of --steps ${steps}`);
}

/** The line a bench prints for an entry of timeTrainer. */
export function describeEntry(e) {
  return `${e.preset}: ${e.msPerStep.toFixed(2)} ms/step${e.blocks > 1 ? ` (median of ${e.blocks} blocks ${e.medianBlockMs.toFixed(3)})` : ""} ` +
    `(${e.dispatchesPerStep} dispatches), ${e.tokensPerSecond.toFixed(0)} tokens/s, loss ${e.firstLoss.toFixed(3)} -> ${e.lastLoss.toFixed(3)}`;
}
