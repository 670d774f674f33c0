// Field checks for the page's forms: every number is read from its text and checked before anything
// starts. An empty, non-numeric, out-of-range or absurd value gets a sentence, never a silent default.
// The limits come from presets.json's rules (app.js: fieldLimits of webgpu/config_rules.js).

/** The field's value as a number in [min, max] (an integer if `integer`), or throws a sentence. An empty
 * `optional` field is null (the caller picks its value: a random sample seed). */
function numberField(input, label, { min, max, integer = false, optional = false }) {
  const text = input.value.trim();
  if (text === "" && optional) return null;
  if (text === "") throw new Error(`${label} is empty: give a number from ${min} to ${max.toLocaleString("en")}.`);
  const value = Number(text);
  if (!Number.isFinite(value)) throw new Error(`${label} "${text}" is not a number.`);
  if (integer && !Number.isInteger(value)) throw new Error(`${label} must be a whole number, not ${text}.`);
  if (value < min || value > max) {
    throw new Error(`${label} ${text} is out of range: give a number from ${min} to ${max.toLocaleString("en")}.`);
  }
  return value;
}

/**
 * Reads every field of `spec` ({key: [input, label, limits]}); returns {values, errors, invalid}:
 * `invalid` is [{key, input, message}] of the fields that failed, in the spec's order.
 */
export function readFields(spec) {
  const values = {}, errors = [], invalid = [];
  for (const [key, [input, label, limits]] of Object.entries(spec)) {
    try {
      values[key] = numberField(input, label, limits);
      input.removeAttribute("aria-invalid");
    } catch (e) {
      errors.push(e.message);
      invalid.push({ key, input, message: e.message });
      input.setAttribute("aria-invalid", "true");
    }
  }
  return { values, errors, invalid };
}

/**
 * Shows a form's field errors in `box` (a role=alert element with an id), one sentence per field, each
 * tied to its field: the field is aria-invalid and aria-describedby its sentence, and the first one takes
 * the focus, so a keyboard or screen-reader user lands where the fix goes. The fields of `spec` that are
 * valid now lose a description this function gave them. Returns true when there was an error.
 */
export function reportFieldErrors(box, spec, { invalid }) {
  const prefix = `${box.id}-`;
  for (const [input] of Object.values(spec)) {
    if (input.getAttribute("aria-describedby")?.startsWith(prefix)) input.removeAttribute("aria-describedby");
  }
  box.replaceChildren(...invalid.map(({ key, input, message }, i) => {
    const span = document.createElement("span");
    span.id = prefix + key;
    span.textContent = (i ? " " : "") + message;
    input.setAttribute("aria-describedby", span.id);
    return span;
  }));
  invalid[0]?.input.focus();
  return invalid.length > 0;
}
