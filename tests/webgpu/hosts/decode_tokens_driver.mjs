// Drives webgpu/kernels/decode_tokens.js (a batch of decoded tokens in one workgroup) under Node (npm
// `webgpu`, Dawn on SwiftShader) for tests/webgpu/test_webgpu_decode_tokens.py; prints one JSON object with,
// per model shape: the largest difference between the logits each generated token was sampled from
// and the full forward of the same window (RecomputeDecoder.lastLogits), whether the tokens are the
// recompute decoder's and the decode chain's (a second decoder on the same trainer with
// decodeInOneWorkgroup false), and whether the batches ran in one workgroup; then the same for a
// long prompt and generation on the tiny preset, with batches submitted ahead and not.
import { readFileSync } from "node:fs";
import { nodeDevice } from "../../../webgpu/node_gpu.js";
import { Trainer } from "../../../webgpu/trainer.js";
import { Decoder } from "../../../webgpu/decoder.js";
import { RecomputeDecoder } from "../../../webgpu/recompute_decoder.js";
import { configFromPresets } from "../../../site/static/js/model_config.js";

const { device } = await nodeDevice();
const presets = JSON.parse(readFileSync(new URL("../../../site/static/presets.json", import.meta.url), "utf8"));
// the tiny preset; a width whose q/k/v and fc_in products take two passes and whose fc_out takes
// rounds of loads in a loop (C = 128); one whose outputs, rows and heads divide unevenly (C = 84, 7
// heads of 12 whose 3 vec4s do not divide the invocations, 3 layers: the decode chain does not take it,
// so the second trainer decodes with one-row products; an odd window, whose restart keeps 12 tokens
// from position 13). Short windows, so that generation restarts them. Tiny and uneven compute the next
// window's rows in each step; wide is asked not to (decodeNextWindow false), so its restarts rebuild them.
const SHAPES = {
  tiny: {},
  wide: { nLayer: 2, nHead: 4, dModel: 128, ctx: 20 },
  uneven: { nLayer: 3, nHead: 7, dModel: 84, ctx: 25 },
};
const NEXT_WINDOW = { tiny: true, wide: false, uneven: true };
const out = {};

/**
 * Generates with `decoder` and with `recompute` (the host samples each token from the full forward of its
 * window: RecomputeDecoder.generate); returns both decoders' tokens and the largest difference between the
 * logits each of `decoder`'s tokens was sampled from and the full forward of the same window.
 */
async function generateChecked(decoder, recompute, prompt, job) {
  const seen = [];
  const kv = Array.from(await decoder.generate(prompt, { ...job, onToken: (t, logits) => seen.push(logits.slice()) }));
  // the recompute decoder's full forwards, kept: each one is of the window the host sampled its token after
  const full = [], lastLogits = recompute.lastLogits.bind(recompute);
  recompute.lastLogits = async (window) => {
    const logits = await lastLogits(window);
    full.push(logits);
    return logits;
  };
  const host = Array.from(await recompute.generate(prompt, job));
  delete recompute.lastLogits;
  // each token's logits against the full forward of the window it was sampled after (docs/determinism.md's
  // context policy: a full window restarts from its last ctx/2 tokens): the recompute decoder's, up to the
  // first token where the two decoders differ (their windows are the same until then), a forward of its own after
  const ctx = decoder.cfg.ctx, differs = kv.findIndex((t, i) => t !== host[i]);
  let window = [], maxDiff = 0, maxLogit = 0;
  const advance = (t) => {
    if (window.length >= ctx) window = window.slice(window.length - Math.floor(ctx / 2));
    window.push(t);
  };
  prompt.forEach(advance);
  for (let i = 0; i < kv.length; i++) {
    const logits = differs === -1 || i <= differs ? full[i] : await recompute.lastLogits(window);
    for (let j = 0; j < logits.length; j++) {
      maxDiff = Math.max(maxDiff, Math.abs(logits[j] - seen[i][j]));
      maxLogit = Math.max(maxLogit, Math.abs(logits[j]));
    }
    advance(kv[i]);
  }
  return { kv, host, maxDiff, maxLogit };
}

for (const [name, model] of Object.entries(SHAPES)) {
  const config = configFromPresets(presets, "tiny", { model });
  const trainer = new Trainer(device, config);
  const decoder = new Decoder(trainer, { decodeInOneWorkgroup: true, decodeNextWindow: NEXT_WINDOW[name] });
  const chain = new Decoder(trainer, { decodeInOneWorkgroup: false });
  const recompute = new RecomputeDecoder(trainer);
  const prompt = Array.from(Buffer.from("ROMEO:"));
  const job = { maxNewTokens: 30, temperature: 0.8, topK: 40, seed: 5, batchMs: Infinity };
  const { kv, host, maxDiff, maxLogit } = await generateChecked(decoder, recompute, prompt, job);
  const chained = Array.from(await chain.generate(prompt, job));
  out[name] = { model: config.model, oneWorkgroup: Boolean(decoder.tokensPlan), chainOneWorkgroup: Boolean(chain.tokensPlan),
    nextWindow: decoder.decodeNextWindow,
    tokens: kv.length, maxDiff, maxLogit, sameAsRecompute: kv.join() === host.join(), sameAsChain: kv.join() === chained.join() };
  recompute.destroy();
  await chain.destroy();
  await decoder.destroy();
  trainer.destroy();
}
// the window the kernel keeps: a prompt that leaves a full window (the upload rebuilds ctx − 1 = 31
// rows, the most), then 100 tokens (seven restarts, inside batches), with each batch submitted ahead of
// the last one's read and without
{
  const config = configFromPresets(presets, "tiny");
  const trainer = new Trainer(device, config);
  const ahead = new Decoder(trainer, { decodeInOneWorkgroup: true });
  const behind = new Decoder(trainer, { decodeInOneWorkgroup: true, decodeAhead: false });
  const recompute = new RecomputeDecoder(trainer);
  const uploads = []; // the window length of each upload (its rows but the last are rebuilt)
  const batch = ahead._tokensBatch.bind(ahead);
  ahead._tokensBatch = (window, n, options) => {
    if (options.upload) uploads.push(window.length);
    return batch(window, n, options);
  };
  const prompt = Array.from(Buffer.from("ROMEO:\nBut soft, what light through yonder windo")); // 48 bytes: a window of 32 left
  const job = { maxNewTokens: 100, temperature: 0.8, topK: 40, seed: 3, batchMs: Infinity };
  const { kv, host, maxDiff, maxLogit } = await generateChecked(ahead, recompute, prompt, job);
  const notAhead = Array.from(await behind.generate(prompt, job));
  out.window = { prompt: prompt.length, rebuilt: uploads[0] - 1, tokens: kv.length, maxDiff, maxLogit, sameAsRecompute: kv.join() === host.join(),
    sameNotAhead: notAhead.join() === host.join() };
  recompute.destroy();
  await behind.destroy();
  await ahead.destroy();
  trainer.destroy();
}
// the rule: the tiny preset's batches take the decode chain until the kernel has compiled in the
// background, then one workgroup, with the same tokens
{
  const config = configFromPresets(presets, "tiny");
  const trainer = new Trainer(device, config);
  const decoder = new Decoder(trainer);
  const recompute = new RecomputeDecoder(trainer);
  const job = { maxNewTokens: 20, temperature: 0.8, topK: 40, seed: 9, batchMs: Infinity };
  const prompt = Array.from(Buffer.from("ROMEO:"));
  const first = Array.from(await decoder.generate(prompt, job));
  const pending = decoder.tokensReady !== undefined;
  await decoder.tokensReady;
  const second = Array.from(await decoder.generate(prompt, job));
  const host = Array.from(await recompute.generate(prompt, job));
  out.rule = { pending, oneWorkgroup: Boolean(decoder.tokensPlan), same: first.join() === host.join() && second.join() === host.join() };
  recompute.destroy();
  await decoder.destroy();
  trainer.destroy();
}
device.destroy();
console.log(JSON.stringify(out));
