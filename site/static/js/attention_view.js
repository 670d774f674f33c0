// The attention view: how much each byte of the prompt (a row, the query) attends to each byte up
// to it (a column, the key) in one layer and head of the model in memory, as a heatmap with the
// bytes on both axes. The engine computes the probabilities (the worker's `attention` message); this
// module only draws them. Hovering a cell, or moving through them with the arrow keys, names it.
import { byteLabel } from "./byte_label.js";

const MARGIN = 40;  // px for the labels left and above the grid
const GRID_PX = 560;  // the largest grid, whatever the prompt's length
const CELL_MAX = 24;
const LOW = [255, 255, 255], HIGH = [29, 78, 216];  // probability 0 and 1
const MASKED = "#e5e7eb";  // keys after the query: the causal mask

const mix = (p) => `rgb(${LOW.map((lo, i) => Math.round(lo + (HIGH[i] - lo) * p)).join(",")})`;

export class AttentionView {
  /** canvas, layer and head <select>s, and an element that names the cell in focus. */
  constructor({ canvas, layer, head, cell }) {
    Object.assign(this, { canvas, layerSelect: layer, headSelect: head, cellText: cell, data: null, focus: [0, 0] });
    layer.addEventListener("change", () => this.draw());
    head.addEventListener("change", () => this.draw());
    canvas.tabIndex = 0;
    canvas.addEventListener("mousemove", (e) => this.pointAt(e));
    canvas.addEventListener("keydown", (e) => this.move(e));
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
    this.draw();
  }

  get cellPx() { return Math.max(2, Math.min(CELL_MAX, Math.floor(GRID_PX / this.data.T))); }

  /** probabilities of the chosen layer and head: (T,T) */
  matrix() {
    const { T, nHead, weights } = this.data, lh = Number(this.layerSelect.value) * nHead + Number(this.headSelect.value);
    return weights.subarray(lh * T * T, (lh + 1) * T * T);
  }

  draw() {
    if (!this.data) return;
    const { T, tokens } = this.data, cell = this.cellPx, size = MARGIN + T * cell, dpr = globalThis.devicePixelRatio || 1;
    const c = this.canvas;
    c.width = size * dpr;
    c.height = size * dpr;
    c.style.width = `${size}px`;  // CSS caps it at the card's width; the height follows
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, size, size);
    const P = this.matrix();
    for (let i = 0; i < T; i++) {
      for (let j = 0; j < T; j++) {
        g.fillStyle = j > i ? MASKED : mix(P[i * T + j]);
        g.fillRect(MARGIN + j * cell, MARGIN + i * cell, cell, cell);
      }
    }
    // labels: every byte when the cells are wide enough to read, else every step-th
    const font = Math.min(12, cell), step = Math.ceil(8 / cell);
    g.fillStyle = "#111";
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
    g.strokeStyle = "#f59e0b";
    g.lineWidth = 2;
    g.strokeRect(MARGIN + j * cell, MARGIN + i * cell, cell, cell);
    this.canvas.setAttribute("aria-label", `Attention of layer ${Number(this.layerSelect.value) + 1}, head ` +
      `${Number(this.headSelect.value) + 1} over ${T} bytes: rows are queries, columns keys. Arrow keys move between cells.`);
    this.describe();
  }

  describe() {
    const [i, j] = this.focus, { tokens, T } = this.data;
    const p = j > i ? "masked (a byte never sees later bytes)" : this.matrix()[i * T + j].toFixed(4);
    this.cellText.textContent = `query ${i} '${byteLabel(tokens[i])}' → key ${j} '${byteLabel(tokens[j])}': ${p}`;
  }

  pointAt(e) {
    if (!this.data) return;
    const r = this.canvas.getBoundingClientRect(), cell = this.cellPx;
    const css = (MARGIN + this.data.T * cell) / r.width;  // drawn px per shown px (a narrow screen shrinks the canvas)
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
  }
}
