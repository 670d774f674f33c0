// The WGSL trainer's two ways to decode a batch, side by side under Node (npm `webgpu`, Dawn): each
// batch's steps in one workgroup (decode_tokens.js; with the next batch submitted ahead, and without;
// with the next window's rows computed by each step, and with a restart that rebuilds them instead)
// and the decode chain with a sampler dispatch a step, with the recompute decoder beside them; same seeded weights, prompt and sampling, rounds of the three
// in turn (replay.mjs roundsInTurn), median tokens/s. docs/performance.md §40 measured the rule
// (DECODE_IN_ONE_WORKGROUP_MAX_WIDTH in trainer.js) with it. A software adapter's figures say nothing.
//   node webgpu/bench/decode_paths.mjs [presets, default tiny,small,medium] [new tokens, default 512]
// Prints a JSON line per preset: tokens/s of each, the ratios to recompute, whether all gave the same tokens.
import { readFileSync } from "node:fs";
import { nodeDevice } from "../node_gpu.js";
import { Trainer } from "../trainer.js";
import { RecomputeDecoder } from "../recompute_decoder.js";
import { decodeTokensFits } from "../kernels/decode_tokens.js";
import { configFromPresets } from "../../site/static/js/model_config.js";
import { roundsInTurn } from "./replay.mjs";

const ROUNDS = { min: 3, max: 15, seconds: 0.5 }; // as python_ref/decode_bench.py's
const SAMPLING = { temperature: 0.8, topK: 40, seed: 0 };

const { device, info } = await nodeDevice();
const presets = JSON.parse(readFileSync(new URL("../../site/static/presets.json", import.meta.url), "utf8"));
const names = (process.argv[2] ?? "tiny,small,medium").split(",");
const newTokens = Number(process.argv[3] ?? 512);
console.log(JSON.stringify({ adapter: [info.vendor, info.architecture, info.description].filter(Boolean).join(" ") }));
for (const name of names) {
  const config = configFromPresets(presets, name);
  if (!decodeTokensFits(config.model)) {
    console.log(JSON.stringify({ preset: name, skipped: "the model does not fit one workgroup" }));
    continue;
  }
  const one = new Trainer(device, config, { decodeInOneWorkgroup: true });
  const behind = new Trainer(device, config, { decodeInOneWorkgroup: true, decodeAhead: false });
  const rebuild = new Trainer(device, config, { decodeInOneWorkgroup: true, decodeNextWindow: false });
  const chain = new Trainer(device, config, { decodeInOneWorkgroup: false });
  const recompute = new RecomputeDecoder(chain);
  const timed = async (decoder, maxNewTokens) => {
    const t0 = performance.now();
    const tokens = await decoder.generate([10], { maxNewTokens, ...SAMPLING });
    return { ms: performance.now() - t0, tokens: Array.from(tokens) };
  };
  for (const decoder of [one, behind, rebuild, chain, recompute]) await timed(decoder, 16); // pipelines and plans on first use
  const r = await roundsInTurn({ one: () => timed(one, newTokens), behind: () => timed(behind, newTokens), rebuild: () => timed(rebuild, newTokens),
    chain: () => timed(chain, newTokens), recompute: () => timed(recompute, newTokens) }, ROUNDS);
  const rate = (mode) => Math.round(newTokens / (r[mode].ms / 1e3));
  const ratio = (mode) => +(rate(mode) / rate("recompute")).toFixed(2);
  console.log(JSON.stringify({ preset: name, oneWorkgroup: rate("one"), oneNotAhead: rate("behind"), oneRebuilding: rate("rebuild"),
    nextWindowRows: one.decodeNextWindow, chain: rate("chain"),
    recompute: rate("recompute"), oneVsRecompute: ratio("one"), oneNotAheadVsRecompute: ratio("behind"), chainVsRecompute: ratio("chain"),
    sameTokens: ["behind", "rebuild", "chain", "recompute"].every((mode) => r[mode].tokens.join() === r.one.tokens.join()),
    rounds: r.one.roundsMs.length }));
  recompute.destroy();
  one.destroy();
  behind.destroy();
  rebuild.destroy();
  chain.destroy();
}
device.destroy();
process.exit(0);
