// The learning rate of each training step, as python_ref computes it (train.py RunOptions.lr_multiplier):
// a linear warm-up over the first warmupSteps updates, then constant ("none") or a cosine to 0 at the run's
// target step. The worker hands each step's rate to the engine (engine.setLearningRate), so WebAssembly,
// WebGPU and PyTorch take the same rate at the same step (tests/site/test_lr_schedule.py).

export const LR_SCHEDULES = ["none", "cosine"];  // python_ref's names; the page shows "none" as "constant"

/** Factor on lr for the update from `step` to step + 1 (binary64, as Python's float). */
export function lrMultiplier(step, totalSteps, { lrSchedule = "none", warmupSteps = 0 } = {}) {
  if (!LR_SCHEDULES.includes(lrSchedule)) throw new Error(`unknown lrSchedule ${JSON.stringify(lrSchedule)}; choose ${LR_SCHEDULES.join(" or ")}`);
  if (step < warmupSteps) return (step + 1) / warmupSteps;
  if (lrSchedule === "cosine") {
    const progress = (step - warmupSteps) / Math.max(1, totalSteps - warmupSteps);
    return 0.5 * (1.0 + Math.cos(Math.PI * Math.min(1.0, progress)));
  }
  return 1.0;
}

/**
 * The rate of the update from `step` to step + 1: training.lr times the multiplier. A cosine that has
 * reached its end (a step at or past the target) gives 0, which the engines' rules refuse (lr > 0): the
 * smallest positive double stands in, a rate that changes no weight.
 */
export function learningRateAt(step, totalSteps, training) {
  return Math.max(training.lr * lrMultiplier(step, totalSteps, training), Number.MIN_VALUE);
}
