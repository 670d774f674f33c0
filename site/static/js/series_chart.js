// A line chart of several series against the step, drawn as loss_chart.js draws its own: on a canvas at
// its CSS size × devicePixelRatio, in the page's theme colours (CSS variables, light or dark), redrawn at
// most once per animation frame. Series take the colour-blind-safe palette --series-0 … --series-7
// (Okabe and Ito's, app.css), and a dash pattern once the palette has gone round, so no two series look
// alike. The canvas is role="img"; the caller writes the text summary screen readers hear (summary()).
// The runs view overlays runs' losses on one; the training view's small multiples are several small ones.

const FONT_PX = 11;
export const PALETTE_SIZE = 8;
const DASHES = [[], [6, 3], [2, 3], [8, 3, 2, 3]];

/** The CSS variable of series i's colour and its dash pattern. */
export const seriesStyle = (i) => ({ colour: `--series-${i % PALETTE_SIZE}`, dash: DASHES[Math.floor(i / PALETTE_SIZE) % DASHES.length] });

/** A tick label: 0.0012 → "1.2e-3", 12.5 → "12.5". */
function tick(v, log) {
  if (v === 0) return "0";
  if (log || Math.abs(v) < 0.01 || Math.abs(v) >= 1e4) {
    const e = Math.floor(Math.log10(Math.abs(v))), m = v / 10 ** e;
    return `${Math.abs(m - 1) < 1e-9 ? "" : `${+m.toFixed(1)}×`}1e${e}`;
  }
  return String(+v.toPrecision(3));
}

/** 1, 2, 2.5 or 5 times a power of ten, at least `raw`: a linear axis's tick spacing. */
function niceStep(raw) {
  const e = 10 ** Math.floor(Math.log10(raw)), m = raw / e;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10) * e;
}

export class SeriesChart {
  /** options: {log: a logarithmic y axis, yMin, yMax: fixed bounds, empty: the sentence before any point, xLabel} */
  constructor(canvas, options = {}) {
    this.canvas = canvas;
    this.ctx = canvas.getContext("2d");
    this.options = options;
    this.series = [];   // [{label, points: [[x, y]], width, style, hidden}]
    this.refs = [];     // [{y, label}]: dashed reference lines, named in the caption
    this.xMax = 1;
    canvas.addEventListener("contextrestored", () => this.draw());
    new ResizeObserver(() => this.schedule()).observe(canvas);
    matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => this.schedule());
  }

  /** series: [{label, points, width?, style? (seriesStyle's), hidden?, markers?}]; refs: [{y, label}]: dashed lines
   * (their label is the caller's to say, in the chart's caption); xMax: the last step shown. */
  set({ series = this.series, refs = this.refs, xMax = this.xMax } = {}) {
    this.series = series;
    this.refs = refs;
    this.xMax = Math.max(1, xMax);
    this.schedule();
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.draw(); });
  }

  fit() {
    const { canvas } = this;
    const dpr = globalThis.devicePixelRatio || 1;
    const w = Math.max(1, canvas.clientWidth), h = Math.max(1, canvas.clientHeight);
    const pw = Math.round(w * dpr), ph = Math.round(h * dpr);
    if (canvas.width !== pw || canvas.height !== ph) { canvas.width = pw; canvas.height = ph; }
    this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return { w, h };
  }

  /** [low, high] of the y axis over the shown points and reference lines. */
  bounds() {
    const { log, yMin, yMax } = this.options;
    const ys = this.series.filter((s) => !s.hidden).flatMap((s) => s.points.map(([, y]) => y))
      .concat(this.refs.map((r) => r.y)).filter((y) => Number.isFinite(y) && (!log || y > 0));
    if (!ys.length) return null;
    let lo = yMin ?? Math.min(...ys), hi = yMax ?? Math.max(...ys);
    if (log) {
      lo = 10 ** Math.floor(Math.log10(lo));
      hi = 10 ** Math.ceil(Math.log10(hi));
      if (hi <= lo) hi = lo * 10;
    } else {
      if (hi - lo < 1e-9) hi = lo + 1;
      const step = niceStep((hi - lo) / 4);
      lo = Math.floor(lo / step + 1e-9) * step;
      hi = Math.ceil(hi / step - 1e-9) * step;
    }
    return [lo, hi];
  }

  draw() {
    const { ctx, canvas } = this;
    const { w, h } = this.fit();
    const css = getComputedStyle(canvas);
    const colour = (name) => css.getPropertyValue(name).trim();
    ctx.clearRect(0, 0, w, h);
    ctx.font = `${FONT_PX}px system-ui, sans-serif`;
    ctx.fillStyle = colour("--chart-text");
    const range = this.bounds();
    if (!range) {
      ctx.textAlign = "center";
      ctx.fillText(this.options.empty ?? "Nothing measured yet.", w / 2, h / 2);
      ctx.textAlign = "start";
      return;
    }
    const { log } = this.options;
    const [lo, hi] = range, f = (y) => (log ? Math.log10(y) : y);
    const pad = { l: 46, r: 8, t: 8, b: 18 };
    const x = (s) => pad.l + (w - pad.l - pad.r) * (s / this.xMax);
    const y = (v) => pad.t + (h - pad.t - pad.b) * (1 - (f(v) - f(lo)) / (f(hi) - f(lo)));
    ctx.strokeStyle = colour("--chart-grid");
    ctx.lineWidth = 1;
    const step = niceStep((hi - lo) / 4);
    const ticks = log ? Array.from({ length: Math.round(Math.log10(hi / lo)) + 1 }, (_, i) => lo * 10 ** i)
      : Array.from({ length: Math.round((hi - lo) / step) + 1 }, (_, i) => lo + step * i);
    const every = Math.max(1, Math.ceil(ticks.length / 5));
    ticks.forEach((t, i) => {
      ctx.beginPath(); ctx.moveTo(pad.l, y(t)); ctx.lineTo(w - pad.r, y(t)); ctx.stroke();
      if (i % every === 0 || i === ticks.length - 1) ctx.fillText(tick(t, log), 2, y(t) + 4);
    });
    ctx.fillText("0", pad.l, h - 4);
    ctx.textAlign = "end";
    ctx.fillText(`${this.options.xLabel ?? "step"} ${this.xMax.toLocaleString("en")}`, w - pad.r, h - 4);
    ctx.textAlign = "start";
    const refs = this.refs.filter((r) => r.y >= lo && r.y <= hi);
    for (const r of refs) {
      ctx.strokeStyle = colour("--chart-text");
      ctx.setLineDash([3, 4]);
      ctx.beginPath(); ctx.moveTo(pad.l, y(r.y)); ctx.lineTo(w - pad.r, y(r.y)); ctx.stroke();
      ctx.setLineDash([]);
    }
    for (const s of this.series) {
      if (s.hidden) continue;
      const pts = s.points.filter(([, v]) => Number.isFinite(v) && (!log || v > 0));
      if (!pts.length) continue;
      ctx.strokeStyle = colour(s.style.colour);
      ctx.fillStyle = ctx.strokeStyle;
      ctx.lineWidth = s.width ?? 1.5;
      ctx.setLineDash(s.style.dash);
      ctx.beginPath();
      pts.forEach(([sx, v], i) => (i ? ctx.lineTo(x(sx), y(v)) : ctx.moveTo(x(sx), y(v))));
      ctx.stroke();
      ctx.setLineDash([]);
      if (pts.length === 1 || s.markers) {
        for (const [sx, v] of pts) {
          ctx.beginPath();
          ctx.arc(x(sx), y(v), 3.5, 0, 2 * Math.PI);
          ctx.fill();
        }
      }
    }
    ctx.lineWidth = 1;
  }
}
