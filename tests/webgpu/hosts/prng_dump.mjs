// Prints what tests/webgpu/test_webgpu_prng.py compares against the spec's vectors and python_ref, as JSON:
// echo JOB_JSON | node prng_dump.mjs   (job: seeds, config, initStd, batches, eval, sampling)
import { readFileSync } from "node:fs";
import * as P from "../../../webgpu/prng.js";

const job = JSON.parse(readFileSync(0, "utf8"));
const out = { splitmix64: {}, normals: {}, init: {}, batches: {}, eval: null, samples: [] };
const b64 = (f) => Buffer.from(f.buffer, f.byteOffset, f.byteLength).toString("base64");
for (const seed of job.seeds) {
  const s = new P.SplitMix64(P.seedPair(seed));
  out.splitmix64[seed] = Array.from({ length: 4 }, () => s.nextHex());
  out.normals[seed] = Array.from(P.normals(P.seedPair(seed), 0, 4));
  out.init[seed] = b64(P.initialWeights(job.config, seed, job.initStd));
  const { nTrain, ctx, batch } = job.batches;
  out.batches[seed] = [0, 1, 2].map((b) => P.batchStarts(seed, b, batch, nTrain - ctx));
}
out.eval = P.evalWindowStarts(job.eval.nVal, job.eval.ctx, job.eval.windows);
const stream = new P.SampleStream(job.sampling.seed);
for (const row of job.sampling.logits) out.samples.push(P.sampleToken(Float32Array.from(row), job.sampling.temperature, job.sampling.topK, stream));
out.samplesDrawn = stream.drawn;
console.log(JSON.stringify(out));
