// The training view: small multiples under the loss chart of what every K-th step did (the worker's
// `stats` messages: training_stats.js summaries), as the run goes. Per layer ("embeddings", "block i",
// "final LayerNorm"; a fine-tune's adapters per block): the gradient norm before clipping and the
// update-to-weight ratio ‖ΔW‖/‖W‖ of that step, both on log axes (the ratio with 1e-3 marked); per layer,
// every head's attention entropy on the probe window (the corpus's first ctx bytes), from 0 (each query
// on one key) to the uniform attention's mean ln(i + 1), marked. /learn says what healthy curves look like.
// Each chart is role="img"; one summary, rewritten at most once a second, says the latest figures.
import { SeriesChart, seriesStyle } from "./series_chart.js";
import { throttledText } from "./throttled_text.js";

const fmt = (x) => (x === null || !Number.isFinite(x) ? "—" : x >= 0.01 && x < 1000 ? x.toPrecision(3) : x.toExponential(2));

export class TrainingView {
  /** els: {panels (the view's box), grad, ratio (canvases), entropy (a box for the layers' canvases), legend (the layers'),
   * heads (the heads' legend), summary, note} */
  constructor(els) {
    this.els = els;
    this.say = throttledText(els.summary);
    this.grad = new SeriesChart(els.grad, { log: true, empty: "No step measured yet." });
    this.ratio = new SeriesChart(els.ratio, { log: true, empty: "No step measured yet." });
    this.layers = [];  // [{figure, chart}] of the entropy panels
    this.reset(null);
  }

  /** Forgets what was measured: another model is in memory (id), or the view was switched off. */
  reset(id) {
    this.id = id;
    this.history = [];
    this.grad.set({ series: [], refs: [], xMax: 1 });
    this.ratio.set({ series: [], refs: [], xMax: 1 });
    this.els.entropy.replaceChildren();
    this.layers = [];
    this.els.legend.replaceChildren();
    this.els.heads.replaceChildren();
    this.els.note.textContent = "";
    this.say("Training view: no step measured yet.");
  }

  /** Shows or hides the panels (the checkbox). */
  show(on) { this.els.panels.hidden = !on; }

  /** One measured step: {id, step, groups, gradNorm, updateRatio, gradNormTotal, entropy, maxEntropy, adapters, backend}. */
  add(m) {
    if (m.id !== this.id) this.reset(m.id);
    const last = this.history[this.history.length - 1];
    if (last && m.step <= last.step) this.history = this.history.filter((h) => h.step < m.step);  // a run restarted
    this.history.push(m);
    if (!last || last.groups.join() !== m.groups.join()) {
      this.legend(this.els.legend, m.groups);
      this.legend(this.els.heads, Array.from({ length: m.entropy[0]?.length ?? 0 }, (_, h) => `head ${h}`));
    }
    this.draw(m);
  }

  legend(list, groups) {
    list.replaceChildren(...groups.map((g, i) => {
      const li = document.createElement("li"), swatch = document.createElement("span");
      swatch.className = "swatch";
      const { colour, dash } = seriesStyle(i);
      swatch.style.setProperty("--swatch", `var(${colour})`);
      if (dash.length) swatch.classList.add("dashed");
      li.append(swatch, g);
      return li;
    }));
  }

  draw(m) {
    const h = this.history, xMax = m.step;
    const per = (key) => m.groups.map((g, i) => ({ label: g, style: seriesStyle(i), width: 1.5,
      points: h.map((s) => [s.step, s[key][s.groups.indexOf(g)]]).filter(([, v]) => v !== undefined && v !== null) }));
    this.grad.set({ series: per("gradNorm"), xMax });
    this.ratio.set({ series: per("updateRatio"), refs: [{ y: 1e-3, label: "1e-3" }], xMax });
    const L = m.entropy.length, H = m.entropy[0]?.length ?? 0;
    while (this.layers.length < L) this.addLayer(this.layers.length, H);
    m.entropy.forEach((_, l) => {
      const series = Array.from({ length: H }, (__, head) => ({ label: `head ${head}`, style: seriesStyle(head), width: 1.5,
        points: h.filter((s) => s.entropy[l]).map((s) => [s.step, s.entropy[l][head]]) }));
      this.layers[l].chart.set({ series, refs: [{ y: m.maxEntropy, label: "uniform" }], xMax });
    });
    const what = m.adapters ? "the adapters' gradient norm per block" : "each layer's gradient norm";
    const every = h.length > 1 ? h[h.length - 1].step - h[h.length - 2].step : null;
    this.els.note.textContent = `Step ${m.step.toLocaleString("en")}${every ? `, measured every ${every} steps` : ""}, on ` +
      `${m.backend === "webgpu" ? "WebGPU" : "WebAssembly"}: ${what} (all together ${fmt(m.gradNormTotal)}) ` +
      `and update ratio; the attention entropy of the corpus's first ${m.probeBytes} bytes, in nats (uniform attention: ` +
      `${m.maxEntropy.toFixed(2)}).`;
    this.say(this.summary(m));
  }

  addLayer(l, H) {
    const figure = document.createElement("figure"), caption = document.createElement("figcaption"), canvas = document.createElement("canvas");
    caption.id = `stats-entropy-title-${l}`;
    caption.textContent = `Attention entropy, layer ${l} (${H} heads; dashed: uniform attention)`;
    canvas.className = "small-chart";
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-labelledby", caption.id);
    canvas.setAttribute("aria-describedby", this.els.summary.id);
    figure.append(caption, canvas);
    this.els.entropy.append(figure);
    this.layers.push({ figure, chart: new SeriesChart(canvas, { log: false, yMin: 0, empty: "No step measured yet." }) });
  }

  /** The latest figures in words, for screen readers (and tests). */
  summary(m) {
    const per = (key) => m.groups.map((g, i) => `${g} ${fmt(m[key][i])}`).join(", ");
    const entropy = m.entropy.map((row, l) => `layer ${l}: ${row.map((x) => x.toFixed(2)).join(", ")}`).join("; ");
    return `Training view at step ${m.step}: gradient norm per layer ${per("gradNorm")}; update-to-weight ratio ${per("updateRatio")}; ` +
      `attention entropy per head (nats, uniform ${m.maxEntropy.toFixed(2)}) ${entropy}.`;
  }
}
