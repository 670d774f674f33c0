// The logit view: each byte of a sample as a chip; hovering or focusing one shows the five most
// probable next bytes the model gave at that step (softmax of its logits at temperature 1: the
// engine computes them, next_byte.js), the sampled one marked. One chip is in the tab order; the
// arrow keys move between them.
import { byteLabel } from "./byte_label.js";

export class LogitView {
  /** strip: where the chips go; panel: where the top-5 of the chip in focus is shown; limit: chips kept. */
  constructor({ strip, panel, limit = 1000 }) {
    Object.assign(this, { strip, panel, limit });
    strip.setAttribute("role", "listbox");
    strip.addEventListener("keydown", (e) => this.onKey(e));
    this.clear();
  }

  clear() {
    this.steps = [];  // [{token, top: [{byte, p}]}], also read by tests through window.playground
    this.strip.replaceChildren();
    this.panel.replaceChildren();
  }

  /** bytes (Uint8Array) and, for each, its top next-byte probabilities [{byte, p}]. */
  append(bytes, tops) {
    const fragment = document.createDocumentFragment();
    bytes.forEach((token, k) => {
      const index = this.steps.length;
      this.steps.push({ token, top: tops[k] });
      if (index >= this.limit) return;
      const chip = document.createElement("span");
      chip.className = "logit-chip";
      chip.textContent = byteLabel(token);
      chip.setAttribute("role", "option");
      chip.tabIndex = index === 0 ? 0 : -1;
      chip.dataset.index = String(index);
      chip.addEventListener("mouseenter", () => this.select(index, false));
      chip.addEventListener("focus", () => this.select(index, false));
      fragment.append(chip);
    });
    this.strip.append(fragment);
  }

  select(index, moveFocus = true) {
    const chips = this.strip.children, chip = chips[index];
    if (!chip) return;
    for (const c of this.strip.querySelectorAll("[aria-selected=true]")) { c.setAttribute("aria-selected", "false"); c.tabIndex = -1; }
    chip.setAttribute("aria-selected", "true");
    chip.tabIndex = 0;
    if (moveFocus) chip.focus();
    const { token, top } = this.steps[index];
    const rows = top.map(({ byte, p }) => {
      const row = document.createElement("li");
      row.className = byte === token ? "logit-row sampled" : "logit-row";
      const label = Object.assign(document.createElement("code"), { textContent: byteLabel(byte) });
      const bar = Object.assign(document.createElement("span"), { className: "logit-bar" });
      bar.style.width = `${(100 * p).toFixed(1)}%`;
      const value = Object.assign(document.createElement("span"), { className: "logit-p", textContent: p.toFixed(4) });
      row.append(label, bar, value);
      return row;
    });
    const title = Object.assign(document.createElement("p"), {
      textContent: `Byte ${index + 1}, '${byteLabel(token)}': the model's five most probable next bytes` });
    const list = document.createElement("ol");
    list.append(...rows);
    this.panel.replaceChildren(title, list);
  }

  onKey(e) {
    const d = { ArrowLeft: -1, ArrowRight: 1, Home: -Infinity, End: Infinity }[e.key];
    const at = Number(document.activeElement?.dataset?.index);
    if (d === undefined || !Number.isInteger(at)) return;
    e.preventDefault();
    this.select(Math.max(0, Math.min(this.strip.children.length - 1, at + d)));
  }
}
