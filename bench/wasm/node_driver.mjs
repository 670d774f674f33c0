// Runs one scenario (scenario.mjs) in Node against one build and prints the result as JSON.
// usage: node [--experimental-wasm-relaxed-simd] node_driver.mjs SPEC.json   spec.build: scalar | simd |
// threads | relaxed (needs the flag);  spec.wasmDir: the directory holding <build>/tinygpt.mjs;  file names
// in the spec are paths.
import { readFileSync, writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { detectFeatures, instantiateBuild, loadTinyGPT } from "../../site/static/js/wasm_loader.js";
import { runScenario } from "./scenario.mjs";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const baseUrl = pathToFileURL(spec.wasmDir.replace(/\/?$/, "/"));
const io = {
  read: (path) => new Uint8Array(readFileSync(path)),
  write: (path, bytes) => writeFileSync(path, bytes),
};

let result;
try {
  if (spec.loaderOnly) {
    // Exercise the loader's decision in this engine (features, memory need, chosen build).
    const cfg = spec.config;
    const loaded = await loadTinyGPT(cfg, { baseUrl, prefer: spec.prefer ?? null });
    result = { build: loaded.build, reason: loaded.reason, needBytes: loaded.needBytes, threads: loaded.threads,
      features: await detectFeatures() };
  } else {
    const tg = await instantiateBuild(spec.build, { baseUrl, threads: spec.threads ?? 1 });
    result = { build: spec.build, ...runScenario(tg, spec, io) };
  }
} catch (e) {
  result = { error: String(e?.stack || e) };
}
process.stdout.write(JSON.stringify(result) + "\n");
// Pthread workers keep Node's event loop alive; the scenario is done, so leave now.
process.exit(result.error ? 1 : 0);
