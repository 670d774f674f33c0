// The training form's model and hyper-parameter fields: learning rate, batch, warm-up, schedule and
// weight decay (defaults from presets.json, bounds from its rules: the page's own, rules.page, within the
// levels' rules), and the form following the model in memory (model_record.js formFor): its preset, or
// an option of its own shape for a model that is no preset's; its steps to go; its hyper-parameters.
import { fieldLimits, sectionProblem } from "../../../webgpu/config_rules.js";
import { formFor, shapeWords } from "./model_record.js";
import { configFromPresets } from "./model_config.js";

const $ = (id) => document.getElementById(id);

/** The value of the Preset option that stands for the loaded model's own shape (not a preset). */
export const LOADED_SHAPE = "loaded-shape";

export class ModelForm {
  constructor(presets) {
    this.presets = presets;
    this.shape = null;  // the loaded model's {nLayer, nHead, dModel, ctx} while its option is in the list
    $("batch").value = presets.presets[$("preset").value].batch;
  }

  /** readFields' spec of the hyper-parameter fields (form_checks.js). */
  spec() {
    const page = (name) => fieldLimits(this.presets.rules.page[name]);
    return {
      lr: [$("lr"), "Learning rate", page("lr")],
      batch: [$("batch"), "Batch", page("batch")],
      warmupSteps: [$("warmup-steps"), "Warm-up steps", page("warmupSteps")],
      weightDecay: [$("weight-decay"), "Weight decay", page("weightDecay")],
    };
  }

  /** The fields' values as a run takes them ({lr, batch, warmupSteps, lrSchedule, weightDecay}), or throws the levels' own sentence. */
  hyper(values) {
    const hyper = { lr: values.lr, batch: values.batch, warmupSteps: values.warmupSteps, weightDecay: values.weightDecay,
      lrSchedule: $("lr-schedule").value };
    const problem = sectionProblem(this.presets.rules, "training", { lr: hyper.lr, batch: hyper.batch, weightDecay: hyper.weightDecay });
    if (problem) throw new Error(problem);
    return hyper;
  }

  /** A new preset was picked: its steps and batch. */
  presetChosen() {
    const p = this.presets.presets[$("preset").value];
    if (!p) return;
    $("steps").value = p.steps;
    $("batch").value = p.batch;
  }

  /** {model, training, ...} of the chosen Preset option: a preset's, or the loaded model's shape. */
  config(name = $("preset").value) {
    if (name === LOADED_SHAPE && this.shape) {
      return configFromPresets(this.presets, this.presets.defaultPreset, { model: this.shape, training: { batch: Number($("batch").value) || 1 } });
    }
    return configFromPresets(this.presets, name);
  }

  /** The form describes the model in memory: its preset (or its own shape), its steps to go, its settings. */
  follow(record) {
    const form = formFor(record, this.presets);
    this._shapeOption(form.preset ? null : record.shape, form.label);
    $("preset").value = form.preset ?? LOADED_SHAPE;
    $("steps").value = form.steps;
    const h = form.hyper;
    $("lr").value = h.lr;
    $("batch").value = h.batch;
    $("warmup-steps").value = h.warmupSteps;
    $("lr-schedule").value = h.lrSchedule;
    $("weight-decay").value = h.weightDecay;
    $("seed").value = h.seed;
  }

  /** A run ended: Steps offers what is left of it (or its length, once it is done). */
  followSteps(record) {
    $("steps").value = formFor(record, this.presets).steps;
  }

  /** Adds (shape) or removes (null) the Preset option of the loaded model's own shape. */
  _shapeOption(shape, label) {
    let option = $("preset").querySelector(`option[value="${LOADED_SHAPE}"]`);
    this.shape = shape;
    if (!shape) { option?.remove(); return; }
    if (!option) {
      option = Object.assign(document.createElement("option"), { value: LOADED_SHAPE });
      $("preset").append(option);
    }
    option.textContent = `${label} (no preset)`;
    delete option.dataset.label;  // the fit marking labels it afresh
  }

  /** The words for the chosen option: a preset's name, or the loaded shape's. */
  chosenWords() {
    return $("preset").value === LOADED_SHAPE && this.shape ? `${shapeWords(this.shape)} model` : $("preset").value;
  }
}
