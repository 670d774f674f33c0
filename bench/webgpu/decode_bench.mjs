// Decode speed of the WGSL trainer under Node (npm `webgpu`, Dawn): Decoder.generate (KV cache)
// against RecomputeDecoder (the whole window per token), same seeded weights, prompt and sampling.
//   echo '{"preset": "tiny", "newTokens": 512, "warmupTokens": 16, "prompt": [10], "temperature": 0.8, "topK": 40,
//          "seed": 0, "rounds": {"min": 3, "max": 15, "seconds": 0.5}}' | node bench/webgpu/decode_bench.mjs
// Prints one JSON line: {adapter, software, kv: {ms, roundsMs, tokens}, recompute: {...}}, or {error}: ms
// is the median of the rounds of each mode, taken in turn (replay.mjs roundsInTurn).
// A software adapter (SwiftShader, llvmpipe) gives tokens but no speed: it is refused unless the job
// says "allowSoftware" (the token-equality test). {"probe": true}: only {adapter, software}.
// Run by bench/decode.py.
import { readFileSync } from "node:fs";
import { nodeDevice } from "../../webgpu/node_gpu.js";
import { configFromPresets } from "../../site/static/js/model_config.js";
import { isSoftwareAdapter } from "../../webgpu/software_adapter.js";
import { timeDecode } from "./time_decode.js";

async function run(job) {
  const { device, info } = await nodeDevice();
  const adapter = [...new Set([info.vendor, info.architecture, info.description].filter(Boolean))].join(" ");
  const software = isSoftwareAdapter(info);
  if (job.probe) return { adapter, software };
  if (software && !job.allowSoftware) throw new Error(`the adapter is software (${adapter}): correct, not fast, so no speed figure`);

  const presets = JSON.parse(readFileSync(new URL("../../site/static/presets.json", import.meta.url), "utf8"));
  const result = { adapter, software, ...(await timeDecode(device, configFromPresets(presets, job.preset), job)) };
  device.destroy();
  return result;
}

let result;
try {
  result = await run(JSON.parse(readFileSync(0, "utf8")));
} catch (e) {
  result = { error: String(e?.stack || e) };
}
process.stdout.write(JSON.stringify(result) + "\n");
process.exit(result.error ? 1 : 0);
