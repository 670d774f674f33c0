// The GPU buffers a Trainer (trainer.js) and its Decoder (decoder.js) both lay out: sizes, the
// activation sets a forward writes, and reading a buffer back. Each owner creates its buffers through
// its own `make(label, bytes, usage)`, so that it frees what it made; the lists of what each creates
// (Trainer.requirements) are built from the same tables.

const U = () => GPUBufferUsage;

/** Bytes of a buffer asked for `size` bytes: a multiple of 4, at least 16. */
export const bufferBytes = (size) => Math.max(16, Math.ceil(size / 4) * 4);

/** Floats a slot of n floats takes in a buffer of several (q, k and v's views): bind-group offsets are multiples of 256 bytes. */
export const slotFloats = (n) => Math.ceil(n / 64) * 64;

/** q, k and v views of n floats each, a slot apart from byte `at` of `buffer`: {stride (floats), q, k, v}. */
export function qkvSlots(buffer, at, n) {
  const stride = slotFloats(n);
  const view = (i) => ({ buffer, offset: at + 4 * i * stride, size: 4 * n });
  return { stride, q: view(0), k: view(1), v: view(2) };
}

/** A buffer of `views` slots of n floats each, made by `make`: {qkv: buffer, stride, q, k, v} (the first three). */
export function qkvViews(make, label, n, views = 3) {
  const stride = slotFloats(n);
  const qkv = make(label, 4 * views * stride, U().STORAGE | U().COPY_SRC);
  return { qkv, ...qkvSlots(qkv, 0, n) };
}

/** An activation set's layer's q, k and v views and the buffer they share, as another set uses them. */
export const sameQkv = ({ qkv, stride, q, k, v }) => ({ qkv, stride, q, k, v });

/**
 * Activation buffers for B rows of T positions (kvT: the positions a KV cache holds), in floats.
 * createActivations creates them from this table and listActivations lists it: one source for both.
 */
export function activationFloats({ dModel: C, nHead: H, vocabSize: V }, B, T, kvT) {
  const rows = B * T;
  return {
    layer: { ln1: rows * C, ln1s: 2 * rows, att: rows * C, lse: B * H * T, res2: rows * C, ln2: rows * C, ln2s: 2 * rows, h: 4 * rows * C, g: 4 * rows * C },
    // q, k, v: three views of one buffer, which one batched product fills, each of this many floats;
    // generation's (kvT > T) are the KV cache, and a token's q lands at its position too
    qkv: B * kvT * C,
    res: rows * C, // L + 1 residual streams
    top: { lnf: rows * C, lnfs: 2 * rows, logits: rows * V, losses: rows },
    ids: rows, // tokens, targets: u32
  };
}
const ACTIVATION_LABELS = { ln1s: "ln1 stats", ln2s: "ln2 stats", lnfs: "lnf stats" };
const activationLabel = (key) => ACTIVATION_LABELS[key] ?? key;

/**
 * One activation set: what the forward saves for the backward, for B rows of T positions, its
 * buffers made by `make`. kept: layer activations held as one buffer of L slots each (by name), each
 * layer's a view. qkv: layer l's q, k and v views ({qkv, stride, q, k, v}, as large: kvT·B·C floats
 * each) where another buffer holds them (another set's, or a KV cache of every layer's); by default
 * each layer's own buffer.
 */
export function createActivations(make, model, label, B, T, kvT, { kept: keptNames = [], qkv = null } = {}) {
  const L = model.nLayer, S = U().STORAGE | U().COPY_SRC;
  const sizes = activationFloats(model, B, T, kvT);
  const own = (table) => Object.fromEntries(Object.entries(table).filter(([k]) => !keptNames.includes(k))
    .map(([k, n]) => [k, make(`${label} ${activationLabel(k)}`, 4 * n, S)]));
  const kept = Object.fromEntries(keptNames.map((k) => {
    const slot = slotFloats(sizes.layer[k]);
    return [k, { buffer: make(`${label} ${activationLabel(k)}`, 4 * L * slot, S), slot }];
  }));
  const view = (k, l) => ({ buffer: kept[k].buffer, offset: 4 * l * kept[k].slot, size: 4 * sizes.layer[k] });
  const layers = [];
  for (let l = 0; l < L; l++) {
    layers.push({ ...own(sizes.layer), ...Object.fromEntries(keptNames.map((k) => [k, view(k, l)])),
      ...(qkv ? qkv(l) : qkvViews(make, `${label} qkv`, sizes.qkv)) });
  }
  // COPY_SRC: a restart on the GPU copies the prefill's tokens into the window it keeps (Decoder._batchCommands)
  const ids = (name) => make(`${label} ${name}`, 4 * sizes.ids, U().STORAGE | U().COPY_DST | U().COPY_SRC);
  return {
    B, T, kvT, layers, kept, res: Array.from({ length: L + 1 }, (_, l) => make(`${label} res${l}`, 4 * sizes.res, S)),
    ...own(sizes.top), tokens: ids("tokens"), targets: ids("targets"),
  };
}

/**
 * The buffers createActivations makes for the same arguments, as add(label, bytes) in its order;
 * ownQkv false: its layers' q, k and v are in a buffer made elsewhere.
 */
export function listActivations(add, model, label, B, T, kvT, { kept = [], ownQkv = true } = {}) {
  const L = model.nLayer, s = activationFloats(model, B, T, kvT);
  for (const k of kept) add(`${label} ${activationLabel(k)}`, 4 * L * slotFloats(s.layer[k]));
  for (let l = 0; l < L; l++) {
    for (const [k, n] of Object.entries(s.layer)) if (!kept.includes(k)) add(`${label} ${activationLabel(k)}`, 4 * n);
    if (ownQkv) add(`${label} qkv`, 4 * 3 * slotFloats(s.qkv));
  }
  for (let l = 0; l <= L; l++) add(`${label} res${l}`, 4 * s.res);
  for (const [k, n] of Object.entries(s.top)) add(`${label} ${activationLabel(k)}`, 4 * n);
  add(`${label} tokens`, 4 * s.ids);
  add(`${label} targets`, 4 * s.ids);
}

/**
 * Maps a read-back buffer. A lost device (or a destroyed trainer) rejects the map with an
 * AbortError whose message may be empty: the rejection says what was being read instead.
 */
export async function mapForReading(buffer, what) {
  try {
    await buffer.mapAsync(GPUMapMode.READ);
  } catch (e) {
    throw new Error(`reading ${what} back from the GPU failed (${e.name}${e.message ? `: ${e.message}` : ""}); the device may have been lost`);
  }
}
