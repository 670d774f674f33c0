// The portable PRNG of docs/determinism.md in JS: SplitMix64 on 32-bit halves (Math.imul and exact
// double arithmetic, no BigInt, so initialising a 25M-parameter model takes seconds, not minutes),
// Box–Muller with the portable log/cos, initial weights, batches, eval windows and sampling.
// Runs unchanged in a browser worker and under Node: its one import, the manifest, has none.
import { manifest } from "./manifest.js";

export { manifest };  // the trainer and the tests take it from here too

const GAMMA_HI = 0x9e3779b9, GAMMA_LO = 0x7f4a7c15;
const MIX1_HI = 0xbf58476d, MIX1_LO = 0x1ce4e5b9;
const MIX2_HI = 0x94d049bb, MIX2_LO = 0x133111eb;
export const DATA_STREAM_KEY = [0xd6e8feb8, 0x6659fd93];
export const SAMPLE_STREAM_KEY = [0x2545f491, 0x4f6cdd1d];
const TWO32 = 4294967296;
const TWO_POW_MINUS_53 = 2 ** -53;
const LN2 = 0.6931471805599453;
const SQRT_HALF = 0.7071067811865476;
const HALF_PI = 1.5707963267948966;
// Spec's decimal strings: each parses to the binary64 nearest the exact rational.
const L = [1.0, 0.3333333333333333, 0.2, 0.14285714285714285, 0.1111111111111111, 0.09090909090909091,
  0.07692307692307693, 0.06666666666666667, 0.058823529411764705, 0.05263157894736842,
  0.047619047619047616, 0.043478260869565216];
const CC = [1.0, -0.5, 0.041666666666666664, -0.001388888888888889, 2.48015873015873e-05,
  -2.755731922398589e-07, 2.08767569878681e-09, -1.1470745597729725e-11, 4.779477332387385e-14,
  -1.5619206968586225e-16, 4.110317623312165e-19, -8.896791392450574e-22];
const SC = [1.0, -0.16666666666666666, 0.008333333333333333, -0.0001984126984126984, 2.7557319223985893e-06,
  -2.505210838544172e-08, 1.6059043836821613e-10, -7.647163731819816e-13, 2.8114572543455206e-15,
  -8.22063524662433e-18, 1.9572941063391263e-20, -3.868170170630684e-23];

// 64-bit values are [hi, lo] pairs of unsigned 32-bit numbers.
function add64(ah, al, bh, bl) {
  const lo = al + bl;
  return [(ah + bh + (lo >= TWO32 ? 1 : 0)) >>> 0, lo >>> 0];
}

function mul64(ah, al, bh, bl) {
  // low 64 bits of the product: al*bl exactly (16-bit pieces, all sums exact in binary64) + cross terms << 32
  const a0 = al & 0xffff, a1 = al >>> 16, b0 = bl & 0xffff, b1 = bl >>> 16;
  const mid = a0 * b1 + a1 * b0;                       // < 2^33
  const low = a0 * b0 + (mid % 65536) * 65536;         // < 2^33
  const carry = Math.floor(low / TWO32);
  const hi = a1 * b1 + Math.floor(mid / 65536) + carry;
  return [(hi + Math.imul(ah, bl) + Math.imul(al, bh)) >>> 0, low >>> 0];
}

function mix(zh, zl) {
  let l = (zl ^ ((zl >>> 30) | (zh << 2))) >>> 0, h = (zh ^ (zh >>> 30)) >>> 0;
  [h, l] = mul64(h, l, MIX1_HI, MIX1_LO);
  l = (l ^ ((l >>> 27) | (h << 5))) >>> 0; h = (h ^ (h >>> 27)) >>> 0;
  [h, l] = mul64(h, l, MIX2_HI, MIX2_LO);
  return [(h ^ (h >>> 31)) >>> 0, (l ^ ((l >>> 31) | (h << 1))) >>> 0];
}

/** [hi, lo] of a seed in [0, 2^53). */
export function seedPair(seed) {
  if (!Number.isInteger(seed) || seed < 0 || seed >= 2 ** 53) throw new RangeError(`seed must be an integer in [0, 2^53), got ${seed}`);
  return [Math.floor(seed / TWO32) >>> 0, seed >>> 0];
}

export function xorPair(a, b) { return [(a[0] ^ b[0]) >>> 0, (a[1] ^ b[1]) >>> 0]; }

/** Sequential reader of a SplitMix64 stream from output `start` on: output(n) = mix(s0 + (n+1)·GAMMA). */
export class SplitMix64 {
  constructor(state0, start = 0) {
    const n1 = start + 1;
    const [ph, pl] = mul64(Math.floor(n1 / TWO32) >>> 0, n1 >>> 0, GAMMA_HI, GAMMA_LO);
    [this.h, this.l] = add64(state0[0], state0[1], ph, pl);
  }
  /** The next output as [hi, lo]. */
  nextPair() {
    const out = mix(this.h, this.l);
    [this.h, this.l] = add64(this.h, this.l, GAMMA_HI, GAMMA_LO);
    return out;
  }
  /** The next output >> 11 as an exact integer in [0, 2^53). */
  next53() {
    const [h, l] = this.nextPair();
    return h * 2097152 + (l >>> 11);
  }
  nextHex() {
    const [h, l] = this.nextPair();
    return h.toString(16).padStart(8, "0") + l.toString(16).padStart(8, "0");
  }
}

export const uniform = (x53) => x53 * TWO_POW_MINUS_53;
export const uniformOpen0 = (x53) => (x53 + 1) * TWO_POW_MINUS_53;

const f64 = new Float64Array(1);
const u32 = new Uint32Array(f64.buffer);
const HI = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1 ? 1 : 0; // little-endian: high word second

/** ln(x) for a positive normal double, only + - * / and exact exponent handling (frexp via the bits). */
export function portableLog(x) {
  f64[0] = x;
  const hi = u32[HI];
  let e = ((hi >>> 20) & 0x7ff) - 1022;
  u32[HI] = (hi & 0x800fffff) | (1022 << 20);
  let m = f64[0]; // x = m * 2^e, m in [0.5, 1)
  if (m < SQRT_HALF) { m = m * 2; e = e - 1; }
  const s = (m - 1) / (m + 1), s2 = s * s;
  let p = L[11];
  for (let k = 10; k >= 0; k--) p = p * s2 + L[k];
  return e * LN2 + (2 * s) * p;
}

/** cos(2πu) for u in [0, 1). */
export function portableCos2Pi(u) {
  const t = u * 4, q = Math.floor(t), a = (t - q) * HALF_PI, a2 = a * a;
  let c = CC[11], sn = SC[11];
  for (let k = 10; k >= 0; k--) { c = c * a2 + CC[k]; sn = sn * a2 + SC[k]; }
  sn = a * sn;
  return q === 0 ? c : q === 1 ? -sn : q === 2 ? -c : sn;
}

/** Normals first .. first+count-1 of a stream (normal j uses outputs 2j and 2j+1), as float64. */
export function normals(state0, first, count) {
  const out = new Float64Array(count);
  const s = new SplitMix64(state0, 2 * first);
  for (let i = 0; i < count; i++) {
    const u1 = uniformOpen0(s.next53()), u2 = uniform(s.next53());
    out[i] = Math.sqrt(-2 * portableLog(u1)) * portableCos2Pi(u2);
  }
  return out;
}

/** All initial weights, manifest order, in one Float32Array of P values (bit-identical to python_ref). */
export function initialWeights(config, seed, initStd) {
  const entries = manifest(config);
  const last = entries[entries.length - 1];
  const out = new Float32Array(last.offset + last.numel);
  const s = new SplitMix64(seedPair(seed), 0);
  const residualStd = initStd / Math.sqrt(2 * config.nLayer);
  for (const e of entries) {
    if (e.name.endsWith(".bias")) continue; // zeros
    if (e.name.includes(".ln") || e.name.startsWith("ln_f")) { out.fill(1, e.offset, e.offset + e.numel); continue; }
    const std = e.name.endsWith("o_proj.weight") || e.name.endsWith("fc_out.weight") ? residualStd : initStd;
    for (let i = 0; i < e.numel; i++) {
      const u1 = uniformOpen0(s.next53()), u2 = uniform(s.next53());
      out[e.offset + i] = Math.fround(Math.sqrt(-2 * portableLog(u1)) * portableCos2Pi(u2) * std);
    }
  }
  return out;
}

/** The contiguous train/val split of docs/determinism.md; refuses a corpus too short for ctx. */
export function splitCorpus(bytes, valFraction, ctx) {
  const n = bytes.length, nVal = Math.floor(n * valFraction), nTrain = n - nVal;
  if (nTrain < ctx + 1 || nVal < ctx + 1) {
    throw new RangeError(`corpus has ${n} bytes: too short for a context of ${ctx} (train ${nTrain}, val ${nVal} bytes; each needs ${ctx + 1})`);
  }
  return { train: bytes.subarray(0, nTrain), val: bytes.subarray(nTrain) };
}

/** Batch b uses data-stream outputs b*B .. b*B+B-1; row r starts at (output >> 11) mod (nTrain - ctx). */
export function batchStarts(seed, batchIndex, batch, nStarts, out = new Array(batch)) {
  const s = new SplitMix64(xorPair(seedPair(seed), DATA_STREAM_KEY), batchIndex * batch);
  for (let r = 0; r < batch; r++) out[r] = s.next53() % nStarts;
  return out;
}

/** K = min(windows, nVal - ctx) val windows at floor(i * (nVal - ctx - 1) / max(K - 1, 1)). */
export function evalWindowStarts(nVal, ctx, windows) {
  const k = Math.max(1, Math.min(windows, nVal - ctx)), span = nVal - ctx - 1;
  return Array.from({ length: k }, (_, i) => Math.floor((i * span) / Math.max(k - 1, 1)));
}

/** The sample stream: one uniform per sampled token; `drawn` is all its state. */
export class SampleStream {
  constructor(seed, drawn = 0) {
    this.state0 = xorPair(seedPair(seed), SAMPLE_STREAM_KEY);
    this.drawn = drawn;
  }
  nextUniform() {
    const u = this.peekUniform(0);
    this.drawn += 1;
    return u;
  }
  /** The uniform `ahead` draws from now, not drawn: the GPU's sampler takes a batch of them at once. */
  peekUniform(ahead) { return uniform(new SplitMix64(this.state0, this.drawn + ahead).next53()); }
}

/** docs/determinism.md § Sampling: greedy at temperature 0, else top-k then inverse-CDF with one uniform. */
export function sampleToken(logits, temperature, topK, stream) {
  const V = logits.length;
  if (temperature === 0) {
    let best = 0;
    for (let i = 1; i < V; i++) if (logits[i] > logits[best]) best = i;
    return best;
  }
  const l = new Float64Array(V);
  for (let i = 0; i < V; i++) l[i] = logits[i] / temperature;
  const keep = new Uint8Array(V).fill(1);
  if (topK > 0 && topK < V) {
    // the k largest, ties to the lower index, NaNs after every number (python_ref's stable argsort):
    // every value above the k-th largest, then the lowest indices of those equal to it. A numeric
    // sort of the values finds it (NaNs last); sorting the indices with a comparator was the largest
    // part of a tiny model's host time a token (see docs/lab/2026-11-28-decoding-on-the-gpu.md §37).
    const sorted = Float64Array.from(l).sort();
    let numbers = V;
    while (numbers > 0 && Number.isNaN(sorted[numbers - 1])) numbers--;
    keep.fill(0);
    let kept = 0;
    if (numbers >= topK) {
      const threshold = sorted[numbers - topK];
      for (let i = 0; i < V; i++) if (l[i] > threshold) { keep[i] = 1; kept++; }
      for (let i = 0; i < V && kept < topK; i++) if (l[i] === threshold) { keep[i] = 1; kept++; }
    } else {
      for (let i = 0; i < V; i++) if (!Number.isNaN(l[i])) { keep[i] = 1; kept++; }
      for (let i = 0; i < V && kept < topK; i++) if (Number.isNaN(l[i])) { keep[i] = 1; kept++; }
    }
  }
  let max = -Infinity;
  for (let i = 0; i < V; i++) if (keep[i] && l[i] > max) max = l[i];
  const p = new Float64Array(V);
  let sum = 0;
  for (let i = 0; i < V; i++) if (keep[i]) { p[i] = Math.exp(l[i] - max); sum += p[i]; }
  const target = stream.nextUniform() * sum;
  let cum = 0, lastNonzero = 0;
  for (let i = 0; i < V; i++) {
    if (!keep[i]) continue;
    cum += p[i];
    if (p[i] > 0) lastNonzero = i;
    if (cum > target) return i;
  }
  return lastNonzero; // u·sum rounded up to sum: the last kept byte of nonzero probability
}
