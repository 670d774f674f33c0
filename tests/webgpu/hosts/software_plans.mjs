// Prints, per preset and per workgroup-memory limit (WebGPU's default 16 KiB, and 32 KiB as on
// SwiftShader and most GPUs), the training step a GPU adapter gets and the one a software adapter
// gets (Trainer's matmulTiles), recorded on stand-in devices (no GPU): for each, the dispatch count,
// the matmul tiles its kernels use and the bytes of every buffer the trainer creates; and each tile's
// software twin with the invocations of both, as JSON {presets: {"<limit>": {preset: {gpu: {step,
// tiles, buffers}, software: {...}}}}, twins: {tile: [twin, threads, twin's threads]}}.
//   node tests/webgpu/hosts/software_plans.mjs [preset,...]
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { recordingDevice, plansOnlyTrainer } from "../../../bench/webgpu/recording_device.js";
import { MATMUL_TILES, softwareTile, tileShape } from "../../../webgpu/kernels/matmul.js";
import { configFromPresets } from "../../../site/static/js/model_config.js";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const presets = JSON.parse(readFileSync(`${ROOT}site/static/presets.json`, "utf8"));

// the tiles a matmul kernel's name holds (a pair's names two): its parts that are tile names
const tilesOf = (name) => name.split("_").filter((part) => part in MATMUL_TILES);

const names = process.argv[2] ? process.argv[2].split(",") : Object.keys(presets.presets);
const out = {};
for (const limit of [16384, 32768]) {
  out[limit] = {};
  for (const name of names) {
    out[limit][name] = {};
    for (const [kind, info] of [["gpu", { vendor: "nvidia" }], ["software", { vendor: "google", architecture: "swiftshader", isFallbackAdapter: true }]]) {
      const { device } = recordingDevice({ adapterInfo: info, limits: { maxComputeWorkgroupStorageSize: limit } });
      const trainer = plansOnlyTrainer(device, configFromPresets(presets, name));
      const tiles = new Set(trainer.trainPlan.entries.flatMap((e) => tilesOf(e.kernel.name)));
      out[limit][name][kind] = { step: trainer.trainPlan.entries.length, tiles: [...tiles].sort(), buffers: trainer.buffers.map((b) => b.size) };
      trainer.destroy();
    }
  }
}
const twins = Object.fromEntries(Object.keys(MATMUL_TILES).map((t) => [t, [softwareTile(t), tileShape(t).threads, tileShape(softwareTile(t)).threads]]));
console.log(JSON.stringify({ presets: out, twins }));
