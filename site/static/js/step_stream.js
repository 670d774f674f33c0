// Training steps in flight, as the page's worker runs them (worker.js) and as the benches time the
// page's loop (bench/webgpu/time_trainer.js). A WebGPU step's loss comes back a round trip after its
// GPU work, so up to `inFlight` steps are queued before the oldest one's loss is awaited. Bursts do
// not drain that queue: between two bursts the worker reads its messages while the GPU works through
// the steps still queued, where a drain would leave it idle for a round trip and the next step's
// encoding (see docs/lab/2026-11-29-page-training-loop.md §46). Only what needs every loss so far drains it: an evaluation in
// the loss chart, a save or a download (the file's loss history), the end of a run.

export const BURST_MS = 50;  // steps run back to back for this long before the worker looks at its messages

/**
 * Steps an engine queues before the oldest loss is awaited (engine.stepsInFlight). A WebAssembly step's
 * loss is known when the step returns. A GPU's comes back a round trip after its work, which in a
 * browser is longer than a small model's step: 4 steps left small's GPU idle where 8 did not, and 16
 * were no faster than 8 (see docs/lab/2026-11-29-page-training-loop.md §46). A software adapter takes
 * seconds a step, and Stop waits for the steps queued: 2 there.
 */
export const STEPS_IN_FLIGHT = { wasm: 1, gpu: 8, software: 2 };

export class StepStream {
  /** engine: the backend protocol's (trainStep, step); onLoss(step, loss): each loss, in step order. */
  constructor(engine, inFlight, onLoss) {
    this.engine = engine;
    this.inFlight = inFlight;
    this.onLoss = onLoss;
    this.pending = []; // [{step, loss: a promise}], oldest first
    // each loss is handed to onLoss after the one before, whoever settles it: the worker's final drain
    // and a download's may run at once
    this.settled = Promise.resolve();
  }

  /** One step queued; the oldest loss settled where `inFlight` are queued. Returns the step's number. */
  async step() {
    const { loss } = await this.engine.trainStep();
    const step = this.engine.step;
    // handled here so that a loss nobody awaits (its engine released) rejects quietly; settle() still throws
    Promise.resolve(loss).catch(() => {});
    this.pending.push({ step, loss });
    if (this.pending.length >= this.inFlight) await this.settle();
    return step;
  }

  /** The oldest queued step's loss, settled after those before it. */
  settle() {
    const { step, loss } = this.pending.shift();
    this.settled = this.settled.then(async () => this.onLoss(step, await loss));
    return this.settled;
  }

  /** Every queued step's loss settled, those another caller is settling too. */
  async drain() {
    while (this.pending.length) this.settle();
    await this.settled;
  }
}

/**
 * Steps back to back on `stream` for about `ms`: after each, afterStep(step) (awaited, where given),
 * then on while more() says so. Leaves the last steps queued. Returns how many steps it ran.
 */
export async function burst(stream, ms, { more, afterStep = null }) {
  const end = performance.now() + ms;
  let count = 0;
  do {
    const step = await stream.step();
    count += 1;
    if (afterStep) await afterStep(step);
  } while (performance.now() < end && more());
  return count;
}
