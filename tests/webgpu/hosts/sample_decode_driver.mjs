// Drives webgpu/kernels/sample_decode.js and Decoder.generate's GPU sampling under Node (npm `webgpu`,
// Dawn on SwiftShader) for tests/webgpu/test_webgpu_sample_decode.py; prints one JSON object:
// - rows: per sampling setting, random rows of logits (spread, rounded into ties, quantised, wide):
//   how many the kernel called certain, and how many of those differ from prng.js's sampleToken;
// - edges: rows whose uniform puts the threshold within 1e-9..1e-4 of a cumulative edge (or on it);
// - unusable: rows with a NaN, an infinity or a logit past 2^61, which must never be certain;
// - generate: Decoder.generate (KV cache, batches sampled on the GPU) against RecomputeDecoder (the
//   host samples every token; once per run, on the same trainer) for the same seeded model, and how the
//   tokens were made: with the decode chain and a sampler dispatch a step, and with a batch in one
//   workgroup (decode_tokens.js);
// - lossAfter: a training step's loss after all that generation.
import { readFileSync } from "node:fs";
import { nodeDevice } from "../../../webgpu/node_gpu.js";
import { Trainer } from "../../../webgpu/trainer.js";
import { Decoder } from "../../../webgpu/decoder.js";
import { RecomputeDecoder } from "../../../webgpu/recompute_decoder.js";
import { Ops } from "../../../webgpu/ops.js";
import { Plan } from "../../../webgpu/plan.js";
import { SampleStream, sampleToken } from "../../../webgpu/prng.js";
import { sampleRecordFloats } from "../../../webgpu/kernels/sample_decode.js";
import { configFromPresets } from "../../../site/static/js/model_config.js";

const { device } = await nodeDevice();
const ops = new Ops(device);
const V = 256, STEPS = 16, BYTES = 4 * sampleRecordFloats(V) * STEPS;
const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
const logits = device.createBuffer({ size: 4 * V * STEPS, usage });
const draws = device.createBuffer({ size: 4 * STEPS, usage });
const tokens = device.createBuffer({ size: 16, usage });
const batch = device.createBuffer({ size: 4 * STEPS, usage });
const samples = device.createBuffer({ size: BYTES, usage });
const read = device.createBuffer({ size: BYTES, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
const readBatch = device.createBuffer({ size: 4 * STEPS, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
let seed = 12345;
const rand = () => { seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0; return seed / 2 ** 32; };

/** The kernel over STEPS rows (each V logits) with their uniforms: [{token, certain}], after checking the logits' copies. */
async function sampleOnGpu(rows, uniforms, temperature, topK, V = 256) {
  const plan = new Plan(device, ops.pipelines, "sample");
  for (let step = 0; step < STEPS; step++) {
    ops.sampleDecode(plan, { V, logits, logitsOff: step * V, draws, tokens, samples, batch, step, temperature, topK });
  }
  plan.freeze();
  device.queue.writeBuffer(logits, 0, rows);
  device.queue.writeBuffer(draws, 0, Float32Array.from(uniforms));
  const enc = device.createCommandEncoder();
  const pass = enc.beginComputePass();
  plan.encode(pass);
  pass.end();
  enc.copyBufferToBuffer(samples, 0, read, 0, BYTES);
  enc.copyBufferToBuffer(batch, 0, readBatch, 0, 4 * STEPS);
  device.queue.submit([enc.finish()]);
  await Promise.all([read.mapAsync(GPUMapMode.READ), readBatch.mapAsync(GPUMapMode.READ)]);
  const rec = new Float32Array(read.getMappedRange()).slice(), stepTokens = new Uint32Array(readBatch.getMappedRange()).slice();
  read.unmap();
  readBatch.unmap();
  plan.destroy();
  const R = sampleRecordFloats(V);
  return Array.from({ length: STEPS }, (_, s) => {
    const copy = rec.subarray(s * R + 4, s * R + 4 + V), row = rows.subarray(s * V, s * V + V);
    if (!copy.every((x, i) => Object.is(x, row[i]))) throw new Error(`step ${s}: the logits' copy differs`);
    if (stepTokens[s] !== rec[s * R]) throw new Error(`step ${s}: batch holds ${stepTokens[s]}, the record ${rec[s * R]}`);
    return { token: rec[s * R], certain: rec[s * R + 1] === 1 };
  });
}

const KINDS = [
  () => (rand() - 0.5) * 10,              // spread
  () => Math.round((rand() - 0.5) * 6),   // integers: many ties, some across the top-k's edge
  () => Math.round(rand() * 3) * 0.25,    // four values only
  () => (rand() - 0.5) * 40,              // wide: most probabilities underflow
];
const SETTINGS = [[0.8, 40], [1, 0], [0, 0], [0.1, 5], [2, 256], [0.001, 40], [1, 1], [1000, 40]];

/** Tallies the kernel's certain tokens against sampleToken with uniform u for each row. */
function tally(into, got, rows, us, temperature, topK, V = 256) {
  got.forEach(({ token, certain }, s) => {
    const want = sampleToken(rows.subarray(s * V, s * V + V), temperature, topK, { nextUniform: () => us[s] });
    into.rows += 1;
    if (certain) {
      into.certain += 1;
      if (token !== want) into.wrong.push({ temperature, topK, step: s, token, want });
    }
  });
}

const out = { rows: {}, edges: { rows: 0, certain: 0, wrong: [] }, unusable: { rows: 0, certain: 0, wrong: [] }, generate: [] };
for (const [temperature, topK] of SETTINGS) {
  const t = (out.rows[`${temperature}/${topK}`] = { rows: 0, certain: 0, wrong: [] });
  for (let round = 0; round < 3 * KINDS.length; round++) {
    const rows = Float32Array.from({ length: V * STEPS }, KINDS[round % KINDS.length]);
    const stream = new SampleStream(round), us = Array.from({ length: STEPS }, (_, s) => stream.peekUniform(s));
    tally(t, await sampleOnGpu(rows, us, temperature, topK), rows, us, temperature, topK);
  }
}

// a vocabulary of 70: the rank loop's lanes past V hold the lowest f32
const small = (out.rows["V=70 0.8/40"] = { rows: 0, certain: 0, wrong: [] });
for (let round = 0; round < 4; round++) {
  const rows = Float32Array.from({ length: 70 * STEPS }, KINDS[round]);
  const stream = new SampleStream(round), us = Array.from({ length: STEPS }, (_, s) => stream.peekUniform(s));
  tally(small, await sampleOnGpu(rows, us, 0.8, 40, 70), rows, us, 0.8, 40, 70);
}

// thresholds on and beside the edges: u = (cumulative up to a kept byte) / sum ± delta, from float64 as sampleToken
for (const [temperature, topK] of [[0.8, 40], [1, 0], [0.1, 5]]) {
  for (let round = 0; round < 8; round++) {
    const rows = Float32Array.from({ length: V * STEPS }, KINDS[round % 2]), us = [];
    for (let s = 0; s < STEPS; s++) {
      const l = Array.from(rows.subarray(s * V, s * V + V), (x) => x / temperature);
      const order = l.map((x, i) => i).sort((a, b) => l[b] - l[a] || a - b);
      const kept = new Set(topK > 0 ? order.slice(0, topK) : order), max = l[order[0]];
      let sum = 0;
      const cum = l.map((x, i) => (sum += kept.has(i) ? Math.exp(x - max) : 0));
      const edge = cum[Math.floor(rand() * V)] / sum, delta = [0, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4][s % 7] * (s % 2 ? -1 : 1);
      us.push(Math.min(Math.max(edge + delta, 0), 1 - 2 ** -53));
    }
    tally(out.edges, await sampleOnGpu(rows, us, temperature, topK), rows, us, temperature, topK);
  }
}

for (const bad of [NaN, Infinity, -Infinity, 2 ** 62]) {
  const rows = Float32Array.from({ length: V * STEPS }, KINDS[0]);
  for (let s = 0; s < STEPS; s++) rows[s * V + ((s * 37) % V)] = bad;
  const us = Array.from({ length: STEPS }, () => rand());
  for (const [temperature, topK] of [[0.8, 40], [0, 0]]) {
    const got = await sampleOnGpu(rows, us, temperature, topK);
    out.unusable.rows += got.length;
    out.unusable.certain += got.filter((g) => g.certain).length;
  }
}

// generation: the seeded tiny model; its ctx of 32 makes the chain's batches end at window restarts.
// The refused and greedy runs host-sample a token every few steps (every step), so that each of their batches
// is cut short and a batch submitted ahead is waited out: they are kept short, but long enough to cross a
// window restart (the prompt's 6 bytes + 26 tokens fill the window; the greedy run's 18-byte prompt, + 14)
const presets = JSON.parse(readFileSync(new URL("../../../site/static/presets.json", import.meta.url), "utf8"));
const corpus = new Uint8Array(readFileSync(new URL("../../../site/static/data/tinyshakespeare.txt", import.meta.url)));
const RUNS = [[0.8, 40, 70, null], [0.8, 40, 30, 3], [0, 0, 20, 0, "ROMEO:\nI am here. "], [1, 0, 60, null], [1e-4, 40, 20, null],
  [0.8, 40, 1, null], [0.8, 40, 40, null, "\n"], [0.8, 40, 40, null, "ROMEO:", 0]];
// the decode chain with its next batch submitted ahead (decodeAhead, the default) and without, and one workgroup:
// three decoders, one after another, of one trainer, whose weights the recompute decoder reads too
const PATHS = [{ decodeInOneWorkgroup: false }, { decodeInOneWorkgroup: false, decodeAhead: false }, { decodeInOneWorkgroup: true }];
const trainer = new Trainer(device, configFromPresets(presets, "tiny"), { corpus });
const recompute = new RecomputeDecoder(trainer);
const hostTokens = []; // per run: the host's sampling of every token (RecomputeDecoder), the same for every path
let decoder;
for (const options of PATHS) {
  await decoder?.destroy();
  decoder = new Decoder(trainer, options);
  const made = { batches: 0, prefills: 0, steps: 0, uncertain: 0, hostDecodes: 0, ahead: 0, landed: 0 };
  let refuse = null; // a step whose token is taken as uncertain, as if the kernel had said so (the host's path)
  const decode = decoder._decode.bind(decoder);
  // a batch of either path: the chain's (_decodeBatch, `prefill` where a rebuilt window opens it) or one
  // workgroup's (_tokensBatch, `upload` where the host's window replaces the GPU's, counted as prefills)
  const counted = (batch, opened) => async (...args) => {
    const steps = await batch(...args);
    if (refuse !== null && steps.length > refuse) steps[refuse].certain = false;
    made.batches += 1;
    made.prefills += opened(args) ? 1 : 0;
    made.steps += steps.length;
    made.uncertain += steps.some((s) => !s.certain) ? 1 : 0;
    return steps;
  };
  decoder._decodeBatch = counted(decoder._decodeBatch.bind(decoder), (args) => args[2].prefill);
  decoder._tokensBatch = counted(decoder._tokensBatch.bind(decoder), (args) => args[2].upload);
  decoder._decode = (...args) => { made.hostDecodes += 1; return decode(...args); };
  // the chain's batches submitted ahead (no host window), and those waited out unread
  const submit = decoder._submitBatch.bind(decoder), land = decoder._landChain.bind(decoder);
  decoder._submitBatch = (pos, n, o) => { made.ahead += o.window ? 0 : 1; return submit(pos, n, o); };
  decoder._landChain = (flight = decoder.chainFlight) => { made.landed += flight ? 1 : 0; return land(flight); };
  for (const [run, [temperature, topK, maxNewTokens, refused, prompt = "ROMEO:", batchMs = Infinity]] of RUNS.entries()) {
    Object.keys(made).forEach((k) => { made[k] = 0; });
    refuse = refused;
    const job = { maxNewTokens, temperature, topK, seed: 7 }, streamed = [];
    // full batches on SwiftShader too, whose steps take longer than a batch may (generate's batchMs),
    // but in the last run: no time for more than one step a batch
    const kv = Array.from(await decoder.generate(Array.from(Buffer.from(prompt)), { ...job, batchMs, onToken: (t, l) => streamed.push([t, l.length]) }));
    const host = (hostTokens[run] ??= Array.from(await recompute.generate(Array.from(Buffer.from(prompt)), job)));
    out.generate.push({ oneWorkgroup: Boolean(decoder.tokensPlan), decodeAhead: decoder.decodeAhead, temperature, topK, maxNewTokens, refused, prompt, batchMs: String(batchMs),
      same: kv.join() === host.join(), count: kv.length,
      streamed: streamed.every(([t, n], i) => t === kv[i] && n === V) && streamed.length === kv.length, ...made });
  }
}
recompute.destroy();
// training goes on after generating (the page's flow)
out.lossAfter = await (await trainer.step()).loss;
await decoder.destroy();
trainer.destroy();
device.destroy();
console.log(JSON.stringify(out));
