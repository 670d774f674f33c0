// Runs side by side: two or more saved models selected in Saved models, their training and validation
// losses overlaid on one chart (a colour and, past the palette, a dash pattern per run: series_chart.js,
// colour-blind safe, in the page's theme), a legend whose boxes show or hide each run (keyboard: Tab and
// Space), a text summary for screen readers, and a table of what differs between them: model, training
// settings, corpora and engines (runs_compare.js), a fine-tune with its base. Everything comes from the
// checkpoints' headers (the worker's `runs` answer), never from their weights.
import { SeriesChart, seriesStyle } from "./series_chart.js";
import { kindWords, runDifferences } from "./runs_compare.js";
import { throttledText } from "./throttled_text.js";

const $ = (id) => document.getElementById(id);
const loss = (x) => (Number.isFinite(x) ? x.toFixed(3) : "—");

export class RunsView {
  /** post(message) to the worker; selected() the ids chosen in Saved models. */
  constructor({ post, selected }) {
    this.post = post;
    this.selected = selected;
    this.runs = [];
    this.hidden = new Set();
    this.chart = new SeriesChart($("runs-chart"), { empty: "No losses in these checkpoints." });
    this.say = throttledText($("runs-summary"));
    $("compare-selected").addEventListener("click", () => this.compare());
    $("runs-close").addEventListener("click", () => { $("runs").hidden = true; });
    $("checkpoints").addEventListener("change", () => this.selectionChanged());
  }

  /** Compare is offered for two or more selected models. */
  selectionChanged() {
    const n = this.selected().length;
    $("compare-selected").disabled = n < 2;
    $("compare-selected").textContent = n > 1 ? `Compare ${n} selected` : "Compare selected";
  }

  compare() {
    const ids = this.selected();
    if (ids.length < 2) return;
    $("runs-message").textContent = `Reading ${ids.length} checkpoints' headers…`;
    this.post({ type: "runs", ids });
  }

  /** The worker's answer: [run] (runs_compare.js runOf), in the order they were asked for. */
  show(runs) {
    this.runs = runs;
    this.hidden = new Set();
    $("runs").hidden = false;
    $("runs-message").textContent = runs.length < 2 ? "Fewer than two of the selected models are still saved: select two or more." : "";
    this.legend();
    this.draw();
    this.table();
    $("runs").scrollIntoView({ block: "nearest" });
  }

  legend() {
    const items = this.runs.map((r, i) => {
      const label = document.createElement("label"), box = document.createElement("input"), swatch = document.createElement("span");
      label.className = "check legend-item";
      box.type = "checkbox";
      box.checked = true;
      box.value = r.id;
      box.addEventListener("change", () => {
        if (box.checked) this.hidden.delete(r.id);
        else this.hidden.add(r.id);
        this.draw();
      });
      swatch.className = "swatch";
      const { colour, dash } = seriesStyle(i);
      swatch.style.setProperty("--swatch", `var(${colour})`);
      if (dash.length) swatch.classList.add("dashed");
      label.append(box, swatch, `${r.name} (${kindWords(r)}, step ${r.step.toLocaleString("en")})`);
      return label;
    });
    $("runs-legend-items").replaceChildren(...items);
  }

  draw() {
    const series = this.runs.flatMap((r, i) => {
      const style = seriesStyle(i), hidden = this.hidden.has(r.id);
      return [{ label: `${r.name} training`, points: r.lossHistory, width: 1, style, hidden },
        { label: `${r.name} validation`, points: r.valHistory, width: 3, style, hidden, markers: true }];
    });
    const xMax = Math.max(1, ...this.runs.flatMap((r) => [r.step, ...r.lossHistory.map(([s]) => s)]));
    this.chart.set({ series, xMax });
    const shown = this.runs.filter((r) => !this.hidden.has(r.id));
    const words = shown.map((r) => {
      const last = r.lossHistory[r.lossHistory.length - 1];
      return `${r.name}: training loss ${last ? `${loss(last[1])} at step ${last[0]}` : "none recorded"}, ` +
        `best validation ${loss(r.bestVal)}`;
    });
    this.say(`Runs side by side, ${shown.length} of ${this.runs.length} shown, up to step ${xMax.toLocaleString("en")}. ${words.join(". ")}.`);
  }

  table() {
    const { differ, same, results } = runDifferences(this.runs);
    const head = document.createElement("tr");
    const th = (text, scope) => Object.assign(document.createElement("th"), { textContent: text, scope });
    head.append(th("", "col"), ...this.runs.map((r) => th(r.name, "col")));
    $("runs-table").tHead.replaceChildren(head);
    const row = ({ label, values }, className = "") => {
      const tr = document.createElement("tr");
      if (className) tr.className = className;
      tr.append(th(label, "row"), ...values.map((v) => Object.assign(document.createElement("td"), { textContent: v })));
      return tr;
    };
    const rows = differ.length ? differ.map((d) => row(d)) : [row({ label: "Settings", values: this.runs.map(() => "the same") })];
    $("runs-table").tBodies[0].replaceChildren(...rows, ...results.map((r) => row(r, "result")));
    $("runs-same").textContent = same.length ? `The same in all: ${same.map((s) => `${s.label}: ${s.value.replace(/\.$/, "")}`).join("; ")}.` : "";
    // for tests and devtools: what the table says
    window.playground.runs = { ids: this.runs.map((r) => r.id), differ: differ.map((d) => d.label), same: same.map((s) => s.label) };
  }
}
