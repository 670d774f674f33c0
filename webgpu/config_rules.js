// The rules of every config field in JS: what site/static/presets.json's "rules" section says each
// field accepts (type, bounds, what 0 or +inf means, checks across fields), turned into the same
// sentences python_ref/config.py and the C++ core (wasm/src/config_rules.cpp) write, so a bad value
// is refused in the same words at every level (tests/site/test_config_rules.py). The page's form
// checks, model_config.js, the .tinygpt reader, the WebAssembly engine and the WebGPU trainer call it.
// The rules come in as an argument (presets.rules, or config.rules from model_config.js): no imports,
// so it runs unchanged in a browser worker, in the page and under Node, wherever webgpu/ is served.

export class ConfigError extends Error {
  constructor(message) {
    super(message);
    this.name = "ConfigError";
  }
}

// ---------------------------------------------------------------- values as Python writes them

const QUOTE_ESCAPES = { "\t": "\\t", "\n": "\\n", "\r": "\\r" };

/** Python's quoting: single quotes unless the text holds ' and no ", backslash escapes, \xNN for the characters keep() rejects. */
export function pyQuote(text, keep) {
  const q = text.includes("'") && !text.includes('"') ? '"' : "'";
  let out = q;
  for (const c of text) {
    const code = c.codePointAt(0);
    if (c === "\\" || c === q) out += "\\" + c;
    else if (QUOTE_ESCAPES[c]) out += QUOTE_ESCAPES[c];
    else out += keep(code) ? c : `\\x${code.toString(16).padStart(2, "0")}`;
  }
  return out + q;
}

export const pyStr = (s) => pyQuote(s, (code) => code >= 0x20 && (code < 0x7f || code > 0xa0));

/**
 * A number as python_ref writes it: nan, inf, -inf; an integer-valued one below 1e16 without ".0"
 * (JS cannot tell JSON's 8.0 from 8); any other as Python's repr() of the float (shortest digits that
 * read back, an exponent below 1e-4 and from 1e16 on: 1e-05, 0.1, 1e+16). C++ writes them the same.
 */
export function pyNumber(v) {
  if (Number.isNaN(v)) return "nan";
  if (!Number.isFinite(v)) return v > 0 ? "inf" : "-inf";
  if (Number.isInteger(v) && Math.abs(v) < 1e16) return String(v);
  const [mantissa, exponent] = Math.abs(v).toExponential().split("e");  // the shortest digits
  const digits = mantissa.replace(".", ""), e = Number(exponent);
  let s;
  if (e < -4 || e >= 16) {
    s = `${digits[0]}${digits.length > 1 ? "." + digits.slice(1) : ""}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
  } else if (e < 0) {
    s = "0." + "0".repeat(-e - 1) + digits;
  } else if (digits.length <= e + 1) {
    s = digits + "0".repeat(e + 1 - digits.length) + ".0";
  } else {
    s = digits.slice(0, e + 1) + "." + digits.slice(e + 1);
  }
  return (v < 0 ? "-" : "") + s;
}

/** repr() of a parsed JSON value, numbers as pyNumber writes them. */
export function pyRepr(v) {
  if (v === null || v === undefined) return "None";
  if (typeof v === "boolean") return v ? "True" : "False";
  if (typeof v === "string") return pyStr(v);
  if (typeof v === "number") return pyNumber(v);
  if (typeof v === "bigint") return String(v);
  if (Array.isArray(v)) return `[${v.map(pyRepr).join(", ")}]`;
  return `{${Object.entries(v).map(([k, x]) => `${pyStr(k)}: ${pyRepr(x)}`).join(", ")}}`;
}

// ---------------------------------------------------------------- rules

/** 'an integer in [1, 4096]', 'a finite number > 0', 'a number > 0 (inf: no clipping)'... */
export function ruleText(rule) {
  const kind = rule.type === "integer" ? "an integer" : "infinity" in rule ? "a number" : "a finite number";
  const low = "min" in rule ? ["[", rule.min] : "above" in rule ? ["(", rule.above] : null;
  const high = "max" in rule ? ["]", rule.max] : "below" in rule ? [")", rule.below] : null;
  let text = kind;
  if (low && high) text = `${kind} in ${low[0]}${pyNumber(low[1])}, ${pyNumber(high[1])}${high[0]}`;
  else if (low) text = `${kind} ${low[0] === "[" ? ">=" : ">"} ${pyNumber(low[1])}`;
  else if (high) text = `${kind} ${high[0] === "]" ? "<=" : "<"} ${pyNumber(high[1])}`;
  const notes = [...("zero" in rule ? [`0: ${rule.zero}`] : []), ...("infinity" in rule ? [`inf: ${rule.infinity}`] : [])];
  return text + (notes.length ? ` (${notes.join("; ")})` : "");
}

function ruleOf(rules, section, name) {
  const rule = rules?.[section]?.[name];
  if (!rule) throw new ConfigError(`presets.json's rules have no ${section}.${name}`);
  return rule;
}

// JSON has one kind of number; python_ref reads an integral one below 1e16 as an integer and any other as
// a float (python_ref/header_checks.py json_number), so an integer rule takes exactly those here too.
const isJsonInteger = (v) => Number.isInteger(v) && Math.abs(v) < 1e16;

/** null if rules[section][name] accepts `value`, else the sentence saying why not. */
export function fieldProblem(rules, section, name, value) {
  const rule = ruleOf(rules, section, name);
  let ok = typeof value === "number" && !Number.isNaN(value) &&
    (rule.type === "integer" ? isJsonInteger(value) : Number.isFinite(value) || (value > 0 && "infinity" in rule));
  ok = ok && !(value < rule.min) && !(value <= rule.above) && !(value > rule.max) && !(value >= rule.below);
  return ok ? null : `${name} must be ${ruleText(rule)}, got ${pyRepr(value)}`;
}

/** null, or the first problem of `values` (each field present, in the rules' order, then the checks across fields). */
export function sectionProblem(rules, section, values) {
  for (const name of Object.keys(ruleOfSection(rules, section))) {
    if (!Object.hasOwn(values, name)) continue;
    const problem = fieldProblem(rules, section, name, values[name]);
    if (problem) return problem;
  }
  for (const check of rules.checks?.[section] ?? []) {
    const [a, b] = check.divisible;
    if (Object.hasOwn(values, a) && Object.hasOwn(values, b) && values[a] % values[b] !== 0) {
      return check.message.replaceAll(`{${a}}`, pyRepr(values[a])).replaceAll(`{${b}}`, pyRepr(values[b]));
    }
  }
  return null;
}

function ruleOfSection(rules, section) {
  if (!rules?.[section]) throw new ConfigError(`no ${section} rules: build the config with site/static/js/model_config.js, which reads them from presets.json`);
  return rules[section];
}

/** Throws a ConfigError for the first problem of `values` (sectionProblem). */
export function checkFields(rules, section, values) {
  const problem = sectionProblem(rules, section, values);
  if (problem) throw new ConfigError(problem);
}

/**
 * Checks a {model, training, initStd, rules} config (model_config.js's): the model fields with
 * initStd, the checks across them, then the training fields, as the C++ core's tg_create and
 * tg_set_hyper do.
 */
export function checkConfig({ model, training, initStd, rules }) {
  checkFields(rules, "model", initStd === undefined ? model : { ...model, initStd });
  if (training) checkFields(rules, "training", training);
}

/** A rule's bounds for a form field, inclusive: {min, max, integer} (an integer's "below n" is max n - 1). */
export function fieldLimits(rule) {
  const integer = rule.type === "integer";
  const min = "min" in rule ? rule.min : "above" in rule && integer ? rule.above + 1 : rule.above;
  const max = "max" in rule ? rule.max : "below" in rule && integer ? rule.below - 1 : rule.below;
  return { min: min ?? -Infinity, max: max ?? Infinity, integer };
}
