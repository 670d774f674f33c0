// What a .tinygpt header may say beyond the keys a reader needs to find the weights: every value the page,
// an engine or python_ref uses is checked, with its key named, so that a file whose CRCs are right but
// whose header lies is refused in one sentence. The same checks, order and words as
// python_ref/header_checks.py (tests/site/test_header_fuzz.py holds the two readers to it); the rules
// are in docs/format.md.
import { checkFields, ConfigError, pyRepr } from "../../../webgpu/config_rules.js";

// Deeper nesting than this anywhere in a header is refused (no key of the format nests past 4).
export const MAX_HEADER_DEPTH = 32;
const SHA256_HEX = /^[0-9a-f]{64}$/;
const RUN_OPTIONS = { worldSize: 1, rankBatch: 1, gradAccum: 1, warmupSteps: 0, cleanSteps: 0 };
const LR_SCHEDULES = ["none", "cosine"];
const PRECISIONS = ["fp32", "bf16", "fp16"];
const FLAGS = ["bf16", "compile", "fsdp"];

export class HeaderError extends Error {}

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const own = (obj, key) => (Object.hasOwn(obj, key) ? obj[key] : undefined);
// JSON's one kind of number, as python_ref reads it: integral and below 1e16 in magnitude is an integer.
export const isInt = (v) => typeof v === "number" && Number.isInteger(v) && Math.abs(v) < 1e16;
const isNumber = (v) => typeof v === "number" && Number.isFinite(v);

/** Whether `value` nests objects or arrays more than MAX_HEADER_DEPTH levels (iteratively). */
export function tooDeep(value) {
  const stack = [[value, 1]];
  while (stack.length) {
    const [v, depth] = stack.pop();
    if (v !== null && typeof v === "object") {
      if (depth > MAX_HEADER_DEPTH) return true;
      for (const x of Array.isArray(v) ? v : Object.values(v)) stack.push([x, depth + 1]);
    }
  }
  return false;
}

export const depthMessage = () => `header JSON nests deeper than ${MAX_HEADER_DEPTH} levels`;

/** A JSON value's kind in the words of the messages. */
export function kind(v) {
  if (v === null || v === undefined) return "null";
  if (typeof v === "boolean") return "a boolean";
  if (typeof v === "number") return "a number";
  if (typeof v === "string") return "a string";
  return Array.isArray(v) ? "an array" : "an object";
}

function keyError(key, expected, got) {
  const value = got !== null && typeof got === "object" ? "" : `: ${pyRepr(got)}`;
  return new HeaderError(`header key ${pyRepr(key)} must be ${expected}, got ${kind(got)}${value}`);
}

function checkTraining(training, rules) {
  if (!isObject(training)) throw keyError("training", "an object", training);
  const recipe = Object.fromEntries(Object.entries(training).filter(([k]) => Object.hasOwn(rules.training, k)));
  try {
    checkFields(rules, "training", recipe);
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    throw new HeaderError(`header key 'training': ${e.message}`);
  }
  for (const [name, low] of Object.entries(RUN_OPTIONS)) {
    if (Object.hasOwn(training, name) && !(isInt(training[name]) && training[name] >= low)) {
      throw new HeaderError(`header key 'training': ${name} must be an integer >= ${low}, got ${pyRepr(training[name])}`);
    }
  }
  if (Object.hasOwn(training, "precision") && !PRECISIONS.includes(training.precision)) {
    throw new HeaderError(`header key 'training': precision must be one of ${PRECISIONS.join(", ")}, got ${pyRepr(training.precision)}`);
  }
  if (Object.hasOwn(training, "lossScale") && !(isNumber(training.lossScale) && training.lossScale > 0)) {
    throw new HeaderError(`header key 'training': lossScale must be a finite number > 0, got ${pyRepr(training.lossScale)}`);
  }
  if (Object.hasOwn(training, "lrSchedule") && !LR_SCHEDULES.includes(training.lrSchedule)) {
    throw new HeaderError(`header key 'training': lrSchedule must be one of ${LR_SCHEDULES.join(", ")}, got ${pyRepr(training.lrSchedule)}`);
  }
  for (const name of FLAGS) {
    if (Object.hasOwn(training, name) && typeof training[name] !== "boolean") {
      throw new HeaderError(`header key 'training': ${name} must be true or false, got ${pyRepr(training[name])}`);
    }
  }
}

function checkCorpus(corpus, key = "corpus") {
  if (!isObject(corpus)) throw keyError(key, "an object {name, bytes, sha256}", corpus);
  const [name, bytes, sha] = [own(corpus, "name"), own(corpus, "bytes"), own(corpus, "sha256")];
  const where = `header key ${pyRepr(key)}`;
  if (typeof name !== "string") throw new HeaderError(`${where}: name must be a string, got ${pyRepr(name)}`);
  if (!(isInt(bytes) && bytes >= 0 && bytes < 2 ** 53)) {
    throw new HeaderError(`${where}: bytes must be an integer in [0, 2^53), got ${pyRepr(bytes)}`);
  }
  if (!(typeof sha === "string" && SHA256_HEX.test(sha))) {
    throw new HeaderError(`${where}: sha256 must be 64 lowercase hex digits, got ${pyRepr(sha)}`);
  }
  for (const bound of ["fromStep", "toStep"]) { // the steps trained on it (the page's corpora list)
    if (Object.hasOwn(corpus, bound) && !(isInt(corpus[bound]) && corpus[bound] >= 0 && corpus[bound] < 2 ** 31)) {
      throw new HeaderError(`${where}: ${bound} must be an integer in [0, 2^31), got ${pyRepr(corpus[bound])}`);
    }
  }
}

function checkHistory(history, key) {
  if (!Array.isArray(history)) throw keyError(key, "an array of [step, loss] pairs", history);
  history.forEach((entry, i) => {
    if (!(Array.isArray(entry) && entry.length === 2 && isInt(entry[0]) && entry[0] >= 0 && entry[0] < 2 ** 31
      && isNumber(entry[1]))) {
      throw new HeaderError(`header key ${pyRepr(key)}: entry ${i} must be [step, loss] (an integer in [0, 2^31) and a `
        + `finite number), got ${pyRepr(entry)}`);
    }
  });
}

/** Every optional key the levels read, where present (the required ones are the reader's own). */
export function checkValues(header, rules) {
  if (Object.hasOwn(header, "training")) checkTraining(header.training, rules);
  if (Object.hasOwn(header, "corpus")) checkCorpus(header.corpus);
  if (Object.hasOwn(header, "corpora")) {
    if (!Array.isArray(header.corpora)) throw keyError("corpora", "an array of {name, bytes, sha256}", header.corpora);
    header.corpora.forEach((c, i) => checkCorpus(c, `corpora[${i}]`));
  }
  for (const key of ["lossHistory", "valHistory"]) if (Object.hasOwn(header, key)) checkHistory(header[key], key);
  for (const key of ["finalLoss", "bestVal"]) {
    if (Object.hasOwn(header, key) && header[key] !== null && !isNumber(header[key])) {
      throw keyError(key, "a finite number or null", header[key]);
    }
  }
  for (const key of ["preset", "sample", "savedAt", "name"]) {
    if (Object.hasOwn(header, key) && header[key] !== null && typeof header[key] !== "string") {
      throw keyError(key, "a string or null", header[key]);
    }
  }
  if (Object.hasOwn(header, "run")) {
    const run = header.run;
    if (!isObject(run)) throw keyError("run", "an object {id, backend, engine}", run);
    for (const field of ["id", "backend", "engine"]) {
      const v = own(run, field);
      if (v !== undefined && v !== null && typeof v !== "string") {
        throw new HeaderError(`header key 'run': ${field} must be a string or null, got ${pyRepr(v)}`);
      }
    }
  }
}

/** A `preset` that names one of presets.json's must describe these weights (its shape is the config's). */
export function checkPreset(header, config, presets) {
  const name = own(header, "preset");
  const preset = typeof name === "string" && Object.hasOwn(presets.presets, name) ? presets.presets[name] : null;
  if (!preset) return;
  for (const field of ["nLayer", "nHead", "dModel", "ctx"]) {
    if (preset[field] !== config[field]) {
      throw new HeaderError(`header key 'preset' says ${pyRepr(name)}, but the weights are not a ${name} model `
        + `(${field} ${config[field]}, the preset has ${preset[field]})`);
    }
  }
}
