// Makes a compute pipeline of every .wgsl file of a folder (dump_wgsl.mjs's output) on Dawn's Null
// backend (npm `webgpu`):
//   node tests/webgpu/hosts/null_backend_pipelines.mjs DIR
// The Null backend runs Dawn's whole front end (Tint's WGSL reader and resolver, layout "auto", the
// device's limits) and compiles nothing for a GPU, so all the variants take seconds where SwiftShader's
// LLVM JIT takes minutes. Each file as compile_check.js's compileErrors compiles it, on a device with
// the trainer's limits (trainerLimits, at the Null adapter's values: WebGPU's defaults) and subgroups
// (which the Null adapter offers; without them the device request fails).
// The variants the trainer takes only on devices that offer more than the defaults fail there with
// nothing else wrong: their one error is a limit this adapter lacks, and they are listed apart, with
// what they need (beyondLimits). Prints {adapter, features, limits, made, beyondLimits: [{file, needs}],
// failures: [{file, errors}], seconds}; exits 1 when any file fails.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
// the npm package where webgpu/ has it (webgpu.mk links webgpu/node_modules); node_gpu.js's nodeDevice
// makes no Null-backend device
import { create, globals } from "../../../webgpu/node_modules/webgpu/index.js";
import { trainerLimits } from "../../../webgpu/trainer.js";
import { compileErrors } from "./compile_check.js";

// Dawn's messages for a pipeline over a device limit, and the limit each names
const LIMIT_ERRORS = [
  [/number of storage buffers \((\d+)\) in the Compute stage exceeds the maximum per-stage limit/, "maxStorageBuffersPerShaderStage"],
  [/total use of workgroup storage \((\d+) bytes\) is larger than the maximum allowed/, "maxComputeWorkgroupStorageSize"],
];

// the GPU instance and adapter must outlive the device (node_gpu.js says why)
const alive = [];

/** A device of the Null adapter, as the trainer asks for one (webgpu/node_gpu.js), with subgroups. */
async function nullDevice() {
  Object.assign(globalThis, globals);
  const gpu = create(["backend=null"]);
  const adapter = await gpu.requestAdapter();
  alive.push(gpu, adapter);
  if (!adapter) throw new Error("no Null-backend adapter in this build of the npm `webgpu` package");
  const device = await adapter.requestDevice({ requiredLimits: trainerLimits(adapter), requiredFeatures: ["subgroups"] });
  device.addEventListener("uncapturederror", (e) => {
    console.error(`WebGPU error: ${e.error.message}`);
    process.exitCode = 1;
  });
  return { adapter, device };
}

/** {limit: value} where a pipeline's only error is one device limit it needs more of, else null. */
function limitNeeded(errors) {
  if (errors.length !== 1) return null;
  for (const [pattern, limit] of LIMIT_ERRORS) {
    const m = errors[0].match(pattern);
    if (m) return { [limit]: Number(m[1]) };
  }
  return null;
}

const dir = process.argv[2];
if (!dir) throw new Error("usage: node tests/webgpu/hosts/null_backend_pipelines.mjs DIR");
const { adapter, device } = await nullDevice();
const result = { adapter: adapter.info.description || "Null backend", features: [...device.features].sort(),
  limits: trainerLimits(device), made: 0, beyondLimits: [], failures: [] };
const start = performance.now();
for (const file of readdirSync(dir).filter((f) => f.endsWith(".wgsl")).sort()) {
  const errors = await compileErrors(device, file, readFileSync(join(dir, file), "utf8"));
  const needs = limitNeeded(errors);
  if (!errors.length) result.made += 1;
  else if (needs) result.beyondLimits.push({ file, needs });
  else result.failures.push({ file, errors });
}
result.seconds = Number(((performance.now() - start) / 1000).toFixed(2));
console.log(JSON.stringify(result));
device.destroy();
if (result.failures.length) process.exitCode = 1;
