// Training loss (every step) and validation loss (every eval) against the step, on a canvas drawn
// at its CSS size × devicePixelRatio (sharp on phones and HiDPI screens, labels at a readable 12 px).
// Colours come from the page's CSS variables, so the chart follows the light or dark theme. Before
// any loss there are no axes to show (a 0.5–1.0 scale would mean nothing): a sentence says so.
// The canvas is role="img"; a text summary beside it says what the chart shows, for screen readers,
// rewritten at most once a second. Redraws at most once per animation frame.
import { throttledText } from "./throttled_text.js";

const FONT_PX = 12;

export class LossChart {
  constructor(canvas, summary) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d");
    this.say = throttledText(summary);
    // a GPU process crash loses an accelerated canvas; once the browser restores it, draw again
    canvas.addEventListener("contextrestored", () => this.draw());
    new ResizeObserver(() => this.schedule()).observe(canvas);
    matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => this.schedule());
    this.reset(1);
  }

  reset(totalSteps) {
    this.total = totalSteps;
    this.train = [];
    this.val = [];
    this.schedule();
  }

  addTrain(step, loss) { this.train.push([step, loss]); this.schedule(); }
  addVal(step, loss) { this.val.push([step, loss]); this.schedule(); }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.draw(); this.say(this.summary()); });
  }

  summary() {
    if (!this.train.length && !this.val.length) return "Loss chart: no losses yet.";
    const parts = [`Loss chart, ${this.total.toLocaleString("en")} steps.`];
    if (this.train.length) {
      const [s0, l0] = this.train[0], [s, l] = this.train[this.train.length - 1];
      parts.push(`Training loss ${l.toFixed(3)} at step ${s} (${l0.toFixed(3)} at step ${s0}).`);
    }
    if (this.val.length) {
      const [s, l] = this.val[this.val.length - 1];
      const best = Math.min(...this.val.map(([, v]) => v));
      parts.push(`Validation loss ${l.toFixed(3)} at step ${s}, best ${best.toFixed(3)}.`);
    }
    return parts.join(" ");
  }

  /** Matches the backing store to the CSS box; returns the CSS size to draw in. */
  fit() {
    const { canvas } = this;
    const dpr = globalThis.devicePixelRatio || 1;
    const w = Math.max(1, canvas.clientWidth), h = Math.max(1, canvas.clientHeight);
    const pw = Math.round(w * dpr), ph = Math.round(h * dpr);
    if (canvas.width !== pw || canvas.height !== ph) { canvas.width = pw; canvas.height = ph; }
    this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return { w, h };
  }

  draw() {
    const { ctx, canvas } = this;
    const { w, h } = this.fit();
    const css = getComputedStyle(canvas);
    const colour = (name) => css.getPropertyValue(name).trim();
    ctx.clearRect(0, 0, w, h);
    ctx.font = `${FONT_PX}px system-ui, sans-serif`;
    ctx.fillStyle = colour("--chart-text");
    const losses = [...this.train, ...this.val].map(([, l]) => l).filter(Number.isFinite);
    if (!losses.length) {
      ctx.textAlign = "center";
      ctx.fillText("No losses yet: train a model or load one.", w / 2, h / 2);
      ctx.textAlign = "start";
      return;
    }
    const pad = { l: 40, r: 8, t: 22, b: 20 };
    const top = Math.max(...losses), bottom = Math.min(...losses);
    const yMin = Math.max(0, Math.floor(bottom * 2) / 2), yMax = Math.max(yMin + 0.5, Math.ceil(top * 2) / 2);
    const x = (s) => pad.l + (w - pad.l - pad.r) * (s / Math.max(1, this.total));
    const y = (l) => pad.t + (h - pad.t - pad.b) * (1 - (l - yMin) / (yMax - yMin));
    ctx.strokeStyle = colour("--chart-grid");
    for (let i = 0; i <= 4; i++) {
      const l = yMin + ((yMax - yMin) * i) / 4;
      ctx.beginPath(); ctx.moveTo(pad.l, y(l)); ctx.lineTo(w - pad.r, y(l)); ctx.stroke();
      ctx.fillText(l.toFixed(2), 4, y(l) + 4);
    }
    ctx.fillText("0", pad.l, h - 5);
    ctx.textAlign = "end";
    ctx.fillText(`step ${this.total.toLocaleString("en")}`, w - pad.r, h - 5);
    const line = (points, name, width) => {
      ctx.strokeStyle = colour(name);
      ctx.lineWidth = width;
      ctx.beginPath();
      points.forEach(([s, l], i) => (i ? ctx.lineTo(x(s), y(l)) : ctx.moveTo(x(s), y(l))));
      ctx.stroke();
      ctx.lineWidth = 1;
    };
    line(this.train, "--chart-train", 1);
    line(this.val, "--chart-val", 2);
    ctx.fillStyle = colour("--chart-val");
    ctx.fillText("validation", w - pad.r, 14);
    const valWidth = ctx.measureText("validation ").width;
    ctx.fillStyle = colour("--chart-train");
    ctx.fillText("train", w - pad.r - valWidth, 14);
    ctx.textAlign = "start";
  }
}
