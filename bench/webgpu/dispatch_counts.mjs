// Prints, per preset, the dispatches of one training step, one eval batch and one decoded token, as
// JSON {preset: {step, eval, decode}}: each is a dependent GPU launch (Dawn puts a barrier between
// them), which bounds how fast a step of a small model can be. Recorded on a stand-in device: no GPU.
//   node bench/webgpu/dispatch_counts.mjs [preset,...|all] [storage buffers per shader stage, default 8]
//                                         [bytes of workgroup memory, default 16384]
//                                         [deferred weight gradients: on, off; default the trainer's rule]
//                                         [LoRA: default or RANK,ALPHA,TARGET+TARGET; none by default]
// With LoRA, each preset's counts are a fine-tune's (webgpu/lora.js): step, eval (with the adapters), decode.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { recordingDevice, plansOnlyTrainer } from "./recording_device.js";
import { Decoder } from "../../webgpu/decoder.js";
import { configFromPresets } from "../../site/static/js/model_config.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const presets = JSON.parse(readFileSync(`${ROOT}site/static/presets.json`, "utf8"));

const names = process.argv[2] && process.argv[2] !== "all" ? process.argv[2].split(",") : Object.keys(presets.presets);
// a device that binds more storage buffers takes the block-end kernel (Ops.layernormBackwardBlock)
// and one that offers more workgroup memory other tiles, and so other pairs
const limits = {
  ...(process.argv[3] ? { maxStorageBuffersPerShaderStage: Number(process.argv[3]) } : {}),
  ...(process.argv[4] ? { maxComputeWorkgroupStorageSize: Number(process.argv[4]) } : {}),
};
const deferWeightGrads = { on: true, off: false }[process.argv[5]];
const loraSpec = process.argv[6];
const lora = !loraSpec ? null : loraSpec === "default" ? { rank: presets.lora.rank, alpha: presets.lora.alpha, targets: presets.lora.targets }
  : { rank: Number(loraSpec.split(",")[0]), alpha: Number(loraSpec.split(",")[1]), targets: loraSpec.split(",")[2].split("+") };
const counts = {};
for (const name of names) {
  const trainer = plansOnlyTrainer(recordingDevice({ limits }).device, configFromPresets(presets, name), { deferWeightGrads, lora });
  const decoder = new Decoder(trainer, lora ? { params: trainer.lora.samplingWeights() } : {});
  counts[name] = { ...trainer.dispatches, ...decoder.dispatches };
  await decoder.destroy();
  trainer.destroy();
}
console.log(JSON.stringify(counts));
