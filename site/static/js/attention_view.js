// The attention view: how much each byte of the prompt (a row, the query) attends to each byte up
// to it (a column, the key) in one layer and head of the model in memory, as a heatmap with the
// bytes on both axes. The engine computes the probabilities (the worker's `attention` message); this
// module only draws them. Hovering a cell, or moving through them with the arrow keys, names it.
// Colours come from the page's CSS variables (--heat-*), so the heatmap follows the light or dark
// theme, and the page's legend (a CSS gradient of the same variables) says what they mean. A long
// prompt is not squeezed into unreadable cells: by default each cell is big enough for its label
// and the grid scrolls in its own box (the Cells menu also offers "fit the width" and fixed sizes).
import { byteLabel } from "./byte_label.js";

const MARGIN = 40;  // px for the labels left and above the grid
export const READABLE_CELL = 14;  // px: a 12 px label fits, and every byte is labelled
const CELL_MAX = 24;
const CANVAS_MAX_PX = 8192;  // backing-store side cap: a 512-byte prompt at 24 px × dpr 2 would be 49k px
const FALLBACK = { low: "#ffffff", high: "#1d4ed8", masked: "#e5e7eb", text: "#111111", focus: "#f59e0b" };

/** [r, g, b] of "#rgb" or "#rrggbb" (what the --heat-* variables hold), or null. */
export function parseHex(text) {
  const m = /^#([0-9a-f]{3}|[0-9a-f]{6})$/i.exec(String(text).trim());
  if (!m) return null;
  const h = m[1].length === 3 ? [...m[1]].map((c) => c + c).join("") : m[1];
  return [0, 2, 4].map((i) => parseInt(h.slice(i, i + 2), 16));
}

/** The colour of probability p in [0, 1] between low and high ([r, g, b] each). */
export function heatColour(low, high, p) {
  return `rgb(${low.map((lo, i) => Math.round(lo + (high[i] - lo) * p)).join(",")})`;
}

/**
 * Cell size in px for T bytes: `mode` "fit" (the grid fills `width` px, however small the cells), "auto"
 * (fit, but never under READABLE_CELL: a long prompt scrolls), or a number of px.
 */
export function cellSize(mode, T, width) {
  const fit = Math.max(2, Math.min(CELL_MAX, Math.floor((width - MARGIN) / T)));
  if (mode === "fit") return fit;
  if (mode === "auto") return Math.max(READABLE_CELL, fit);
  const px = Number(mode);
  return Number.isFinite(px) && px > 0 ? Math.min(px, 64) : fit;
}

export class AttentionView {
  /** canvas (inside the scroll box `scroll`), layer, head and zoom <select>s, and an element that names the cell in focus. */
  constructor({ canvas, layer, head, zoom, scroll, cell }) {
    Object.assign(this, { canvas, layerSelect: layer, headSelect: head, zoomSelect: zoom, scrollBox: scroll, cellText: cell,
      data: null, focus: [0, 0], layout: null });
    layer.addEventListener("change", () => this.draw());
    head.addEventListener("change", () => this.draw());
    zoom.addEventListener("change", () => { this.draw(); this.reveal(); });
    canvas.tabIndex = 0;
    canvas.addEventListener("mousemove", (e) => this.pointAt(e));
    canvas.addEventListener("keydown", (e) => this.move(e));
    matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => this.draw());
    new ResizeObserver(() => this.draw()).observe(scroll);  // "fit" and "auto" follow the box's width
  }

  /** {tokens: Uint8Array (T), nLayer, nHead, T, weights: Float32Array (nLayer, nHead, T, T)} */
  show(data) {
    this.data = data;
    const options = (select, n, word) => {
      const keep = Math.min(Number(select.value) || 0, n - 1);
      select.replaceChildren(...Array.from({ length: n }, (_, i) => new Option(`${word} ${i + 1}`, String(i))));
      select.value = String(keep);
    };
    options(this.layerSelect, data.nLayer, "layer");
    options(this.headSelect, data.nHead, "head");
    this.focus = [data.T - 1, data.T - 1];
    this.scrollBox.hidden = false;
    this.draw();
  }

  /** Forgets the heatmap (another model is in memory: these probabilities are not its). */
  clear() {
    this.data = null;
    this.layout = null;
    this.canvas.width = this.canvas.height = 0;
    this.scrollBox.hidden = true;
    this.cellText.textContent = "";
    this.layerSelect.replaceChildren();
    this.headSelect.replaceChildren();
  }

  get cellPx() { return cellSize(this.zoomSelect.value, this.data.T, this.scrollBox.clientWidth || 600); }

  /** probabilities of the chosen layer and head: (T,T) */
  matrix() {
    const { T, nHead, weights } = this.data, lh = Number(this.layerSelect.value) * nHead + Number(this.headSelect.value);
    return weights.subarray(lh * T * T, (lh + 1) * T * T);
  }

  colours() {
    const css = getComputedStyle(this.canvas);
    const get = (name) => css.getPropertyValue(`--heat-${name}`).trim() || FALLBACK[name];
    return { low: parseHex(get("low")) ?? parseHex(FALLBACK.low), high: parseHex(get("high")) ?? parseHex(FALLBACK.high),
      masked: get("masked"), text: get("text"), focus: get("focus") };
  }

  draw() {
    if (!this.data) return;
    const { T, tokens } = this.data, cell = this.cellPx, size = MARGIN + T * cell;
    const dpr = Math.min(globalThis.devicePixelRatio || 1, CANVAS_MAX_PX / size);
    const c = this.canvas, colour = this.colours();
    c.width = Math.round(size * dpr);
    c.height = Math.round(size * dpr);
    c.style.width = `${size}px`;  // the scroll box shows what does not fit
    c.style.height = `${size}px`;
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, size, size);
    const P = this.matrix();
    for (let i = 0; i < T; i++) {
      for (let j = 0; j < T; j++) {
        g.fillStyle = j > i ? colour.masked : heatColour(colour.low, colour.high, P[i * T + j]);
        g.fillRect(MARGIN + j * cell, MARGIN + i * cell, cell, cell);
      }
    }
    // labels: every byte when the cells are wide enough to read, else every step-th
    const font = Math.min(12, cell), step = Math.ceil(8 / cell);
    g.fillStyle = colour.text;
    g.font = `${font}px ui-monospace, monospace`;
    g.textBaseline = "middle";
    for (let t = 0; t < T; t += step) {
      const label = byteLabel(tokens[t]), mid = MARGIN + t * cell + cell / 2;
      g.textAlign = "right";
      g.fillText(label, MARGIN - 4, mid);  // the query of row t
      g.save();
      g.translate(mid, MARGIN - 4);
      g.rotate(-Math.PI / 2);
      g.textAlign = "left";
      g.fillText(label, 0, 0);  // the key of column t
      g.restore();
    }
    const [i, j] = this.focus;
    g.strokeStyle = colour.focus;
    g.lineWidth = 2;
    g.strokeRect(MARGIN + j * cell, MARGIN + i * cell, cell, cell);
    // what is drawn, for tests and devtools: cell px, a label every `labelEvery` bytes, and the font
    this.layout = { cell, labelEvery: step, font, size, T };
    this.canvas.setAttribute("aria-label", `Attention of layer ${Number(this.layerSelect.value) + 1}, head ` +
      `${Number(this.headSelect.value) + 1} over ${T} bytes: rows are queries, columns keys. Arrow keys move between cells.`);
    this.describe();
  }

  describe() {
    const [i, j] = this.focus, { tokens, T } = this.data;
    const p = j > i ? "masked (a byte never sees later bytes)" : this.matrix()[i * T + j].toFixed(4);
    this.cellText.textContent = `query ${i} '${byteLabel(tokens[i])}' → key ${j} '${byteLabel(tokens[j])}': ${p}`;
  }

  /** Scrolls the box so that the cell in focus (and its row's and column's labels, where they fit) is in view. */
  reveal() {
    if (!this.data) return;
    const box = this.scrollBox, cell = this.cellPx, scale = this.canvas.clientWidth / (MARGIN + this.data.T * cell);
    const [i, j] = this.focus, x = (MARGIN + j * cell) * scale, y = (MARGIN + i * cell) * scale, s = cell * scale;
    if (x < box.scrollLeft + MARGIN) box.scrollLeft = Math.max(0, x - MARGIN);
    else if (x + s > box.scrollLeft + box.clientWidth) box.scrollLeft = x + s - box.clientWidth;
    if (y < box.scrollTop + MARGIN) box.scrollTop = Math.max(0, y - MARGIN);
    else if (y + s > box.scrollTop + box.clientHeight) box.scrollTop = y + s - box.clientHeight;
  }

  pointAt(e) {
    if (!this.data) return;
    const r = this.canvas.getBoundingClientRect(), cell = this.cellPx;
    const css = (MARGIN + this.data.T * cell) / r.width;  // drawn px per shown px
    const j = Math.floor(((e.clientX - r.left) * css - MARGIN) / cell), i = Math.floor(((e.clientY - r.top) * css - MARGIN) / cell);
    if (i < 0 || j < 0 || i >= this.data.T || j >= this.data.T) return;
    this.focus = [i, j];
    this.draw();
  }

  move(e) {
    const d = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] }[e.key];
    if (!d || !this.data) return;
    e.preventDefault();
    const clamp = (x) => Math.max(0, Math.min(this.data.T - 1, x));
    this.focus = [clamp(this.focus[0] + d[0]), clamp(this.focus[1] + d[1])];
    this.draw();
    this.reveal();
  }
}
