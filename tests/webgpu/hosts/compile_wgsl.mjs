// Compiles every .wgsl file of a folder (dump_wgsl.mjs's output) on the Node adapter (npm `webgpu`):
//   node tests/webgpu/hosts/compile_wgsl.mjs DIR
// Each file as compile_check.js compiles it. Prints {adapter, compiled, failures: [{file, errors}]};
// exits 1 when any file fails.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { nodeDevice } from "../../../webgpu/node_gpu.js";
import { compileErrors } from "./compile_check.js";

const dir = process.argv[2];
if (!dir) throw new Error("usage: node tests/webgpu/hosts/compile_wgsl.mjs DIR");
const { device, info } = await nodeDevice();
const failures = [];
let compiled = 0;
for (const file of readdirSync(dir).filter((f) => f.endsWith(".wgsl")).sort()) {
  const errors = await compileErrors(device, file, readFileSync(join(dir, file), "utf8"));
  if (errors.length) failures.push({ file, errors });
  else compiled += 1;
}
console.log(JSON.stringify({ adapter: info.architecture || info.vendor, compiled, failures }));
device.destroy();
if (failures.length) process.exitCode = 1;
