// Node wrapper of kernel_cases.js: DIR/cases.json + DIR/<name>.bin in, DIR/<name>.out (float32) back.
import { readFileSync, writeFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { nodeDevice } from "../../../webgpu/node_gpu.js";
import { runKernelCases } from "./kernel_cases.js";

const dir = process.argv[2];
const cases = JSON.parse(readFileSync(join(dir, "cases.json"), "utf8"));
const inputs = {};
for (const f of readdirSync(dir)) if (f.endsWith(".bin")) inputs[f.slice(0, -4)] = new Uint8Array(readFileSync(join(dir, f)));
const { device } = await nodeDevice();
const results = await runKernelCases(device, cases, inputs);
for (const [name, values] of Object.entries(results)) writeFileSync(join(dir, `${name}.out`), values);
device.destroy();
