// Decode speed of the C++ core's WebAssembly build in Node: tg_generate with the KV cache and with a
// full recompute of the window per token, same seeded weights, prompt and sampling.
//   echo '{"preset": "tiny", "newTokens": 512, "prompt": [10], "temperature": 0.8, "topK": 40, "seed": 0,
//          "warmupTokens": 16, "rounds": {"min": 3, "max": 15, "seconds": 0.5}, "wasmDir": "build/wasm"}' \
//     | node --experimental-wasm-relaxed-simd bench/wasm/decode_node.mjs
// Prints one JSON line: {build, reason, threads, kv: {ms, roundsMs, tokens}, recompute: {...}}, or {error}: ms
// is the median of the rounds of each mode, taken in turn (bench/webgpu/replay.mjs roundsInTurn).
// The build is wasm_loader.js's choice, the one the page would get in this engine (Node 20 offers
// relaxed SIMD only behind the flag above). wasmDir: the folder of the builds (default: the page's
// site/static/wasm); threads: the pool of a threaded build (default: every core). Run by bench/decode.py.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { loadTinyGPT } from "../../site/static/js/wasm_loader.js";
import { configFromPresets } from "../../site/static/js/model_config.js";
import { roundsInTurn } from "../webgpu/replay.mjs";

async function run(job, { model, training, initStd }, loaded) {
  const { tg } = loaded, { api } = tg;
  // one row: generation runs batch 1, and the arena's training activations grow with the batch
  const handle = tg.withStruct("tg_config", { ...model, initStd }, (ptr) => api.tg_create(ptr, 1, loaded.threads));
  if (!handle) throw tg.failure("tg_create", api.tg_last_error_code());
  const prompt = tg.copyIn(new Uint8Array(Int32Array.from(job.prompt).buffer));
  const out = tg.malloc(4 * Math.max(1, job.newTokens, job.warmupTokens));
  try {
    tg.check(api.tg_init(handle, training.seed), "tg_init"); // the preset's seeded initial weights
    const timed = (useKvCache, maxNew) => {
      const t0 = performance.now();
      const made = tg.check(api.tg_generate(handle, prompt, job.prompt.length, maxNew, job.temperature, job.topK, job.seed,
        useKvCache ? 1 : 0, out), "tg_generate");
      return { ms: performance.now() - t0, tokens: Array.from(tg.i32(out, made)) };
    };
    // warm-up: the engine tiers up the hot loops and the pool's threads start working
    timed(true, job.warmupTokens);
    timed(false, job.warmupTokens);
    // awaited here, before `finally` frees the buffers the rounds use
    return await roundsInTurn({ kv: () => timed(true, job.newTokens), recompute: () => timed(false, job.newTokens) }, job.rounds);
  } finally {
    tg.free(out);
    tg.free(prompt);
    api.tg_destroy(handle);
  }
}

let result;
try {
  const job = JSON.parse(readFileSync(0, "utf8"));
  const presets = JSON.parse(readFileSync(new URL("../../site/static/presets.json", import.meta.url), "utf8"));
  const config = configFromPresets(presets, job.preset);
  const baseUrl = job.wasmDir ? pathToFileURL(job.wasmDir.replace(/\/?$/, "/")) : undefined;
  const loaded = await loadTinyGPT({ ...config.model, initStd: config.initStd, batch: 1 }, { baseUrl, threads: job.threads });
  result = { build: loaded.build, reason: loaded.reason, threads: loaded.threads, ...(await run(job, config, loaded)) };
} catch (e) {
  result = { error: String(e?.stack || e) };
}
process.stdout.write(JSON.stringify(result) + "\n");
// Pthread workers keep Node's event loop alive; the run is done, so leave now.
process.exit(result.error ? 1 : 0);
