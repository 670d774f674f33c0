// One preset's decoding timed as the benches report it, on any host's device: Node + Dawn
// (decode_bench.mjs) or a browser's WebGPU in a module worker (browser_bench_worker.js). Trainer.generate
// (the KV cache) against RecomputeDecoder (the whole window a token), the same seeded weights, prompt and
// sampling, rounds of each in turn (replay.mjs roundsInTurn).
import { Trainer } from "../trainer.js";
import { RecomputeDecoder } from "../recompute_decoder.js";
import { roundsInTurn } from "./replay.mjs";

/**
 * job: {newTokens, warmupTokens, prompt: [bytes], temperature, topK, seed, rounds} (python_ref/decode_bench.py
 * makes it), and notAhead: also the KV cache without its next batch submitted ahead (Trainer's
 * decodeAhead false), an A/B of that lever in the same rounds.
 * -> {kv: {ms, roundsMs, tokens}, recompute: {...}, kvNotAhead?: {...}}: ms is each mode's median round.
 */
export async function timeDecode(device, config, job) {
  const trainer = new Trainer(device, config); // the preset's seeded initial weights
  const recompute = new RecomputeDecoder(trainer);
  const behind = job.notAhead ? new Trainer(device, config, { decodeAhead: false }) : null;
  try {
    const sampling = { temperature: job.temperature, topK: job.topK, seed: job.seed };
    const timed = async (decoder, maxNewTokens) => {
      const t0 = performance.now();
      const tokens = await decoder.generate(job.prompt, { maxNewTokens, ...sampling });
      return { ms: performance.now() - t0, tokens: Array.from(tokens) };
    };
    // warm-up: pipelines compile and the decode plan is recorded on first use
    await timed(trainer, job.warmupTokens);
    await trainer.tokensReady; // where tiny's batches decode in one workgroup, its pipeline compiles in the background
    await timed(recompute, job.warmupTokens);
    if (behind) await timed(behind, job.warmupTokens);
    // rounds of each mode in turn, the median kept: one round of 512 tokens on an H200 read the same
    // code at 307 and 498 tokens/s a minute apart (docs/performance.md §35), as the host's speed moved,
    // and a round of tiny's KV cache takes ~60 ms, so small models get more rounds (§38)
    const modes = { kv: () => timed(trainer, job.newTokens), recompute: () => timed(recompute, job.newTokens) };
    if (behind) modes.kvNotAhead = () => timed(behind, job.newTokens);
    return await roundsInTurn(modes, job.rounds);
  } finally {
    recompute.destroy();
    behind?.destroy();
    trainer.destroy();
  }
}
