// Prints, per preset, the dispatches of one training step, one eval batch and one decoded token, as
// JSON {preset: {step, eval, decode}}: each is a dependent GPU launch (Dawn puts a barrier between
// them), which bounds how fast a step of a small model can be. Recorded on a stand-in device: no GPU.
//   node webgpu/tools/dispatch_counts.mjs [preset,...]
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { recordingDevice } from "./recording_device.js";
import { Trainer } from "../trainer.js";
import { configFromPresets } from "../../site/static/js/model_config.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const presets = JSON.parse(readFileSync(`${ROOT}site/static/presets.json`, "utf8"));

// the plans depend on the config alone: a stand-in state that importState ignores, so no weights are made
class PlansOnly extends Trainer {
  importState() {}
}

const names = process.argv[2] ? process.argv[2].split(",") : Object.keys(presets.presets);
const counts = {};
for (const name of names) {
  const trainer = new PlansOnly(recordingDevice().device, configFromPresets(presets, name), { state: new Uint8Array(0) });
  counts[name] = trainer.dispatches;
  trainer.destroy();
}
console.log(JSON.stringify(counts));
