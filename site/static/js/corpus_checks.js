// What the page checks of a corpus before anything trains on it. The split and its limits mirror
// python_ref/data.py (Corpus.from_bytes, Corpus.split) with the same numbers, so a corpus the page
// accepts is one `tinygpt train --corpus` accepts too, and the messages name the same sizes.

/** The biggest corpus the page reads: it is held in the tab, copied to the worker and into the engine. */
export const MAX_CORPUS_BYTES = 256 * 1024 * 1024;

const MB = 1024 * 1024;
const size = (n) => (n >= 1024 * MB ? `${(n / 1024 / MB).toFixed(2)} GB` : n >= MB ? `${(n / MB).toFixed(1)} MB` : `${n.toLocaleString("en")} bytes`);

/** {train, val}: bytes in each split, as Corpus.split: the last floor(n * valFraction) bytes validate. */
export function splitSizes(n, valFraction) {
  const val = Math.floor(n * valFraction);
  return { train: n - val, val };
}

/** A file's size is checked before a byte of it is read: a 2 GB file must not freeze the tab. */
export function fileSizeProblem(name, bytes) {
  if (bytes <= MAX_CORPUS_BYTES) return null;
  return `${name} is ${size(bytes)}: the playground trains on corpora up to ${size(MAX_CORPUS_BYTES)} ` +
    "(the whole corpus is kept in memory). Pick a smaller file or cut this one.";
}

/** " or the preset tiny (context 32)": the presets of `shorter` whose windows fit both splits, or "". */
function smallerPresets(train, val, ctx, shorter) {
  const fit = shorter.filter((p) => p.ctx < ctx && train > p.ctx && val > p.ctx).sort((a, b) => b.ctx - a.ctx);
  if (!fit.length) return "";
  const names = fit.map((p) => `${p.preset} (context ${p.ctx})`);
  return ` or ${fit.length === 1 ? "the preset" : "one of the presets"} ${names.join(", ")}, which it can train`;
}

const byteName = (b) => `0x${b.toString(16).padStart(2, "0")}${b >= 0x20 && b < 0x7f ? ` '${String.fromCharCode(b)}'` : ""}`;

/**
 * A sentence saying why `bytes` cannot train a model of context `ctx`, or null when it can. `shorter`:
 * the presets of a shorter context ([{preset, ctx}]); a corpus too short for `ctx` names those it can
 * train, and suggests no smaller preset where there is none that would do.
 */
export function corpusProblem(bytes, name, { ctx, valFraction, shorter = [] }) {
  const n = bytes.length;
  const tooBig = fileSizeProblem(name, n);
  if (tooBig) return tooBig;
  if (n === 0) return `The corpus "${name}" is empty: give a text with some content.`;
  const { train, val } = splitSizes(n, valFraction);
  const need = ctx + 1;
  if (train < need || val < need) {
    return `The corpus "${name}" has ${n.toLocaleString("en")} bytes: too short for a context of ${ctx} ` +
      `(the train split has ${train.toLocaleString("en")} and the validation split ${val.toLocaleString("en")} bytes; ` +
      `each needs at least ${need}). Use a longer text (at least ${Math.ceil(need / valFraction).toLocaleString("en")} bytes)` +
      smallerPresets(train, val, ctx, shorter) + ".";
  }
  if (bytes.every((b) => b === bytes[0])) {
    return `The corpus "${name}" is one byte repeated (${n.toLocaleString("en")} × ${byteName(bytes[0])}): ` +
      "there is nothing to learn from it. Give a text with more than one kind of byte.";
  }
  return null;
}
