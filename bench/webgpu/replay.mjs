import { Plan } from "../../webgpu/plan.js";

/** A benchmark's `--name value` arguments, as {name: value}. */
export function benchArgs(argv = process.argv.slice(2)) {
  return Object.fromEntries(argv.map((a, i, all) => (a.startsWith("--") ? [a.slice(2), all[i + 1]] : null)).filter(Boolean));
}

/**
 * Resolves once ready() holds. Under Node it sleeps 50 µs between event-loop turns: Dawn's Node binding polls
 * for finished GPU work with a new JS function on every turn of the event loop while any of its promises is
 * pending, so awaiting one busy-waits and fills the heap with garbage: through a medium or large run,
 * collections a few times a second stalled the loop for 25–50 ms, and the GPU ran dry (docs/performance.md
 * §29). A browser's WebGPU has no such poll, so there it awaits `promise` itself (browser_bench.js), as the
 * site's worker does; this keeps either bench's figure the GPU's.
 */
async function quietly(ready, promise) {
  if (typeof setImmediate !== "function") return promise.catch(() => {}); // a browser
  while (!ready()) {
    Atomics.wait(NAP, 0, 0, 0.05);
    await new Promise((resolve) => setImmediate(resolve));
  }
}
const NAP = new Int32Array(new SharedArrayBuffer(4));

/**
 * n training steps as fast as the GPU takes them: step i is submitted once the loss it will reuse
 * the ring slot of (step i − the ring's length) is back, waited for quietly. Resolves to the n losses.
 */
export async function runSteps(trainer, n) {
  const ring = trainer.ring.length, back = new Uint8Array(n), pending = new Array(n);
  for (let i = 0; i < n; i++) {
    if (i >= ring) await quietly(() => back[i - ring], pending[i - ring]);
    pending[i] = (await trainer.step()).loss;
    pending[i].finally(() => { back[i] = 1; }).catch(() => {}); // a failure is thrown by Promise.all below
  }
  if (n > 0) await quietly(() => back[n - 1], pending[n - 1]);
  return Promise.all(pending);
}

/** The middle value of xs (the upper one of an even count). */
export const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

/**
 * Decode rounds (bench/decode.py's ROUNDS, passed in the job): runs each of `modes` ({name: () =>
 * {ms, tokens}, or a promise of it}) in turn, at least rounds.min times, then more while the first mode's runs add up to less
 * than rounds.seconds, at most rounds.max. Returns {name: {ms: the median, roundsMs, tokens}}; throws if a
 * mode gave different tokens in two rounds.
 */
export async function roundsInTurn(modes, rounds) {
  if (!rounds) throw new Error("the job names no rounds (bench/decode.py ROUNDS)");
  const names = Object.keys(modes), runs = Object.fromEntries(names.map((name) => [name, []]));
  const firstSeconds = () => runs[names[0]].reduce((sum, x) => sum + x.ms, 0) / 1e3;
  while (runs[names[0]].length < rounds.min || (runs[names[0]].length < rounds.max && firstSeconds() < rounds.seconds)) {
    for (const name of names) runs[name].push(await modes[name]());
  }
  return Object.fromEntries(names.map((name) => {
    const all = runs[name];
    if (all.some((x) => x.tokens.join() !== all[0].tokens.join())) throw new Error(`the ${name} decoder gave different tokens in two rounds`);
    const ms = all.map((x) => x.ms);
    return [name, { ms: median(ms), roundsMs: ms, tokens: all[0].tokens }];
  }));
}

// Shared by the benchmarks: a frozen plan replayed `reps` times in one compute pass and one submit
// (each dispatch waits for the previous one, as in a step); returns ms from submit to completion.
export async function replay(device, plan, reps) {
  const enc = device.createCommandEncoder();
  const pass = enc.beginComputePass();
  for (let r = 0; r < reps; r++) plan.encode(pass);
  pass.end();
  const t0 = performance.now();
  device.queue.submit([enc.finish()]);
  await device.queue.onSubmittedWorkDone();
  return performance.now() - t0;
}

/**
 * µs per replay of a frozen plan, each waiting for the one before (as in a step): reps replays in
 * one submit less one alone, after a warm-up of `warmup` replays in one submit, so that the submit's own cost drops out.
 */
export async function replayMicroseconds(device, plan, reps = 30, warmup = 3) {
  if (!(reps >= 2)) throw new Error(`replayMicroseconds: reps ${reps}, at least 2 (the timing is reps replays less one)`);
  if (warmup > 0) await replay(device, plan, warmup);
  const one = Math.min(await replay(device, plan, 1), await replay(device, plan, 1));
  return (1000 * ((await replay(device, plan, reps)) - one)) / (reps - 1);
}

/**
 * Keeps the GPU busy for `ms` with a 2048³ product, replayed. While the host builds a trainer or
 * compiles pipelines the GPU idles and may lower its clocks; the first few hundred ms of work then
 * ran up to 4× slower (H100: xl's first 4–13 steps at 21 ms instead of 5.0, by GPU timestamps;
 * step_timeline.mjs). Done right before timing, it keeps that out of the figures.
 */
export async function raiseClocks(device, ops, ms = 300) {
  if (ms <= 0) return; // asked for none (a software adapter, whose clocks mean nothing)
  const n = 2048, S = GPUBufferUsage.STORAGE;
  const [A, B, C] = [0, 1, 2].map(() => device.createBuffer({ size: 4 * n * n, usage: S }));
  const plan = new Plan(device, ops.pipelines, "raise clocks");
  ops.matmul(plan, "forward", { M: n, N: n, K: n, A, B, C });
  plan.freeze();
  for (const t0 = performance.now(); performance.now() - t0 < ms;) await replay(device, plan, 5);
  plan.destroy();
  for (const x of [A, B, C]) x.destroy();
}
