// Training, seen: the statistics the training view shows every K steps (presets.json page.statsEvery),
// grouped and summarised exactly as python_ref/training_stats.py does, which is their reference.
// An engine measures a step (engine.trainStep({stats: {probe}}): WebAssembly's tg_train_step_stats and
// tg_attention_entropy, WebGPU's webgpu/training_stats.js) and gives, per trained tensor (the model's,
// or a fine-tune's adapters), the sums of squares of its gradient before the clip, of its weights
// before the update and of the update, and the attention entropy of every layer and head on the probe
// window. Pure functions: the worker and the tests under Node run them.

const BLOCK = /^blocks\.(\d+)\./;
export const EMBEDDINGS = "embeddings";
export const FINAL_LAYERNORM = "final LayerNorm";

/** The group a tensor (of the manifest, or of the adapter manifest) is shown in. */
export function groupOf(name) {
  const m = BLOCK.exec(name);
  if (m) return `block ${m[1]}`;
  if (name.startsWith("token_embedding") || name.startsWith("position_embedding")) return EMBEDDINGS;
  if (name.startsWith("ln_f")) return FINAL_LAYERNORM;
  throw new Error(`tensor ${name} belongs to no group of the training view`);
}

/** The entropy of uniform causal attention over a window of T, averaged over its queries: mean_i ln(i + 1). */
export function maxEntropy(T) {
  let s = 0;
  for (let i = 0; i < T; i++) s += Math.log(i + 1);
  return s / T;
}

/** The probe window: the first ctx bytes of the corpus (its training split starts there). */
export const probeWindow = (corpus, ctx) => corpus.subarray(0, Math.min(ctx, corpus.length));

/** Whether the step after `step` is measured, measuring every `every` steps (0 or null: the view is off). */
export const measuredNext = (step, every) => Boolean(every) && (step + 1) % every === 0;

/**
 * What the view shows of one measured step: {groups, gradNorm, updateRatio, gradNormTotal} from the
 * names and sums (Float64Array, 3 per tensor), and {entropy (nLayer arrays of nHead), maxEntropy} from
 * the entropy (Float64Array, nLayer·nHead) of a probe of T bytes. An update ratio is null where the
 * group's weights are all zero (nothing to compare the update with).
 */
export function summarise(names, sums, { entropy = null, nHead = 0, T = 0 } = {}) {
  const groups = [], totals = new Map();
  let grad2 = 0;
  names.forEach((name, i) => {
    const g = groupOf(name);
    if (!totals.has(g)) {
      groups.push(g);
      totals.set(g, [0, 0, 0]);
    }
    const t = totals.get(g);
    for (let k = 0; k < 3; k++) t[k] += sums[3 * i + k];
    grad2 += sums[3 * i];
  });
  const out = {
    groups,
    gradNorm: groups.map((g) => Math.sqrt(totals.get(g)[0])),
    updateRatio: groups.map((g) => (totals.get(g)[1] > 0 ? Math.sqrt(totals.get(g)[2]) / Math.sqrt(totals.get(g)[1]) : null)),
    gradNormTotal: Math.sqrt(grad2),
  };
  if (entropy) {
    out.entropy = [];
    for (let l = 0; l < entropy.length / nHead; l++) out.entropy.push(Array.from(entropy.subarray(l * nHead, (l + 1) * nHead)));
    out.maxEntropy = maxEntropy(T);
  }
  return out;
}
