// Reader and writer of .tinygpt checkpoints, version 2 (docs/format.md), for the Web Worker and
// for Node. Its imports: the manifest (webgpu/manifest.js), the config rules (webgpu/config_rules.js)
// and presets.json's defaults and rules (presets.js; the worker loads them before it reads a file).
//
// It mirrors python_ref/tinygpt_file.py: the same checks in the same order with the same messages,
// so a file is refused for the same stated reason at every level. Where Python's message shows a
// value with repr(), pyRepr (config_rules.js) writes it the same way.
import { manifest, paramCount as manifestParamCount } from "../../../webgpu/manifest.js";
import { ConfigError, checkFields, pyQuote, pyRepr } from "../../../webgpu/config_rules.js";
import { presetsNow } from "./presets.js";
import { checkPreset, checkValues, depthMessage, HeaderError, isInt, tooDeep } from "./header_checks.js";
//
// Sizes are Numbers (exact to 2^53), never 32-bit integers: a file with the AdamW moments of the
// largest preset is 5.68 GB. Float views assume a little-endian host, as every browser and Node
// platform is; the prefix and the step go through DataView with explicit little-endian.
//
// The float32 "state" that readers return and writers take is the C++ core's tg_import_state /
// tg_export_state layout: i32 step | f32 weights | [f32 m | f32 v], in manifest order.

const MAGIC = [0x54, 0x47, 0x50, 0x54]; // "TGPT"
const VERSION = 2;
const PREFIX_SIZE = 12;
const CRC_PLACEHOLDER = "00000000";
const WEIGHTS_DTYPES = ["float32", "float16"];
const BLOCK_NAMES = ["weights", "AdamW m", "AdamW v"];
const CONFIG_KEYS = ["nLayer", "nHead", "dModel", "ctx", "vocabSize", "layerNormEps"];
// Python's bytes regex: \s there is ASCII whitespace only (JS's \s would also take 0xA0 in latin1).
const HEADER_CRC_FIELD = /"headerCrc32"[ \t\n\r\v\f]*:[ \t\n\r\v\f]*"([0-9a-f]{8})"/g;
// fatal: invalid UTF-8 is refused, as Python's bytes.decode does; ignoreBOM: a BOM is kept and then
// refused by JSON.parse, as Python's json.loads refuses it, instead of being silently dropped.
const UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const ENCODER = new TextEncoder();
const PLACEHOLDER_BYTES = ENCODER.encode(CRC_PLACEHOLDER);

export class TinyGPTFileError extends Error {
  constructor(message) {
    super(message);
    this.name = "TinyGPTFileError";
  }
}

const fail = (message) => new TinyGPTFileError(message);

// ---------------------------------------------------------------- CRC-32 (zlib / IEEE)

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c;
  }
  return table;
})();

// crc32(b, crc32(a)) === crc32(a followed by b), like zlib.crc32's second argument.
export function crc32(bytes, crc = 0) {
  let c = ~crc;
  for (let i = 0; i < bytes.length; i++) c = CRC_TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return ~c >>> 0;
}

const hex8 = (crc) => crc.toString(16).padStart(8, "0");

// ---------------------------------------------------------------- Python's view of JSON values

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
// JSON has one kind of number: integral and below 1e16 is an integer at both readers (header_checks.js).
// A key of the object itself: a parsed header must not answer "constructor" from Object.prototype.
const own = (obj, key) => (Object.hasOwn(obj, key) ? obj[key] : undefined);

function pyTypeName(v) {
  if (v === null || v === undefined) return "NoneType";
  if (typeof v === "boolean") return "bool";
  if (typeof v === "string") return "str";
  if (typeof v === "number") return isInt(v) ? "int" : "float";
  return Array.isArray(v) ? "list" : "dict";
}

export const pyBytes = (bytes) => "b" + pyQuote(String.fromCharCode(...bytes), (code) => code >= 0x20 && code < 0x7f);

// Bytes as a string of the same length, one character per byte, for regex search on raw bytes.
function latin1(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 8192) s += String.fromCharCode(...bytes.subarray(i, i + 8192));
  return s;
}

// ---------------------------------------------------------------- config and manifest

// python_ref's ModelConfig.from_json and its checks; returns the config with presets.json's
// defaults filled in (vocabSize, layerNormEps), checked by presets.json's rules.
export function checkConfig(config) {
  if (!isObject(config)) throw fail(`model config must be an object, got ${pyTypeName(config)}`);
  const missing = CONFIG_KEYS.slice(0, 4).filter((f) => !Object.hasOwn(config, f));
  if (missing.length) throw fail(`model config lacks ${missing.join(", ")}`);
  const presets = presetsNow();
  const c = Object.fromEntries(CONFIG_KEYS.map((key) => [key, Object.hasOwn(config, key) ? config[key] : presets.model[key]]));
  try {
    checkFields(presets.rules, "model", c);
  } catch (e) {
    throw e instanceof ConfigError ? fail(e.message) : e;
  }
  return c;
}

export const paramCount = manifestParamCount;

// [{name, shape, offset}] in the state's order (the header's manifest); offset counts elements within one block.
export function manifestEntries(config) {
  return manifest(config).map(({ name, shape, offset }) => ({ name, shape, offset }));
}

const numel = (entry) => entry.shape.reduce((a, b) => a * b, 1);

// ---------------------------------------------------------------- header

// Also the adapter file's (adapter_file.js): the same framing, the same header rules.
export function decodeHeader(raw) {
  if ((PREFIX_SIZE + raw.length) % 4) {
    throw fail(`header length ${raw.length} leaves the data unaligned (12 + N must be a multiple of 4)`);
  }
  let text, header;
  try {
    text = UTF8.decode(raw);
  } catch {
    throw fail("header JSON invalid: not UTF-8");
  }
  try {
    header = JSON.parse(text);
  } catch {
    throw fail("header JSON invalid: not a JSON text"); // the parsers' own wordings differ; the problem is the same
  }
  if (tooDeep(header)) throw fail(depthMessage());
  if (!isObject(header)) throw fail("header JSON invalid: expected an object");
  const found = [...latin1(raw).matchAll(HEADER_CRC_FIELD)];
  if (found.length !== 1 || own(header, "headerCrc32") !== found[0][1]) {
    throw fail("header lacks a valid headerCrc32 field (exactly one, 8 lowercase hex digits)");
  }
  const start = found[0].index + found[0][0].length - 9; // the 8 digits before the closing quote
  const crc = crc32(raw.subarray(start + 8), crc32(PLACEHOLDER_BYTES, crc32(raw.subarray(0, start))));
  if (hex8(crc) !== header.headerCrc32) throw fail("header CRC32 mismatch: the header is corrupt");
  return header;
}

// [key, Python type name]: the message names the type as python_ref's does.
const REQUIRED_KEYS = [
  ["config", "dict"], ["manifest", "list"], ["includesOptimizerState", "bool"], ["stateCrc32", "str"],
];

function parseHeader(raw) {
  const header = decodeHeader(raw);
  for (const [key, kind] of REQUIRED_KEYS) {
    if (pyTypeName(own(header, key)) !== kind) throw fail(`header key '${key}' is missing or not a ${kind}`);
  }
  if (!/^[0-9a-f]{8}$/.test(header.stateCrc32)) {
    throw fail(`header key 'stateCrc32' must be 8 lowercase hex digits, got ${pyRepr(header.stateCrc32)}`);
  }
  const dtype = weightsDtypeOf(header);
  if (!WEIGHTS_DTYPES.includes(dtype)) {
    throw fail(`header key 'weightsDtype' must be 'float32' or 'float16', got ${pyRepr(dtype)}`);
  }
  if (dtype === "float16" && header.includesOptimizerState) {
    throw fail("a float16 file holds weights only, but its includesOptimizerState is true");
  }
  const dataState = own(header, "dataState");
  const validDataState = (d) =>
    isObject(d) && ["seed", "batchesDrawn"].every((k) => isInt(own(d, k)) && d[k] >= 0 && d[k] < 2 ** 53);
  if (dataState != null && !validDataState(dataState)) {
    throw fail(`header key 'dataState' must be {seed, batchesDrawn}, integers in [0, 2^53), got ${pyRepr(dataState)}`);
  }
  asFileError(() => checkValues(header, presetsNow().rules));
  return header;
}

// A header check's refusal, as the reader's own error.
function asFileError(check) {
  try {
    return check();
  } catch (e) {
    throw e instanceof HeaderError ? fail(e.message) : e;
  }
}

const weightsDtypeOf = (header) => (Object.hasOwn(header, "weightsDtype") ? header.weightsDtype : "float32");

// What follows the step: a float16 state of odd count ends with 2 zero bytes (file length a multiple of 4).
function stateLayout(count, blocks, dtype) {
  if (dtype === "float16") {
    const padding = count % 2 ? " + 2 bytes of padding" : "";
    return { elementBytes: 2, elements: count + (count % 2), description: `step + ${count} float16${padding}` };
  }
  return { elementBytes: 4, elements: count * blocks, description: `step + ${blocks} x ${count} float32` };
}

// No checkpoint this format is used for comes near this (behemoth with moments: 5.7 GB); a config
// implying more is wrong, and calling the file "truncated" would send the reader the wrong way.
const PLAUSIBLE_STATE_BYTES = 2 ** 40;

function shortfall(actual, expected) {
  if (actual >= expected) return "";
  if (expected > PLAUSIBLE_STATE_BYTES) return " - the header's config is implausible (over 1 TiB of state), not the file truncated";
  return " - the file is truncated";
}

// The header's manifest must be exactly the config's (names, integer shapes and offsets).
function checkManifest(got, expected) {
  if (got.length !== expected.length) {
    throw fail(`manifest/shape mismatch: ${got.length} tensors listed, the config implies ${expected.length}`);
  }
  expected.forEach((e, i) => {
    const g = got[i];
    if (!isObject(g)) throw fail(`manifest/shape mismatch: entry ${i} is ${pyRepr(g)}, not an object {name, shape, offset}`);
    if (own(g, "name") !== e.name) {
      throw fail(`manifest/shape mismatch: found tensor ${pyRepr(own(g, "name"))} where ${pyRepr(e.name)} belongs`);
    }
    const shape = own(g, "shape");
    const offset = own(g, "offset");
    const sameShape = Array.isArray(shape) && shape.length === e.shape.length
      && shape.every((d, j) => isInt(d) && d === e.shape[j]);
    const same = sameShape && isInt(offset) && offset === e.offset;
    if (!same) {
      throw fail(`manifest/shape mismatch: ${e.name} is listed as shape ${pyRepr(shape)} at offset `
        + `${pyRepr(offset)}, the config implies ${pyRepr(e.shape)} at ${e.offset}`);
    }
  });
}

// ---------------------------------------------------------------- reading

// Everything the first 12 + N bytes and the file's total size can prove, without the state: to list
// checkpoints quickly, read 12 bytes, take N = u32 LE at offset 8, read 12 + N and call this.
// Returns {header, config, step: null, includesOptimizerState, weightsDtype, manifest, stateOffset,
// stateLength}; the state is bytes [stateOffset, stateOffset + stateLength) of the file.
export function readHeader(prefixBytes, totalSize) {
  if (totalSize < PREFIX_SIZE) {
    throw fail(`file is truncated: ${totalSize} bytes, shorter than the 12-byte prefix`);
  }
  const magic = prefixBytes.subarray(0, 4);
  if (!MAGIC.every((b, i) => magic[i] === b)) {
    throw fail(`not a .tinygpt file: magic is ${pyBytes(magic)}, expected b'TGPT'`);
  }
  const prefix = new DataView(prefixBytes.buffer, prefixBytes.byteOffset, PREFIX_SIZE);
  const version = prefix.getUint32(4, true);
  if (version !== VERSION) throw fail(`unknown .tinygpt version ${version}; this reader knows version ${VERSION}`);
  const n = prefix.getUint32(8, true);
  if (PREFIX_SIZE + n > totalSize) {
    throw fail(`file is truncated: header of ${n} bytes runs past the end (${totalSize} bytes)`);
  }
  if (prefixBytes.length < PREFIX_SIZE + n) {
    throw new RangeError(`readHeader needs the first ${PREFIX_SIZE + n} bytes, got ${prefixBytes.length}`);
  }
  const header = parseHeader(prefixBytes.subarray(PREFIX_SIZE, PREFIX_SIZE + n));
  let config;
  try {
    config = checkConfig(header.config);
  } catch (e) {
    if (!(e instanceof TinyGPTFileError)) throw e;
    throw fail(`config in header invalid: ${e.message}`);
  }
  asFileError(() => checkPreset(header, config, presetsNow()));
  // Length before manifest: the size check is arithmetic, while building the config's manifest for
  // an absurd nLayer would take unbounded time; after it, the manifest is bounded by the file.
  const count = paramCount(config);
  const includesOptimizerState = header.includesOptimizerState;
  const weightsDtype = weightsDtypeOf(header);
  const layout = stateLayout(count, includesOptimizerState ? 3 : 1, weightsDtype);
  const expected = 4 + layout.elementBytes * layout.elements;
  const actual = totalSize - PREFIX_SIZE - n;
  if (actual !== expected) {
    throw fail(`state length mismatch: ${actual} bytes after the header, expected ${expected} `
      + `(${layout.description})${shortfall(actual, expected)}`);
  }
  const manifest = manifestEntries(config);
  checkManifest(header.manifest, manifest);
  return {
    header, config, step: null, includesOptimizerState, weightsDtype, manifest,
    stateOffset: PREFIX_SIZE + n, stateLength: expected,
  };
}

// The whole file -> {header, config, step, includesOptimizerState, weightsDtype, state}; state is a
// new, aligned Uint8Array of the float32 state (float16 weights are widened to float32).
export function readTinyGPT(bytes) {
  const listed = readHeader(bytes, bytes.length);
  const { header, config, includesOptimizerState, weightsDtype, manifest, stateOffset } = listed;
  const stored = bytes.subarray(stateOffset);
  if (hex8(crc32(stored)) !== header.stateCrc32) throw fail("state CRC32 mismatch: the weights are corrupt");
  const step = new DataView(stored.buffer, stored.byteOffset, 4).getInt32(0, true);
  if (step < 0) throw fail(`step is negative (${step})`);
  const count = paramCount(config);
  const state = weightsDtype === "float16" ? widenFloat16State(stored, count) : stored.slice();
  const floats = new Float32Array(state.buffer, 4, (state.length - 4) / 4);
  const bad = firstNonFinite(floats, manifest, count);
  if (bad) throw fail(`non-finite value (NaN or infinity) in ${bad.block} of ${bad.name}`);
  const negative = includesOptimizerState ? firstNegativeV(floats, manifest, count) : null;
  if (negative) throw fail(`negative value in AdamW v of ${negative}: v is a mean of squares`);
  return { header, config, step, includesOptimizerState, weightsDtype, state };
}

function widenFloat16State(stored, count) {
  if (count % 2 && (stored[4 + 2 * count] || stored[5 + 2 * count])) {
    throw fail("float16 padding after the weights is not zero");
  }
  const state = new Uint8Array(4 + 4 * count);
  state.set(stored.subarray(0, 4));
  const halves = new Uint16Array(stored.slice(4, 4 + 2 * count).buffer); // a copy: stored may be unaligned
  new Float32Array(state.buffer, 4, count).set(f16BitsToF32(halves));
  return state;
}

// The tensor name of the first negative AdamW v (the third block), or null: a resumed step would
// take its square root.
function firstNegativeV(floats, manifest, count) {
  for (let at = 0; at < count; at++) {
    if (floats[2 * count + at] < 0) return manifest.findLast((e) => e.offset <= at).name;
  }
  return null;
}

// {block, name} of the first NaN or infinity in blocks of count floats, or null.
function firstNonFinite(floats, manifest, count) {
  for (let i = 0; i < floats.length; i++) {
    if (!Number.isFinite(floats[i])) {
      const block = Math.floor(i / count);
      const at = i - block * count;
      return { block: BLOCK_NAMES[block], name: manifest.findLast((e) => e.offset <= at).name };
    }
  }
  return null;
}

// ---------------------------------------------------------------- writing

// {config, header, state} -> the bytes of a float32 file. state: 4 + 4P bytes (weights only) or
// 4 + 12P (with AdamW moments); header: extra keys (training, dataState, ...), kept as given.
export function writeTinyGPT({ config, header = {}, state }) {
  const cfg = configForWriting(config);
  const count = paramCount(cfg);
  const blocks = blocksOfState(state, count);
  const floats = floatView(state, count * blocks);
  const manifest = manifestEntries(cfg);
  for (let b = 0; b < blocks; b++) {
    for (const e of manifest) {
      const start = b * count + e.offset;
      refuseNonFinite(floats.subarray(start, start + numel(e)), BLOCK_NAMES[b], e.name);
    }
  }
  checkStepForWriting(state);
  return assembleFile(cfg, manifest, header, blocks === 3, "float32", state);
}

// The compact weights-only float16 file (docs/format.md): state is the float32 state without
// moments (4 + 4P bytes); each weight is rounded to the nearest float16, ties to even.
export function writeCompactF16({ config, header = {}, state }) {
  const cfg = configForWriting(config);
  const count = paramCount(cfg);
  if (blocksOfState(state, count) !== 1) {
    throw fail("refusing to save: a float16 file holds weights only (no AdamW moments)");
  }
  const floats = floatView(state, count);
  const manifest = manifestEntries(cfg);
  const stored = new Uint8Array(4 + 2 * (count + (count % 2))); // the padding stays zero
  const halves = new Uint16Array(stored.buffer, 4, count);
  for (const e of manifest) {
    const tensor = floats.subarray(e.offset, e.offset + numel(e));
    refuseNonFinite(tensor, "weights", e.name);
    halves.set(f32ToF16Bits(tensor, e.name), e.offset);
  }
  checkStepForWriting(state);
  stored.set(state.subarray(0, 4));
  return assembleFile(cfg, manifest, header, false, "float16", stored);
}

function configForWriting(config) {
  try {
    return checkConfig(config);
  } catch (e) {
    if (!(e instanceof TinyGPTFileError)) throw e;
    throw fail(`refusing to save: ${e.message}`);
  }
}

function blocksOfState(state, count) {
  if (state.length === 4 + 4 * count) return 1;
  if (state.length === 4 + 12 * count) return 3;
  throw fail(`refusing to save: the state has ${state.length} bytes, the config implies ${4 + 4 * count} `
    + `(step + weights) or ${4 + 12 * count} (step + weights + AdamW m and v)`);
}

// The floats after the step, in place when aligned, else from an aligned copy.
function floatView(state, length) {
  if ((state.byteOffset + 4) % 4 === 0) return new Float32Array(state.buffer, state.byteOffset + 4, length);
  return new Float32Array(state.slice(4, 4 + 4 * length).buffer);
}

function refuseNonFinite(tensor, what, name) {
  for (let i = 0; i < tensor.length; i++) {
    if (!Number.isFinite(tensor[i])) throw fail(`refusing to save: ${what} of ${name} holds NaN or infinity`);
  }
}

function checkStepForWriting(state) {
  const step = new DataView(state.buffer, state.byteOffset, 4).getInt32(0, true);
  if (step < 0) throw fail(`refusing to save: step must be an integer in [0, 2^31), got ${step}`);
}

function assembleFile(config, manifest, meta, includesOptimizerState, dtype, stored) {
  const header = { ...meta };
  delete header.weightsDtype; // absent means float32, so a float32 file is what it always was
  Object.assign(header, { config, manifest, includesOptimizerState, stateCrc32: hex8(crc32(stored)) });
  if (dtype === "float16") header.weightsDtype = "float16";
  if (!Object.hasOwn(header, "savedAt")) header.savedAt = nowIsoSeconds();
  const text = encodeHeader(header);
  const out = new Uint8Array(PREFIX_SIZE + text.length + stored.length);
  out.set(MAGIC);
  const prefix = new DataView(out.buffer, 0, PREFIX_SIZE);
  prefix.setUint32(4, VERSION, true);
  prefix.setUint32(8, text.length, true);
  out.set(text, PREFIX_SIZE);
  out.set(stored, PREFIX_SIZE + text.length);
  return out;
}

// Python's datetime.now(timezone.utc).isoformat(timespec="seconds"): 2026-11-23T14:00:00+00:00
export const nowIsoSeconds = () => new Date().toISOString().slice(0, 19) + "+00:00";

// Compact JSON padded with spaces so that 12 + N is a multiple of 4, with "headerCrc32" = the
// CRC-32 of these bytes taken while the field reads "00000000" (python_ref's encode_header).
export function encodeHeader(meta) {
  const header = { ...meta, headerCrc32: CRC_PLACEHOLDER };
  let json;
  try {
    // JSON.stringify would silently write NaN and infinity as null: refuse them as Python does.
    json = JSON.stringify(header, (key, value) => {
      if (typeof value === "number" && !Number.isFinite(value)) {
        throw new Error("Out of range float values are not JSON compliant");
      }
      return value;
    });
  } catch (e) {
    throw fail(`refusing to save: header metadata is not plain JSON (${e.message})`);
  }
  const encoded = ENCODER.encode(json);
  const text = new Uint8Array(encoded.length + ((4 - ((PREFIX_SIZE + encoded.length) % 4)) % 4)).fill(0x20);
  text.set(encoded);
  const found = [...latin1(text).matchAll(HEADER_CRC_FIELD)];
  if (found.length !== 1) { // a nested one would make the file unreadable
    throw fail("refusing to save: header metadata may not hold a key named 'headerCrc32'");
  }
  const start = found[0].index + found[0][0].length - 9;
  text.set(ENCODER.encode(hex8(crc32(text))), start);
  return text;
}

// ---------------------------------------------------------------- float16

// float32 -> float16 bits, round to nearest, ties to even (numpy's astype(np.float16)), subnormals
// included. A finite value that rounds beyond 65504 (|x| >= 65520) would become infinity: refused,
// naming the tensor. NaN and infinity pass through (writers refuse them before converting).
export function f32ToF16Bits(values, name = "the array") {
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  const out = new Uint16Array(values.length);
  for (let i = 0; i < bits.length; i++) {
    const h = f32BitsToF16Bits(bits[i]);
    if (h < 0) {
      throw fail(`refusing to save: weights of ${name} hold a value beyond the float16 range (largest finite 65504)`);
    }
    out[i] = h;
  }
  return out;
}

// One value; -1 where a finite value overflows.
function f32BitsToF16Bits(x) {
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  const mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 | (mant >>> 13) : 0); // NaN stays a (quiet) NaN
  const e16 = exp - 112; // float16 biased exponent: bias 15 instead of 127
  if (e16 < -10) return sign; // below 2^-25, half the smallest subnormal: rounds to (signed) zero
  // Subnormal result: the implicit 1 shifts into the mantissa; a carry up to 0x400 is the smallest normal.
  if (e16 <= 0) return sign | roundShift(mant | 0x800000, 14 - e16);
  const h = roundShift((e16 << 23) | mant, 13); // a mantissa carry correctly bumps the exponent
  return h >= 0x7c00 ? -1 : sign | h;
}

// v >> s rounded to nearest, ties to even (s in 1..24, v < 2^31).
function roundShift(v, s) {
  const q = v >>> s;
  const rest = v & ((1 << s) - 1);
  const half = 1 << (s - 1);
  return rest > half || (rest === half && q & 1) ? q + 1 : q;
}

// float16 bits -> float32, exact (every float16 is a float32).
export function f16BitsToF32(halves) {
  const out = new Float32Array(halves.length);
  const bits = new Uint32Array(out.buffer);
  for (let i = 0; i < halves.length; i++) bits[i] = f16BitsToF32Bits(halves[i]);
  return out;
}

function f16BitsToF32Bits(h) {
  const sign = (h & 0x8000) << 16;
  let exp = (h >>> 10) & 0x1f;
  let mant = h & 0x3ff;
  if (exp === 0x1f) return sign | 0x7f800000 | (mant << 13);
  if (exp === 0) {
    if (mant === 0) return sign;
    exp = 1; // a subnormal: shift the leading 1 up to the implicit bit
    while (!(mant & 0x400)) {
      mant <<= 1;
      exp--;
    }
    mant &= 0x3ff;
  }
  return sign | ((exp + 112) << 23) | (mant << 13);
}
