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
 *
 * The text goes into runs (inline-blocks, `.sample-run` in app.css), a new one begun after a newline once
 * the current one holds RUN_CHARS characters, so an append lays out the run that grows, not the whole
 * sample: in one run, an untrained model's 100,000 random bytes (most of them escapes, each an element)
 * cost 118 ms of layout per append and left the page deaf to clicks (docs/lab/2026-12-06-sample-layout.md).
 * Inline-blocks rather than blocks: the page, innerText and a copy read exactly the text of one run.
 */
export const RUN_CHARS = 2048;

export class SampleView {
  constructor(element) {
    this.element = element;
    this.clear();
  }

  clear() {
    this.element.replaceChildren();
    this.rest = new Uint8Array(0);
    this.run = null;  // the run that grows; null: the next text begins one
    this.runChars = 0;
  }

  /** bytes: Uint8Array or array of byte values; `final`: no more bytes will follow. */
  append(bytes, final = false) {
    const all = new Uint8Array(this.rest.length + bytes.length);
    all.set(this.rest);
    all.set(bytes, this.rest.length);
    const { pieces, rest } = renderBytes(all, final);
    this.rest = rest;
    const e = this.element, atEnd = e.scrollHeight - e.scrollTop - e.clientHeight < 24;
    for (const p of pieces) {
      if (p.escape) {
        const span = document.createElement("span");
        span.className = "escape";
        span.title = "a byte that is not printable text, shown as its value";
        span.textContent = p.escape;
        this.write(span, p.escape.length);
        continue;
      }
      let text = p.text;
      while (text) {
        const cut = this.runChars >= RUN_CHARS ? text.indexOf("\n") + 1 : 0;
        const part = cut > 0 ? text.slice(0, cut) : text;
        this.write(part, part.length);
        if (cut > 0) this.run = null;  // every run but the last ends with a newline
        text = text.slice(part.length);
      }
    }
    if (atEnd) e.scrollTop = e.scrollHeight;
  }

  write(node, chars) {
    if (!this.run || this.run.parentNode !== this.element) {  // also after someone emptied the element
      this.run = document.createElement("span");
      this.run.className = "sample-run";
      this.runChars = 0;
      this.element.append(this.run);
    }
    this.run.append(node);
    this.runChars += chars;
  }
}
