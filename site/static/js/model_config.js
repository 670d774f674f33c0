// The model and training configuration in JS, in one place: from a preset of presets.json, or from
// a .tinygpt header. Every JS level (the page's worker, its engines, webgpu/ tools and bench) builds
// its {model, training, initStd, rules} here, so no second copy of the defaults can drift
// (tests/site/test_model_config.py pins the result to python_ref.config). Each config is checked
// by presets.json's rules (webgpu/config_rules.js) before it is returned, and carries them (`rules`)
// for the engines, which check again what reaches them.
import { checkConfig } from "../../../webgpu/config_rules.js";

const MODEL_KEYS = ["nLayer", "nHead", "dModel", "ctx", "vocabSize", "layerNormEps"];

/** {model, training, initStd, rules} for preset `name` of presets.json (the parsed file), with optional overrides. */
export function configFromPresets(presets, name, overrides = {}) {
  const p = presets.presets[name];
  if (!p) throw new Error(`unknown preset ${JSON.stringify(name)}; choose one of ${Object.keys(presets.presets).join(", ")}`);
  const model = {
    nLayer: p.nLayer, nHead: p.nHead, dModel: p.dModel, ctx: p.ctx,
    vocabSize: presets.model.vocabSize, layerNormEps: presets.model.layerNormEps, ...(overrides.model ?? {}),
  };
  const training = { ...presets.training, batch: p.batch, steps: p.steps, ...(overrides.training ?? {}) };
  const config = { model, training, initStd: presets.model.initStd, rules: presets.rules };
  checkConfig(config);
  return config;
}

/**
 * The same config for a checkpoint: the model from header.config, the training settings it recorded
 * (presets.json's training values fill keys an older or foreign header lacks: a file with weights
 * alone can still sample and train on, just not resume a recorded data stream), initStd from
 * presets.json. A header without a batch takes its preset's, else the default preset's.
 */
export function configFromHeader(header, presets) {
  const recordedModel = header?.config;
  if (!recordedModel || typeof recordedModel !== "object") throw new Error("the checkpoint header has no model config");
  const model = {};
  for (const key of MODEL_KEYS) model[key] = recordedModel[key] ?? presets.model[key];
  for (const key of MODEL_KEYS) {
    if (model[key] === undefined) throw new Error(`the checkpoint's model config lacks ${key}`);
  }
  const recorded = header.training ?? {};
  const preset = presets.presets[header.preset] ?? presets.presets[presets.defaultPreset];
  const steps = presets.presets[header.preset]?.steps ?? 0;
  const training = { ...presets.training, steps, batch: preset.batch, ...recorded };
  const config = { model, training, initStd: presets.model.initStd, rules: presets.rules };
  try {
    checkConfig(config);
  } catch (e) {
    throw new Error(`the checkpoint's settings are invalid: ${e.message}`);
  }
  return config;
}
