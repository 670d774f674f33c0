// Compiles every .wgsl file of a folder (dump_wgsl.mjs's output) on the Node adapter (npm `webgpu`):
//   node webgpu/tools/compile_wgsl.mjs DIR
// Each file: createShaderModule, getCompilationInfo (no error messages), then a compute pipeline
// (layout "auto", its one entry point). Prints {adapter, compiled, failures: [{file, errors}]};
// exits 1 when any file fails.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { nodeDevice } from "../node_gpu.js";

const dir = process.argv[2];
if (!dir) throw new Error("usage: node webgpu/tools/compile_wgsl.mjs DIR");
const { device, info } = await nodeDevice();
const failures = [];
let compiled = 0;
for (const file of readdirSync(dir).filter((f) => f.endsWith(".wgsl")).sort()) {
  const code = readFileSync(join(dir, file), "utf8");
  device.pushErrorScope("validation");
  const module = device.createShaderModule({ label: file, code });
  const errors = (await module.getCompilationInfo()).messages.filter((m) => m.type === "error")
    .map((m) => `${m.lineNum}:${m.linePos} ${m.message}`);
  if (!errors.length) {
    try {
      await device.createComputePipelineAsync({ label: file, layout: "auto", compute: { module } });
    } catch (e) {
      errors.push(`pipeline: ${e.message}`);
    }
  }
  const scoped = await device.popErrorScope();
  if (scoped) errors.push(`validation: ${scoped.message}`);
  if (errors.length) failures.push({ file, errors });
  else compiled += 1;
}
console.log(JSON.stringify({ adapter: info.architecture || info.vendor, compiled, failures }));
device.destroy();
if (failures.length) process.exitCode = 1;
