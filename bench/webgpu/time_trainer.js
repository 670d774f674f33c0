// One preset's training step timed as the benches report it, on any host's device: Node + Dawn
// (bench.mjs) or a browser's WebGPU in a module worker (browser_bench_worker.js), so that the two
// figures come from the same loop.
import { Trainer } from "../../webgpu/trainer.js";
import { raiseClocks, runSteps, median } from "./replay.mjs";
import { StepStream, burst, BURST_MS, STEPS_IN_FLIGHT } from "../../site/static/js/step_stream.js";
import { yieldToMessages } from "../../site/static/js/yield_to_messages.js";

/**
 * Builds a trainer for `config` (the named preset's), runs `warmup` steps, raises the clocks, then
 * times `steps` in `blocks` equal blocks, each drained before the next. msPerStep is the mean of them
 * all, medianBlockMs the typical block's: a machine stalls now and then (one medium block at 2.9
 * ms/step among others at 1.1, docs/lab/2026-11-27-wgsl-step-dispatch-costs.md §29), and one mean over 200 steps carries it whole.
 * pageLoop: then also `blocks` rounds of that many steps in the page's own loop (timePageLoop).
 * trainerOptions: more of the Trainer's options ({lora}: a LoRA fine-tune's step, bench.mjs --lora).
 * -> the bench's entry for the preset (and the trainer, for a profile, when keep is set).
 */
export async function timeTrainer(device, ops, name, config, corpus, { steps, warmup, blocks = 1, clocksMs = 300, pageLoop = 0, keep = false,
  trainerOptions = {} }) {
  checkBlocks(steps, blocks);
  const t0 = performance.now();
  const trainer = new Trainer(device, config, { corpus, ...trainerOptions });
  const setupMs = performance.now() - t0; // pipelines, buffers, initial weights
  try {
    // warm-up first: a browser's createComputePipeline returns at once and its GPU process compiles while
    // the first steps wait, the GPU idle and its clocks falling (H200, Chromium: the first 50 timed steps
    // of medium at 4.1 ms, the rest at 0.89, docs/lab/2026-11-29-wgsl-trainer-in-chromium.md §43); then the clocks, then the timing
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
      lastLoss: values[values.length - 1], dispatchesPerStep: trainer.trainPlan.entries.length,
      ...(pageLoop ? await timePageLoop(trainer, pageLoop, blocks) : {}) };
    return keep ? { entry, trainer } : { entry };
  } finally {
    if (!keep) trainer.destroy();
  }
}

/**
 * The page's own training loop on `trainer` (site/static/js/step_stream.js, as worker.js runs it):
 * bursts of BURST_MS with STEPS_IN_FLIGHT.gpu steps queued and the worker's yield between bursts, `steps`
 * steps a round, then the queue drained. Each of `rounds` rounds runs once as the page trains (the
 * queue kept from one burst to the next) and once draining it after every burst, as the page did before
 * docs/lab/2026-11-29-decode-chain.md §46. -> {pageLoopMs, drainedEachBurstMs}: the median round of each, ms a step
 * (and each round's, as ...RoundsMs).
 */
async function timePageLoop(trainer, steps, rounds) {
  const engine = { trainStep: () => trainer.step(), get step() { return trainer.stepCount; } };
  const round = async (drainEachBurst) => {
    const stream = new StepStream(engine, STEPS_IN_FLIGHT.gpu, () => {});
    const first = trainer.stepCount, more = () => trainer.stepCount - first < steps;
    const start = performance.now();
    while (more()) {
      await burst(stream, BURST_MS, { more });
      if (drainEachBurst) await stream.drain();
      await yieldToMessages();
    }
    await stream.drain();
    return (performance.now() - start) / steps;
  };
  const kept = [], drained = [];
  for (let r = 0; r < rounds; r++) {
    kept.push(await round(false));
    drained.push(await round(true));
  }
  return { pageLoopMs: median(kept), pageLoopRoundsMs: kept, drainedEachBurstMs: median(drained), drainedEachBurstRoundsMs: drained };
}

/** Throws unless `blocks` divides `steps` into whole blocks (the benches' --blocks and --steps). */
export function checkBlocks(steps, blocks) {
  if (!(Number.isInteger(blocks) && blocks >= 1 && steps % blocks === 0)) throw new Error(`--blocks ${blocks}: a whole divisor of --steps ${steps}`);
}

/** The line a bench prints for an entry of timeTrainer. */
export function describeEntry(e) {
  return `${e.preset}: ${e.msPerStep.toFixed(2)} ms/step${e.blocks > 1 ? ` (median of ${e.blocks} blocks ${e.medianBlockMs.toFixed(3)})` : ""} ` +
    `(${e.dispatchesPerStep} dispatches), ${e.tokensPerSecond.toFixed(0)} tokens/s, loss ${e.firstLoss.toFixed(3)} -> ${e.lastLoss.toFixed(3)}` +
    (e.pageLoopMs ? `; the page's loop ${e.pageLoopMs.toFixed(3)} ms/step (draining each burst ${e.drainedEachBurstMs.toFixed(3)})` : "");
}
