// Sampled bytes as text a person can read: a byte-level model can emit any byte, so control bytes
// (other than newline and tab, kept as layout) and bytes that are not valid UTF-8 are shown as
// escapes (\x07, \xff) in their own style, never as boxes, replacement characters or raw controls.
// Bytes arrive in chunks and a character may span two chunks, so a partial sequence waits.

const hex = (b) => `\\x${b.toString(16).padStart(2, "0")}`;

/** Length of the UTF-8 sequence a lead byte starts, and the allowed range of its second byte. */
function sequence(lead) {
  if (lead >= 0xc2 && lead <= 0xdf) return [2, 0x80, 0xbf];
  if (lead === 0xe0) return [3, 0xa0, 0xbf];
  if (lead === 0xed) return [3, 0x80, 0x9f];  // no UTF-16 surrogates
  if (lead >= 0xe1 && lead <= 0xef) return [3, 0x80, 0xbf];
  if (lead === 0xf0) return [4, 0x90, 0xbf];
  if (lead >= 0xf1 && lead <= 0xf3) return [4, 0x80, 0xbf];
  if (lead === 0xf4) return [4, 0x80, 0x8f];
  return [0, 0, 0];
}

/**
 * Splits bytes into pieces: {text} or {escape}. Returns {pieces, rest}: `rest` is an unfinished
 * sequence at the end that may complete with the next chunk (unless `final`).
 */
export function renderBytes(bytes, final = false) {
  const pieces = [];
  let text = "";
  const escape = (s) => {
    if (text) pieces.push({ text });
    text = "";
    pieces.push({ escape: s });
  };
  let i = 0;
  while (i < bytes.length) {
    const b = bytes[i];
    if (b < 0x80) {
      if (b === 0x0a || b === 0x09 || (b >= 0x20 && b !== 0x7f)) text += String.fromCharCode(b);
      else escape(hex(b));
      i++;
      continue;
    }
    const [n, lo, hi] = sequence(b);
    if (n === 0) { escape(hex(b)); i++; continue; }
    let ok = true, j = 1;
    for (; j < n && i + j < bytes.length; j++) {
      const c = bytes[i + j];
      if (j === 1 ? c < lo || c > hi : c < 0x80 || c > 0xbf) { ok = false; break; }
    }
    if (!ok) { escape(hex(b)); i++; continue; }
    if (j < n) {  // the chunk ends inside a sequence
      if (!final) break;
      escape(hex(b));
      i++;
      continue;
    }
    let cp = b & (0xff >> (n + 1));
    for (let k = 1; k < n; k++) cp = (cp << 6) | (bytes[i + k] & 0x3f);
    if (cp <= 0x9f) escape(`\\u${cp.toString(16).padStart(4, "0")}`);  // C1 controls
    else text += String.fromCodePoint(cp);
    i += n;
  }
  if (text) pieces.push({ text });
  return { pieces, rest: bytes.slice(i) };
}

/**
 * Appends sampled bytes to an element as text and styled escapes. The element has a bounded height and
 * scrolls (app.css): while the reader is at its end, the end stays in view as bytes arrive; a reader who
 * scrolled up to read is left where they are.
 */
export class SampleView {
  constructor(element) {
    this.element = element;
    this.rest = new Uint8Array(0);
  }

  clear() {
    this.element.replaceChildren();
    this.rest = new Uint8Array(0);
  }

  /** bytes: Uint8Array or array of byte values; `final`: no more bytes will follow. */
  append(bytes, final = false) {
    const all = new Uint8Array(this.rest.length + bytes.length);
    all.set(this.rest);
    all.set(bytes, this.rest.length);
    const { pieces, rest } = renderBytes(all, final);
    this.rest = rest;
    const fragment = document.createDocumentFragment();
    for (const p of pieces) {
      if (p.text) { fragment.append(p.text); continue; }
      const span = document.createElement("span");
      span.className = "escape";
      span.title = "a byte that is not printable text, shown as its value";
      span.textContent = p.escape;
      fragment.append(span);
    }
    const e = this.element, atEnd = e.scrollHeight - e.scrollTop - e.clientHeight < 24;
    e.append(fragment);
    if (atEnd) e.scrollTop = e.scrollHeight;
  }
}
