// One preset's decoding timed as the benches report it, on any host's device: Node + Dawn
// (decode_bench.mjs) or a browser's WebGPU in a module worker (browser_bench_worker.js). Decoder.generate
// (the KV cache) against RecomputeDecoder (the whole window a token), the same seeded weights, prompt and
// sampling, rounds of each in turn (replay.mjs roundsInTurn).
import { Trainer } from "../../webgpu/trainer.js";
import { Decoder } from "../../webgpu/decoder.js";
import { RecomputeDecoder } from "../../webgpu/recompute_decoder.js";
import { decodeTokensFits } from "../../webgpu/kernels/decode_tokens.js";
import { roundsInTurn } from "./replay.mjs";

// Decoders a job may time beside the default one, on the same trainer and in the same rounds: an A/B
// of a lever or a rule (Decoder's options)
export const DECODE_VARIANTS = {
  notAhead: () => ({ decodeAhead: false }), // no batch submitted before the last one is read
  oneWorkgroup: (model) => (decodeTokensFits(model) ? { decodeInOneWorkgroup: true } : null), // where the kernel fits the model
  chain: () => ({ decodeInOneWorkgroup: false }), // every batch on the decode chain
};

/**
 * job: {newTokens, warmupTokens, prompt: [bytes], temperature, topK, seed, rounds} (bench/decode.py
 * makes it), and variants: names of DECODE_VARIANTS to time too (those that do not apply to the model
 * are left out). -> {kv: {ms, roundsMs, tokens}, recompute: {...}, variants: {name: {...}}}: ms is
 * each mode's median round.
 */
export async function timeDecode(device, config, job) {
  for (const name of job.variants ?? []) if (!DECODE_VARIANTS[name]) throw new Error(`no decode variant ${name}: ${Object.keys(DECODE_VARIANTS).join(", ")}`);
  const trainer = new Trainer(device, config); // the preset's seeded initial weights
  const kv = new Decoder(trainer), recompute = new RecomputeDecoder(trainer);
  const variants = Object.fromEntries((job.variants ?? []).map((name) => [name, DECODE_VARIANTS[name](config.model)])
    .filter(([, options]) => options).map(([name, options]) => [name, new Decoder(trainer, options)]));
  try {
    const sampling = { temperature: job.temperature, topK: job.topK, seed: job.seed };
    const timed = async (decoder, maxNewTokens) => {
      const t0 = performance.now();
      const tokens = await decoder.generate(job.prompt, { maxNewTokens, ...sampling });
      return { ms: performance.now() - t0, tokens: Array.from(tokens) };
    };
    // warm-up: pipelines compile and the decode plan is recorded on first use (decoders made together share a
    // kernel's background compile: PipelineCache.prepare)
    for (const decoder of [kv, ...Object.values(variants)]) {
      await timed(decoder, job.warmupTokens);
      await decoder.tokensReady; // where tiny's batches decode in one workgroup, its pipeline compiles in the background
    }
    await timed(recompute, job.warmupTokens);
    // rounds of each mode in turn, the median kept: one round of 512 tokens on an H200 read the same
    // code at 307 and 498 tokens/s a minute apart, as the host's speed moved, and a round of tiny's KV
    // cache takes ~60 ms, so small models get more rounds (docs/lab/2026-11-28-decoding-on-the-gpu.md §35, §38)
    const modes = { kv: () => timed(kv, job.newTokens), recompute: () => timed(recompute, job.newTokens) };
    for (const [name, decoder] of Object.entries(variants)) modes[`variant ${name}`] = () => timed(decoder, job.newTokens);
    const r = await roundsInTurn(modes, job.rounds);
    return { kv: r.kv, recompute: r.recompute, variants: Object.fromEntries(Object.keys(variants).map((name) => [name, r[`variant ${name}`]])) };
  } finally {
    recompute.destroy();
    for (const decoder of [kv, ...Object.values(variants)]) await decoder.destroy();
    trainer.destroy();
  }
}
