// The Fine-tune (LoRA) section of the page: the model in memory (the demo, a saved or an uploaded one)
// becomes the frozen base of a LoRA fine-tune on the corpus chosen in Train (rank, alpha, targets,
// learning rate and steps: presets.json's "lora" defaults, bounded by its rules like every field), and a
// fine-tune in memory can be merged and unmerged and downloaded as its adapter file (.tgla, resumable)
// or as the merged model (.tinygpt). It also draws the sample of the base beside the fine-tune's (the
// worker sends it as the `base` stream of a side-by-side sample). The worker does the work
// (finetune_worker.js); the messages are in backend_protocol.md.
import { readFields, reportFieldErrors } from "./form_checks.js";
import { fieldLimits, sectionProblem } from "../../../webgpu/config_rules.js";
import { SampleView } from "./sample_text.js";

const $ = (id) => document.getElementById(id);
const n = (x) => x.toLocaleString("en");
const TARGET_WORDS = { q_proj: "q", k_proj: "k", v_proj: "v", o_proj: "o", fc_in: "MLP in", fc_out: "MLP out" };
const backendName = (b) => (b === "webgpu" ? "WebGPU" : "WebAssembly");

export class FineTunePanel {
  /**
   * presets: presets.json; post(message) to the worker; model(): the record of the model in memory (or
   * null); run(): {backend, seed, checkpointSeconds, corpus} of the Train section, or throws a sentence
   * (its fields are reported there); started(): a fine-tune was asked for (the page is busy training).
   */
  constructor({ presets, post, model, run, started }) {
    Object.assign(this, { presets, post, model, run, started });
    this.training = false;
    this.baseView = new SampleView($("sample-output-base"));
    $("finetune-form").addEventListener("submit", (e) => this.submit(e));
    $("lora-merge").addEventListener("click", () => this.post({ type: "merge" }));
    $("lora-unmerge").addEventListener("click", () => this.post({ type: "unmerge" }));
    $("download-adapter").addEventListener("click", () => this.post({ type: "download", id: null, what: "adapter" }));
    $("download-merged").addEventListener("click", () => this.post({ type: "download", id: null, what: "merged" }));
  }

  /** readFields' spec of the fine-tune's fields (form_checks.js): bounds from presets.json's rules. */
  spec() {
    const rules = this.presets.rules;
    return {
      rank: [$("lora-rank"), "Rank", fieldLimits(rules.lora.rank)],
      alpha: [$("lora-alpha"), "Alpha", fieldLimits(rules.lora.alpha)],
      lr: [$("lora-lr"), "Learning rate", fieldLimits(rules.page.lr)],
      steps: [$("lora-steps"), "Steps", { ...fieldLimits(rules.page.steps), min: 1 }],
    };
  }

  /** The fields as a fine-tune takes them, or null (their sentences shown under the form). */
  fields() {
    const spec = this.spec(), result = readFields(spec);
    const targets = [...document.querySelectorAll("#lora-targets input[name=target]:checked")].map((b) => b.value);
    if (!result.errors.length) {
      const problem = sectionProblem(this.presets.rules, "lora", { rank: result.values.rank, alpha: result.values.alpha });
      if (problem) result.invalid.push({ key: "alpha", input: $("lora-alpha"), message: `LoRA ${problem}.` });
      if (!targets.length) {
        result.invalid.push({ key: "targets", input: document.querySelector("#lora-targets input"),
          message: "Choose at least one projection to adapt." });
      }
    }
    reportFieldErrors($("finetune-errors"), spec, result);
    return result.invalid.length ? null : { ...result.values, targets };
  }

  async submit(e) {
    e.preventDefault();
    const l = this.model();
    if (!l || this.training) return;
    const fields = this.fields();
    if (!fields) return;
    let run;
    try {
      run = await this.run(l);
    } catch (err) {
      $("finetune-errors").textContent = err.message;
      return;
    }
    if (!run) return;
    this.started();
    const { rank, alpha, targets, lr, steps } = fields;
    this.post({ type: "finetune", backend: run.backend, lora: { rank, alpha, targets }, steps, lr, seed: run.seed,
      checkpointSeconds: run.checkpointSeconds, corpus: run.corpus });
  }

  /** The section follows the model in memory: what would be its base, or the fine-tune it is. */
  follow(record) {
    const lora = record?.lora ?? null;
    $("finetune-base").textContent = !record
      ? "Load a model first (the demo, a saved or an uploaded one): it becomes the frozen base, and only small low-rank adapters train on the corpus chosen above."
      : lora ? `The model in memory is a fine-tune; Fine-tune again makes its merged weights the base of a new one, ` +
        "and Train continues this one."
        : `Base: ${record.name ?? record.preset ?? "the model in memory"} at step ${n(record.step)} (${n(record.paramCount)} ` +
          "parameters, frozen).";
    $("finetune-current").hidden = !lora;
    $("sample-compare-label").hidden = !lora;
    if (lora) {
      const targets = lora.targets.map((t) => TARGET_WORDS[t] ?? t).join(", ");
      const base = lora.base;
      $("finetune-info").textContent = `LoRA fine-tune of ${base.name}${base.step !== null ? ` (step ${n(base.step)})` : ""}, ` +
        `weights sha256 ${base.sha256.slice(0, 12)}…: rank ${lora.rank}, alpha ${lora.alpha} (scale ${+(lora.scale.toFixed(4))}), ` +
        `adapting ${targets}` + (lora.paramCount ? `; ${n(lora.paramCount)} adapter parameters` : "") +
        `; at step ${n(record.step)} on ${backendName(record.backend)}. ` +
        (lora.merged ? "Merged: the weights are W + (alpha / rank)·B A, and training waits until it is unmerged."
          : "Not merged: every forward adds (alpha / rank)·B A x.");
    }
    this.refresh();
  }

  /** Controls while this tab trains (or samples): nothing that changes the model under a run. */
  setTraining(training) {
    this.training = training;
    this.refresh();
  }

  refresh() {
    const l = this.model(), lora = l?.lora ?? null;
    $("finetune-start").disabled = !l || this.training;
    $("lora-merge").disabled = !lora || this.training || lora.merged;
    $("lora-unmerge").disabled = !lora || this.training || !lora.merged;
    $("download-adapter").disabled = !lora || this.training;
    $("download-merged").disabled = !lora || this.training;
    $("sample-compare").disabled = !lora || lora.merged;
  }

  /** Whether a sample now should come beside the base's: a fine-tune, not merged, the box ticked. */
  compare() {
    const lora = this.model()?.lora;
    return Boolean(lora && !lora.merged && $("sample-compare").checked);
  }

  /** A sample begins: the base's pane is shown (and cleared) when it comes beside the fine-tune's. */
  sampleStarted(prompt, compare) {
    this.baseView.clear();
    $("sample-pane-base").hidden = !compare;
    $("sample-pane-label").hidden = !compare;
    if (compare) this.baseView.append(new TextEncoder().encode(prompt));
  }

  /** The base's bytes of a side-by-side sample (`text` messages of stream "base"). */
  baseText(m) {
    this.baseView.append(m.bytes, false);
  }

  baseDone() {
    this.baseView.append([], true);
  }

  clear() {
    this.baseView.clear();
    $("sample-pane-base").hidden = true;
    $("sample-pane-label").hidden = true;
  }

  /** The Evaluate line of a fine-tune: its base's loss beside its own. */
  evaluated(m) {
    if (m.baseValLoss === null || m.baseValLoss === undefined) return "";
    const change = m.valLoss - m.baseValLoss;
    return ` Without the adapter (the base alone): ${m.baseValLoss.toFixed(4)}; the adapter ${change < 0 ? "lowers" : "raises"} ` +
      `it by ${Math.abs(change).toFixed(4)}.`;
  }
}
