// Reader and writer of LoRA adapter files (.tgla, docs/format.md "LoRA adapter file"), for the Web
// Worker and for Node. It mirrors python_ref/lora.py's read_adapter, save_adapter and base_problem: the
// same checks in the same order with the same messages, so a damaged adapter, or one on another base,
// is refused for the same stated reason at every level (tests/site/test_adapter_file_js.py holds the two
// to it). The framing and the header are a .tinygpt's (tinygpt_file.js: decodeHeader, encodeHeader).
//
// The "state" that the reader returns and the writer takes is the engines' adapter state
// (tg_lora_export_state, webgpu/lora.js exportState): i32 step | f32 adapters x Q | [f32 m x Q | f32 v x Q],
// adapter-manifest order, little-endian. A file's data is that state without the step, which its
// header holds.
import { checkFields, ConfigError, pyNumber, pyRepr } from "../../../webgpu/config_rules.js";
import { checkConfig, crc32, decodeHeader, encodeHeader, paramCount, pyBytes, TinyGPTFileError } from "./tinygpt_file.js";
import { isInt } from "./header_checks.js";
import { presetsNow } from "./presets.js";
import { sha256Hex } from "./sha256.js";

/** The adaptable projections in canonical order (python_ref/lora.py TARGETS; bit i of the C API's mask). */
export const LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "fc_in", "fc_out"];
const MAGIC = [0x54, 0x47, 0x4c, 0x41]; // "TGLA"
const TGPT = [0x54, 0x47, 0x50, 0x54];
const VERSION = 1;
const PREFIX_SIZE = 12;
const BLOCK_WORDS = ["adapter", "AdamW m", "AdamW v"];

/** An adapter file that cannot be trusted or does not fit the model; the message says why (AdapterFileError). */
export class AdapterFileError extends TinyGPTFileError {
  constructor(message) {
    super(message);
    this.name = "AdapterFileError";
  }
}

const fail = (message) => new AdapterFileError(message);
const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const own = (obj, key) => (Object.hasOwn(obj, key) ? obj[key] : undefined);
// Python's str() of a JSON value, as an f-string writes it (a string bare, the rest as repr)
const pyStrOf = (v) => (typeof v === "string" ? v : pyRepr(v));
const hex8 = (crc) => crc.toString(16).padStart(8, "0");
const TYPE_OF = { dict: isObject, list: Array.isArray, str: (v) => typeof v === "string" };

/** [in, out] of a target's Linear at width C. */
const targetDims = (target, C) => (target === "fc_in" ? [C, 4 * C] : target === "fc_out" ? [4 * C, C] : [C, C]);
const modulePath = (l, target) => `blocks.${l}.${target.startsWith("fc_") ? "mlp" : "attn"}.${target}`;

/** The C API's bit mask of targets (tg_lora_config.targets): bit i for LORA_TARGETS[i]. */
export const targetMask = (targets) => targets.reduce((mask, t) => mask | (1 << LORA_TARGETS.indexOf(t)), 0);

/**
 * python_ref's LoRAConfig(rank, alpha, targets, seed): checked by presets.json's rules ("lora") and the
 * target and seed checks, in its words; targets come back in canonical order. Throws ConfigError.
 */
export function loraConfig({ rank, alpha, targets, seed }) {
  try {
    checkFields(presetsNow().rules, "lora", { rank, alpha });
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    throw new ConfigError(`LoRA ${e.message}`);
  }
  const list = Array.isArray(targets) ? targets : null;
  const unknown = (list ?? []).filter((t) => !LORA_TARGETS.includes(t));
  if (!list || !list.length || unknown.length || new Set(list).size !== list.length) {
    throw new ConfigError(`LoRA targets must be distinct names among ${LORA_TARGETS.join(", ")}, got ${pyRepr(targets)}`);
  }
  if (!isInt(seed) || seed < 0 || seed >= 2 ** 53) throw new ConfigError(`LoRA seed must be an integer in [0, 2^53), got ${pyRepr(seed)}`);
  return { rank, alpha, targets: LORA_TARGETS.filter((t) => list.includes(t)), seed };
}

/** LoRAConfig.from_json: an object with rank, alpha, targets and seed, then loraConfig's checks. */
function loraFromJson(d) {
  if (!isObject(d) || !["rank", "alpha", "targets", "seed"].every((k) => Object.hasOwn(d, k))) {
    throw new ConfigError(`LoRA config must be an object with rank, alpha, targets, seed, got ${pyRepr(d)}`);
  }
  return loraConfig(d);
}

/** The adapter manifest (python_ref adapter_manifest): [{name, shape, offset}], offsets in floats within a block. */
export function adapterEntries(config, lora) {
  const out = [], r = lora.rank;
  let offset = 0;
  for (let l = 0; l < config.nLayer; l++) {
    for (const target of lora.targets) {
      const [inF, outF] = targetDims(target, config.dModel);
      out.push({ name: `${modulePath(l, target)}.lora_A`, shape: [r, inF], offset });
      offset += r * inF;
      out.push({ name: `${modulePath(l, target)}.lora_B`, shape: [outF, r], offset });
      offset += outF * r;
    }
  }
  return out;
}

/** Q, the adapters' float count, by formula (python_ref _shapes): no manifest is built for an absurd config. */
export const adapterCount = (config, lora) =>
  config.nLayer * lora.targets.reduce((n, t) => n + lora.rank * targetDims(t, config.dModel).reduce((a, b) => a + b), 0);

// The header's manifest must equal the implied one exactly, integers as integers (python_ref's == and _all_int).
function sameManifest(got, entries) {
  if (!Array.isArray(got) || got.length !== entries.length) return false;
  return entries.every((e, i) => {
    const g = got[i];
    if (!isObject(g) || Object.keys(g).length !== 3 || own(g, "name") !== e.name) return false;
    const shape = own(g, "shape"), offset = own(g, "offset");
    return isInt(offset) && offset === e.offset && Array.isArray(shape) && shape.length === e.shape.length
      && shape.every((d, j) => isInt(d) && d === e.shape[j]);
  });
}

// ---------------------------------------------------------------- reading

/**
 * Everything the first 12 + N bytes and the file's size prove, without the data (to list saved
 * fine-tunes quickly): {header, lora, baseConfig, step, includesOptimizerState, entries, Q, dataOffset}.
 * Refuses in read_adapter's words, up to and including the manifest check.
 */
export function readAdapterHeader(prefixBytes, totalSize) {
  if (totalSize < PREFIX_SIZE) throw fail(`adapter file is truncated: ${totalSize} bytes, shorter than the 12-byte prefix`);
  const magic = prefixBytes.subarray(0, 4);
  if (!MAGIC.every((b, i) => magic[i] === b)) {
    const hint = TGPT.every((b, i) => magic[i] === b) ? " (that is a model checkpoint, not an adapter)" : "";
    throw fail(`not a LoRA adapter file: magic is ${pyBytes(magic)}, expected b'TGLA'${hint}`);
  }
  const prefix = new DataView(prefixBytes.buffer, prefixBytes.byteOffset, PREFIX_SIZE);
  const version = prefix.getUint32(4, true);
  if (version !== VERSION) throw fail(`unknown adapter file version ${version}; this reader knows version ${VERSION}`);
  const n = prefix.getUint32(8, true);
  if (PREFIX_SIZE + n > totalSize) throw fail(`adapter file is truncated: header of ${n} bytes runs past the end (${totalSize} bytes)`);
  if (prefixBytes.length < PREFIX_SIZE + n) throw new RangeError(`readAdapterHeader needs the first ${PREFIX_SIZE + n} bytes`);
  let header;
  try {
    header = decodeHeader(prefixBytes.subarray(PREFIX_SIZE, PREFIX_SIZE + n));
  } catch (e) {
    if (!(e instanceof TinyGPTFileError)) throw e;
    throw fail(`adapter ${e.message}`);
  }
  for (const [key, kind] of [["lora", "dict"], ["baseConfig", "dict"], ["manifest", "list"], ["dataCrc32", "str"], ["baseWeightsCrc32", "str"]]) {
    if (!TYPE_OF[kind](own(header, key))) throw fail(`adapter header key '${key}' is missing or not a ${kind}`);
  }
  const withMoments = Object.hasOwn(header, "includesOptimizerState") ? header.includesOptimizerState : false;
  if (typeof withMoments !== "boolean") throw fail("adapter header key 'includesOptimizerState' is not a bool");
  const step = own(header, "step") ?? null;
  if (step !== null && !(isInt(step) && step >= 0 && step < 2 ** 31)) {
    throw fail(`adapter header key 'step' must be an integer in [0, 2^31), got ${pyRepr(step)}`);
  }
  if (withMoments && step === null) throw fail("adapter holds AdamW moments but no 'step': it cannot be resumed exactly");
  const sha = own(header, "baseWeightsSha256") ?? null;
  if (sha !== null && !(typeof sha === "string" && /^[0-9a-f]{64}$/.test(sha))) {
    throw fail("adapter header key 'baseWeightsSha256' must be 64 lowercase hex digits");
  }
  let lora, baseConfig;
  try {
    lora = loraFromJson(header.lora);
    baseConfig = checkConfig(header.baseConfig);
  } catch (e) {
    if (!(e instanceof ConfigError || e instanceof TinyGPTFileError)) throw e;
    throw fail(`adapter header config invalid: ${e.message}`);
  }
  const blocks = withMoments ? 3 : 1;
  // the length first (arithmetic on the config), the manifest only then: bounded by the file's size
  const Q = adapterCount(baseConfig, lora), data = totalSize - PREFIX_SIZE - n;
  if (data !== 4 * Q * blocks) {
    const what = withMoments ? "adapters + AdamW m and v" : "adapters";
    throw fail(`adapter data length mismatch: ${data} bytes, expected ${4 * Q * blocks} (${blocks} x ${Q} float32: ${what})`);
  }
  const entries = adapterEntries(baseConfig, lora);
  if (!sameManifest(header.manifest, entries)) {
    throw fail("adapter manifest/shape mismatch: its tensors are not those its LoRA config implies");
  }
  return { header, lora, baseConfig, step, includesOptimizerState: withMoments, entries, Q, dataOffset: PREFIX_SIZE + n };
}

/**
 * A whole adapter file -> readAdapterHeader's fields and `state`: a new, aligned Uint8Array of the
 * adapter state (i32 step | adapters | [m | v]), the step the header's (0 when it has none).
 */
export function readAdapter(bytes) {
  const listed = readAdapterHeader(bytes, bytes.length);
  const { header, Q, dataOffset, includesOptimizerState, step } = listed;
  const data = bytes.subarray(dataOffset);
  if (hex8(crc32(data)) !== header.dataCrc32) throw fail("adapter data CRC32 mismatch: the adapter is corrupt");
  const state = new Uint8Array(4 + data.length);
  new DataView(state.buffer).setInt32(0, step ?? 0, true);
  state.set(data, 4);
  const floats = new Float32Array(state.buffer, 4, data.length / 4);
  for (let i = 0; i < floats.length; i++) {
    if (!Number.isFinite(floats[i])) throw fail("adapter holds non-finite values (NaN or infinity)");
  }
  if (includesOptimizerState) {
    for (let i = 2 * Q; i < 3 * Q; i++) {
      if (floats[i] < 0) throw fail("negative value in an adapter's AdamW v: v is a mean of squares");
    }
  }
  return { ...listed, state };
}

// ---------------------------------------------------------------- the base an adapter belongs to

/** python's json.dumps of a flat config object (", " and ": ", numbers as Python writes them). */
const pyJson = (obj) => `{${Object.entries(obj).map(([k, v]) => `"${k}": ${typeof v === "number" ? pyNumber(v) : JSON.stringify(v)}`).join(", ")}}`;

/** {crc32, sha256} of a .tinygpt state's weights (float32 LE, manifest order): the base's identity. */
export async function baseIdentity(state, config) {
  const weights = state.subarray(4, 4 + 4 * paramCount(config));
  return { crc32: hex8(crc32(weights)), sha256: await sha256Hex(weights) };
}

/**
 * null if the adapter (readAdapter's or readAdapterHeader's) was made on these very weights, else the
 * reason (python_ref base_problem): the config, or the weights' hashes. base: {config, crc32, sha256}.
 */
export function baseProblem(adapter, base) {
  const model = checkConfig(base.config);
  if (Object.keys(model).some((k) => model[k] !== adapter.baseConfig[k])) {
    return `adapter does not fit this model: it was made for ${pyJson(adapter.baseConfig)}, the model is ${pyJson(model)}`;
  }
  const { header } = adapter, sha = own(header, "baseWeightsSha256") ?? null;
  if (header.baseWeightsCrc32 !== base.crc32) {
    return `adapter was trained on other base weights (base CRC32 ${header.baseWeightsCrc32}, this model's ${base.crc32})`;
  }
  if (sha !== null && sha !== base.sha256) {
    return `adapter was trained on other base weights (base SHA-256 ${sha.slice(0, 16)}..., this model's ` +
      `${base.sha256.slice(0, 16)}...; their CRC32s agree)`;
  }
  return null;
}

// ---------------------------------------------------------------- writing

/**
 * The bytes of an adapter file (python_ref save_adapter): the adapter state `state` (4 + 4Q bytes, or
 * 4 + 12Q with AdamW's moments: then the header's `step` is the state's, and a `step` in `header` that
 * differs is refused), of LoRA `lora` on a base of `baseConfig` whose weights hash to baseCrc32 and
 * baseSha256; `header`: the other keys (training, dataState, corpus, histories, ...), kept as given.
 */
export function writeAdapter({ baseConfig, lora, baseCrc32, baseSha256, header: meta = {}, state }) {
  let config, cfg;
  try {
    config = checkConfig(baseConfig);
    cfg = loraConfig(lora);
  } catch (e) {
    if (!(e instanceof ConfigError || e instanceof TinyGPTFileError)) throw e;
    throw fail(`refusing to save: ${e.message}`);
  }
  const Q = adapterCount(config, cfg), entries = adapterEntries(config, cfg);
  const blocks = state.length === 4 + 4 * Q ? 1 : state.length === 4 + 12 * Q ? 3 : 0;
  if (!blocks) {
    throw fail(`refusing to save: the adapter state has ${state.length} bytes, the config implies ${4 + 4 * Q} ` +
      `(step + adapters) or ${4 + 12 * Q} (step + adapters + AdamW m and v)`);
  }
  const data = state.slice(4, 4 + 4 * Q * blocks);  // aligned: its floats are read below
  const floats = new Float32Array(data.buffer);
  const header = { ...meta };
  if (blocks === 3) {
    const step = new DataView(state.buffer, state.byteOffset, 4).getInt32(0, true);
    if (!Object.hasOwn(header, "step")) header.step = step;
    if (header.step !== step) throw fail(`refusing to save: step ${pyStrOf(header.step)} differs from the optimizer's step ${step}`);
  }
  for (let b = 0; b < blocks; b++) {
    for (const e of entries) {
      const n = e.shape[0] * e.shape[1], at = b * Q + e.offset;
      for (let i = at; i < at + n; i++) {
        if (!Number.isFinite(floats[i])) throw fail(`refusing to save: ${BLOCK_WORDS[b]} tensor ${e.name} holds NaN or infinity`);
      }
    }
  }
  Object.assign(header, {
    lora: { rank: cfg.rank, alpha: cfg.alpha, targets: cfg.targets, seed: cfg.seed }, baseConfig: config,
    baseWeightsCrc32: baseCrc32, baseWeightsSha256: baseSha256, manifest: entries, includesOptimizerState: blocks === 3,
    dataCrc32: hex8(crc32(data)),
  });
  const text = encodeHeader(header);
  const out = new Uint8Array(PREFIX_SIZE + text.length + data.length);
  out.set(MAGIC);
  const prefix = new DataView(out.buffer, 0, PREFIX_SIZE);
  prefix.setUint32(4, VERSION, true);
  prefix.setUint32(8, text.length, true);
  out.set(text, PREFIX_SIZE);
  out.set(data, PREFIX_SIZE + text.length);
  return out;
}

/** Whether `bytes` begin with an adapter file's magic (an upload is routed by it). */
export const isAdapterFile = (bytes) => bytes.length >= 4 && MAGIC.every((b, i) => bytes[i] === b);
