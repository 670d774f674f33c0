// Field checks for the page's forms: every number is read from its text and checked before anything
// starts. An empty, non-numeric, out-of-range or absurd value gets a sentence, never a silent default.
// The limits come from presets.json's rules (app.js: fieldLimits of webgpu/config_rules.js).

/** The field's value as a number in [min, max] (an integer if `integer`), or throws a sentence. */
function numberField(input, label, { min, max, integer = false }) {
  const text = input.value.trim();
  if (text === "") throw new Error(`${label} is empty: give a number from ${min} to ${max.toLocaleString("en")}.`);
  const value = Number(text);
  if (!Number.isFinite(value)) throw new Error(`${label} "${text}" is not a number.`);
  if (integer && !Number.isInteger(value)) throw new Error(`${label} must be a whole number, not ${text}.`);
  if (value < min || value > max) {
    throw new Error(`${label} ${text} is out of range: give a number from ${min} to ${max.toLocaleString("en")}.`);
  }
  return value;
}

/** Reads every field of `spec` ({key: [input, label, limits]}); returns {values, errors}. */
export function readFields(spec) {
  const values = {}, errors = [];
  for (const [key, [input, label, limits]] of Object.entries(spec)) {
    try {
      values[key] = numberField(input, label, limits);
      input.removeAttribute("aria-invalid");
    } catch (e) {
      errors.push(e.message);
      input.setAttribute("aria-invalid", "true");
    }
  }
  return { values, errors };
}
