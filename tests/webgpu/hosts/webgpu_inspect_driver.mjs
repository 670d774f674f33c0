// Drives the look inside of site/static/js/engines/webgpu_engine.js under Node (npm `webgpu`, Dawn on
// SwiftShader) for tests/webgpu/test_webgpu_inspect.py: `node webgpu_inspect_driver.mjs <state file> <prompt hex> <new tokens>`
// loads a tiny model's .tinygpt state, prints one JSON object: the attention of the prompt
// ({T, weights}) and a greedy sample with each byte's top-5 next-byte probabilities.
import { readFileSync } from "node:fs";
import { register } from "node:module";
import { fileURLToPath } from "node:url";
import { configFromPresets } from "../../../site/static/js/model_config.js";

// the engine imports the trainer by its served path: map it to webgpu/ before importing either
register("./served_layout_hooks.mjs", import.meta.url);
const { createEngine } = await import("../../../site/static/js/engines/webgpu_engine.js");

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const { create, globals } = await import(new URL("../../../webgpu/node_modules/webgpu/index.js", import.meta.url));
Object.assign(globalThis, globals);
const gpu = create([]);  // must outlive every adapter and device (webgpu/node_gpu.js says why)
const presets = JSON.parse(readFileSync(`${ROOT}site/static/presets.json`, "utf8"));
const corpus = new Uint8Array(readFileSync(`${ROOT}site/static/data/tinyshakespeare.txt`));

const [statePath, promptHex, newTokens] = process.argv.slice(2);
const prompt = Uint8Array.from(Buffer.from(promptHex, "hex"));
const fatals = [];
const engine = await createEngine({ ...configFromPresets(presets, "tiny"), corpus, seed: 0, state: new Uint8Array(readFileSync(statePath)),
  onFatal: (m) => fatals.push(m), adapter: await gpu.requestAdapter() });
const { T, weights } = await engine.attention(prompt);
const sample = [];
await engine.generate(prompt, { temperature: 0, topK: 0, seed: 0, maxNewTokens: Number(newTokens),
  onToken: (token, top) => sample.push({ token, top }) });
await engine.destroy(); // the decode kernel's background compile ends before the process does
console.log(JSON.stringify({ T, weights: Array.from(weights), sample, fatals }));
