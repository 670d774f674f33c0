// One byte as a short label for the look-inside views (attention_view.js, logit_view.js): a
// byte-level model sees bytes, not characters, so printable ASCII is shown as itself, a space as
// ␣, newline and tab as \n and \t, and every other byte (controls, UTF-8 pieces) as \xNN.
const NAMED = { 0x0a: "\\n", 0x09: "\\t", 0x20: "␣" };

export function byteLabel(b) {
  if (b in NAMED) return NAMED[b];
  if (b > 0x20 && b < 0x7f) return String.fromCharCode(b);
  return `\\x${b.toString(16).padStart(2, "0")}`;
}
